"""Keras' TimeDistributed: one layer applied to every step of `[B, T, ...]`.

The steps are folded into the batch (`[B·T, ...]`), the layer runs once, and the result is
unfolded, which is what both Keras majors compute for a layer that treats samples apart. Keras 3
calls the layer step by step, so a BatchNormalization inside it normalises each step's batch on
its own in training mode; that case runs step by step here too. The output mask: Keras 3 passes
the input mask on; Keras 2 takes the inner layer's mask of the folded steps where it has one,
else the input mask.
"""

from __future__ import annotations

import torch

from .base import Layer
from .normalization import KerasBatchNormalization

__all__ = ["KerasTimeDistributed"]


class KerasTimeDistributed(Layer):
    """`TimeDistributed(layer)` around a Keras layer module."""

    supports_masking = True

    def __init__(self, layer: Layer, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.layer = layer

    def _stepwise(self) -> bool:
        return (
            self.keras_major == 3
            and self.training
            and isinstance(self.layer, KerasBatchNormalization)
        )

    def forward(self, inputs, mask=None):
        B, T = inputs.shape[0], inputs.shape[1]
        if self._stepwise():
            steps = [
                self.layer(inputs[:, t], mask=None if mask is None else mask[:, t])
                for t in range(T)
            ]
            return torch.stack(steps, dim=1)
        flat = inputs.reshape(B * T, *inputs.shape[2:])
        flat_mask = None if mask is None else mask.reshape(B * T, *mask.shape[2:])
        y = self.layer(flat, mask=flat_mask)
        return y.reshape(B, T, *y.shape[1:])

    def compute_mask(self, inputs, mask):
        if self.keras_major == 3:
            return mask
        B, T = inputs.shape[0], inputs.shape[1]
        flat = inputs.reshape(B * T, *inputs.shape[2:])
        flat_mask = None if mask is None else mask.reshape(B * T, *mask.shape[2:])
        inner = self.layer.compute_mask(flat, flat_mask)
        if inner is None:
            if mask is None:
                return None
            while mask.dim() > 2:
                mask = mask.any(dim=-1)
            return mask
        return inner.reshape(B, T, *inner.shape[1:])
