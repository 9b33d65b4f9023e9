"""The protobuf wire format, decoded by hand, for the few TF messages porting reads without
TensorFlow: the checkpoint index (`tensorbundle.py`), the TF2 object graph (`object_graph.py`)
and TF1 meta graphs (`tf1_graph.py`).

A message is a run of `varint tag` + value, `tag = field << 3 | wire type`: 0 varint, 1 fixed64,
2 length-delimited (bytes, strings, sub-messages, packed repeated scalars), 5 fixed32.
`fields(buf)` returns every field's values in order; sub-messages stay bytes until the caller
parses them. Field numbers are those of TF's `.proto` files, named where they are used.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["fields", "int64", "last", "packed_floats", "packed_varints", "tensor_value", "varint"]


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """`(value, position after it)` of the varint at `pos`."""
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(buf: bytes) -> dict[int, list]:
    """Field number -> list of values: ints for varint/fixed fields, bytes for length-delimited
    ones (sub-messages are parsed by the caller)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ValueError("truncated fixed64 field")
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            value = bytes(buf[pos : pos + n])
            if len(value) != n:
                raise ValueError("truncated length-delimited field")
            pos += n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("truncated fixed32 field")
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (field {field})")
        out.setdefault(field, []).append(value)
    return out


def int64(v: int) -> int:
    """A varint read as int64 (two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def last(f: dict, n: int, default=0):
    """The value of a non-repeated field (protobuf: the last one wins), or `default`."""
    return f[n][-1] if n in f else default


def packed_varints(values: list) -> list[int]:
    """A repeated varint field, packed (bytes) or not (ints), as ints."""
    out: list[int] = []
    for v in values:
        if isinstance(v, bytes):
            pos = 0
            while pos < len(v):
                x, pos = varint(v, pos)
                out.append(x)
        else:
            out.append(v)
    return out


def packed_floats(values: list, fmt: str) -> list[float]:
    """A repeated float (`fmt="f"`, fixed32) or double (`"d"`, fixed64) field, packed or not."""
    out: list[float] = []
    size = struct.calcsize(fmt)
    for v in values:
        if isinstance(v, bytes):
            out.extend(struct.unpack(f"<{len(v) // size}{fmt}", v))
        else:
            out.append(struct.unpack(f"<{fmt}", struct.pack("<I" if size == 4 else "<Q", v))[0])
    return out


# DataType (tensorflow/core/framework/types.proto) of the TensorProto values read here.
_TENSOR_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 9: "<i8", 10: "?"}


def tensor_value(buf: bytes) -> np.ndarray | None:
    """A TensorProto (dtype = 1, tensor_shape = 2, tensor_content = 4, float_val = 5,
    double_val = 6, int_val = 7, int64_val = 10, bool_val = 11) of a numeric dtype as a NumPy
    array, or None for other dtypes. A scalar repeated to fill the shape is expanded, as TF
    does."""
    f = fields(buf)
    dtype = last(f, 1)
    if dtype not in _TENSOR_DTYPES:
        return None
    shape_f = fields(last(f, 2, b""))
    shape = tuple(int64(last(fields(d), 1)) for d in shape_f.get(2, []))
    np_dtype = np.dtype(_TENSOR_DTYPES[dtype])
    count = int(np.prod(shape, dtype=np.int64))
    if 4 in f:
        return np.frombuffer(last(f, 4), np_dtype).reshape(shape).astype(np_dtype.newbyteorder("="))
    if dtype == 1:
        vals = packed_floats(f.get(5, []), "f")
    elif dtype == 2:
        vals = packed_floats(f.get(6, []), "d")
    elif dtype == 3:
        vals = [int64(v) for v in packed_varints(f.get(7, []))]
    elif dtype == 9:
        vals = [int64(v) for v in packed_varints(f.get(10, []))]
    else:
        vals = [bool(v) for v in packed_varints(f.get(11, []))]
    arr = np.array(vals, dtype=np_dtype.newbyteorder("="))
    if arr.size == count:
        return arr.reshape(shape)
    if arr.size == 1:
        return np.full(shape, arr[0], dtype=arr.dtype)
    if arr.size == 0:
        return np.zeros(shape, dtype=arr.dtype)
    raise ValueError(f"TensorProto: {arr.size} values for shape {list(shape)}")
