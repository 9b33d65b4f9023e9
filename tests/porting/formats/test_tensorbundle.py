"""The TF-free checkpoint reader (`porting/formats/tensorbundle.py`) against TensorFlow's own
encoders: its crc32c against the checksums TF writes into TFRecords (every length the byte loop
and the lane-parallel NumPy path take), its OrderedCode against TF's own test vectors and
against the slice keys TF's Saver writes (starts of 1 to 4 bytes), and its string tensors
against TF's reader (lengths across every varint boundary). Whole checkpoints TF wrote: a TF1
Saver's of every dtype, TF2 checkpoints whole and sharded, partitioned variables, and bundles
made for newer readers, refused as TF refuses them. Hostile files end to end:
tests/robustness/test_fuzz_readers.py.
"""

import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import (
    counted_rand,
    needs_tf,
    pb_field,
    pb_sstable,
    pb_table_block,
    pb_varint,
    same_bits,
    tf_checkpoint_entries,
    tf_module,
)
from torch_lstm_grad import porting
from torch_lstm_grad.porting.formats import tensorbundle
from torch_lstm_grad.porting.formats.tensorbundle import (
    TensorBundleReader,
    crc32c,
    masked_crc32c,
    read_table,
    slice_key,
)

tf = pytest.importorskip("tensorflow", reason="TensorFlow (the oracle) is not installed")

# -- crc32c ---------------------------------------------------------------------------------


def _tfrecord_checksums(tmp_path, payload: bytes) -> tuple[int, int]:
    """The masked crc32c TF writes for a record's 8-byte length and for its data (a TFRecord
    is length, masked crc of the length, data, masked crc of the data)."""
    path = str(tmp_path / f"r{len(payload)}.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        w.write(payload)
    with open(path, "rb") as fh:
        raw = fh.read()
    (length,) = struct.unpack_from("<Q", raw, 0)
    assert length == len(payload) and len(raw) == 8 + 4 + length + 4
    return struct.unpack_from("<I", raw, 8)[0], struct.unpack_from("<I", raw, 12 + length)[0]


_LANES = tensorbundle._CRC_LANES_FROM


@pytest.mark.parametrize(
    "n", [0, 1, 2, 255, 4096, _LANES - 1, _LANES, _LANES + 1, _LANES + 300, 3 * _LANES + 12345]
)
def test_crc32c_is_tf_s(tmp_path, n):
    payload = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    of_length, of_data = _tfrecord_checksums(tmp_path, payload)
    assert masked_crc32c(struct.pack("<Q", n)) == of_length
    assert masked_crc32c(payload) == of_data
    # Continued over a cut anywhere (the string tensors' checksum runs over three parts).
    for cut in {0, n // 3, n}:
        assert tensorbundle.mask_crc(crc32c(payload[cut:], crc32c(payload[:cut]))) == of_data


def test_crc32c_of_bytes_a_lane_cannot_split(tmp_path):
    """Lengths whose lanes leave a remainder and whose lane count is not a power of the span."""
    for n in (_LANES * 2 - 1, _LANES * 5 + 255):
        payload = bytes(range(256)) * (n // 256) + b"\xff" * (n % 256)
        assert masked_crc32c(payload) == _tfrecord_checksums(tmp_path, payload)[1]


def test_crc32c_through_the_crc32c_package_is_continued(tmp_path, monkeypatch):
    """Where the `crc32c` package is installed its function does the work (`crc32c(data,
    value=0)`); a continued CRC passes it the value. The package is stood in for by one of its
    signature (CI does not install it), the TFRecord checksum the oracle."""
    import types

    def package_crc32c(data, value=0):
        view = memoryview(data).cast("B")
        return tensorbundle._crc_bytes(view, value ^ 0xFFFFFFFF) ^ 0xFFFFFFFF

    monkeypatch.setitem(sys.modules, "crc32c", types.SimpleNamespace(crc32c=package_crc32c))
    payload = b"one lstm cell and then another"
    of_data = _tfrecord_checksums(tmp_path, payload)[1]
    assert masked_crc32c(payload) == of_data
    assert tensorbundle.mask_crc(crc32c(payload[9:], crc32c(payload[:9]))) == of_data


# -- OrderedCode ----------------------------------------------------------------------------

# From TF's tensorflow/core/lib/strings/ordered_code_test.cc (EncodingIsExpected.Signed): one
# value at each boundary of the encoded length, both signs.
_SIGNED = [
    (0, b"\x80"),
    (-1, b"\x7f"),
    (-64, b"@"),
    (-65, b"?\xbf"),
    (-8193, b"\x1f\xdf\xff"),
    (65536, b"\xe1\x00\x00"),
    (1048575, b"\xef\xff\xff"),
    (1048576, b"\xf0\x10\x00\x00"),
    (-1048577, b"\x0f\xef\xff\xff"),
    (134217727, b"\xf7\xff\xff\xff"),
    (134217728, b"\xf8\x08\x00\x00\x00"),
    (-134217729, b"\x07\xf7\xff\xff\xff"),
    (17179869184, b"\xfc\x04\x00\x00\x00\x00"),
    (-17179869185, b"\x03\xfb\xff\xff\xff\xff"),
    (2199023255552, b"\xfe\x02\x00\x00\x00\x00\x00"),
    (-2199023255553, b"\x01\xfd\xff\xff\xff\xff\xff"),
    (281474976710656, b"\xff\x01" + bytes(6)),
    (36028797018963968, b"\xff\x80\x80" + bytes(6)),
    (4611686018427387904, b"\xff\xc0@" + bytes(7)),
    (9223372036854775807, b"\xff\xc0\x7f" + b"\xff" * 7),
    (-9223372036854775807, b"\x00?\x80" + bytes(6) + b"\x01"),
]
# ... EncodingIsExpected.Unsigned and .String.
_UNSIGNED = [(0, b"\x00"), (1, b"\x01\x01"), (0x100, b"\x02\x01\x00"),
             (0xFFFFFFFF, b"\x04\xff\xff\xff\xff")]  # fmt: skip
_STRINGS = [(b"", b"\x00\x01"), (b"foo", b"foo\x00\x01"),
            (b"\x00\x01\xff", b"\x00\xff\x01\xff\x00\x00\x01")]  # fmt: skip


@pytest.mark.parametrize("value, code", _SIGNED, ids=[str(v) for v, _ in _SIGNED])
def test_signed_numbers_are_encoded_as_tf_encodes_them(value, code):
    assert tensorbundle._signed_increasing(value) == code


def test_unsigned_numbers_and_strings_are_encoded_as_tf_encodes_them():
    for value, code in _UNSIGNED:
        assert tensorbundle._num_increasing(value) == code
    for value, code in _STRINGS:
        assert tensorbundle._string_increasing(value) == code


def _saver_checkpoint(tmp_path, variables) -> str:
    """A TF1 Saver checkpoint of `variables`: name -> (value, partitions per axis or None)."""
    g = tf.Graph()
    with g.as_default():
        for name, (value, parts) in variables.items():
            partitioner = None if parts is None else (lambda shape, dtype, p=parts: p)
            tf.compat.v1.get_variable(name, initializer=tf.constant(value), partitioner=partitioner)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver().save(sess, str(tmp_path / "ckpt"))


def test_slice_keys_are_the_keys_tf_writes(tmp_path):
    """Partitioned variables whose slices start past 63, 8191 and 2**20 (OrderedCode of 2, 3
    and 4 bytes), along either axis and with a whole-dimension extent: the keys TF's Saver
    wrote are exactly the ones slice_key makes, and each variable assembles to TF's value."""
    rng = np.random.default_rng(3)
    variables = {
        "rows": (rng.integers(-9, 9, (200, 3), dtype=np.int8), [3, 1]),
        "cols": (rng.integers(-9, 9, (2, 20000), dtype=np.int8), [1, 2]),
        "long": (rng.integers(-9, 9, 3 << 20, dtype=np.int8), [3]),
        "whole": (rng.standard_normal((2, 2)).astype(np.float32), None),
    }
    prefix = _saver_checkpoint(tmp_path, variables)
    keys = {k for k, _ in read_table(prefix + ".index") if k[:1] == b"\x00"}
    r = TensorBundleReader(prefix)
    made = {slice_key(n, ext) for n, e in r.entries.items() for ext in e.slices}
    assert made == keys and len(keys) == 3 + 2 + 3
    starts = {max(s for s, _ in ext) for e in r.entries.values() for ext in e.slices}
    assert {67, 10000, 1 << 20} <= starts  # 2, 3 and 4 bytes
    theirs = tf.train.load_checkpoint(prefix)
    for name, (value, _) in variables.items():
        np.testing.assert_array_equal(r.get_tensor(name), theirs.get_tensor(name))
        np.testing.assert_array_equal(r.get_tensor(name), value)


# -- string tensors -------------------------------------------------------------------------


def test_strings_are_tf_s(tmp_path):
    """Elements whose lengths take varints of 1, 2 and 3 bytes (0, 127 | 128, 16383 | 16384),
    bytes that are not UTF-8, a scalar and an empty vector: get_strings returns what TF's
    reader does, and the entry's checksum (lengths, their checksum, bytes) is TF's."""
    elements = [b"", b"a", b"x" * 127, b"y" * 128, b"\xff\x00" * 8191 + b"z", b"w" * 16384,
                "größe".encode(), b"q" * 70000]  # fmt: skip
    mod = tf.Module()
    mod.vector = tf.Variable(tf.constant(elements))
    mod.scalar = tf.Variable(tf.constant(b"only"))
    mod.empty = tf.Variable(tf.constant([], tf.string))
    mod.matrix = tf.Variable(tf.constant([[b"a", b""], [b"bcd", b"e" * 200]]))
    prefix = tf.train.Checkpoint(m=mod).write(str(tmp_path / "s"))
    theirs = tf.train.load_checkpoint(prefix)
    r = TensorBundleReader(prefix)
    for short in ("vector", "scalar", "empty", "matrix"):
        name = f"m/{short}/.ATTRIBUTES/VARIABLE_VALUE"
        assert r.get_variable_to_dtype_map()[name] == "string"
        want = np.asarray(theirs.get_tensor(name), dtype=object)
        assert r.get_strings(name) == list(want.reshape(-1))
        assert r.get_variable_to_shape_map()[name] == list(want.shape)
    assert r.get_strings("m/vector/.ATTRIBUTES/VARIABLE_VALUE") == elements


def test_a_string_byte_changed_fails_the_checksum(tmp_path):
    mod = tf.Module()
    mod.v = tf.Variable(tf.constant([b"abc", b"d" * 300]))
    prefix = tf.train.Checkpoint(m=mod).write(str(tmp_path / "s"))
    name = "m/v/.ATTRIBUTES/VARIABLE_VALUE"
    e = TensorBundleReader(prefix).entries[name]
    data = tmp_path / "s.data-00000-of-00001"
    raw = bytearray(data.read_bytes())
    # lengths 3 and 300 (varints of 1 and 2 bytes), their checksum, then the bytes
    assert raw[e.offset : e.offset + 3] == bytes([3, 0xAC, 0x02]) and e.size == 3 + 4 + 303
    for at in (e.offset + 7, e.offset + 3, e.offset + e.size - 1):  # a byte, the lengths' crc
        changed = bytearray(raw)
        changed[at] ^= 1
        data.write_bytes(bytes(changed))
        with pytest.raises(ValueError, match="fail their checksum"):
            TensorBundleReader(prefix).get_strings(name)
        assert len(TensorBundleReader(prefix, verify_crc=False).get_strings(name)) == 2
    # A length changed (and its checksum with it) no longer fills the entry's bytes.
    changed = bytearray(raw)
    changed[e.offset] = 4
    data.write_bytes(bytes(changed))
    with pytest.raises(ValueError, match=r"lengths of .* \(\[4, 300\]\) do not fill its 310"):
        TensorBundleReader(prefix, verify_crc=False).get_strings(name)


def test_bfloat16_is_widened_to_float32_whole_and_partitioned_without_ml_dtypes(tmp_path):
    """bfloat16 variables, one whole and one in slices, read as TF's values widened to float32;
    also in a process where NumPy knows no bfloat16 (no ml_dtypes: TF-free use)."""
    import ml_dtypes

    rng = np.random.default_rng(5)
    values = {n: rng.standard_normal(s).astype(ml_dtypes.bfloat16) for n, s in
              (("whole", (2, 3)), ("parts", (4, 3)))}  # fmt: skip
    prefix = _saver_checkpoint(tmp_path, {"whole": (values["whole"], None),
                                          "parts": (values["parts"], [2, 1])})  # fmt: skip
    theirs = tf.train.load_checkpoint(prefix)
    r = TensorBundleReader(prefix)
    assert r.entries["parts"].sliced and r.get_variable_to_dtype_map()["parts"] == "bfloat16"
    read = (
        "import sys, numpy as np; sys.modules['ml_dtypes'] = None\n"
        "from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader as R\n"
        f"r = R({prefix!r})\n"
        f"np.savez({str(tmp_path / 'out.npz')!r}, **{{n: r.get_tensor(n) for n in r.entries}})\n"
    )
    subprocess.run([sys.executable, "-c", read], check=True)
    apart = np.load(tmp_path / "out.npz")
    for name, value in values.items():
        want = np.asarray(theirs.get_tensor(name)).astype(np.float32)
        np.testing.assert_array_equal(want, value.astype(np.float32))
        for ours in (r.get_tensor(name), apart[name]):
            assert ours.dtype == np.float32
            np.testing.assert_array_equal(ours, want)


# -- hostile bundles, made by hand: each check refused one past its bound, kept at it --------

_VALUES = np.arange(6, dtype="<f4")  # the data file: 24 bytes


def _shape(*dims) -> bytes:
    return b"".join(pb_field(2, 2, pb_field(1, 0, pb_varint(d))) for d in dims)


def _entry(dtype=1, shape=(2,), shard=0, offset=0, size=8, slices=(), raw_shape=None, data=None):
    """A BundleEntryProto of bytes [offset, +size) of `data` (default _VALUES', their
    crc32c as TF checks it); slices: per slice, per dimension (start, length or None)."""
    data = _VALUES.tobytes() if data is None else data
    crc = masked_crc32c(data[offset : offset + size]) if offset + size <= len(data) else 0
    out = pb_field(1, 0, pb_varint(dtype))
    out += pb_field(2, 2, _shape(*shape) if raw_shape is None else raw_shape)
    out += (
        pb_field(3, 0, pb_varint(shard))
        + pb_field(4, 0, pb_varint(offset))
        + pb_field(5, 0, pb_varint(size))
    )
    out += pb_field(6, 5, struct.pack("<I", crc))
    for extents in slices:
        ext = b"".join(
            pb_field(
                1,
                2,
                pb_field(1, 0, pb_varint(s)) + (b"" if n is None else pb_field(2, 0, pb_varint(n))),
            )
            for s, n in extents
        )
        out += pb_field(7, 2, ext)
    return out


def _header(num_shards=1, endianness=0) -> bytes:
    version = pb_field(1, 0, pb_varint(1))
    return (
        pb_field(1, 0, pb_varint(num_shards))
        + pb_field(2, 0, pb_varint(endianness))
        + pb_field(3, 2, version)
    )


def _bundle(tmp_path, entries: dict, data: bytes, header=None, shards=1) -> str:
    """A checkpoint of `entries` (key -> BundleEntryProto bytes) over one data file."""
    prefix = str(tmp_path / f"b{len(list(tmp_path.iterdir()))}")
    items = sorted({b"": header or _header(shards), **entries}.items())
    with open(prefix + ".index", "wb") as fh:
        fh.write(pb_sstable(items))
    for s in range(shards):
        with open(f"{prefix}.data-{s:05d}-of-{shards:05d}", "wb") as fh:
            fh.write(data)
    return prefix


def _opens(prefix, name=None):
    """Both readers open it and agree on the tensor (TF as the oracle of what is kept)."""
    r = TensorBundleReader(prefix)
    if name is None:
        return r
    ours = r.get_tensor(name)
    np.testing.assert_array_equal(ours, tf.train.load_checkpoint(prefix).get_tensor(name))
    return ours


def _refused(prefix, message):
    with pytest.raises(ValueError, match=message):
        TensorBundleReader(prefix)


def test_tensor_bytes_must_lie_in_the_data_file_and_match_the_shape(tmp_path):
    data = _VALUES.tobytes()
    at_end = _bundle(tmp_path, {b"t": _entry(shape=(2,), offset=16, size=8)}, data)
    np.testing.assert_array_equal(_opens(at_end, "t"), [4.0, 5.0])
    _refused(_bundle(tmp_path, {b"t": _entry(shape=(2,), offset=17, size=8)}, data),
             r"t: bytes \[17, \+8\) lie outside .*data-00000-of-00001 \(24 bytes\)")  # fmt: skip
    _refused(_bundle(tmp_path, {b"t": _entry(shape=(3,), offset=0, size=8)}, data),
             r"t: 8 bytes for shape \[3\] of float32")  # fmt: skip
    _refused(_bundle(tmp_path, {b"t": _entry(shape=(1,), offset=0, size=8)}, data),
             r"t: 8 bytes for shape \[1\] of float32")  # fmt: skip
    _refused(_bundle(tmp_path, {b"t": _entry(shard=1)}, data), "t: shard 1 of 1")
    _opens(_bundle(tmp_path, {b"t": _entry(shard=1)}, data, shards=2))
    # A dtype this reader lists but does not read is still bounded by its file.
    r = _opens(_bundle(tmp_path, {b"u": _entry(dtype=23, size=16)}, data))
    assert r.get_variable_to_dtype_map() == {"u": "uint64"}
    with pytest.raises(NotImplementedError, match="dtype uint64 is not read"):
        r.get_tensor("u")
    _refused(_bundle(tmp_path, {b"u": _entry(dtype=23, offset=9, size=16)}, data), "lie outside")


def test_data_types_are_tf_s():
    """Every DataType of TF's enum (types.proto; the reference types aside, which no checkpoint
    holds) under TF's own name, those read as the NumPy type TF gives them (bfloat16: its 16
    bits, widened to float32 on read); no other."""
    from tensorflow.core.framework import types_pb2

    enum = {v for v in types_pb2.DataType.values() if 0 < v < 100}
    assert set(tensorbundle._KNOWN_DTYPES) == enum
    names = {k: name for k, (name, _) in tensorbundle.DTYPES.items()} | tensorbundle._UNREADABLE
    assert {k: names[k] for k in enum} == {k: tf.dtypes.as_dtype(k).name for k in enum}
    for k, (name, code) in tensorbundle.DTYPES.items():
        theirs = np.dtype(tf.dtypes.as_dtype(k).as_numpy_dtype)
        assert np.dtype(code) == theirs if name != "bfloat16" else theirs.itemsize == 2


@pytest.mark.parametrize("dtype, ok", [(0, False), (1, True), (24, True), (33, True), (34, False)])
def test_data_types_outside_tf_s_enum_are_refused(tmp_path, dtype, ok):
    prefix = _bundle(tmp_path, {b"t": _entry(dtype=dtype, shape=(0,), size=0)}, b"")
    if ok:  # listed under the name TF's reader gives it
        theirs = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()["t"].name
        assert TensorBundleReader(prefix).get_variable_to_dtype_map() == {"t": theirs}
    else:
        _refused(prefix, f"entry 't': unknown DataType {dtype}")


def test_shapes_tf_cannot_hold_are_refused(tmp_path):
    """TF's TensorShape: at most 254 dimensions, none negative, an int64 element count (TF's
    reader aborts the process on each)."""
    ok = _bundle(tmp_path, {b"t": _entry(shape=(1,) * 254, size=4)}, _VALUES.tobytes())
    assert TensorBundleReader(ok).get_variable_to_shape_map() == {"t": [1] * 254}
    with pytest.raises(NotImplementedError, match="t: rank 254: NumPy holds at most 64"):
        TensorBundleReader(ok).get_tensor("t")  # as TF's reader, which returns NumPy too
    ok = _bundle(tmp_path, {b"t": _entry(shape=(1,) * 64, size=4)}, _VALUES.tobytes())
    assert TensorBundleReader(ok).get_tensor("t").shape == (1,) * 64
    _refused(_bundle(tmp_path, {b"t": _entry(shape=(1,) * 255, size=4)}, b"\x00" * 4),
             r"shape \[1, 1, 1, 1, 1, 1, 1, 1\] \(rank 255\) is not a tensor's")  # fmt: skip
    _refused(_bundle(tmp_path, {b"t": _entry(shape=(2, -1 & (2**64 - 1)), size=0)}, b""),
             r"shape \[2, -1\] \(rank 2\)")  # fmt: skip
    big = (1 << 31, 1 << 31, 2)  # 2**63 elements: one past int64's largest
    _refused(_bundle(tmp_path, {b"t": _entry(shape=big, size=0)}, b""), "rank 3")
    edge = (1 << 31, 1 << 31, 1, 1)  # 2**62 elements fit (then its 8 bytes do not)
    _refused(_bundle(tmp_path, {b"t": _entry(shape=edge, size=8)}, b"\x00" * 8),
             r"t: 8 bytes for shape \[2147483648, 2147483648, 1, 1\]")  # fmt: skip
    most = (153092023, 60247241209)  # 2**63 - 1 elements, int64's largest: they fit too
    _refused(_bundle(tmp_path, {b"t": _entry(shape=most, size=8)}, b"\x00" * 8),
             r"t: 8 bytes for shape \[153092023, 60247241209\]")  # fmt: skip
    unknown = _bundle(tmp_path, {b"t": _entry(raw_shape=pb_field(3, 0, pb_varint(1)))}, b"\x00" * 8)
    r = TensorBundleReader(unknown)
    assert r.get_variable_to_shape_map() == {"t": None}
    with pytest.raises(ValueError, match="'t' has an unknown rank"):
        r.get_tensor("t")


def test_string_tensors_need_a_byte_per_element(tmp_path):
    _opens(_bundle(tmp_path, {b"s": _entry(dtype=7, shape=(3,), size=3)}, b"\x00" * 3))
    _refused(_bundle(tmp_path, {b"s": _entry(dtype=7, shape=(4,), size=3)}, b"\x00" * 3),
             "s: 4 strings in 3 bytes")  # fmt: skip
    _opens(_bundle(tmp_path, {b"s": _entry(dtype=7, shape=(), size=0)}, b""))  # an empty scalar
    # Of unknown rank (no count of strings to check): listed, its strings not read.
    unknown = _entry(dtype=7, raw_shape=pb_field(3, 0, pb_varint(1)), size=3)
    r = TensorBundleReader(_bundle(tmp_path, {b"s": unknown}, b"\x00" * 3))
    assert r.get_variable_to_shape_map() == {"s": None}
    with pytest.raises(ValueError, match="'s' has an unknown rank"):
        r.get_strings("s")
    r = _opens(_bundle(tmp_path, {b"t": _entry()}, _VALUES.tobytes()))
    with pytest.raises(ValueError, match=r"t: not an unpartitioned string tensor \(float32\)"):
        r.get_strings("t")


def _partitioned(tmp_path, whole_shape, slices, pieces, whole_dtype=1):
    """A partitioned variable `v` of `whole_shape`: its slices (start, length or None per
    dimension), each slice's entry (shape) over consecutive bytes of _VALUES."""
    entries, offset = {}, 0
    entries[b"v"] = _entry(dtype=whole_dtype, shape=whole_shape, size=0, slices=slices)
    for extents, shape in zip(slices, pieces, strict=True):
        size = 4 * int(np.prod(shape))
        key = slice_key("v", [(s, -1 if n is None else n) for s, n in extents])
        entries[key] = _entry(shape=shape, offset=offset, size=size)
        offset += size
    return _bundle(tmp_path, entries, _VALUES.tobytes())


def test_slices_must_lie_inside_their_variable_and_cover_it(tmp_path):
    halves = [((0, 1), (0, None)), ((1, 1), (0, None))]
    ok = _partitioned(tmp_path, (2, 3), halves, [(1, 3), (1, 3)])
    np.testing.assert_array_equal(_opens(ok, "v"), _VALUES.reshape(2, 3))
    # Empty slices, at the end and between two: TF reads them (nothing to copy), so do we.
    for slices, pieces in (
        ([((0, 2),), ((2, 0),)], [(2,), (0,)]),
        ([((0, 1),), ((1, 0),), ((1, 1),)], [(1,), (0,), (1,)]),
    ):
        np.testing.assert_array_equal(_opens(_partitioned(tmp_path, (2,), slices, pieces), "v"),
                                      _VALUES[:2])  # fmt: skip
    _refused(_partitioned(tmp_path, (2, 3), [((0, 1), (0, None)), ((2, 1), (0, None))],
                          [(1, 3), (1, 3)]), r"v: slice .* outside shape \(2, 3\)")  # fmt: skip
    _refused(_partitioned(tmp_path, (2, 3), [((0, 2), (1, None))], [(2, 3)]),
             r"slice .* outside shape")  # a whole dimension must start at 0  # fmt: skip
    _refused(_partitioned(tmp_path, (2, 3), [((0, 1),)], [(1, 3)]),
             r"v: slice \(\(0, 1\),\) does not match shape \(2, 3\)")  # fmt: skip
    _refused(_partitioned(tmp_path, (2, 3), halves, [(1, 3), (1, 2)]),
             r"v: slice \(\(1, 1\), \(0, -1\)\) is a float32 \(1, 2\)")  # fmt: skip
    _refused(_partitioned(tmp_path, (2, 3), halves, [(1, 3), (1, 3)], whole_dtype=2),
             r"is a float32 \(1, 3\)")  # fmt: skip
    # Listed but absent from the index (under another variable's key).
    entries = {b"v": _entry(shape=(2,), size=0, slices=[((0, None),)]),
               slice_key("w", [(0, -1)]): _entry()}  # fmt: skip
    _refused(_bundle(tmp_path, entries, _VALUES.tobytes()), r"v: slice .* listed but not in")
    # One row twice: the slices' elements add up but do not cover the variable.
    twice = _partitioned(tmp_path, (2, 3), [((0, 1), (0, None)), ((0, 1), (0, None))],
                         [(1, 3), (1, 3)])  # fmt: skip
    with pytest.raises(ValueError, match="the slices of 'v' do not cover it"):
        TensorBundleReader(twice).get_tensor("v")
    short = _partitioned(tmp_path, (2, 3), [((0, 1), (0, None))], [(1, 3)])
    with pytest.raises(ValueError, match="the slices of 'v' do not cover it"):
        TensorBundleReader(short).get_tensor("v")


def test_a_slice_of_unknown_rank_or_of_a_slice_is_refused(tmp_path):
    entries = {b"v": _entry(raw_shape=pb_field(3, 0, pb_varint(1)), size=0, slices=[((0, None),)])}
    _refused(_bundle(tmp_path, entries, b""), "v: slices of a slice, or of a tensor of unknown")
    inner = [((0, None),)]
    entries = {b"v": _entry(shape=(2,), size=0, slices=inner),
               slice_key("v", [(0, -1)]): _entry(shape=(2,), size=0, slices=inner)}  # fmt: skip
    _refused(_bundle(tmp_path, entries, b""), r"slices of a slice")


@pytest.mark.parametrize("start, length, ok", [(0, None, True), (0, 2, True), (1, 1, True)])
def test_slice_extents_as_tf_writes_them(tmp_path, start, length, ok):
    """An extent without a length is the whole dimension (TF's kFullExtent, -1 in its key)."""
    shape = (2 if length is None else length,)
    prefix = _partitioned(tmp_path, (2,), [((start, length),)], [shape])
    if start == 1:  # half a variable
        with pytest.raises(ValueError, match="do not cover it"):
            TensorBundleReader(prefix).get_tensor("v")
    else:
        np.testing.assert_array_equal(TensorBundleReader(prefix).get_tensor("v"), [0.0, 1.0])


def test_negative_offsets_and_sizes_are_refused_as_tf_refuses_them(tmp_path):
    """TF: "Seeking to a negative position", "Invalid size in bundle entry"."""
    data, neg = _VALUES.tobytes(), -1 & (2**64 - 1)
    for offset, size, shown in [(neg, 8, r"\[-1, \+8\)"), (0, neg, r"\[0, \+-1\)"),
                                (-8 & neg, 8, r"\[-8, \+8\)")]:  # fmt: skip
        prefix = _bundle(tmp_path, {b"t": _entry(offset=offset, size=size)}, data)
        with pytest.raises(Exception, match="negative position|Invalid size"):
            tf.train.load_checkpoint(prefix).get_tensor("t")
        _refused(prefix, f"entry 't': bytes {shown}")


def test_a_slice_without_extents_is_refused_as_tf_refuses_it(tmp_path):
    """TF writes an extent per dimension (an empty one for a whole dimension); a slice of a
    matrix with none is not the whole matrix to TF's reader, which refuses it."""
    prefix = _partitioned(tmp_path, (2, 3), [()], [(2, 3)])
    with pytest.raises(Exception, match="Mismatching ranks"):
        tf.train.load_checkpoint(prefix).get_tensor("v")
    _refused(prefix, r"v: slice \(\) does not match shape \(2, 3\)")


def test_negative_extents_are_refused(tmp_path):
    neg = -1 & (2**64 - 1)
    for extents in [((neg, None),), ((0, -2 & (2**64 - 1)),), ((0, neg),)]:
        entries = {b"v": _entry(shape=(2,), size=0, slices=[extents])}
        _refused(_bundle(tmp_path, entries, b""), "slice extent start")


@pytest.mark.parametrize("shards, ok", [(0, False), (1, True), (99999, True), (100000, False)])
def test_the_number_of_shards_fits_the_data_files_names(tmp_path, shards, ok):
    prefix = _bundle(tmp_path, {}, b"", header=_header(num_shards=shards))
    if ok:
        r = TensorBundleReader(prefix)
        assert r.num_shards == shards and r.shard_path(3).endswith(f".data-00003-of-{shards:05d}")
    else:
        _refused(prefix, f"num_shards {shards}")


def test_a_header_without_num_shards_says_none_as_tf_reads_it(tmp_path):
    """BundleHeaderProto is proto3: a header without num_shards says 0. TF then opens
    `-of-00000` data files, not `-of-00001`; the reader refuses it rather than read another
    file than TF's."""
    version = pb_field(3, 2, pb_field(1, 0, pb_varint(1)))
    entry = {b"t": _entry(shape=(2,), offset=0, size=8)}
    prefix = _bundle(tmp_path, entry, _VALUES.tobytes(), header=pb_field(2, 0, b"\x00") + version)
    with pytest.raises(Exception, match="data-00000-of-00000"):
        tf.train.load_checkpoint(prefix).get_tensor("t")
    _refused(prefix, "num_shards 0")
    _opens(_bundle(tmp_path, entry, _VALUES.tobytes()), "t")  # num_shards 1: read


def test_big_endian_bundles_are_read_and_unknown_byte_orders_refused(tmp_path):
    data = _VALUES.astype(">f4").tobytes()
    entry = _entry(shape=(6,), size=24, data=data)
    prefix = _bundle(tmp_path, {b"t": entry}, data, header=_header(1, 1))
    out = TensorBundleReader(prefix).get_tensor("t")
    np.testing.assert_array_equal(out, _VALUES)
    assert out.dtype == np.dtype("=f4")
    _refused(_bundle(tmp_path, {}, b"", header=_header(1, 2)), "unknown endianness 2")
    prefix = str(tmp_path / "nohead")
    with open(prefix + ".index", "wb") as fh:
        fh.write(pb_sstable([(b"t", _entry())]))
    _refused(prefix, r"no BundleHeaderProto \(empty key\)")


# -- the SSTable ----------------------------------------------------------------------------


def _write(tmp_path, index: bytes) -> str:
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.index"
    path.write_bytes(index)
    return str(path)


def _read_blocks(tmp_path, blocks, restarts=1) -> list[tuple[bytes, bytes]]:
    """read_table of an SSTable of these data blocks (raw entries, as `_block` takes them)."""
    return read_table(_write(tmp_path, pb_sstable(blocks=blocks, restarts=restarts)))


def test_shared_key_prefixes_are_read_as_tf_reads_them(tmp_path):
    """TF writes keys sharing a prefix with the one before; the reader rebuilds them, and
    refuses a prefix longer than the key before or an entry running past its block."""
    entries = [(0, b"", _header()), (0, b"abc", b"1"), (2, b"d", b"2"), (3, b"e", b"3")]
    rebuilt = [(b"", _header()), (b"abc", b"1"), (b"abd", b"2"), (b"abde", b"3")]
    assert _read_blocks(tmp_path, [entries]) == rebuilt
    bad = [(0, b"", _header()), (0, b"abc", b"1"), (4, b"d", b"2")]
    with pytest.raises(ValueError, match="corrupt block entry at"):
        _read_blocks(tmp_path, [bad])
    assert _read_blocks(tmp_path, [bad[:2] + [(3, b"d", b"2")]])[-1][0] == b"abcd"
    # A key suffix (10 bytes said, 2 there) running into the restart array; a value likewise.
    for entry in (b"\x00\x0a\x00ab", b"\x00\x02\x0aab"):
        block = entry + struct.pack("<II", 0, 1)
        with pytest.raises(ValueError, match="here: corrupt block entry at 3"):
            list(tensorbundle._block_entries(block, "here"))


def test_keys_must_increase_across_blocks(tmp_path):
    one, two = [(0, b"", _header()), (0, b"a", b"1")], [(0, b"b", b"2")]
    assert [k for k, _ in _read_blocks(tmp_path, [one, two])] == [b"", b"a", b"b"]
    for later in (b"a", b"0"):  # equal, then smaller
        with pytest.raises(ValueError, match=f"keys out of order at {later!r}"):
            _read_blocks(tmp_path, [one, [(0, later, b"2")]])


def test_the_restart_count_must_fit_its_block(tmp_path):
    """The restart array (count words before the count) must fit the block; the entries end
    where it starts."""
    entries = [(0, b"", _header())]
    body = 3 + len(_header())  # three one-byte varints and the value
    fits = (body + 4) // 4  # the most restarts the block's body and one restart word hold
    with pytest.raises(ValueError, match="corrupt block entry at 3"):  # the entry cut short
        _read_blocks(tmp_path, [entries], restarts=fits)
    with pytest.raises(ValueError, match=f"bad restart count {fits + 1}"):
        _read_blocks(tmp_path, [entries], restarts=fits + 1)
    assert _read_blocks(tmp_path, [entries], restarts=1) == [(b"", _header())]
    for short in (b"", b"abc"):
        with pytest.raises(ValueError, match="here: block too short"):
            list(tensorbundle._block_entries(short, "here"))
    assert list(tensorbundle._block_entries(struct.pack("<I", 0), "here")) == []


def _footer_index_handle(data: bytes) -> tuple[int, int, int]:
    """(offset, size, position in the file of the size varint) of the index block."""
    from torch_lstm_grad.porting.decoding import proto

    footer = len(data) - 48
    _, pos = proto.varint(data, footer)
    _, pos = proto.varint(data, pos)
    off, at = proto.varint(data, pos)
    size, _ = proto.varint(data, at)
    return off, size, at


def test_blocks_are_bounded_by_the_file_and_checked(tmp_path):
    data = pb_sstable(blocks=[[(0, b"", _header())]])
    off, size, at = _footer_index_handle(data)
    assert off + size + 5 == len(data) - 48 and size < 64  # one-byte varints
    # The index block grown to end its trailer with the file: inside it (its trailer then
    # read from the footer), and one byte more: past it.
    with pytest.raises(ValueError) as inside:
        read_table(_write(tmp_path, data[:at] + bytes([size + 48]) + data[at + 1 :]))
    assert "runs past" not in str(inside.value)
    with pytest.raises(ValueError, match=rf"block \[{off}, \+{size + 49}\) runs past the end"):
        read_table(_write(tmp_path, data[:at] + bytes([size + 49]) + data[at + 1 :]))
    # The trailer: compression 0 (none) or 1 (snappy, not read here), a masked crc32c.
    for kind, error in [(1, NotImplementedError), (2, ValueError)]:
        edited = data[: off + size] + bytes([kind]) + data[off + size + 1 :]
        with pytest.raises(
            error, match="snappy" if kind == 1 else "unknown block compression type 2"
        ):
            read_table(_write(tmp_path, edited))
    crc = off + size + 1
    edited = data[:crc] + bytes([data[crc] ^ 1]) + data[crc + 1 :]
    with pytest.raises(
        ValueError, match=f"index block\\): block checksum mismatch \\(crc32c\\) at offset {off}"
    ):
        read_table(_write(tmp_path, edited))
    assert read_table(_write(tmp_path, edited), verify=False) == [(b"", _header())]
    # A data block's checksum (the block at 0, one-byte varints in its handle): the message
    # names the file; verify=False reads it.
    ((_, handle),) = tensorbundle._block_entries(data[off : off + size], "")
    assert handle[0] == 0 and len(handle) == 2
    crc = handle[1] + 1
    edited = _write(tmp_path, data[:crc] + bytes([data[crc] ^ 1]) + data[crc + 1 :])
    with pytest.raises(
        ValueError, match=f"{edited}: block checksum mismatch \\(crc32c\\) at offset 0"
    ):
        read_table(edited)
    assert read_table(edited, verify=False) == [(b"", _header())]


def test_data_blocks_may_not_overlap_or_reach_the_index_block(tmp_path):
    """Each data block starts at or after the end of the one before and ends before the index
    block: a hostile index cannot make the reader walk a block many times."""
    one, two = [(0, b"", _header())], [(0, b"a", b"1")]
    data = pb_sstable(blocks=[one, two])
    off, size, _ = _footer_index_handle(data)
    index = data[off : off + size]
    keys = [k for k, _ in tensorbundle._block_entries(index, "")]
    handles = [h for _, h in tensorbundle._block_entries(index, "")]
    assert keys == [b"", b"a"] and len(handles) == 2

    def with_handles(*hs) -> bytes:
        block = pb_table_block([(0, bytes([65 + i]), h) for i, h in enumerate(hs)])
        head = data[:off]
        trailer = b"\x00" + struct.pack("<I", masked_crc32c(block + b"\x00"))
        meta = data[len(data) - 48 : len(data) - 46]  # the metaindex handle: two 1-byte varints
        footer = (meta + pb_varint(off) + pb_varint(len(block))).ljust(40, b"\x00")
        return head + block + trailer + footer + struct.pack("<Q", 0xDB4775248B80FB57)

    assert len(read_table(_write(tmp_path, with_handles(*handles)))) == 2
    with pytest.raises(ValueError, match="overlaps another block"):  # the same block twice
        read_table(_write(tmp_path, with_handles(handles[0], handles[0], handles[1])))
    with pytest.raises(ValueError, match="overlaps another block"):  # out of file order
        read_table(_write(tmp_path, with_handles(handles[1], handles[0])))
    # The metaindex block (empty) ends where the index block starts: a data block may.
    meta = data[len(data) - 48 : len(data) - 46]
    assert len(read_table(_write(tmp_path, with_handles(*handles, meta)))) == 2
    # The index block itself as a data block: its handle, in the one entry of a block as long
    # as the handle says.
    size_of = {n: pb_varint(off) + pb_varint(n) for n in range(64)}
    itself = next(h for n, h in size_of.items() if len(pb_table_block([(0, b"A", h)])) == n)
    with pytest.raises(ValueError, match="overlaps another block"):
        read_table(_write(tmp_path, with_handles(itself)))
    # A block whose trailer's last byte is 0, as is the first byte of any block (the shared
    # prefix count of its first entry): the next block placed on that byte overlaps by one and
    # is refused, the index block or a data block; placed a byte later, it is read.
    value, block, trailer = next(
        (v, b, b"\x00" + struct.pack("<I", masked_crc32c(b + b"\x00")))
        for v, b in ((v, pb_table_block([(0, b"a", v)])) for v in (b"%d" % n for n in range(4096)))
        if struct.pack("<I", masked_crc32c(b + b"\x00"))[3] == 0
    )
    second = pb_table_block([(0, b"b", b"2")])
    after = b"\x00" + struct.pack("<I", masked_crc32c(second + b"\x00"))
    for gap in (4, 5):
        head = block + trailer[:gap]
        index_next = _table_of(head, [(0, len(block))])
        data_next = _table_of(head + second + after, [(0, len(block)), (len(head), len(second))])
        if gap == 4:
            with pytest.raises(ValueError, match=rf"data block \[0, \+{len(block)}\) overlaps"):
                read_table(_write(tmp_path, index_next))
            with pytest.raises(ValueError, match=rf"data block \[{len(head)}, \+\d+\) overlaps"):
                read_table(_write(tmp_path, data_next))
        else:
            assert read_table(_write(tmp_path, index_next)) == [(b"a", value)]
            assert read_table(_write(tmp_path, data_next)) == [(b"a", value), (b"b", b"2")]


def _table_of(head: bytes, handles) -> bytes:
    """An SSTable of the data blocks in `head` at `handles` (offset, size), its index block
    right after `head`."""
    index = pb_table_block(
        [(0, bytes([65 + i]), pb_varint(o) + pb_varint(n)) for i, (o, n) in enumerate(handles)]
    )
    trailer = b"\x00" + struct.pack("<I", masked_crc32c(index + b"\x00"))
    footer = (b"\x00\x00" + pb_varint(len(head)) + pb_varint(len(index))).ljust(40, b"\x00")
    return head + index + trailer + footer + struct.pack("<Q", 0xDB4775248B80FB57)


def test_files_too_short_or_without_the_magic_are_refused(tmp_path):
    data = pb_sstable(blocks=[[(0, b"", _header())]])
    with pytest.raises(ValueError, match=r"too short for an SSTable \(47 bytes\)"):
        read_table(_write(tmp_path, data[-47:]))
    # The footer alone is long enough (TF: shorter than Footer::kEncodedLength is too short);
    # its index block lies outside the file.
    with pytest.raises(ValueError, match=r"index block\): block \[\d+, \+\d+\) runs past the end"):
        read_table(_write(tmp_path, data[-48:]))
    with pytest.raises(ValueError, match="bad magic 0x004775248b80fb57"):
        read_table(_write(tmp_path, data[:-1] + b"\x00"))


def _strings(elements: list[bytes]) -> tuple[bytes, bytes]:
    """A string tensor's bytes as TF writes them (varint lengths, the masked crc32c of the
    lengths as uint32s, the bytes) and its entry's checksum field."""
    lengths = b"".join(struct.pack("<I", len(x)) for x in elements)
    checksum = struct.pack("<I", tensorbundle.mask_crc(crc32c(lengths)))
    data = b"".join(pb_varint(len(x)) for x in elements) + checksum + b"".join(elements)
    crc = tensorbundle.mask_crc(crc32c(checksum + b"".join(elements), crc32c(lengths)))
    return data, pb_field(6, 5, struct.pack("<I", crc))


def test_an_entry_without_its_checksum_is_refused_as_tf_refuses_it(tmp_path):
    """BundleEntryProto is proto3: an entry without crc32c says 0, and TF checks the bytes
    against that 0 (numbers and strings alike); read, they would be bytes no checksum vouches
    for."""
    data, strings_crc = _strings([b"a", b"bc"])
    numbers_crc = pb_field(6, 5, struct.pack("<I", masked_crc32c(_VALUES.tobytes()[:8])))
    strings = _entry(dtype=7, shape=(2,), size=len(data), data=data)
    strings = strings.replace(pb_field(6, 5, struct.pack("<I", masked_crc32c(data))), strings_crc)
    for entry, crc, payload, read in (
        (_entry(), numbers_crc, _VALUES.tobytes(), "get_tensor"),
        (strings, strings_crc, data, "get_strings"),
    ):
        assert entry.count(crc) == 1
        kept_prefix = _bundle(tmp_path, {b"t": entry}, payload)
        kept = getattr(TensorBundleReader(kept_prefix), read)("t")  # checksum as TF writes it:
        theirs = tf.train.load_checkpoint(kept_prefix).get_tensor("t")  # TF reads it too
        assert np.asarray(theirs).tolist() == np.asarray(kept, dtype=object).tolist()
        without = _bundle(tmp_path, {b"t": entry.replace(crc, b"")}, payload)
        with pytest.raises(Exception, match="Checksum does not match"):
            tf.train.load_checkpoint(without).get_tensor("t")
        with pytest.raises(ValueError, match="the bytes of 't' fail their checksum"):
            getattr(TensorBundleReader(without), read)("t")
        again = getattr(TensorBundleReader(without, verify_crc=False), read)("t")
        np.testing.assert_array_equal(np.asarray(again), np.asarray(kept))
    # Bytes whose masked crc32c is 0 (four, solved from crc32c's linear system) match the
    # absent field: TF reads them, and so does the reader.
    zero = b"E\xa3\xe7\x1f"
    assert masked_crc32c(zero) == 0
    entry = _entry(shape=(1,), size=4, data=zero)
    assert entry.endswith(pb_field(6, 5, bytes(4)))  # the crc32c field, 0, last: cut
    prefix = _bundle(tmp_path, {b"t": entry[:-5]}, zero)
    np.testing.assert_array_equal(_opens(prefix, "t"), np.frombuffer(zero, "<f4"))


def test_bytes_cut_after_the_index_was_read_are_refused(tmp_path):
    """The data file shortened between opening the checkpoint and reading a tensor: refused
    naming the file (TF: "Read less bytes than requested"), not read short."""
    prefix = _bundle(tmp_path, {b"t": _entry(offset=8, size=8)}, _VALUES.tobytes())
    r = TensorBundleReader(prefix)
    with open(r.shard_path(0), "r+b") as fh:
        fh.truncate(12)
    with pytest.raises(Exception, match="Read less bytes"):
        tf.train.load_checkpoint(prefix).get_tensor("t")
    with pytest.raises(
        ValueError, match=r"data-00000-of-00001: bytes \[8, \+8\) of 't' lie outside"
    ):
        r.get_tensor("t")


def test_string_lengths_past_the_entry_are_refused_naming_the_file(tmp_path):
    prefix = _bundle(tmp_path, {b"s": _entry(dtype=7, shape=(2,), size=2, data=b"\x80\x80")},
                     b"\x80\x80")  # two lengths, whose varint never ends  # fmt: skip
    with pytest.raises(Exception, match="Read less bytes"):
        tf.train.load_checkpoint(prefix).get_tensor("s")
    r = TensorBundleReader(prefix)
    path = re.escape(r.shard_path(0))
    with pytest.raises(ValueError, match=rf"^{path}: the string lengths of 's': truncated varint"):
        r.get_strings("s")


def test_a_partitioned_variable_of_a_type_not_read_is_refused_by_name(tmp_path):
    entries = {b"v": _entry(dtype=8, shape=(1,), size=0, slices=[((0, None),)]),
               slice_key("v", [(0, -1)]): _entry(dtype=8, shape=(1,), size=8)}  # fmt: skip
    r = TensorBundleReader(_bundle(tmp_path, entries, _VALUES.tobytes()))
    with pytest.raises(NotImplementedError, match=r"v: a partitioned complex64 variable of shape"):
        r.get_tensor("v")


I, H = 3, 4  # noqa: E741


@needs_tf
def test_tensorbundle_reader_tf1_saver_all_dtypes(tmp_path):
    """A TF1 Saver checkpoint with every supported dtype, a scalar, an empty tensor and enough
    long names to fill several index data blocks: every entry equals TF's, bit for bit, with
    the crc32c of the blocks and of every tensor verified."""
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    rng = np.random.default_rng(7)
    values = {
        "f32": counted_rand(3, 5),
        "f64": rng.standard_normal((2, 3)),
        "f16": rng.standard_normal(7).astype(np.float16),
        "bf16": np.array([1.5, -2.25, 3.0e38, 1e-39], np.float32),  # cast to bfloat16 below
        "i32": rng.integers(-9, 9, (4,), dtype=np.int32),
        "i64": np.int64(-(2**40)),
        "i8": np.array([-128, 0, 127], np.int8),
        "u8": np.array([0, 255], np.uint8),
        "flag": np.array([True, False, True]),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.float32(3.25),
    }
    values |= {
        f"rnn/multi_rnn_cell/cell_{k:03d}/some_long_scope/kernel": counted_rand(2)
        for k in range(300)
    }
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        for n, v in values.items():
            c = tf.constant(v)
            if n == "bf16":
                c = tf.cast(c, tf.bfloat16)
            tf.compat.v1.get_variable(n, initializer=c)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "m"))
    want = tf_checkpoint_entries(tmp_path / "m")
    r = TensorBundleReader(tmp_path / "m", verify_crc=True)
    assert set(r.entries) == set(want) == set(values)
    dtypes = r.get_variable_to_dtype_map()
    assert dtypes["bf16"] == "bfloat16" and dtypes["f16"] == "float16" and dtypes["i64"] == "int64"
    for name in want:
        same_bits(r.get_tensor(name), want[name])
    assert r.get_tensor("bf16").tolist()[:2] == [1.5, -2.25]
    # porting's two readers agree on the float variables (bfloat16 widened by both).
    ours = porting.read_variables(tmp_path / "m", reader="tensorbundle")
    theirs = porting.read_variables(tmp_path / "m", reader="tensorflow")
    assert (
        set(ours) == set(theirs) == {n for n in values if n[0] == "r" or n[0] in "fbes"} - {"flag"}
    )
    for name in theirs:
        same_bits(ours[name], theirs[name])


@needs_tf
def test_tensorbundle_reader_tf2_checkpoint_and_shards(tmp_path):
    """TF2 tf.train.Checkpoint (the `_CHECKPOINTABLE_OBJECT_GRAPH` string and save_counter
    skipped), written whole and split over several data shards."""
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    mod = tf.Module()
    mod.kernel = tf.Variable(counted_rand(I + H, 4 * H))
    mod.bias = tf.Variable(counted_rand(4 * H))
    mod.half = tf.Variable(counted_rand(3, 3).astype(np.float16))
    mod.big = tf.Variable(counted_rand(64, 64))
    ckpt = tf.train.Checkpoint(net=mod)
    prefixes = [ckpt.save(str(tmp_path / "whole"))]
    policy = getattr(tf.train.experimental, "MaxShardSizePolicy", None)
    if policy is not None:
        opts = tf.train.CheckpointOptions(
            experimental_sharding_callback=policy(max_shard_size=4096)
        )
        prefixes.append(ckpt.write(str(tmp_path / "sharded"), options=opts))
    for prefix in prefixes:
        want = tf_checkpoint_entries(prefix)
        r = TensorBundleReader(prefix, verify_crc=True)
        assert r.get_variable_to_dtype_map()["_CHECKPOINTABLE_OBJECT_GRAPH"] == "string"
        # The string entry's crc32c (lengths, their checksum and the bytes) checks out too.
        assert len(r.get_strings("_CHECKPOINTABLE_OBJECT_GRAPH")[0]) > 0
        assert set(want) == set(r.entries) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
        for name in want:
            same_bits(r.get_tensor(name), want[name])
        ours = porting.read_variables(prefix, reader="tensorbundle")
        assert set(ours) == {f"net/{n}" for n in ("kernel", "bias", "half", "big")}
        np.testing.assert_array_equal(ours["net/big"], mod.big.numpy())
    if policy is not None:
        assert TensorBundleReader(prefixes[1]).num_shards > 1


@needs_tf
def test_tensorbundle_reader_slices_and_errors(tmp_path):
    """A TF1 partitioned variable is assembled from its slices; a snappy-flagged block, a bad
    magic and a missing prefix give clear errors."""
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.get_variable(
            "part",
            initializer=tf.constant(counted_rand(6, 2)),
            partitioner=tf.compat.v1.fixed_size_partitioner(2),
        )
        tf.compat.v1.get_variable("whole", initializer=tf.constant(counted_rand(2)))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "p"))
    r = TensorBundleReader(tmp_path / "p", verify_crc=True)
    want = tf_checkpoint_entries(tmp_path / "p")
    assert r.entries["part"].sliced and r.get_variable_to_shape_map()["part"] == [6, 2]
    assert set(r.entries) == set(want) == {"part", "whole"}
    for name in want:
        same_bits(r.get_tensor(name), want[name])
    ours = porting.read_variables(tmp_path / "p", reader="tensorbundle")
    np.testing.assert_array_equal(ours["part"], want["part"])
    index = (tmp_path / "p.index").read_bytes()
    # Flag the index block (its handle closes the footer's first varints) as snappy-compressed.
    from torch_lstm_grad.porting.decoding import proto

    footer = index[-48:]
    _, pos = proto.varint(footer, 0)
    _, pos = proto.varint(footer, pos)
    off, pos = proto.varint(footer, pos)
    size, _ = proto.varint(footer, pos)
    snappy = bytearray(index)
    snappy[off + size] = 1
    (tmp_path / "s.index").write_bytes(bytes(snappy))
    with pytest.raises(NotImplementedError, match="snappy"):
        TensorBundleReader(tmp_path / "s")
    (tmp_path / "bad.index").write_bytes(index[:-1] + b"\x00")
    with pytest.raises(ValueError, match="a Keras file.*bad magic"):
        porting.read_variables(tmp_path / "bad", reader="tensorbundle")
    with pytest.raises(ValueError, match="a Keras file.*no such file"):
        porting.read_variables(tmp_path / "nothing", reader="tensorbundle")


@needs_tf
@pytest.mark.parametrize(
    "version, refusal",
    [
        (
            (1, 999, ()),
            "made for readers of version 999 or later; this one reads version 1, as TF's",
        ),
        ((1, 0, (1,)), "marks readers of version 1 (this one, TF's) bad"),
    ],
)
def test_tensorbundle_made_for_newer_readers_is_refused_as_tf_refuses_it(
    tmp_path, version, refusal
):
    """A bundle whose header's VersionDef TF's reader refuses (min_consumer above its format
    version 1, or version 1 listed as bad) is refused by the package's reader too, before
    TF's is reached; the same header with min_consumer 1 opens in both."""

    from torch_lstm_grad.porting.decoding.guard import CorruptFile
    from torch_lstm_grad.porting.formats.tensorbundle import TensorBundleReader

    tf = tf_module()
    prefix = str(tmp_path / "v")

    def write(producer, min_consumer, bad):
        v = pb_field(1, 0, pb_varint(producer)) + pb_field(2, 0, pb_varint(min_consumer))
        v += b"".join(pb_field(3, 0, pb_varint(b)) for b in bad)
        header = pb_field(1, 0, pb_varint(1)) + pb_field(3, 2, v)
        (tmp_path / "v.index").write_bytes(pb_sstable([(b"", header)]))
        (tmp_path / "v.data-00000-of-00001").write_bytes(b"")

    write(*version)
    with pytest.raises(Exception, match="above current version|upgrade TensorFlow|bad"):
        tf.train.load_checkpoint(prefix)  # TF's own verdict on the file
    for reader in ("tensorflow", "tensorbundle"):
        with pytest.raises(CorruptFile) as err:
            porting.read_variables(prefix, reader=reader)
        assert str(err.value) == f"{prefix}.index: TensorBundle index: {refusal}"
    write(1, 1, ())
    tf.train.load_checkpoint(prefix)
    assert TensorBundleReader(prefix).entries == {}
