"""Protobuf text format (`.pbtxt`, `tf.io.write_graph(..., as_text=True)`) turned into the
binary wire format, for the messages porting reads, so one binary reader (`proto.py`) serves
both.

Text format names fields; the wire format numbers them. `to_wire(text, "GraphDef")` parses the
text and encodes every field that `SCHEMA` names (the fields of TF's `.proto` files that the
readers use, with their numbers); a field it does not name is skipped, as a binary reader skips
a field it does not read. Scalars keep their text (`-inf`, `0x1F`, `DT_FLOAT`), strings their C
escapes (`\\n`, `\\303`, `\\x1f`), and `name: [a, b]` lists and `<...>` / `{...}` messages are
both accepted.
"""

from __future__ import annotations

import math
import re
import struct

__all__ = ["SCHEMA", "to_wire"]

# DataType (tensorflow/core/framework/types.proto); `_REF` types are 100 more.
_DTYPES = {
    "DT_INVALID": 0,
    "DT_FLOAT": 1,
    "DT_DOUBLE": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 5,
    "DT_INT8": 6,
    "DT_STRING": 7,
    "DT_COMPLEX64": 8,
    "DT_INT64": 9,
    "DT_BOOL": 10,
    "DT_QINT8": 11,
    "DT_QUINT8": 12,
    "DT_QINT32": 13,
    "DT_BFLOAT16": 14,
    "DT_QINT16": 15,
    "DT_QUINT16": 16,
    "DT_UINT16": 17,
    "DT_COMPLEX128": 18,
    "DT_HALF": 19,
    "DT_RESOURCE": 20,
    "DT_VARIANT": 21,
    "DT_UINT32": 22,
    "DT_UINT64": 23,
    "DT_FLOAT8_E5M2": 24,
    "DT_FLOAT8_E4M3FN": 25,
    "DT_FLOAT8_E4M3FNUZ": 26,
    "DT_FLOAT8_E4M3B11FNUZ": 27,
    "DT_FLOAT8_E5M2FNUZ": 28,
    "DT_INT4": 29,
    "DT_UINT4": 30,
    "DT_INT2": 31,
    "DT_UINT2": 32,
    "DT_FLOAT4_E2M1FN": 33,
}
_DTYPES |= {f"{k}_REF": v + 100 for k, v in _DTYPES.items() if v}

# message -> field name -> (number, kind): kind is a scalar kind ("string", "int" (int64),
# "int32", "bool", "enum", "float", "double") or the name of a message; "map:<message>" is a
# map<string, message>.
SCHEMA: dict[str, dict[str, tuple[int, str]]] = {
    "GraphDef": {
        "node": (1, "NodeDef"),
        "library": (2, "FunctionDefLibrary"),
        "versions": (4, "VersionDef"),
    },
    "VersionDef": {"producer": (1, "int32")},
    "NodeDef": {
        "name": (1, "string"),
        "op": (2, "string"),
        "input": (3, "string"),
        "device": (4, "string"),
        "attr": (5, "map:AttrValue"),
    },
    "AttrValue": {
        "list": (1, "ListValue"),
        "s": (2, "string"),
        "i": (3, "int"),
        "f": (4, "float"),
        "b": (5, "bool"),
        "type": (6, "enum"),
        "shape": (7, "TensorShapeProto"),
        "tensor": (8, "TensorProto"),
        "placeholder": (9, "string"),
        "func": (10, "NameAttrList"),
    },
    "ListValue": {
        "s": (2, "string"),
        "i": (3, "int"),
        "f": (4, "float"),
        "b": (5, "bool"),
        "type": (6, "enum"),
        "shape": (7, "TensorShapeProto"),
        "tensor": (8, "TensorProto"),
        "func": (9, "NameAttrList"),
    },
    "NameAttrList": {"name": (1, "string"), "attr": (2, "map:AttrValue")},
    "TensorShapeProto": {"dim": (2, "Dim"), "unknown_rank": (3, "bool")},
    "Dim": {"size": (1, "int"), "name": (2, "string")},
    "TensorProto": {
        "dtype": (1, "enum"),
        "tensor_shape": (2, "TensorShapeProto"),
        "version_number": (3, "int32"),
        "tensor_content": (4, "string"),
        "float_val": (5, "float"),
        "double_val": (6, "double"),
        "int_val": (7, "int32"),
        "string_val": (8, "string"),
        "int64_val": (10, "int"),
        "bool_val": (11, "bool"),
        "half_val": (13, "int32"),
    },
    "FunctionDefLibrary": {"function": (1, "FunctionDef")},
    "FunctionDef": {
        "signature": (1, "OpDef"),
        "node_def": (3, "NodeDef"),
        "ret": (4, "map:string"),
        "attr": (5, "map:AttrValue"),
    },
    "OpDef": {"name": (1, "string"), "input_arg": (2, "ArgDef"), "output_arg": (3, "ArgDef")},
    "ArgDef": {"name": (1, "string"), "type": (3, "enum"), "type_attr": (4, "string")},
}
# A map<string, V> field is a repeated message {key = 1, value = 2}.
for _value in ("AttrValue", "string"):
    SCHEMA[f"_entry:{_value}"] = {"key": (1, "string"), "value": (2, _value)}

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*
    |(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<punct>[{}<>\[\]:,;/])  # `/`: in an Any's [type.googleapis.com/...]
    |(?P<word>[-+]?[A-Za-z0-9_.+\-]+)""",
    re.VERBOSE,
)
_ESCAPES = {
    "n": 10,
    "t": 9,
    "r": 13,
    "a": 7,
    "b": 8,
    "f": 12,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            line = text.count("\n", 0, pos) + 1
            raise ValueError(f"text format: unexpected {text[pos : pos + 20]!r} on line {line}")
        pos = m.end()
        if m.lastgroup:
            out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


def _unescape(quoted: str) -> bytes:
    body, out, i = quoted[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        e = body[i + 1]  # there is one: the tokenizer pairs each backslash with a character
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 :])
            out.append(int(m.group(), 8) & 0xFF)
            i += 1 + len(m.group())
        elif e in "xX":
            m = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :])
            if m is None:
                raise ValueError(f"text format: bad escape in {quoted[:40]!r}")
            out.append(int(m.group(), 16))
            i += 2 + len(m.group())
        else:
            raise ValueError(f"text format: unknown escape \\{e} in {quoted[:40]!r}")
    return bytes(out)


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative int64s take ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _number(word: str, field: str) -> float | int:
    """A number as protobuf's tokenizer reads it: C integers (`0x1F`, octal `017`), floats with
    an optional `f` suffix, `inf` / `infinity` / `nan` in any case."""
    w = word.lower()
    sign = "-" if w.startswith("-") else ""
    digits = w.lstrip("+-")
    if re.fullmatch(r"0[0-7]+", digits):  # C's octal, which Python's int(.., 0) refuses
        return int(sign + "0o" + digits[1:], 0)
    if digits in ("inf", "inff", "infinity", "infinityf"):
        return float(sign + "inf")
    if digits in ("nan", "nanf"):
        return float("nan")
    if not digits.startswith("0x") and digits.endswith("f"):
        digits = digits[:-1]  # `1.5f`
    try:
        return int(sign + digits, 0)
    except ValueError:
        pass
    try:
        return float(sign + digits)
    except ValueError:
        raise ValueError(f"text format: field {field!r}: {word!r} is not a number") from None


# A double beyond this is infinity as a float, as protobuf's SafeDoubleToFloat makes it.
_FLOAT_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


_BITS = {"int": 64, "int32": 32, "enum": 32}  # the signed integer kinds


def _scalar(kind: str, token: tuple[str, str], field: str) -> bytes:
    """The wire bytes of one scalar value (without its tag)."""
    tk, text = token
    if kind == "string":
        if tk != "str":
            raise ValueError(f"text format: field {field!r} expects a string, found {text!r}")
        return _unescape(text)
    if tk != "word":
        raise ValueError(f"text format: field {field!r} expects a value, found {text!r}")
    if kind == "bool":
        if text not in ("true", "false", "True", "False", "t", "f", "1", "0"):
            raise ValueError(f"text format: field {field!r}: {text!r} is not a bool")
        return _varint(int(text in ("true", "True", "t", "1")))
    if kind == "enum":
        if text in _DTYPES:
            return _varint(_DTYPES[text])
        if not text.lstrip("+-")[:1].isdigit():
            raise ValueError(f"text format: field {field!r}: {text!r} is not a DataType")
    value = _number(text, field)
    if kind in _BITS:
        if not isinstance(value, int):
            raise ValueError(f"text format: field {field!r}: {text!r} is not an integer")
        if not -(1 << _BITS[kind] - 1) <= value < 1 << _BITS[kind] - 1:
            raise ValueError(
                f"text format: field {field!r}: {text!r} is out of the int{_BITS[kind]} range"
            )
        return _varint(value)
    if kind == "float" and math.isfinite(value) and abs(value) > _FLOAT_MAX:
        value = math.copysign(math.inf, value)
    return struct.pack("<f" if kind == "float" else "<d", float(value))


_WIRE = {"string": 2, "int": 0, "int32": 0, "bool": 0, "enum": 0, "float": 5, "double": 1}


_MAX_NESTING = 100  # messages and lists inside each other (protobuf's own parsers stop at 100)


class _Parser:
    def __init__(self, text: str):
        self.toks, self.i, self.depth = _tokens(text), 0, 0

    def nest(self) -> None:
        """One level deeper; a hostile text must not exhaust Python's recursion limit."""
        self.depth += 1
        if self.depth > _MAX_NESTING:
            raise ValueError(f"text format: nested more than {_MAX_NESTING} deep")

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ValueError("text format: unexpected end of text")
        self.i += 1
        return self.toks[self.i - 1]

    def expect(self, text: str) -> None:
        tok = self.take()
        if tok[1] != text:
            raise ValueError(f"text format: expected {text!r}, found {tok[1]!r}")

    def message(self, name: str | None, close: str | None) -> bytes:
        """The fields up to `close` (None: the end of the text), encoded; `name` None skips."""
        schema = SCHEMA.get(name, {}) if name else {}
        out = bytearray()
        while True:
            tok = self.peek()
            if tok is None:
                if close is not None:
                    raise ValueError(f"text format: missing {close!r}")
                return bytes(out)
            if tok[1] == close:
                self.take()
                return bytes(out)
            if tok[1] in (",", ";"):
                self.take()
                continue
            kind_tok, field = self.take()
            if kind_tok == "punct" and field == "[":  # an extension or Any: [type.url] {...}
                while self.take()[1] != "]":
                    pass
                field = ""
            elif kind_tok != "word":
                raise ValueError(f"text format: expected a field name, found {field!r}")
            number, kind = schema.get(field, (None, None))
            if name is None:
                number = None
            colon = self.peek() is not None and self.peek()[1] == ":"
            if colon:
                self.take()
            values = self.values(kind if number is not None else None, field)
            for v in values:
                wire = _WIRE.get(kind, 2) if number is not None else None
                if wire is None:
                    continue
                out += _varint(number << 3 | wire)
                if wire == 2:
                    out += _varint(len(v)) + v
                else:
                    out += v

    def values(self, kind: str | None, field: str) -> list[bytes]:
        tok = self.peek()
        if tok is None:
            raise ValueError(f"text format: field {field!r} has no value")
        if tok[1] == "[":
            self.take()
            self.nest()
            out = []
            while self.peek() is not None and self.peek()[1] != "]":
                if self.peek()[1] == ",":
                    self.take()
                    continue
                out += self.values(kind, field)
            self.expect("]")
            self.depth -= 1
            return out
        if tok[1] in ("{", "<"):
            self.take()
            self.nest()
            close = "}" if tok[1] == "{" else ">"
            if kind is None:  # a field the schema does not name: parsed, skipped
                out = [self.message(None, close)]
            elif kind.startswith("map:"):
                out = [self.map_entry(kind[4:], close, field)]
            elif kind in SCHEMA:
                out = [self.message(kind, close)]
            else:  # skipping it would leave the field unset: read as its default, silently
                raise ValueError(f"text format: field {field!r} expects a value, found {tok[1]!r}")
            self.depth -= 1
            return out
        value = self.take()
        if tok[0] == "str":  # adjacent strings are one string
            while self.peek() is not None and self.peek()[0] == "str":
                value = ("str", value[1][:-1] + self.take()[1][1:])
        if kind is None:
            return []
        if kind in SCHEMA or kind.startswith("map:"):
            raise ValueError(f"text format: field {field!r} expects a message, found {value[1]!r}")
        return [_scalar(kind, value, field)]

    def map_entry(self, value_kind: str, close: str, field: str) -> bytes:
        """A map<string, ...> entry `{ key: "k" value { ... } }` as its wire message."""
        return self.message(f"_entry:{value_kind}", close)


def to_wire(text: str, message: str) -> bytes:
    """The binary encoding of `text` (protobuf text format of `message`), holding the fields
    `SCHEMA` names. Raises ValueError naming what it cannot parse."""
    return _Parser(text).message(message, None)
