"""What every Keras layer module shares: the Keras major whose semantics it follows and how it
passes masks on (docs/porting.md, "Whole models").

A layer is called as Keras calls it, `layer(inputs, mask=None)` (`inputs` a tensor, or a list of
tensors for a merge layer), with Keras' `training` taken from the module's own `training` flag
(`model.eval()` is Keras' `training=False`). `compute_mask(inputs, mask)` returns the mask Keras
attaches to the layer's output. Both Keras majors drop the mask at a layer that does not
support masking (Keras 3 with a warning): its output has none.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Layer", "any_mask"]


def any_mask(mask) -> bool:
    """Whether `mask` (None, a tensor, or a list of them) holds a tensor."""
    if isinstance(mask, (list, tuple)):
        return any(m is not None for m in mask)
    return mask is not None


class Layer(nn.Module):
    """Base of the Keras layer modules: `keras_major` is the Keras that wrote the layer (2 for
    Keras 2.x / tf.keras / tf_keras, 3 for Keras 3)."""

    #: Whether the layer passes its input's mask on unchanged (Keras' `supports_masking`).
    supports_masking = False

    def __init__(self, keras_major: int = 3):
        super().__init__()
        if keras_major not in (2, 3):
            raise NotImplementedError(f"Keras {keras_major} layers are not ported")
        self.keras_major = keras_major

    def compute_mask(self, inputs, mask):
        return mask if self.supports_masking else None

    def extra_repr(self) -> str:
        return f"keras_major={self.keras_major}"


def float_dtype(dtype) -> torch.dtype:
    return torch.float32 if dtype is None else dtype
