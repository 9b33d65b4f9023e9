"""The protobuf wire-format reader (`porting/decoding/proto.py`) against Google's protobuf and
TF's own encoders: varints, fields of every wire type, int64 bounds and repeated numbers, a
number of the wrong wire type refused (where protobuf would read a default), tensor values as
TF's make_ndarray reads them, and a constant filled from one value bounded."""

import numpy as np
import pytest

from tests.helpers import needs_tf


@needs_tf
def test_varints_as_protobuf_writes_them():
    """The wire format's varints, written by Google's protobuf encoder: read back to the value
    and the position after them; every truncation, and an eleventh byte, refused."""
    encoder = pytest.importorskip("google.protobuf.internal.encoder")
    from torch_lstm_grad.porting.decoding import proto

    for value in (0, 1, 127, 128, 300, 2**32 - 1, 2**35 + 5, 2**63 - 1, 2**64 - 1):
        data = encoder._VarintBytes(value)
        assert proto.varint(b"\x07" + data + b"\x01", 1) == (value, 1 + len(data))
        for cut in range(len(data)):
            with pytest.raises(ValueError, match="^truncated varint$"):
                proto.varint(data[:cut], 0)
    with pytest.raises(ValueError, match="^varint longer than 10 bytes$"):
        proto.varint(b"\xff" * 10 + b"\x01", 0)


@needs_tf
def test_fields_of_every_wire_type_as_protobuf_writes_them():
    """One field of each wire type the reader takes (varint, fixed64, length-delimited,
    fixed32), written by Google's protobuf (its well-known wrapper types): decoded to the value
    protobuf wrote, and every truncation of the message refused."""
    import struct

    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    from torch_lstm_grad.porting.decoding import proto

    def bits(fmt_from, fmt_to, value):
        return struct.unpack(fmt_to, struct.pack(fmt_from, value))[0]

    cases = [
        (wrappers.UInt64Value(value=2**40 + 3), 2**40 + 3),
        (wrappers.DoubleValue(value=-2.5), bits("<d", "<Q", -2.5)),
        (wrappers.BytesValue(value=b"\x00abc"), b"\x00abc"),
        (wrappers.FloatValue(value=1.25), bits("<f", "<I", 1.25)),
    ]
    for message, want in cases:
        data = message.SerializeToString()
        assert proto.fields(data) == {1: [want]}
        assert proto.fields(data + data) == {1: [want, want]}
        for cut in range(1, len(data)):
            with pytest.raises(ValueError, match="^truncated "):
                proto.fields(data[:cut])


@needs_tf
def test_numbers_as_protobuf_reads_them():
    """int64 values at both bounds, and a number field given twice (two messages run together,
    which protobuf merges: the last value wins), written and read back by Google's protobuf:
    the reader reads the value protobuf reads."""
    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    from torch_lstm_grad.porting.decoding import proto

    values = (-(2**63), -1, 0, 1, 2**63 - 1)
    for value in values:
        data = wrappers.Int64Value(value=value).SerializeToString()
        assert proto.int64(proto.integer(proto.fields(data), 1)) == value
    for a, b in zip(values, values[::-1], strict=True):
        data = b"".join(wrappers.Int64Value(value=v).SerializeToString() for v in (a, b))
        want = wrappers.Int64Value.FromString(data).value
        assert proto.int64(proto.integer(proto.fields(data), 1)) == want == (b if b else a)
    data = b"".join(wrappers.FloatValue(value=v).SerializeToString() for v in (1.5, -2.25))
    got = proto.packed_floats([proto.last(proto.fields(data), 1, None)], "f")
    assert got == [wrappers.FloatValue.FromString(data).value] == [-2.25]


@needs_tf
def test_a_number_of_the_wrong_wire_type_is_refused():
    """A number written with another number's wire type (a varint where a float or a fixed32
    belongs, a fixed-width value where a varint belongs): Google's protobuf keeps it as an
    unknown field and reads the field's default or earlier value in its place, so TF never sees
    it; the reader, which would have read it, refuses the file instead, naming the field."""
    wrappers = pytest.importorskip("google.protobuf.wrappers_pb2")
    tensor_pb2 = pytest.importorskip("tensorflow.core.framework.tensor_pb2")
    bundle_pb2 = pytest.importorskip("tensorflow.core.protobuf.tensor_bundle_pb2")
    from torch_lstm_grad.porting.decoding import proto
    from torch_lstm_grad.porting.formats import tensorbundle

    varint_5 = b"\x08\x05"  # field 1, wire type 0
    fixed32_5 = b"\x0d\x05\x00\x00\x00"  # field 1, wire type 5
    fixed64_5 = b"\x09\x05" + bytes(7)  # field 1, wire type 1
    assert wrappers.FloatValue.FromString(varint_5).value == 0.0
    with pytest.raises(ValueError, match=r"^a float written as a varint \(5\): wrong wire type$"):
        proto.packed_floats(proto.fields(varint_5)[1], "f")
    assert wrappers.DoubleValue.FromString(fixed32_5).value == 0.0
    with pytest.raises(ValueError, match=r"^a double written as a fixed32 \(5\)"):
        proto.packed_floats(proto.fields(fixed32_5)[1], "d")
    for data, wire in ((fixed32_5, "fixed32"), (fixed64_5, "fixed64")):
        assert wrappers.Int64Value.FromString(data).value == 0
        with pytest.raises(ValueError, match=f"^field 1: a {wire} where a varint belongs"):
            proto.integer(proto.fields(data), 1)
        with pytest.raises(ValueError, match=f"^a {wire} value 5 where a varint belongs"):
            proto.packed_varints(proto.fields(data)[1])

    # In TF's messages: a float constant's value as a varint (TF reads none: zeros) ...
    t = tensor_pb2.TensorProto(dtype=1)
    t.tensor_shape.dim.add(size=2)
    data = t.SerializeToString() + b"\x28\x05"  # float_val (5) as a varint
    assert list(tensor_pb2.TensorProto.FromString(data).float_val) == []
    assert proto.tensor_value(t.SerializeToString()).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="^a float written as a varint"):
        proto.tensor_value(data)
    # ... and a checkpoint entry's crc32c (fixed32) followed by a varint one: TF keeps the first
    data = bundle_pb2.BundleEntryProto(dtype=1, crc32c=7).SerializeToString() + b"\x30\x05"
    assert bundle_pb2.BundleEntryProto.FromString(data).crc32c == 7
    with pytest.raises(ValueError, match="^field 6: a varint where a fixed32 belongs"):
        tensorbundle._parse_entry(data)


@needs_tf
def test_tensor_values_as_tensorflow_reads_them():
    """Constants of every dtype the reader takes (float, double, int32, int64, bool), stored
    as content bytes and as repeated values (one value filling the shape, as TF writes equal
    values), written by TF's make_tensor_proto: read as TF's make_ndarray reads them; a shape
    with an unknown dimension or rank is no constant's and is refused."""
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import tensor_pb2

    from torch_lstm_grad.porting.decoding import proto

    rng = np.random.default_rng(5)
    values = [
        rng.standard_normal((2, 3)).astype(np.float32),
        rng.standard_normal((3,)).astype(np.float64),
        rng.integers(-(2**31), 2**31 - 1, (2, 2), dtype=np.int32),
        rng.integers(-(2**63), 2**63 - 1, (3,), dtype=np.int64),
        np.array([True, False, True]),
    ]
    for value in values:
        for data in (
            tf.make_tensor_proto(value).SerializeToString(),  # tensor_content
            tf.make_tensor_proto(value.flat[0], value.dtype, value.shape).SerializeToString(),
        ):
            want = tf.make_ndarray(tensor_pb2.TensorProto.FromString(data))
            got = proto.tensor_value(data)
            assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
            np.testing.assert_array_equal(got, want)
    for dims, unknown_rank in (([2, -1], False), ([], True)):
        t = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
        t.tensor_shape.unknown_rank = unknown_rank
        for d in dims:
            t.tensor_shape.dim.add(size=d)
        with pytest.raises(ValueError, match="is not a constant's"):
            proto.tensor_value(t.SerializeToString())


@needs_tf
def test_a_constant_filled_from_one_value_is_bounded():
    """TF stores a constant of equal values as one value and its shape (make_tensor_proto of a
    scalar with a shape, as TF writes it): filled up to proto.MAX_FILLED_BYTES (256 MiB, the
    bound included) as make_ndarray fills it; past it, from one value or none, refused by name
    before anything is allocated (a hostile graph's [2^40] Const would take 4 TiB)."""
    tf = pytest.importorskip("tensorflow")
    from tensorflow.core.framework import tensor_pb2

    from torch_lstm_grad.porting.decoding import proto

    assert proto.MAX_FILLED_BYTES == 1 << 28
    at_bound = [proto.MAX_FILLED_BYTES // 4]  # float32: exactly 256 MiB
    data = tf.make_tensor_proto(np.float32(1.5), tf.float32, at_bound).SerializeToString()
    assert len(data) < 32  # one value and the shape
    got = proto.tensor_value(data)
    want = tf.make_ndarray(tensor_pb2.TensorProto.FromString(data))
    assert got.shape == want.shape == tuple(at_bound) and got.dtype == want.dtype
    assert got[0] == got[-1] == want[-1] == 1.5
    del got, want
    for dtype, shape in ((tf.float32, [proto.MAX_FILLED_BYTES // 4 + 1]),
                         (tf.float64, [2, proto.MAX_FILLED_BYTES // 16 + 1]),
                         (tf.int32, [1 << 40])):  # fmt: skip
        data = tf.make_tensor_proto(1, dtype, shape).SerializeToString()
        with pytest.raises(ValueError, match=r"would fill \d+ bytes from 1 stored value"):
            proto.tensor_value(data)
    empty = tensor_pb2.TensorProto(dtype=1)  # no value at all: zeros, as make_ndarray fills
    empty.tensor_shape.dim.add(size=1 << 40)
    with pytest.raises(ValueError, match=r"would fill \d+ bytes from 0 stored value"):
        proto.tensor_value(empty.SerializeToString())
