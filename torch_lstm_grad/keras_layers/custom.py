"""A layer of the user's own Keras class in a ported model (`convert --custom CLASS`): the port
keeps its config and its weights, and the user supplies what it computes at `load_model(...,
custom_layers={"CLASS": factory})` (docs/porting.md, "Whole models").

`factory(config, weights)` gets the layer's config (a dict, as the file stores it) and its
weights (Keras' names -> the Parameters this layer registers, in the file's order) and returns
an `nn.Module` whose `forward(inputs, mask=None)` is called as Keras calls the layer; its
`compute_mask(inputs, mask)`, where it has one, gives the output mask (else the output has
none, as for a Keras layer that does not support masking).
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Layer

__all__ = ["KerasCustomLayer"]


class KerasCustomLayer(Layer):
    """The user's layer: `weights` (ParameterDict `w0, w1, ...` in the file's order; Keras'
    names in `weight_names`) and the `module` the user's factory made (None until then)."""

    def __init__(self, class_name: str, config: dict, weight_names: list[str], shapes: list,
                 *, keras_major: int = 3, dtype=None, trainable: bool = True):  # fmt: skip
        super().__init__(keras_major)
        self.class_name, self.config = class_name, config
        self.weight_names = list(weight_names)
        self.weights = nn.ParameterDict({
            f"w{k}": nn.Parameter(torch.zeros(shape, dtype=dtype or torch.float32),
                                  requires_grad=trainable)
            for k, shape in enumerate(shapes)
        })  # fmt: skip
        self.module: nn.Module | None = None

    def keras_weights(self) -> dict[str, nn.Parameter]:
        return {n: self.weights[f"w{k}"] for k, n in enumerate(self.weight_names)}

    def attach(self, factory) -> None:
        """Makes the user's module: `factory(config, weights)`."""
        module = factory(dict(self.config), self.keras_weights())
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"the factory of {self.class_name!r} returned a {type(module).__name__}, "
                "not an nn.Module"
            )
        self.module = module

    def forward(self, inputs, mask=None):
        if self.module is None:
            raise NotImplementedError(
                f"a layer of the user's class {self.class_name!r}: give its module with "
                f"load_model(..., custom_layers={{{self.class_name!r}: factory}})"
            )
        return self.module(inputs, mask=mask)

    def compute_mask(self, inputs, mask):
        compute = getattr(self.module, "compute_mask", None)
        return compute(inputs, mask) if compute is not None else None

    def extra_repr(self) -> str:
        return f"{self.class_name!r}, {len(self.weight_names)} weights, {super().extra_repr()}"
