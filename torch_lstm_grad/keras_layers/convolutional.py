"""Keras' 1-D convolution, pooling and padding layers over `[B, T, C]` (`channels_last`, Keras'
default; `channels_first` `[B, C, T]` too).

`KerasConv1D` holds Keras' `kernel [kernel_size, C_in / groups, filters]` and `bias [filters]`.
Padding follows TF: `"valid"` none; `"same"` the total `max((out - 1)·stride + (k - 1)·dilation
+ 1 - T, 0)` split with the smaller half on the left, out = ceil(T / stride); `"causal"`
`(k - 1)·dilation` on the left. Average pooling over `"same"` padding divides by the number of
steps inside the sequence, as TF's `avg_pool` does. `GlobalAveragePooling1D` averages the
unmasked steps where a mask arrives.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .activations import activation as activation_fn
from .base import Layer, float_dtype

__all__ = [
    "KerasAveragePooling1D",
    "KerasConv1D",
    "KerasCropping1D",
    "KerasGlobalAveragePooling1D",
    "KerasGlobalMaxPooling1D",
    "KerasMaxPooling1D",
    "KerasUpSampling1D",
    "KerasZeroPadding1D",
]


def _pair(v) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _one(v) -> int:
    return int(v[0]) if isinstance(v, (list, tuple)) else int(v)


def _same_padding(length: int, size: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    out = -(-length // stride)
    total = max((out - 1) * stride + (size - 1) * dilation + 1 - length, 0)
    return total // 2, total - total // 2


class _Channels(Layer):
    """Runs `_run` on `[B, C, T]`, converting from and to the layer's data format."""

    def __init__(self, data_format: str, keras_major: int):
        super().__init__(keras_major)
        if data_format not in ("channels_last", "channels_first"):
            raise NotImplementedError(f"data_format={data_format!r}")
        self.data_format = data_format

    def forward(self, inputs, mask=None):
        last = self.data_format == "channels_last"
        x = inputs.transpose(1, 2) if last else inputs
        y = self._run(x)
        return y.transpose(1, 2) if last else y


class KerasConv1D(_Channels):
    """`Conv1D(filters, kernel_size, strides=1, padding="valid", dilation_rate=1, groups=1,
    activation=None, use_bias=True)`."""

    def __init__(self, in_channels: int, filters: int, kernel_size, strides=1, padding="valid",
                 data_format="channels_last", dilation_rate=1, groups: int = 1, activation=None,
                 use_bias: bool = True, *, keras_major: int = 3, dtype=None):  # fmt: skip
        super().__init__(data_format, keras_major)
        self.kernel_size, self.strides = _one(kernel_size), _one(strides)
        self.dilation_rate, self.groups = _one(dilation_rate), int(groups)
        if padding not in ("valid", "same", "causal"):
            raise NotImplementedError(f"Conv1D padding={padding!r}")
        if padding == "causal" and data_format != "channels_last":
            raise NotImplementedError("Conv1D causal padding with channels_first")
        self.padding, self.activation_name = padding, activation
        self.act = activation_fn(activation, keras_major)
        dtype = float_dtype(dtype)
        shape = (self.kernel_size, in_channels // self.groups, filters)
        self.kernel = nn.Parameter(torch.empty(shape, dtype=dtype))
        limit = math.sqrt(6.0 / (self.kernel_size * (shape[1] + filters)))
        with torch.no_grad():
            self.kernel.uniform_(-limit, limit)
        self.bias = nn.Parameter(torch.zeros(filters, dtype=dtype)) if use_bias else None

    def _run(self, x):
        k, d = self.kernel_size, self.dilation_rate
        if self.padding == "causal":
            x = F.pad(x, ((k - 1) * d, 0))
        elif self.padding == "same":
            x = F.pad(x, _same_padding(x.shape[-1], k, self.strides, d))
        # Keras' [k, C_in / groups, filters] -> torch's [filters, C_in / groups, k]
        w = self.kernel.permute(2, 1, 0)
        y = F.conv1d(x, w, self.bias, stride=self.strides, dilation=d, groups=self.groups)
        return self.act(y)

    def extra_repr(self) -> str:
        return (f"kernel={list(self.kernel.shape)}, strides={self.strides}, padding="
                f"{self.padding!r}, dilation_rate={self.dilation_rate}, activation="
                f"{self.activation_name!r}, {super().extra_repr()}")  # fmt: skip


class _Pooling1D(_Channels):
    def __init__(self, pool_size=2, strides=None, padding="valid", data_format="channels_last",
                 *, keras_major: int = 3):  # fmt: skip
        super().__init__(data_format, keras_major)
        if padding not in ("valid", "same"):
            raise NotImplementedError(f"pooling padding={padding!r}")
        self.pool_size = _one(pool_size)
        self.strides = self.pool_size if strides is None else _one(strides)
        self.padding = padding

    def extra_repr(self) -> str:
        return (f"pool_size={self.pool_size}, strides={self.strides}, padding={self.padding!r}, "
                f"{super().extra_repr()}")  # fmt: skip


class KerasMaxPooling1D(_Pooling1D):
    """`MaxPooling1D(pool_size=2, strides=None, padding="valid")`."""

    def _run(self, x):
        if self.padding == "same":
            x = F.pad(x, _same_padding(x.shape[-1], self.pool_size, self.strides), value=-math.inf)
        return F.max_pool1d(x, self.pool_size, self.strides)


class KerasAveragePooling1D(_Pooling1D):
    """`AveragePooling1D(pool_size=2, strides=None, padding="valid")`."""

    def _run(self, x):
        if self.padding == "valid":
            return F.avg_pool1d(x, self.pool_size, self.strides)
        pad = _same_padding(x.shape[-1], self.pool_size, self.strides)
        total = F.avg_pool1d(F.pad(x, pad), self.pool_size, self.strides) * self.pool_size
        ones = torch.ones_like(x[:1, :1])
        count = F.avg_pool1d(F.pad(ones, pad), self.pool_size, self.strides) * self.pool_size
        return total / count


class _Global1D(Layer):
    def __init__(self, data_format: str = "channels_last", keepdims: bool = False, *,
                 keras_major: int = 3):  # fmt: skip
        super().__init__(keras_major)
        if data_format not in ("channels_last", "channels_first"):
            raise NotImplementedError(f"data_format={data_format!r}")
        self.steps = 1 if data_format == "channels_last" else 2
        self.keepdims = keepdims


class KerasGlobalAveragePooling1D(_Global1D):
    """`GlobalAveragePooling1D()`: the mean over the steps, the unmasked ones where a mask
    arrives; the output has no mask."""

    supports_masking = True

    def forward(self, inputs, mask=None):
        if mask is None:
            return inputs.mean(dim=self.steps, keepdim=self.keepdims)
        m = mask.unsqueeze(2 if self.steps == 1 else 1)
        x = torch.where(m, inputs, torch.zeros((), dtype=inputs.dtype))
        m = m.to(inputs.dtype)
        return x.sum(dim=self.steps, keepdim=self.keepdims) / m.sum(
            dim=self.steps, keepdim=self.keepdims
        )

    def compute_mask(self, inputs, mask):
        return None


class KerasGlobalMaxPooling1D(_Global1D):
    """`GlobalMaxPooling1D()`: the maximum over the steps (masks are not read)."""

    def forward(self, inputs, mask=None):
        return inputs.amax(dim=self.steps, keepdim=self.keepdims)


class KerasZeroPadding1D(Layer):
    """`ZeroPadding1D(padding=1)`: zeros before and after the steps of `[B, T, C]`."""

    def __init__(self, padding=1, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.padding = _pair(padding)

    def forward(self, inputs, mask=None):
        return F.pad(inputs, (0, 0, *self.padding))


class KerasCropping1D(Layer):
    """`Cropping1D(cropping=(1, 1))`: steps cut from the start and the end of `[B, T, C]`."""

    def __init__(self, cropping=(1, 1), *, keras_major: int = 3):
        super().__init__(keras_major)
        self.cropping = _pair(cropping)

    def forward(self, inputs, mask=None):
        start, end = self.cropping
        return inputs[:, start : inputs.shape[1] - end]


class KerasUpSampling1D(Layer):
    """`UpSampling1D(size=2)`: each step of `[B, T, C]` repeated `size` times."""

    def __init__(self, size: int = 2, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.size = int(size)

    def forward(self, inputs, mask=None):
        return inputs.repeat_interleave(self.size, dim=1)
