"""Keras 3 operations recorded in a Functional model's graph: an op applied to a symbolic tensor
(`x[:, :4]`, the `not_equal` an Embedding's mask is computed with) becomes a node of the
model whose layer is the op. Their outputs carry no mask, as in Keras.

`KerasOp(op, args_spec)` applies one of `OPS` to its positional arguments, in which the tensors
arrive in the places the config names them and constants stay as stored.
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


def _constant(v, like: torch.Tensor):
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=like.dtype, device=like.device)


OPS = {
    "NotEqual": lambda a, b: torch.ne(a, _constant(b, a)),
    "Equal": lambda a, b: torch.eq(a, _constant(b, a)),
    "GetItem": lambda x, key: x[_index(key)],
    "Cast": None,  # needs its dtype: see KerasOp
}


class KerasOp(Layer):
    """A Keras 3 operation (`NotEqual`, `Equal`, `GetItem`, `Cast`) in a model's graph."""

    def __init__(self, op: str, dtype: str | None = None, *, keras_major: int = 3):
        super().__init__(keras_major)
        if op not in OPS:
            raise NotImplementedError(f"the Keras op {op} (ported ops: {', '.join(OPS)})")
        if op == "Cast" and dtype not in _DTYPES:
            raise NotImplementedError(f"Cast to {dtype!r}")
        self.op, self.cast_dtype = op, dtype

    def forward(self, inputs, mask=None):
        args = list(inputs)
        if self.op == "Cast":
            return args[0].to(_DTYPES[self.cast_dtype])
        return OPS[self.op](*args)

    def compute_mask(self, inputs, mask):
        return None

    def extra_repr(self) -> str:
        return f"{self.op!r}"
