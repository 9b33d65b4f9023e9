"""The text-format reader (`porting/decoding/textproto.py`, `.pbtxt` graphs) against protobuf's
own: for texts that use every field `SCHEMA` names, every DataType, every escape and every spelling
of a number and a bool, the wire bytes it writes parse to the message that
`google.protobuf.text_format` parses from the same text (TensorFlow's GraphDef classes are the
oracle). What it cannot parse is refused with a message naming it; nesting is bounded as protobuf
bounds it."""

import math

import pytest

from tests.helpers import needs_tf
from torch_lstm_grad.porting.decoding import textproto
from torch_lstm_grad.porting.decoding.textproto import to_wire

pytestmark = needs_tf


def _class(message: str):
    """TensorFlow's protobuf class of `message`."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, tensor_pb2

    return {
        "GraphDef": graph_pb2.GraphDef,
        "AttrValue": attr_value_pb2.AttrValue,
        "TensorProto": tensor_pb2.TensorProto,
    }[message]


def _wire_parsed(text: str, message: str = "GraphDef"):
    """to_wire's bytes parsed by protobuf (also for texts its text parser refuses)."""
    return _class(message).FromString(to_wire(text, message))


def _oracle(text: str, message: str = "GraphDef"):
    """(protobuf's parse of `text`, the parse of to_wire's bytes) as two messages of one class."""
    from google.protobuf import text_format

    return text_format.Parse(text, _class(message)()), _wire_parsed(text, message)


def _attr(value: str) -> str:
    """`value` as the AttrValue of a node's attribute."""
    return f"node {{ attr {{ key: 'k' value {{ {value} }} }} }}"


def _same(text: str, message: str = "GraphDef") -> None:
    want, got = _oracle(text, message)
    assert got == want, f"{text!r}:\n{got}\n!=\n{want}"


# Every field of SCHEMA, each with a value (the library's function too), the map fields with
# several entries, and `<...>` beside `{...}`.
_EVERY_FIELD = r"""
node {
  name: "lstm/kernel"
  op: "Const"
  input: "a"
  input: "^b:1"
  device: "/device:CPU:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "s" value { s: "x\001y" } }
  attr { key: "i" value { i: -7 } }
  attr { key: "f" value { f: 0.25 } }
  attr { key: "b" value { b: true } }
  attr { key: "p" value { placeholder: "T" } }
  attr {
    key: "shape"
    value { shape { dim { size: -1 } dim { size: 4 name: "n" } } }
  }
  attr { key: "u" value { shape { unknown_rank: true } } }
  attr {
    key: "value"
    value {
      tensor {
        dtype: DT_FLOAT
        tensor_shape { dim { size: 2 } }
        version_number: 3
        tensor_content: "\000\000\200?\000\000\000@"
        float_val: 1.5
        double_val: 2.25
        int_val: -3
        string_val: "s"
        int64_val: -9000000000
        bool_val: true
        half_val: 15360
      }
    }
  }
  attr {
    key: "list"
    value {
      list {
        s: "a" s: "b"
        i: 1 i: -2
        f: 0.5
        b: false
        type: DT_INT32
        shape < dim < size: 3 > >
        tensor { dtype: DT_INT32 int_val: 4 }
        func { name: "g" }
      }
    }
  }
  attr {
    key: "fn"
    value { func { name: "body" attr { key: "T" value { type: DT_DOUBLE } } } }
  }
}
node < name: "second" op: "Identity" input: "lstm/kernel" >
library {
  function {
    signature {
      name: "body"
      input_arg { name: "x" type: DT_FLOAT }
      input_arg { name: "y" type_attr: "T" }
      output_arg { name: "z" type: DT_FLOAT }
    }
    node_def { name: "add" op: "AddV2" input: "x" input: "y" }
    ret { key: "z" value: "add:z:0" }
    ret { key: "w" value: "add:z:1" }
    attr { key: "_noinline" value { b: true } }
  }
}
versions { producer: 1987 }
"""


def test_every_schema_field_is_what_protobuf_parses():
    _same(_EVERY_FIELD)


def test_every_field_the_schema_names_is_in_the_test_text():
    """The text above is the whole schema: a field added to SCHEMA without a value here would
    go unchecked."""
    for message, fields in textproto.SCHEMA.items():
        if message.startswith("_entry:"):
            continue
        for field in fields:
            assert f"{field} " in _EVERY_FIELD or f"{field}:" in _EVERY_FIELD, (message, field)


def test_every_data_type_by_name():
    """Each DataType name, its `_REF` form too, is the number types.proto gives it."""
    from tensorflow.core.framework import types_pb2

    assert textproto._DTYPES == dict(types_pb2.DataType.items())  # TF 2.21's, _REF forms too
    names = list(textproto._DTYPES)
    text = "list { " + " ".join(f"type: {n}" for n in names) + " }"
    _same(text, "AttrValue")
    for n in names:
        _same(f"type: {n}", "AttrValue")


def test_every_escape_of_a_string():
    for body in [
        r"\n\t\r\a\b\f\v\\\'\"",
        r"\0\12\377x\1234",  # octal: one to three digits
        r"\x1f\xA\xag",  # hex: one or two digits
        "plain é",  # UTF-8 as it stands
        r"\303\251",
    ]:
        _same(f'tensor {{ string_val: "{body}" }}', "AttrValue")
    # `\?` is `?` to protobuf's C++ parser, which reads TF's .pbtxt files; Python's keeps the
    # backslash (with a DeprecationWarning), so it is no oracle for this one
    assert to_wire(r's: "\?"', "AttrValue") == b"\x12\x01?"
    # `\X` is `\x` to C++'s unescape (Python's keeps it)
    assert to_wire(r's: "\X1F\X1"', "AttrValue") == b"\x12\x02\x1f\x01"
    # an octal escape past \377 keeps its low 8 bits, as C++'s unescape stores it in a char
    assert to_wire(r's: "\400\777"', "AttrValue") == b"\x12\x02\x00\xff"
    _same(r"""s: 'single "quoted" \'x\''""", "AttrValue")
    _same(r's: "adjacent " "strings" ' + "'joined'", "AttrValue")


def test_every_spelling_of_a_number():
    for f in ["1.5f", "-2.5F", "1e3", "-1E-3f", "7", "0.", ".5", "inf", "-inf", "+inf", "infinity",
              "-infinity", "Infinity", "inff", "-inff", "infinityf"]:  # fmt: skip
        _same(f"tensor {{ float_val: {f} double_val: {f} }}", "AttrValue")
    for i in ["0x1F", "0X1f", "-0x10", "0xff", "017", "-017", "+5", "0", "-1",
              "9223372036854775807", "-9223372036854775808"]:  # fmt: skip
        _same(f"tensor {{ int64_val: {i} }}", "AttrValue")
        _same(f"i: {i}", "AttrValue")
        _same(f"shape {{ dim {{ size: {i} }} }}", "AttrValue")
    _same("tensor { int_val: -2147483648 int_val: 2147483647 half_val: 0x3c00 version_number: -1 }",
          "AttrValue")  # fmt: skip
    _same("versions { producer: 2147483647 }")
    _same("versions { producer: -2147483648 }")
    _same("type: -2147483648", "AttrValue")
    _same("list { type: [2147483647, 0x13] }", "AttrValue")
    _same("tensor { dtype: 1 }", "AttrValue")  # enums by number
    _same("type: 0x13", "AttrValue")
    # a double too big for a float is infinity, as protobuf's C++ parser stores it
    _same("tensor { float_val: 1e39 float_val: -1e300 double_val: 1e300 }", "AttrValue")
    # the largest float is one still
    _same("tensor { float_val: 3.4028234663852886e38 float_val: -3.4028234663852886e38 }",
          "AttrValue")  # fmt: skip
    for nan in ["nan", "NaN", "nanf"]:
        _, got = _oracle(f"tensor {{ float_val: {nan} double_val: -{nan} }}", "AttrValue")
        assert math.isnan(got.tensor.float_val[0]) and math.isnan(got.tensor.double_val[0])


def test_every_spelling_of_a_bool():
    for b in ["true", "false", "True", "False", "t", "f", "1", "0"]:
        _same(f"b: {b}", "AttrValue")
    _same("list { b: [true, f, 1, False] }", "AttrValue")


def test_the_syntax_protobuf_accepts():
    """Lists in brackets, separators, comments, messages without a colon or with one, angle
    brackets; fields the schema does not name (scalars, messages, lists, extensions) skipped."""
    _same(_attr("list { i: [1, 2, -3] s: ['a', \"b\"] };") + ", versions { producer: 5 },")
    _same("list: { i: [] shape: [{dim {size: 1}}, <dim: <size: 2>>] }", "AttrValue")
    _same("# a comment\nnode { # another\n name: 'n' op: 'Const' }\n# the end")
    skipped = (
        "node { name: 'n' experimental_debug_info { original_node_names: ['a', 'b'] } "
        "op: 'Const' experimental_type { type_id: 1 } }"
    )
    # protobuf knows those fields; the reader skips them, as a binary reader skips what it does
    # not read: the same message without them
    want, _ = _oracle("node { name: 'n' op: 'Const' }")
    got = _wire_parsed(skipped)
    assert got == want
    got = _wire_parsed("node { name: 'n' [type.googleapis.com/x.Y] { a: 1 } op: 'Const' }")
    assert got == want
    got = _wire_parsed("unknown_scalar: 3 unknown_list: [1, 2] node { name: 'n' op: 'Const' }")
    assert got == want


def test_many_siblings_are_not_nesting():
    """Each message closed gives its level back: 300 siblings and 300 lists parse."""
    text = " ".join(f"node {{ name: 'n{i}' input: ['a'] }}" for i in range(300))
    _same(text)


def test_nesting_is_bounded_as_protobuf_bounds_it():
    """100 levels parse; the 101st is refused by name (Python's recursion limit never meets a
    hostile text); lists count as levels too."""
    ok = "a " + "{ a " * 99 + "{ }" + " }" * 99
    assert to_wire(ok, "GraphDef") == b""
    with pytest.raises(ValueError, match="nested more than 100 deep"):
        to_wire("a " + "{ a " * 100 + "{ }" + " }" * 100, "GraphDef")
    assert to_wire("a: " + "[" * 100 + "]" * 100, "GraphDef") == b""
    with pytest.raises(ValueError, match="nested more than 100 deep"):
        to_wire("a: " + "[" * 101 + "]" * 101, "GraphDef")


@pytest.mark.parametrize(
    "text, message",
    [
        ("node { name: 'n' } ~", r"unexpected '~' on line 1"),
        ("\n\nnode { name: 'n' $ }", r"unexpected '\$ }' on line 3"),
        ("node { name: 'n'", r"missing '}'"),
        ("node < name: 'n' }", r"expected a field name, found '}'"),
        ("node { : 'n' }", r"expected a field name, found ':'"),
        ("node { name: }", r"field 'name' expects a string, found '}'"),
        ("node { name: n }", r"field 'name' expects a string, found 'n'"),
        (_attr("b: 2"), r"field 'b': '2' is not a bool"),
        (_attr("i: 1.5"), r"field 'i': '1.5' is not an integer"),
        (_attr("i: 'x'"), r"field 'i' expects a value, found \"'x'\""),
        ("node { name: 'a\\x' }", r"bad escape in \"'a\\\\x'\""),
        ("node { name: 'a\\q' }", r"unknown escape \\q in"),
        ("node { name: 'a\\", r"unexpected"),
        ("node { input: ['a', 'b'", r"unexpected end of text"),
        (_attr("type: DT_FOO"), r"field 'type': 'DT_FOO' is not a DataType"),
        (_attr("type: 1.0"), r"field 'type': '1.0' is not an integer"),
        (_attr("type: 2147483648"), r"field 'type': '2147483648' is out of the int32 range"),
        (_attr("i: 9223372036854775808"), r"'9223372036854775808' is out of the int64 range"),
        (_attr("i: -9223372036854775809"), r"'-9223372036854775809' is out of the int64 range"),
        (_attr("tensor { int_val: 2147483648 }"), r"'2147483648' is out of the int32 range"),
        (_attr("tensor { half_val: -2147483649 }"), r"'-2147483649' is out of the int32 range"),
        ("versions { producer: 0x80000000 }", r"'0x80000000' is out of the int32 range"),
        (_attr("f: 1.5.5"), r"field 'f': '1.5.5' is not a number"),
        (_attr("f: infinityf5"), r"field 'f': 'infinityf5' is not a number"),
        ("node { name:", r"field 'name' has no value"),
        ("node { name { } }", r"field 'name' expects a value, found '{'"),
        (_attr("f < >"), r"field 'f' expects a value, found '<'"),
        ("versions: 5", r"field 'versions' expects a message, found '5'"),
        ("node { attr: 'k' }", r"field 'attr' expects a message, found \"'k'\""),
        ("node [x.y]", r"field 'node' expects a message, found 'x.y'"),
        ("[x.y", r"unexpected end of text"),
    ],
)
def test_what_it_cannot_parse_is_named(text, message):
    with pytest.raises(ValueError, match="text format: .*" + message):
        to_wire(text, "GraphDef")


def test_a_dangling_backslash_is_refused():
    """`"a\\"` closes nowhere (the backslash escapes the quote): an unclosed string, by line."""
    with pytest.raises(ValueError, match="unexpected '\"a\\\\\\\\\"' on line 1"):
        to_wire('s: "a\\"', "AttrValue")


def test_negative_integers_take_ten_bytes_as_protobuf_writes_them():
    """A negative int64 or int32 is its 64-bit two's complement: ten bytes, as protobuf's own
    serializer writes them (a reader may ignore bits past 64; the bytes must still be these)."""
    from tensorflow.core.framework import attr_value_pb2, graph_pb2

    for v in [-1, -7, -(1 << 31), -(1 << 63)]:
        want = attr_value_pb2.AttrValue(i=v).SerializeToString()
        assert len(want) == 11 and to_wire(f"i: {v}", "AttrValue") == want
    want = graph_pb2.GraphDef(versions={"producer": -5}).SerializeToString()
    assert to_wire("versions { producer: -5 }", "GraphDef") == want
