"""Keras 3 operations recorded in a Functional model's graph: an op applied to a symbolic tensor
(`x[:, :4]`, and the ops Keras' own `compute_mask` runs while the model is built: an
Embedding's `not_equal`, a Concatenate's `expand_dims`, `logical_or`, `any`, ...) becomes a
node of the model whose layer is the op. Keras 3 computes the masks it records this way when it
loads the model, so the port runs them too. Their outputs carry no mask, as in Keras.

`KerasOp(op, params)` applies one of `OPS` to its positional arguments (tensors where the
config names them, constants as stored) with the op's parameters from its config (`axis`,
`keepdims`, `dtype`).
"""

from __future__ import annotations

import torch

from .base import Layer

__all__ = ["OPS", "KerasOp"]

_DTYPES = {"bool": torch.bool, "int32": torch.int32, "int64": torch.int64,
           "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16}  # fmt: skip


def _index(spec):
    """A Keras 3 GetItem key (ints, `__slice__` objects, None, `__ellipsis__`) as Python's."""
    if isinstance(spec, list):
        return tuple(_index(s) for s in spec)
    if isinstance(spec, dict) and spec.get("class_name") == "__slice__":
        c = spec.get("config") or {}
        return slice(c.get("start"), c.get("stop"), c.get("step"))
    if isinstance(spec, dict) and spec.get("class_name") == "__ellipsis__":
        return Ellipsis
    if spec is None or isinstance(spec, int):
        return spec
    raise NotImplementedError(f"GetItem with a key {str(spec)[:60]}")


def _tensor(v, like: torch.Tensor):
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype, device=like.device)


def _dtype(p, default=None):
    name = p.get("dtype")
    if name is None:
        return default
    if name not in _DTYPES:
        raise NotImplementedError(f"dtype {name!r}")
    return _DTYPES[name]


def _axes(p):
    axis = p.get("axis")
    return tuple(axis) if isinstance(axis, list) else axis


def _reduce(fn):
    def run(p, x):
        axis = _axes(p)
        if axis is None:
            return fn(x)
        return fn(x, dim=axis, keepdim=bool(p.get("keepdims", False)))

    return run


OPS = {
    "NotEqual": lambda p, a, b: torch.ne(a, _tensor(b, a)),
    "Equal": lambda p, a, b: torch.eq(a, _tensor(b, a)),
    "LogicalOr": lambda p, a, b: torch.logical_or(a, _tensor(b, a)),
    "LogicalAnd": lambda p, a, b: torch.logical_and(a, _tensor(b, a)),
    "LogicalNot": lambda p, a: torch.logical_not(a),
    "Any": _reduce(torch.any),
    "All": _reduce(torch.all),
    "ExpandDims": lambda p, x: x.unsqueeze(p.get("axis", -1)),
    "Squeeze": lambda p, x: x.squeeze() if p.get("axis") is None else x.squeeze(_axes(p)),
    "ZerosLike": lambda p, x: torch.zeros_like(x, dtype=_dtype(p, x.dtype)),
    "OnesLike": lambda p, x: torch.ones_like(x, dtype=_dtype(p, x.dtype)),
    "Concatenate": lambda p, xs: torch.cat(list(xs), dim=p.get("axis", 0)),
    "Cast": lambda p, x: x.to(_dtype(p)),
    "GetItem": lambda p, x, key: x[_index(key)],
    "Add": lambda p, a, b: a + b,
    "Subtract": lambda p, a, b: a - b,
    "Multiply": lambda p, a, b: a * b,
    "TrueDivide": lambda p, a, b: a / b,
    "Negative": lambda p, x: -x,
}


class KerasOp(Layer):
    """A Keras 3 operation (one of `OPS`) in a model's graph, with its config's parameters."""

    def __init__(self, op: str, params: dict | None = None, *, keras_major: int = 3):
        super().__init__(keras_major)
        if op not in OPS:
            raise NotImplementedError(f"the Keras op {op} (ported ops: {', '.join(OPS)})")
        self.op, self.params = op, dict(params or {})
        if "dtype" in self.params:
            _dtype(self.params)  # refuses a dtype it does not know, when built

    def forward(self, inputs, mask=None):
        return OPS[self.op](self.params, *list(inputs))

    def compute_mask(self, inputs, mask):
        return None

    def extra_repr(self) -> str:
        return f"{self.op!r}, {self.params}"
