"""Keras' core layers: Dense, Embedding, Activation, Masking, ActivityRegularization (the
identity: its penalty is a loss term), and the layers that are the identity at `training=False`
(Dropout, SpatialDropout1D, GaussianNoise, GaussianDropout, AlphaDropout).

Weights keep Keras' names and layouts (`Dense.kernel [in, units]`, `Embedding.embeddings
[input_dim, output_dim]`), so a file's arrays load as they are. In training mode the noise
layers draw torch's own random numbers, with Keras' distributions: a port reproduces Keras'
`training=False` function exactly and its training-time noise in distribution only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .activations import activation as activation_fn
from .base import Layer, float_dtype

__all__ = [
    "KerasActivation",
    "KerasActivityRegularization",
    "KerasAlphaDropout",
    "KerasDense",
    "KerasDropout",
    "KerasEmbedding",
    "KerasGaussianDropout",
    "KerasGaussianNoise",
    "KerasMasking",
    "KerasSpatialDropout1D",
]


def _glorot_uniform_(w: torch.Tensor, fan_in: int, fan_out: int) -> None:
    limit = math.sqrt(6.0 / max(1, fan_in + fan_out))
    with torch.no_grad():
        w.uniform_(-limit, limit)


class KerasDense(Layer):
    """`Dense(units, activation, use_bias)`: `activation(inputs · kernel + bias)` over the last
    axis of an input of any rank; passes the mask on."""

    supports_masking = True

    def __init__(self, input_dim: int, units: int, activation=None, use_bias: bool = True, *,
                 keras_major: int = 3, dtype=None):  # fmt: skip
        super().__init__(keras_major)
        self.units, self.use_bias, self.activation_name = units, use_bias, activation
        self.act = activation_fn(activation, keras_major)
        dtype = float_dtype(dtype)
        self.kernel = nn.Parameter(torch.empty(input_dim, units, dtype=dtype))
        _glorot_uniform_(self.kernel, input_dim, units)
        self.bias = nn.Parameter(torch.zeros(units, dtype=dtype)) if use_bias else None

    def forward(self, inputs, mask=None):
        y = torch.matmul(inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.act(y)

    def extra_repr(self) -> str:
        return (f"{self.kernel.shape[0]}, {self.units}, activation={self.activation_name!r}, "
                f"use_bias={self.use_bias}, {super().extra_repr()}")  # fmt: skip


class KerasEmbedding(Layer):
    """`Embedding(input_dim, output_dim, mask_zero)`: rows of `embeddings` by integer id (float
    ids are cast to int as Keras casts them); with `mask_zero`, the mask is `ids != 0`."""

    def __init__(self, input_dim: int, output_dim: int, mask_zero: bool = False, *,
                 keras_major: int = 3, dtype=None):  # fmt: skip
        super().__init__(keras_major)
        self.input_dim, self.output_dim, self.mask_zero = input_dim, output_dim, mask_zero
        self.embeddings = nn.Parameter(
            torch.empty(input_dim, output_dim, dtype=float_dtype(dtype)).uniform_(-0.05, 0.05)
        )

    def forward(self, inputs, mask=None):
        if inputs.dtype not in (torch.int32, torch.int64):
            inputs = inputs.to(torch.int32)
        return F.embedding(inputs, self.embeddings)

    def compute_mask(self, inputs, mask):
        return torch.ne(inputs, 0) if self.mask_zero else None

    def extra_repr(self) -> str:
        return (f"{self.input_dim}, {self.output_dim}, mask_zero={self.mask_zero}, "
                f"{super().extra_repr()}")  # fmt: skip


class KerasActivation(Layer):
    """`Activation(activation)`; passes the mask on."""

    supports_masking = True

    def __init__(self, activation, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.activation_name = activation
        self.act = activation_fn(activation, keras_major)

    def forward(self, inputs, mask=None):
        return self.act(inputs)

    def extra_repr(self) -> str:
        return f"{self.activation_name!r}, {super().extra_repr()}"


class KerasMasking(Layer):
    """`Masking(mask_value)`: a step whose features all equal `mask_value` is masked, and its
    outputs are zeros; the mask is `any(inputs != mask_value, axis=-1)`."""

    def __init__(self, mask_value: float = 0.0, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.mask_value = float(mask_value)

    def _kept(self, inputs):
        return torch.ne(inputs, self.mask_value).any(dim=-1, keepdim=True)

    def forward(self, inputs, mask=None):
        return torch.where(self._kept(inputs), inputs, torch.zeros((), dtype=inputs.dtype))

    def compute_mask(self, inputs, mask):
        return self._kept(inputs).squeeze(-1)

    def extra_repr(self) -> str:
        return f"mask_value={self.mask_value}, {super().extra_repr()}"


class KerasActivityRegularization(Layer):
    """`ActivityRegularization(l1, l2)`: the identity (its penalty is a loss term, which a port
    does not add); passes the mask on."""

    supports_masking = True

    def __init__(self, *, keras_major: int = 3):
        super().__init__(keras_major)

    def forward(self, inputs, mask=None):
        return inputs


class _Noise(Layer):
    """A layer that is the identity at `training=False`; passes the mask on."""

    supports_masking = True

    def __init__(self, rate: float, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.rate = float(rate)

    def forward(self, inputs, mask=None):
        if not self.training or self.rate <= 0:
            return inputs
        return self.noise(inputs)

    def extra_repr(self) -> str:
        return f"{self.rate}, {super().extra_repr()}"


class KerasDropout(_Noise):
    """`Dropout(rate, noise_shape=None)`: at training, zeros with probability `rate`, the rest
    scaled by `1 / (1 - rate)`."""

    def noise(self, x):
        return F.dropout(x, self.rate, training=True)


class KerasSpatialDropout1D(_Noise):
    """`SpatialDropout1D(rate)`: at training, whole channels of a `[B, T, C]` input dropped."""

    def noise(self, x):
        keep = torch.empty(x.shape[0], 1, x.shape[2], dtype=x.dtype, device=x.device)
        keep.bernoulli_(1.0 - self.rate)
        return x * keep / (1.0 - self.rate)


class KerasGaussianNoise(_Noise):
    """`GaussianNoise(stddev)`: at training, `inputs + N(0, stddev²)`."""

    def noise(self, x):
        return x + torch.randn_like(x) * self.rate


class KerasGaussianDropout(_Noise):
    """`GaussianDropout(rate)`: at training, `inputs · N(1, rate / (1 - rate))`."""

    def noise(self, x):
        return x * (1.0 + torch.randn_like(x) * math.sqrt(self.rate / (1.0 - self.rate)))


class KerasAlphaDropout(_Noise):
    """`AlphaDropout(rate)`: at training, SELU's dropout keeping mean and variance: dropped
    units set to SELU's negative saturation, then `a · x + b`."""

    def noise(self, x):
        alpha_p = -1.6732632423543772848170429916717 * 1.0507009873554804934193349852946
        keep = torch.rand_like(x) >= self.rate
        a = ((1 - self.rate) * (1 + self.rate * alpha_p**2)) ** -0.5
        b = -a * alpha_p * self.rate
        return a * torch.where(keep, x, torch.full_like(x, alpha_p)) + b
