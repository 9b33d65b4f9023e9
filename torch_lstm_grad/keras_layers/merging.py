"""Keras' merge layers: Concatenate, Add, Subtract, Multiply, Average, Maximum, Minimum, called
on a list of tensors, with the masks each Keras major gives their outputs.

Inputs of lower rank are expanded at axis 1 until the ranks agree, then broadcast, as Keras'
`Merge.call` does. Masks (docs/porting.md, "Whole models"):

* Concatenate: each input's mask (all-True where it has none) widened to the input's shape,
  concatenated along `axis`, then reduced over the last axis: with `all` in Keras 2, `any` in
  Keras 3; no mask when no input has one.
* The element-wise layers: Keras 2 ANDs the masks the inputs have (none when none has one);
  Keras 3 ORs them, and gives no mask when any input has none. Keras 3's Maximum and Minimum
  and Multiply also read the masks: a masked element takes the other operand's value before the
  comparison (Maximum, Minimum) or counts as 1 (Multiply).
"""

from __future__ import annotations

import torch

from .base import Layer

__all__ = [
    "KerasAdd",
    "KerasAverage",
    "KerasConcatenate",
    "KerasMaximum",
    "KerasMinimum",
    "KerasMultiply",
    "KerasSubtract",
]


def _same_rank(inputs):
    rank = max(x.dim() for x in inputs)
    out = []
    for x in inputs:
        while x.dim() < rank:
            x = x.unsqueeze(1)
        out.append(x)
    return out


def _masks(mask, n):
    if mask is None:
        return [None] * n
    if len(mask) != n:
        raise ValueError(f"a merge layer got {n} inputs and {len(mask)} masks")
    return list(mask)


class _Merge(Layer):
    supports_masking = True

    def forward(self, inputs, mask=None):
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 1:
            raise ValueError(f"{type(self).__name__} is called on a list of tensors")
        return self._merge(_same_rank(inputs), _masks(mask, len(inputs)))

    def compute_mask(self, inputs, mask):
        masks = _masks(mask, len(inputs))
        if all(m is None for m in masks):
            return None
        if self.keras_major == 2:
            out = None
            for m in masks:
                if m is not None:
                    out = m if out is None else out & m
            return out
        if any(m is None for m in masks):
            return None
        out = masks[0]
        for m in masks[1:]:
            out = out | m
        return out


class KerasAdd(_Merge):
    """`Add()`: the sum of the inputs."""

    def _merge(self, xs, masks):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out


class KerasSubtract(_Merge):
    """`Subtract()`: `inputs[0] - inputs[1]`."""

    def _merge(self, xs, masks):
        if len(xs) != 2:
            raise ValueError(f"Subtract is called on exactly 2 inputs, not {len(xs)}")
        return xs[0] - xs[1]


class KerasMultiply(_Merge):
    """`Multiply()`: the product of the inputs. Keras 3 reads the masks: a masked element
    counts as 1, and where every input has a mask, the product is 0 wherever all of them are
    masked."""

    def _merge(self, xs, masks):
        if self.keras_major == 2 or all(m is None for m in masks):
            out = xs[0]
            for x in xs[1:]:
                out = out * x
            return out
        every = all(m is not None for m in masks)
        out, out_mask = None, None
        for x, m in zip(xs, masks, strict=True):
            if m is not None:
                m = m.unsqueeze(-1).expand(x.shape)
                x = torch.where(m, x, torch.ones((), dtype=x.dtype))
                if every:
                    out_mask = m if out_mask is None else out_mask | m
            out = x if out is None else out * x
        if every:
            out = torch.where(out_mask, out, torch.zeros((), dtype=out.dtype))
        return out


class KerasAverage(_Merge):
    """`Average()`: the mean of the inputs (their sum divided by their count)."""

    def _merge(self, xs, masks):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out / len(xs)


class _Extremum(_Merge):
    def _merge(self, xs, masks):
        if self.keras_major == 2 or all(m is None for m in masks):
            out = xs[0]
            for x in xs[1:]:
                out = self.op(out, x)
            return out
        out, out_mask = None, None
        for x, m in zip(xs, masks, strict=True):
            m = m.unsqueeze(-1).expand(x.shape) if m is not None else None
            if out is None:
                out, out_mask = x, m
                continue
            if m is not None:
                x = torch.where(m, x, out)
            if out_mask is not None:
                out = torch.where(out_mask, out, x)
            out_mask = out_mask | m if m is not None and out_mask is not None else None
            out = self.op(out, x)
        return out


class KerasMaximum(_Extremum):
    """`Maximum()`: the element-wise maximum of the inputs."""

    op = staticmethod(torch.maximum)


class KerasMinimum(_Extremum):
    """`Minimum()`: the element-wise minimum of the inputs."""

    op = staticmethod(torch.minimum)


class KerasConcatenate(Layer):
    """`Concatenate(axis=-1)`."""

    supports_masking = True

    def __init__(self, axis: int = -1, *, keras_major: int = 3):
        super().__init__(keras_major)
        self.axis = int(axis)

    def forward(self, inputs, mask=None):
        return torch.cat(list(inputs), dim=self.axis)

    def compute_mask(self, inputs, mask):
        masks = _masks(mask, len(inputs))
        if all(m is None for m in masks):
            return None
        full = []
        for x, m in zip(inputs, masks, strict=True):
            if m is None:
                m = torch.ones(x.shape, dtype=torch.bool, device=x.device)
            elif m.dim() < x.dim():
                m = m.unsqueeze(-1).expand(x.shape)
            full.append(m)
        cat = torch.cat(full, dim=self.axis)
        return cat.all(dim=-1) if self.keras_major == 2 else cat.any(dim=-1)

    def extra_repr(self) -> str:
        return f"axis={self.axis}, {super().extra_repr()}"
