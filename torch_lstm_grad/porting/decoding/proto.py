"""The protobuf wire format, decoded by hand, for the few TF messages porting reads without
TensorFlow: the checkpoint index (`tensorbundle.py`), the TF2 object graph (`object_graph.py`)
and GraphDefs (`graphs/graph_def.py`).

A message is a run of `varint tag` + value, `tag = field << 3 | wire type`: 0 varint, 1 fixed64,
2 length-delimited (bytes, strings, sub-messages, packed repeated scalars), 5 fixed32.
`fields(buf)` returns every field's values in order; sub-messages stay bytes until the caller
parses them. Field numbers are those of TF's `.proto` files, named where they are used.

The bytes come from files that may be corrupt or hostile: every length is checked against the
bytes left before it is used, and a field read with the wrong wire type (a number where a
message or string belongs, or the reverse; a fixed-width value where a varint belongs, or the
reverse) raises ValueError through `integer`, `fixed32`, `float32`, `message`, `string`,
`packed_varints`, `packed_floats` and `fields` rather than being read as another type.
Protobuf's own parsers keep such a field as an unknown one and read the field's default in its
place: a value TF never sees, so the file is refused. The callers add the file's name
(`guard.reading`).
"""

from __future__ import annotations

import math
import struct

import numpy as np

__all__ = [
    "Fixed32",
    "Fixed64",
    "fields",
    "fixed32",
    "float32",
    "int64",
    "integer",
    "last",
    "message",
    "packed_floats",
    "packed_varints",
    "string",
    "strings",
    "tensor_value",
    "varint",
]

# The most bytes a TensorProto may fill from fewer stored values (TF stores a constant of equal
# values as one value and its shape): a hostile shape must not allocate without bound.
MAX_FILLED_BYTES = 1 << 28


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


class Fixed32(int):
    """A fixed32 field's value: an int that keeps its wire type, so that a float, a fixed32 and
    a varint are told apart."""


class Fixed64(int):
    """A fixed64 field's value (doubles, fixed64 integers)."""


def fields(buf: bytes) -> dict[int, list]:
    """Field number -> list of values: ints for varint fields, `Fixed32`/`Fixed64` for
    fixed-width ones, bytes for length-delimited ones (sub-messages are parsed by the
    caller)."""
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise ValueError("a number where a message belongs (wrong wire type)")
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
            value = Fixed64(struct.unpack_from("<Q", buf, pos)[0])
            pos += 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            if n > len(buf) - pos:
                left = len(buf) - pos
                raise ValueError(f"truncated length-delimited field ({n} bytes, {left} left)")
            value = bytes(buf[pos : pos + n])
            pos += n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("truncated fixed32 field")
            value = Fixed32(struct.unpack_from("<I", buf, pos)[0])
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (field {field})")
        out.setdefault(field, []).append(value)
    return out


def int64(v: int) -> int:
    """A varint read as int64 (two's complement)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def last(f: dict, n: int, default):
    """The value of a non-repeated field (protobuf: the last one wins), or `default`."""
    return f[n][-1] if n in f else default


def _wire(v) -> str:
    """What a value of `fields` was on the wire, for the messages of refusals."""
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, Fixed32):
        return "a fixed32"
    return "a fixed64" if isinstance(v, Fixed64) else "a varint"


def integer(f: dict, n: int, default=0):
    """A non-repeated varint field (int32, int64, uint*, bool, enum), or `default`."""
    v = last(f, n, default)
    if v is not default and (not isinstance(v, int) or isinstance(v, (Fixed32, Fixed64))):
        raise ValueError(f"field {n}: {_wire(v)} where a varint belongs (wrong wire type)")
    return v


def fixed32(f: dict, n: int, default=None):
    """A non-repeated fixed32 field, or `default`."""
    v = last(f, n, default)
    if v is not default and not isinstance(v, Fixed32):
        raise ValueError(f"field {n}: {_wire(v)} where a fixed32 belongs (wrong wire type)")
    return v


def float32(f: dict, n: int, default=None):
    """A non-repeated float field, or `default` (packed bytes are a repeated field's form)."""
    v = last(f, n, None)
    if v is None:
        return default
    if not isinstance(v, Fixed32):
        raise ValueError(f"field {n}: {_wire(v)} where a float belongs (wrong wire type)")
    return packed_floats([v], "f")[0]


def message(f: dict, n: int) -> bytes:
    """A non-repeated message or bytes field, b"" when absent."""
    v = last(f, n, b"")
    if not isinstance(v, bytes):
        raise ValueError(f"field {n}: a number where a message or string belongs (wrong wire type)")
    return v


def _text(v, n: int) -> str:
    if not isinstance(v, bytes):
        raise ValueError(f"field {n}: a number where a string belongs (wrong wire type)")
    try:
        return v.decode()
    except UnicodeDecodeError as err:
        raise ValueError(f"field {n}: a string that is not UTF-8 ({err.reason})") from err


def string(f: dict, n: int) -> str:
    """A non-repeated string field, decoded (proto3 strings are UTF-8), "" when absent."""
    return _text(last(f, n, b""), n)


def strings(f: dict, n: int) -> list[str]:
    """A repeated string field, decoded."""
    return [_text(v, n) for v in f.get(n, [])]


def packed_varints(values: list) -> list[int]:
    """A repeated varint field, packed (bytes) or not (ints), as ints."""
    out: list[int] = []
    for v in values:
        if isinstance(v, bytes):
            pos = 0
            while pos < len(v):
                x, pos = varint(v, pos)
                out.append(x)
        elif isinstance(v, (Fixed32, Fixed64)):
            raise ValueError(f"{_wire(v)} value {v} where a varint belongs (wrong wire type)")
        else:
            out.append(v)
    return out


def packed_floats(values: list, fmt: str) -> list[float]:
    """A repeated float (`fmt="f"`, fixed32) or double (`"d"`, fixed64) field, packed or not."""
    out: list[float] = []
    size = struct.calcsize(fmt)
    wire, bits, name = (Fixed32, "<I", "float") if size == 4 else (Fixed64, "<Q", "double")
    for v in values:
        if isinstance(v, bytes):
            if len(v) % size:
                raise ValueError(f"packed {fmt} values: {len(v)} bytes, not a multiple of {size}")
            out.extend(struct.unpack(f"<{len(v) // size}{fmt}", v))
        elif isinstance(v, wire):
            out.append(struct.unpack(f"<{fmt}", struct.pack(bits, v))[0])
        else:  # a varint (or a fixed64 for a float) where a fixed-width value belongs
            raise ValueError(f"a {name} written as {_wire(v)} ({v}): wrong wire type")
    return out


# DataType (tensorflow/core/framework/types.proto) of the TensorProto values read here.
_TENSOR_DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 9: "<i8", 10: "?"}


def tensor_value(buf: bytes) -> np.ndarray | None:
    """A TensorProto (dtype = 1, tensor_shape = 2, tensor_content = 4, float_val = 5,
    double_val = 6, int_val = 7, int64_val = 10, bool_val = 11) of a numeric dtype as a NumPy
    array, or None for other dtypes. A scalar repeated to fill the shape is expanded, as TF
    does."""
    f = fields(buf)
    dtype = integer(f, 1)
    if dtype not in _TENSOR_DTYPES:
        return None
    shape_f = fields(message(f, 2))
    shape = tuple(int64(integer(fields(d), 1)) for d in shape_f.get(2, []))
    if any(d < 0 for d in shape) or integer(shape_f, 3):
        raise ValueError(f"TensorProto: shape {list(shape)} is not a constant's")
    np_dtype = np.dtype(_TENSOR_DTYPES[dtype])
    count = math.prod(shape)
    if 4 in f:
        content = message(f, 4)
        if len(content) != count * np_dtype.itemsize:
            raise ValueError(
                f"TensorProto: {len(content)} bytes of content for shape {list(shape)} of "
                f"{np_dtype}"
            )
        return np.frombuffer(content, np_dtype).reshape(shape).astype(np_dtype.newbyteorder("="))
    if dtype == 1:
        vals = packed_floats(f.get(5, []), "f")
    elif dtype == 2:
        vals = packed_floats(f.get(6, []), "d")
    elif dtype == 3:  # an int32 field keeps a varint's low 32 bits, as protobuf reads it
        vals = [((v & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000 for v in packed_varints(f.get(7, []))]
    elif dtype == 9:
        vals = [int64(v) for v in packed_varints(f.get(10, []))]
    else:
        vals = [bool(v) for v in packed_varints(f.get(11, []))]
    arr = np.array(vals, dtype=np_dtype.newbyteorder("="))
    if arr.size == count:
        return arr.reshape(shape)
    if arr.size <= 1 and count * np_dtype.itemsize > MAX_FILLED_BYTES:
        raise ValueError(
            f"TensorProto: shape {list(shape)} would fill {count * np_dtype.itemsize} bytes "
            f"from {arr.size} stored value(s) (more than {MAX_FILLED_BYTES})"
        )
    if arr.size == 1:
        return np.full(shape, arr[0], dtype=arr.dtype)
    if arr.size == 0:
        return np.zeros(shape, dtype=arr.dtype)
    raise ValueError(f"TensorProto: {arr.size} values for shape {list(shape)}")
