"""The TF-free checkpoint reader (`porting/tensorbundle.py`) against TensorFlow's own encoders:
its crc32c against the checksums TF writes into TFRecords (every length the byte loop and the
lane-parallel NumPy path take), its OrderedCode against TF's own test vectors and against the
slice keys TF's Saver writes (starts of 1 to 4 bytes), and its string tensors against TF's
reader (lengths across every varint boundary). The happy paths of whole checkpoints:
test_porting_readers.py; hostile files end to end: test_fuzz_readers.py.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from torch_lstm_grad.porting import tensorbundle
from torch_lstm_grad.porting.tensorbundle import (
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
            tf.compat.v1.get_variable(
                name, initializer=tf.constant(value), partitioner=partitioner
            )
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
