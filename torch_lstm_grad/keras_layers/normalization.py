"""Keras' BatchNormalization and LayerNormalization, with Keras' defaults (epsilon 1e-3,
momentum 0.99) and Keras' update rule.

`KerasBatchNormalization` holds `gamma`, `beta` (Parameters, when `scale` / `center`) and
`moving_mean`, `moving_variance` (buffers), all `[C]` over `axis`. At `training=False`
(`model.eval()`) it computes `(x - moving_mean) · rsqrt(moving_variance + epsilon) · gamma +
beta`. In training mode it normalises with the batch's mean and (biased) variance over every
axis but `axis` — over the unmasked steps only where a mask arrives, as both Keras majors weigh
them — and updates the moving statistics as Keras does: `moving = moving · momentum + batch ·
(1 - momentum)`. torch's `nn.BatchNorm1d` differs on each of these points (epsilon 1e-5, an
inverted momentum, the unbiased variance in its running update, channels first), which is why
a hand port through it goes wrong.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Layer, float_dtype

__all__ = ["KerasBatchNormalization", "KerasLayerNormalization", "KerasUnitNormalization"]

# Keras' backend.epsilon(): Keras 3 adds it to the masked moments' count.
_KERAS_EPSILON = 1e-7


def _axes(axis, ndim: int) -> list[int]:
    axes = [axis] if isinstance(axis, int) else list(axis)
    return sorted(a % ndim for a in axes)


def _shape(v: torch.Tensor, axes: list[int], ndim: int) -> torch.Tensor:
    """`v` (over `axes`) shaped to broadcast against an input of rank `ndim`."""
    if axes == list(range(ndim - len(axes), ndim)):
        return v
    shape = [1] * ndim
    for a, n in zip(axes, v.shape, strict=False):
        shape[a] = n
    return v.reshape(shape)


class KerasBatchNormalization(Layer):
    """`BatchNormalization(axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True)` over
    `num_features` channels; passes the mask on."""

    supports_masking = True

    def __init__(self, num_features: int, axis: int = -1, momentum: float = 0.99,
                 epsilon: float = 1e-3, center: bool = True, scale: bool = True, *,
                 keras_major: int = 3, dtype=None):  # fmt: skip
        super().__init__(keras_major)
        if not isinstance(axis, int):
            raise NotImplementedError(f"BatchNormalization over several axes ({axis})")
        self.axis, self.momentum, self.epsilon = axis, float(momentum), float(epsilon)
        self.center, self.scale = center, scale
        dtype = float_dtype(dtype)
        self.gamma = nn.Parameter(torch.ones(num_features, dtype=dtype)) if scale else None
        self.beta = nn.Parameter(torch.zeros(num_features, dtype=dtype)) if center else None
        self.register_buffer("moving_mean", torch.zeros(num_features, dtype=dtype))
        self.register_buffer("moving_variance", torch.ones(num_features, dtype=dtype))

    def _moments(self, x: torch.Tensor, reduce: list[int], mask):
        if mask is None:
            mean = x.mean(dim=reduce, keepdim=True)
            return mean, (x - mean).square().mean(dim=reduce, keepdim=True)
        w = mask.unsqueeze(-1).expand(x.shape).to(x.dtype)
        count = w.sum(dim=reduce, keepdim=True)
        if self.keras_major == 3:  # keras/src/layers/normalization/batch_normalization.py
            count = count + _KERAS_EPSILON
            mean = (x * w).sum(dim=reduce, keepdim=True) / count
            return mean, ((x - mean) * w).square().sum(dim=reduce, keepdim=True) / count
        # tf_keras: tf.nn.weighted_moments (div_no_nan: an all-masked batch gives zeros)
        safe = torch.where(count > 0, count, torch.ones_like(count))
        mean = torch.where(count > 0, (x * w).sum(dim=reduce, keepdim=True) / safe, 0.0)
        var = (w * (x - mean).square()).sum(dim=reduce, keepdim=True) / safe
        return mean, torch.where(count > 0, var, 0.0)

    def forward(self, inputs, mask=None):
        ndim = inputs.dim()
        axis = self.axis % ndim
        if self.training:
            if self.keras_major == 2 and ndim in (4, 5):
                raise NotImplementedError(
                    "training-mode BatchNormalization of a rank-4/5 input as Keras 2 computes "
                    "it (TF's fused kernel, whose moving variance takes the unbiased estimate)"
                )
            reduce = [a for a in range(ndim) if a != axis]
            mean, var = self._moments(inputs, reduce, mask)
            with torch.no_grad():
                m = self.momentum
                for stat, batch in ((self.moving_mean, mean), (self.moving_variance, var)):
                    stat.mul_(m).add_(batch.reshape(-1).to(stat.dtype), alpha=1 - m)
        else:
            mean = _shape(self.moving_mean, [axis], ndim)
            var = _shape(self.moving_variance, [axis], ndim)
        # tf.nn.batch_normalization's order: x · inv + (beta - mean · inv)
        inv = torch.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            inv = inv * _shape(self.gamma, [axis], ndim)
        shift = -mean * inv
        if self.beta is not None:
            shift = shift + _shape(self.beta, [axis], ndim)
        return inputs * inv + shift

    def extra_repr(self) -> str:
        return (f"{self.moving_mean.shape[0]}, axis={self.axis}, momentum={self.momentum}, "
                f"epsilon={self.epsilon}, {super().extra_repr()}")  # fmt: skip


class KerasLayerNormalization(Layer):
    """`LayerNormalization(axis=-1, epsilon=1e-3, center=True, scale=True, rms_scaling=False)`
    over the last axes (`normalized_shape`); passes the mask on."""

    supports_masking = True

    def __init__(self, normalized_shape, axis=-1, epsilon: float = 1e-3, center: bool = True,
                 scale: bool = True, rms_scaling: bool = False, *, keras_major: int = 3,
                 dtype=None):  # fmt: skip
        super().__init__(keras_major)
        shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        self.axis, self.epsilon, self.rms_scaling = axis, float(epsilon), rms_scaling
        dtype = float_dtype(dtype)
        scale, center = scale or rms_scaling, center and not rms_scaling
        self.gamma = nn.Parameter(torch.ones(shape, dtype=dtype)) if scale else None
        self.beta = nn.Parameter(torch.zeros(shape, dtype=dtype)) if center else None

    def forward(self, inputs, mask=None):
        ndim = inputs.dim()
        axes = _axes(self.axis, ndim)
        if self.rms_scaling:  # Keras 3: x · rsqrt(mean(x²) + epsilon) · gamma
            inv = torch.rsqrt(inputs.square().mean(dim=axes, keepdim=True) + self.epsilon)
            return inputs * inv * _shape(self.gamma, axes, ndim)
        mean = inputs.mean(dim=axes, keepdim=True)
        var = (inputs - mean).square().mean(dim=axes, keepdim=True)
        inv = torch.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            inv = inv * _shape(self.gamma, axes, ndim)
        shift = -mean * inv
        if self.beta is not None:
            shift = shift + _shape(self.beta, axes, ndim)
        return inputs * inv + shift

    def extra_repr(self) -> str:
        return f"axis={self.axis}, epsilon={self.epsilon}, {super().extra_repr()}"


class KerasUnitNormalization(Layer):
    """`UnitNormalization(axis=-1)`: `x · rsqrt(sum(x²))` over `axis`, bounded as each Keras
    bounds it: Keras 3 `min(rsqrt(sum(x²)), 1e12)`, tf_keras (`tf.linalg.l2_normalize`)
    `rsqrt(max(sum(x²), 1e-12))`; passes the mask on."""

    supports_masking = True

    def __init__(self, axis=-1, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.axis = axis

    def forward(self, inputs, mask=None):
        axes = _axes(self.axis, inputs.dim())
        square_sum = inputs.square().sum(dim=axes, keepdim=True)
        if self.keras_major == 2:
            return inputs * torch.rsqrt(torch.clamp(square_sum, min=1e-12))
        return inputs * torch.clamp(torch.rsqrt(square_sum), max=1e12)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, {super().extra_repr()}"
