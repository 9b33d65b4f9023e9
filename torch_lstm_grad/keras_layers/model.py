"""A whole Keras model as one `nn.Module`: its layers (Keras layer modules, nested models) run
in the order of the model's graph, with masks produced, passed on, merged and consumed as the
Keras that wrote the model does (docs/porting.md, "Whole models").

The graph is data (`graph`, what the converter reads from the model's config): the model's
inputs in Keras' order, its outputs, and its layer calls ("nodes") in an order where every call
comes after the calls producing its inputs. A tensor is named as Keras names it, `[layer,
node_index, tensor_index]`: output `tensor_index` of call `node_index` of `layer` (a model
input is `[input_name, 0, 0]`). A call's `args` is its inputs: one tensor, or a list of them
(a merge layer's), each such a name; its `kwargs` may name tensors too (`initial_state`, an
explicit `mask`).

`model(x, ...)` takes the inputs positionally in Keras' order and returns Keras' outputs (one
tensor, or a tuple in Keras' order); `model.eval()` is Keras' `training=False`, `model.train()`
its `training=True`. `keras_weights()` maps each weight's Keras name to the tensor holding it,
in the order of Keras' `model.weights`.
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .normalization import KerasBatchNormalization

__all__ = ["KerasModel"]


def _is_ref(x) -> bool:
    return (
        isinstance(x, (list, tuple))
        and len(x) == 3
        and isinstance(x[0], str)
        and isinstance(x[1], int)
        and isinstance(x[2], int)
    )


def _key(ref) -> tuple[str, int, int]:
    return (ref[0], int(ref[1]), int(ref[2]))


def _gather(structure, values: dict):
    """`structure` with every tensor name replaced by its value (lists stay lists)."""
    if _is_ref(structure):
        return values[_key(structure)]
    if isinstance(structure, (list, tuple)):
        return [_gather(s, values) for s in structure]
    if isinstance(structure, dict):
        return {k: _gather(v, values) for k, v in structure.items()}
    return structure


def _outputs_list(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


class KerasModel(nn.Module):
    """A Keras Functional or Sequential model: `layers` by Keras name (each registered as a
    submodule under that name) and the `graph` that calls them. `weight_names`: the Keras name
    of each weight, `(layer, attribute path in the layer's module)` in Keras' `model.weights`
    order; `frozen`: the layers Keras does not train (`trainable: false`)."""

    def __init__(self, name: str, layers: dict[str, nn.Module], graph: dict,
                 weight_names: list[tuple[str, str, str]] | None = None,
                 frozen: list[str] = ()):  # fmt: skip
        super().__init__()
        self.frozen = list(frozen)
        self.keras_name = name
        self.graph = graph
        self._layer_names = list(layers)
        for layer_name, module in layers.items():
            self.add_module(layer_name, module)
        self._weight_names = list(weight_names or [])
        self._input_keys = [_key(r) for r in graph["inputs"]]

    def train(self, mode: bool = True):
        """Keras' `training=mode`; a frozen layer (`trainable: false`) keeps computing its
        `training=False` function in BatchNormalization, as Keras runs it (`frozen`)."""
        super().train(mode)
        for name in self.frozen:
            for m in self.get_submodule(name).modules():
                if isinstance(m, KerasBatchNormalization):
                    m.eval()
        return self

    def layer(self, name: str) -> nn.Module:
        return self.get_submodule(name)

    def run(self, inputs: list, masks: list | None = None):
        """`(outputs, output masks)` of the graph for `inputs` (and their masks, as a model
        nested in another receives them)."""
        if len(inputs) != len(self._input_keys):
            raise ValueError(
                f"{self.keras_name}: {len(self._input_keys)} inputs expected "
                f"({', '.join(k[0] for k in self._input_keys)}), {len(inputs)} given"
            )
        values, mask_of = {}, {}
        masks = masks or [None] * len(inputs)
        for key, x, m in zip(self._input_keys, inputs, masks, strict=True):
            values[key], mask_of[key] = x, m
        for node in self.graph["nodes"]:
            module = self.get_submodule(node["layer"])
            args = _gather(node["args"], values)
            in_masks = _gather(node["args"], mask_of)
            kwargs = _gather(node.get("kwargs", {}), values)
            mask = kwargs.pop("mask", in_masks)
            if hasattr(module, "run"):  # a nested model
                xs = args if isinstance(args, list) else [args]
                ms = mask if isinstance(mask, list) else [mask]
                outs, out_masks = module.run(xs, ms)
            else:
                result = module(args, mask=mask, **kwargs)
                outs = _outputs_list(result)
                out_masks = _outputs_list(module.compute_mask(args, mask))
                if len(out_masks) != len(outs):
                    out_masks = (out_masks + [None] * len(outs))[: len(outs)]
            for k, (y, m) in enumerate(zip(outs, out_masks, strict=True)):
                key = (node["layer"], int(node["node"]), k)
                values[key], mask_of[key] = y, m
        outs = [values[_key(r)] for r in self.graph["outputs"]]
        return outs, [mask_of[_key(r)] for r in self.graph["outputs"]]

    def forward(self, *inputs):
        outs, _ = self.run(list(inputs))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def compute_mask(self, inputs, mask):
        _, masks = self.run(inputs if isinstance(inputs, list) else [inputs], mask)
        return masks[0] if len(masks) == 1 else masks

    def keras_weights(self) -> OrderedDict[str, torch.Tensor]:
        """Every weight by its Keras name, in the order of Keras' `model.weights`: the
        Parameter of a trainable weight, the buffer of a non-trainable statistic."""
        out = OrderedDict()
        for keras_name, layer, attr in self._weight_names:
            owner, _, leaf = f"{layer}.{attr}".rpartition(".")
            out[keras_name] = getattr(self.get_submodule(owner), leaf)
        return out

    def extra_repr(self) -> str:
        ins = ", ".join(k[0] for k in self._input_keys)
        return f"{self.keras_name!r}, inputs=({ins}), {len(self.graph['nodes'])} layer calls"
