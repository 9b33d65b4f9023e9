"""Keras' reshaping layers: Flatten, Reshape, Permute, RepeatVector (the batch axis is kept;
shapes and axes are the non-batch ones, as Keras states them)."""

from __future__ import annotations

from .base import Layer

__all__ = ["KerasFlatten", "KerasPermute", "KerasRepeatVector", "KerasReshape"]


class KerasFlatten(Layer):
    """`Flatten()`: `[B, ...] -> [B, prod(...)]` (`channels_first` inputs are moved to channels
    last first, as Keras does)."""

    def __init__(self, data_format: str = "channels_last", *, keras_major: int = 3):
        super().__init__(keras_major)
        self.channels_first = data_format == "channels_first"

    def forward(self, inputs, mask=None):
        if self.channels_first and inputs.dim() > 2:
            inputs = inputs.permute(0, *range(2, inputs.dim()), 1)
        return inputs.reshape(inputs.shape[0], -1)


class KerasReshape(Layer):
    """`Reshape(target_shape)` (one entry may be -1)."""

    def __init__(self, target_shape, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.target_shape = tuple(-1 if d is None else int(d) for d in target_shape)

    def forward(self, inputs, mask=None):
        return inputs.reshape(inputs.shape[0], *self.target_shape)

    def extra_repr(self) -> str:
        return f"{self.target_shape}, {super().extra_repr()}"


class KerasPermute(Layer):
    """`Permute(dims)`: `dims` numbers the non-batch axes from 1."""

    def __init__(self, dims, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.dims = tuple(int(d) for d in dims)

    def forward(self, inputs, mask=None):
        return inputs.permute(0, *self.dims)

    def extra_repr(self) -> str:
        return f"{self.dims}, {super().extra_repr()}"


class KerasRepeatVector(Layer):
    """`RepeatVector(n)`: `[B, F] -> [B, n, F]`."""

    def __init__(self, n: int, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.n = int(n)

    def forward(self, inputs, mask=None):
        return inputs.unsqueeze(1).expand(inputs.shape[0], self.n, inputs.shape[1])

    def extra_repr(self) -> str:
        return f"{self.n}, {super().extra_repr()}"
