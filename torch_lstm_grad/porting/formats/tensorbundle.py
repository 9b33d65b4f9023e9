"""A TensorFlow-free reader of TF checkpoints (the TensorBundle format, TF1 `Saver` V2 and TF2
`tf.train.Checkpoint`): `<prefix>.index` + `<prefix>.data-XXXXX-of-YYYYY`.

Format (as TF 2.21 writes it; checked against its files in tests/test_porting.py):

* `<prefix>.index` is a LevelDB-style SSTable. The file ends with a 48-byte footer: two block
  handles (metaindex, index; each a varint64 offset and a varint64 size), zero padding to 40
  bytes, then the magic 0xdb4775248b80fb57 (little-endian uint64). Every block is followed by a
  5-byte trailer: a compression byte (0 none, 1 snappy) and the masked crc32c of the block and
  that byte. A block is a run of entries `varint32 shared, varint32 non_shared, varint32
  value_len, key[shared:] bytes, value bytes` (each key shares `shared` leading bytes with the
  previous one), then `uint32` restart offsets and their `uint32` count. The index block's values
  are the handles of the data blocks, whose entries are the bundle's (key, value) pairs in key
  order.
* The empty key holds a `BundleHeaderProto` (num_shards = 1, endianness = 2 (0 little, 1 big),
  version = 3); every other key is a tensor name whose value is a `BundleEntryProto` (dtype = 1,
  shape = 2 (TensorShapeProto: repeated dim = 2 {size = 1}), shard_id = 3, offset = 4, size = 5,
  crc32c = 6 (fixed32), slices = 7). Keys starting with a NUL byte are the slices of partitioned
  variables.
* The tensor's bytes are `[offset, offset + size)` of `<prefix>.data-{shard:05d}-of-{n:05d}`,
  raw, in the header's byte order. `crc32c` is the **masked** crc32c of those bytes
  (`((c >> 15 | c << 17) + 0xa282ead8) mod 2**32`), as for the blocks.

The protobuf wire format is decoded by hand (`proto.py`).
A partitioned variable (TF1 partitioners; TF2's `MaxShardSizePolicy` splits big variables too)
has an entry with `slices` (TensorSliceProto: repeated extent = 1 {start = 1, length = 2;
no length: the whole dimension}) and no data; each slice is its own entry under the key
`OrderedCode(0, name, ndims, start_0, length_0, ...)` (TF's `EncodeTensorNameSlice`; length -1
for a whole dimension), which `get_tensor` looks up and assembles. Snappy-compressed blocks
(TF writes none) raise NotImplementedError. String tensors (e.g. TF2's
`_CHECKPOINTABLE_OBJECT_GRAPH`, a serialized TrackableObjectGraph) are read by `get_strings`:
TF writes each element's length as a varint64, then a 4-byte checksum of the lengths, then the
bytes (`WriteStringTensor`). Resources and variants are listed but not read: `get_tensor`
raises NotImplementedError for them. bfloat16 is returned widened to float32 (exact).

A corrupt or hostile checkpoint is refused with a ValueError naming the file and the check:
the blocks' and the tensors' crc32c are verified (NumPy, about 100 MB/s; the `crc32c` package
when installed), every varint and length is checked against the bytes left, data blocks must
follow each other without overlapping and keys increase, every entry's fields have their wire
types, a shape has at most 254 non-negative dimensions whose product fits an int64, each
tensor's bytes lie inside its data file and are as many as its shape and dtype take, and slices
lie inside their variable. `checkpoint.py` runs these checks before TF's own reader, which
aborts the process on some of them.
"""

from __future__ import annotations

import functools
import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..decoding import guard, proto

__all__ = ["TensorBundleReader", "crc32c", "masked_crc32c"]

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48
_BUNDLE_VERSION = 1  # TF's kTensorBundleVersion: the format this reader reads

# DataType enum (tensorflow/core/framework/types.proto) -> (name, numpy dtype, little-endian)
DTYPES = {
    1: ("float32", "f4"),
    2: ("float64", "f8"),
    3: ("int32", "i4"),
    4: ("uint8", "u1"),
    5: ("int16", "i2"),
    6: ("int8", "i1"),
    9: ("int64", "i8"),
    10: ("bool", "?"),
    14: ("bfloat16", "u2"),  # widened to float32 on read
    17: ("uint16", "u2"),
    19: ("float16", "f2"),
}
_STRING = 7
# The rest of the enum as of TF 2.21, by TF's names: listed, not read.
_UNREADABLE = {
    _STRING: "string",
    8: "complex64",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    15: "qint16",
    16: "quint16",
    18: "complex128",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
    26: "float8_e4m3fnuz",
    27: "float8_e4m3b11fnuz",
    28: "float8_e5m2fnuz",
    29: "int4",
    30: "uint4",
    31: "int2",
    32: "uint2",
    33: "float4_e2m1fn",
}


# -- crc32c (Castagnoli) ----------------------------------------------------------------------

_CRC_TABLE: list[int] = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)
_CRC_NP = np.array(_CRC_TABLE, np.uint32)
_CRC_LANES_FROM = 1 << 18  # below this many bytes the plain loop is faster


def _crc_bytes(data, reg: int) -> int:
    """The CRC register after `data` (no pre/post inversion), a byte at a time."""
    table = _CRC_TABLE
    for byte in data:
        reg = table[(reg ^ byte) & 0xFF] ^ (reg >> 8)
    return reg


def _gf2_apply(cols, v: int) -> int:
    out, i = 0, 0
    while v:
        if v & 1:
            out ^= cols[i]
        v >>= 1
        i += 1
    return out


@functools.lru_cache(maxsize=64)
def _zero_bytes_operator(n: int) -> tuple[int, ...]:
    """The register's change over `n` zero bytes, a linear map over GF(2): the image of each of
    its 32 bits (the CRC of `a + b` is that of `a` moved over len(b) zero bytes, xor b's)."""
    base = [_CRC_TABLE[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(32)]
    out = [1 << i for i in range(32)]
    while n:
        if n & 1:
            out = [_gf2_apply(base, c) for c in out]
        n >>= 1
        if n:
            base = [_gf2_apply(base, c) for c in base]
    return tuple(out)


def crc32c(data, crc: int = 0) -> int:
    """The (unmasked) CRC-32C of `data`, continuing `crc`. Uses the `crc32c` package when
    installed; else NumPy: the bytes are cut into up to 16384 lanes whose CRCs are computed side
    by side, a table lookup per byte column, and combined pairwise (about 100 MB/s), small
    inputs a byte at a time."""
    try:
        import crc32c as _fast  # type: ignore[import-not-found]

        return _fast.crc32c(data, crc) if crc else _fast.crc32c(data)
    except ImportError:
        pass
    view = memoryview(data).cast("B")
    reg = crc ^ 0xFFFFFFFF
    if len(view) < _CRC_LANES_FROM:
        return _crc_bytes(view, reg) ^ 0xFFFFFFFF
    lanes = 1 << min(14, (len(view) // 256).bit_length() - 1)
    span = len(view) // lanes
    columns = np.frombuffer(view, np.uint8, count=lanes * span).reshape(lanes, span).T.copy()
    r = np.zeros(lanes, np.uint32)
    for column in columns:  # every lane's register from zero
        r = _CRC_NP[(r ^ column) & 0xFF] ^ (r >> np.uint32(8))
    while len(r) > 1:  # neighbours combined: the left one moved over the right one's bytes
        cols = _zero_bytes_operator(span)
        left = np.zeros_like(r[0::2])
        for bit in range(32):
            left ^= np.where((r[0::2] >> np.uint32(bit)) & 1, np.uint32(cols[bit]), np.uint32(0))
        r = left ^ r[1::2]
        span *= 2
    reg = _gf2_apply(_zero_bytes_operator(span), reg) ^ int(r[0])
    return _crc_bytes(view[span:], reg) ^ 0xFFFFFFFF


def mask_crc(c: int) -> int:
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    return mask_crc(crc32c(data))


@dataclass(frozen=True)
class BundleEntry:
    dtype: int
    shape: tuple[int, ...] | None  # None: unknown rank
    shard_id: int
    offset: int
    size: int
    crc32c: int  # absent: 0, as proto3 reads it and TF checks the bytes against
    slices: tuple[tuple[tuple[int, int], ...], ...]  # per slice, per dim (start, length | -1)

    @property
    def sliced(self) -> bool:
        return bool(self.slices)

    @property
    def dtype_name(self) -> str:
        if self.dtype in DTYPES:
            return DTYPES[self.dtype][0]
        return _UNREADABLE[self.dtype]


# TF's TensorShape holds at most 254 dimensions and an int64 element count; a shape past either
# aborts TF's checkpoint reader (a CHECK), so the index is checked before TF reads it.
_MAX_RANK = 254
_NUMPY_MAX_RANK = 64  # numpy 2's NPY_MAXDIMS
_MAX_ELEMENTS = (1 << 63) - 1
_KNOWN_DTYPES = DTYPES.keys() | _UNREADABLE.keys()  # 1 to 33 (types.proto); 0 is DT_INVALID


def _parse_shape(buf: bytes, what: str) -> tuple[int, ...] | None:
    sf = proto.fields(buf)
    if proto.integer(sf, 3):
        return None
    shape = tuple(proto.int64(proto.integer(proto.fields(d), 1)) for d in sf.get(2, []))
    if len(shape) > _MAX_RANK or any(d < 0 for d in shape) or math.prod(shape) > _MAX_ELEMENTS:
        raise ValueError(f"{what}: shape {list(shape)[:8]} (rank {len(shape)}) is not a tensor's")
    return shape


def _parse_entry(value: bytes, what: str = "entry") -> BundleEntry:
    """A BundleEntryProto, every field of the type it must have and every number in range."""
    f = proto.fields(value)
    shape = _parse_shape(proto.message(f, 2), what) if 2 in f else ()
    slices = []
    for sp in f.get(7, []):
        extents = []
        for ef in map(proto.fields, proto.fields(sp).get(1, [])):
            start = proto.int64(proto.integer(ef, 1))
            length = proto.int64(proto.integer(ef, 2)) if 2 in ef else -1
            if start < 0 or length < -1 or (length == -1 and 2 in ef):
                raise ValueError(f"{what}: slice extent start {start}, length {length}")
            extents.append((start, length))
        slices.append(tuple(extents))
    entry = BundleEntry(
        dtype=proto.integer(f, 1),
        shape=shape,
        shard_id=proto.integer(f, 3),
        offset=proto.int64(proto.integer(f, 4)),
        size=proto.int64(proto.integer(f, 5)),
        crc32c=proto.fixed32(f, 6, 0),
        slices=tuple(slices),
    )
    if entry.dtype not in _KNOWN_DTYPES:
        raise ValueError(f"{what}: unknown DataType {entry.dtype}")
    if entry.offset < 0 or entry.size < 0:
        raise ValueError(f"{what}: bytes [{entry.offset}, +{entry.size})")
    return entry


# -- OrderedCode (tensorflow/core/lib/strings/ordered_code), for the keys of slices ---------

_HEADER_BITS = [
    (0, 0),
    (0x80, 0),
    (0xC0, 0),
    (0xE0, 0),
    (0xF0, 0),
    (0xF8, 0),
    (0xFC, 0),
    (0xFE, 0),
    (0xFF, 0),
    (0xFF, 0x80),
    (0xFF, 0xC0),
]


def _num_increasing(n: int) -> bytes:
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([len(body)]) + body


def _string_increasing(s: bytes) -> bytes:
    esc = {0: b"\x00\xff", 0xFF: b"\xff\x00"}
    return b"".join(esc.get(c, bytes([c])) for c in s) + b"\x00\x01"


def _signed_increasing(v: int) -> bytes:
    x = ~v if v < 0 else v
    if x < 64:
        return bytes([(0x80 ^ v) & 0xFF])
    n = min(next(k for k in range(2, 11) if x.bit_length() <= 7 * k - 1), 10)
    buf = bytearray((b"\xff\xff" if v < 0 else b"\x00\x00") + (v & (2**64 - 1)).to_bytes(8, "big"))
    out = buf[len(buf) - n :]
    out[0] ^= _HEADER_BITS[n][0]
    out[1] ^= _HEADER_BITS[n][1]
    return bytes(out)


def slice_key(name: str, extents) -> bytes:
    """The index key of one slice of a partitioned variable (TF's EncodeTensorNameSlice)."""
    key = _num_increasing(0) + _string_increasing(name.encode()) + _num_increasing(len(extents))
    for start, length in extents:
        key += _signed_increasing(start) + _signed_increasing(length)
    return key


# -- SSTable --------------------------------------------------------------------------------


def _block(data: bytes, handle: bytes, where: str, verify: bool) -> tuple[bytes, int, int]:
    """`(contents, offset, size)` of the block a handle points to, its trailer checked."""
    off, pos = proto.varint(handle, 0)
    size, _ = proto.varint(handle, pos)
    if off + size + 5 > len(data):
        raise ValueError(f"{where}: block [{off}, +{size}) runs past the end of the file")
    contents, kind = data[off : off + size], data[off + size]
    if kind == 1:
        raise NotImplementedError(
            f"{where}: snappy-compressed index blocks are not supported by the TF-free reader "
            "(TF writes them uncompressed; read this checkpoint with TensorFlow installed)"
        )
    if kind != 0:
        raise ValueError(f"{where}: unknown block compression type {kind}")
    if verify:
        (want,) = struct.unpack_from("<I", data, off + size + 1)
        if masked_crc32c(data[off : off + size + 1]) != want:
            raise ValueError(f"{where}: block checksum mismatch (crc32c) at offset {off}")
    return contents, off, size


def _block_entries(block: bytes, where: str):
    if len(block) < 4:
        raise ValueError(f"{where}: block too short")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (restarts + 1)
    if end < 0:
        raise ValueError(f"{where}: bad restart count {restarts}")
    pos, key = 0, b""
    while pos < end:
        shared, pos = proto.varint(block, pos)
        non_shared, pos = proto.varint(block, pos)
        vlen, pos = proto.varint(block, pos)
        if shared > len(key) or pos + non_shared + vlen > end:
            raise ValueError(f"{where}: corrupt block entry at {pos}")
        key = key[:shared] + block[pos : pos + non_shared]
        pos += non_shared
        yield key, block[pos : pos + vlen]
        pos += vlen


def read_table(path: str, verify: bool = True) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable file, in file order. The data blocks must follow each
    other without overlapping and the keys must increase, as TF writes them: a hostile index
    cannot make the reader walk one block many times."""
    with open(path, "rb") as fh:
        data = fh.read()
    if len(data) < _FOOTER:
        raise ValueError(f"{path}: too short for an SSTable ({len(data)} bytes)")
    footer = data[-_FOOTER:]
    (magic,) = struct.unpack_from("<Q", footer, _FOOTER - 8)
    if magic != _MAGIC:
        raise ValueError(f"{path}: not an SSTable (bad magic {magic:#018x})")
    _, pos = proto.varint(footer, 0)  # metaindex offset
    _, pos = proto.varint(footer, pos)  # metaindex size
    index, index_off, _ = _block(data, footer[pos:], f"{path} (index block)", verify)
    out: list[tuple[bytes, bytes]] = []
    end = 0
    for _, handle in _block_entries(index, f"{path} (index block)"):
        block, off, size = _block(data, handle, path, verify)
        if off < end or off + size + 5 > index_off:
            raise ValueError(f"{path}: data block [{off}, +{size}) overlaps another block")
        end = off + size + 5
        for key, value in _block_entries(block, path):
            if out and key <= out[-1][0]:
                raise ValueError(f"{path}: keys out of order at {key[:40]!r}")
            out.append((key, value))
    return out


# -- the bundle -----------------------------------------------------------------------------


class TensorBundleReader:
    """`TensorBundleReader(prefix)`: `entries` (tensor name -> BundleEntry), `get_tensor(name)`
    (a NumPy array), `get_variable_to_shape_map()` / `get_variable_to_dtype_map()` (dtype names).

    Opening it reads and checks the whole index: the blocks' crc32c (`verify_crc`, default on),
    every entry parsed strictly, each tensor's bytes inside its data file (by the file's size)
    and as many as its shape and dtype take, a partitioned variable's slices inside its shape
    and present. What TF's own reader aborts the process on (an entry that does not parse, a
    negative dimension) is refused here first (`checkpoint.py` opens a checkpoint with this
    reader before TF's). Reading a tensor checks its crc32c."""

    def __init__(self, prefix: str | os.PathLike, verify_crc: bool = True):
        self.prefix = os.fspath(prefix)
        self.verify_crc = verify_crc
        index = self.prefix + ".index"
        if not os.path.isfile(index):
            raise FileNotFoundError(f"{index}: no such file (not a TF checkpoint prefix)")
        self.entries: dict[str, BundleEntry] = {}
        self._slices: dict[bytes, BundleEntry] = {}
        self._shards: dict[int, bytes] = {}
        with guard.reading(index, "TensorBundle index"):
            header = None
            for key, value in read_table(index, verify_crc):
                if key == b"":
                    header = proto.fields(value)
                elif key[:1] == b"\x00":  # a slice of a partitioned variable
                    self._slices[key] = _parse_entry(value, f"slice {key[:40]!r}")
                else:
                    name = key.decode("utf-8")
                    self.entries[name] = _parse_entry(value, f"entry {name[:80]!r}")
            if header is None:
                raise ValueError("no BundleHeaderProto (empty key) in the index")
            # A header without num_shards says 0 (proto3), as TF reads it: TF then looks for
            # data files named `-of-00000`, which no TF writer makes; refused, not read as 1.
            self.num_shards = proto.integer(header, 1, 0)
            if not 1 <= self.num_shards <= 99999:  # the data files' names have five digits
                raise ValueError(f"num_shards {self.num_shards}")
            endianness = proto.integer(header, 2, 0)
            if endianness not in (0, 1):
                raise ValueError(f"unknown endianness {endianness}")
            self.byte_order = "<" if endianness == 0 else ">"
            # TF's reader refuses a bundle made for a newer reader (tensor_bundle.cc checks the
            # header's VersionDef against its format version, 1): so does this one.
            version = proto.fields(proto.message(header, 3))  # producer 1, min_consumer 2
            min_consumer = proto.integer(version, 2, 0)
            bad = proto.packed_varints(version.get(3, []))  # bad_consumers
            if min_consumer > _BUNDLE_VERSION:
                raise ValueError(
                    f"made for readers of version {min_consumer} or later; this one reads "
                    f"version {_BUNDLE_VERSION}, as TF's"
                )
            if _BUNDLE_VERSION in bad:
                raise ValueError(f"marks readers of version {_BUNDLE_VERSION} (this one, TF's) bad")
            for name, e in self.entries.items():
                self._check_entry(name, e)

    def _shard_size(self, shard: int, name: str) -> int:
        path = self.shard_path(shard)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file (the data of {name!r})")
        return os.path.getsize(path)

    def _check_entry(self, name: str, e: BundleEntry, whole: BundleEntry | None = None) -> None:
        """Raises ValueError where the entry's bytes, shape and slices do not agree."""
        if e.shape is not None and e.dtype == _STRING and math.prod(e.shape) > max(e.size, 1):
            raise ValueError(f"{name}: {math.prod(e.shape)} strings in {e.size} bytes")
        if e.sliced:
            if whole is not None or e.shape is None:
                raise ValueError(f"{name}: slices of a slice, or of a tensor of unknown rank")
            for extents in e.slices:
                if len(extents) != len(e.shape):  # none either: TF says "Mismatching ranks"
                    raise ValueError(f"{name}: slice {extents} does not match shape {e.shape}")
                for (start, length), n in zip(extents, e.shape, strict=True):
                    if start + max(length, 0) > n or (length < 0 and start):
                        raise ValueError(f"{name}: slice {extents} outside shape {e.shape}")
                sub = self._slices.get(slice_key(name, extents))
                if sub is None:
                    raise ValueError(f"{name}: slice {extents} listed but not in the index")
                spans = zip(extents, e.shape, strict=True)
                want = tuple(n if length < 0 else length for (_, length), n in spans)
                if sub.dtype != e.dtype or sub.shape != want:
                    raise ValueError(f"{name}: slice {extents} is a {sub.dtype_name} {sub.shape}")
                self._check_entry(f"{name} slice {extents}", sub, e)
            return
        if e.shard_id >= self.num_shards:
            raise ValueError(f"{name}: shard {e.shard_id} of {self.num_shards}")
        size = self._shard_size(e.shard_id, name)
        if e.offset + e.size > size:
            raise ValueError(
                f"{name}: bytes [{e.offset}, +{e.size}) lie outside "
                f"{self.shard_path(e.shard_id)} ({size} bytes)"
            )
        if e.dtype in DTYPES and e.shape is not None:
            itemsize = np.dtype(DTYPES[e.dtype][1]).itemsize
            if e.size != math.prod(e.shape) * itemsize:
                raise ValueError(
                    f"{name}: {e.size} bytes for shape {list(e.shape)} of {e.dtype_name}"
                )

    def get_variable_to_shape_map(self) -> dict[str, list[int] | None]:
        return {n: None if e.shape is None else list(e.shape) for n, e in self.entries.items()}

    def get_variable_to_dtype_map(self) -> dict[str, str]:
        return {n: e.dtype_name for n, e in self.entries.items()}

    def shard_path(self, shard: int) -> str:
        return f"{self.prefix}.data-{shard:05d}-of-{self.num_shards:05d}"

    def _shard(self, shard: int) -> bytes:
        if shard not in self._shards:
            with open(self.shard_path(shard), "rb") as fh:
                self._shards[shard] = fh.read()
        return self._shards[shard]

    def get_tensor(self, name: str) -> np.ndarray:
        e = self.entries[name]
        if e.sliced:
            return self._assemble(name, e)
        return self._read(name, e)

    def _entry_bytes(self, name: str, e) -> bytes:
        """The entry's bytes in its shard, bounds-checked and (verify_crc, numeric entries)
        checksum-checked; a string entry's checksum is not over its bytes (get_strings)."""
        data = self._shard(e.shard_id)
        path = self.shard_path(e.shard_id)
        if e.offset + e.size > len(data):  # the file changed since it was opened
            raise ValueError(f"{path}: bytes [{e.offset}, +{e.size}) of {name!r} lie outside it")
        raw = data[e.offset : e.offset + e.size]
        if self.verify_crc and e.dtype != _STRING and masked_crc32c(raw) != e.crc32c:
            raise ValueError(f"{path}: the bytes of {name!r} fail their checksum (crc32c)")
        return raw

    def get_strings(self, name: str) -> list[bytes]:
        """The elements of a string tensor, flattened (a scalar gives one)."""
        e = self.entries[name]
        path = self.shard_path(e.shard_id)
        if e.dtype != _STRING or e.sliced:
            raise ValueError(f"{name}: not an unpartitioned string tensor ({e.dtype_name})")
        if e.shape is None:  # no count of strings to read
            raise ValueError(f"{self.prefix}: {name!r} has an unknown rank")
        count = math.prod(e.shape)
        raw = self._entry_bytes(name, e)
        lengths, pos = [], 0
        with guard.reading(path, f"the string lengths of {name!r}"):
            for _ in range(count):
                n, pos = proto.varint(raw, pos)
                lengths.append(n)
        pos += 4  # the checksum of the lengths
        if pos + sum(lengths) != len(raw):
            raise ValueError(
                f"{path}: the string lengths of {name!r} ({lengths[:8]}) do not fill its "
                f"{len(raw)} bytes"
            )
        if self.verify_crc:
            # TF's writer sums each length as a fixed uint32 (uint64 above 2^32 - 1), then the
            # lengths' masked checksum as written, then the strings' bytes.
            c = 0
            for n in lengths:
                c = crc32c(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little"), c)
            c = crc32c(raw[pos - 4 : len(raw)], c)
            if mask_crc(c) != e.crc32c:
                raise ValueError(f"{path}: the bytes of {name!r} fail their checksum (crc32c)")
        out = []
        for n in lengths:
            out.append(raw[pos : pos + n])
            pos += n
        return out

    def _assemble(self, name: str, e: BundleEntry) -> np.ndarray:
        """A partitioned variable: each slice's entry sits under its OrderedCode key (their
        shapes and bytes were checked when the index was read, so the slices' bytes bound the
        allocation)."""
        if e.dtype not in DTYPES:  # (an unknown rank was refused with the index)
            raise NotImplementedError(
                f"{name}: a partitioned {e.dtype_name} variable of shape {e.shape} is not read by "
                "the TF-free reader"
            )
        subs = [(extents, self._slices[slice_key(name, extents)]) for extents in e.slices]
        if sum(math.prod(sub.shape) for _, sub in subs) < math.prod(e.shape):
            raise ValueError(f"{self.prefix}: the slices of {name!r} do not cover it")
        out = np.zeros(e.shape, np.float32 if e.dtype == 14 else np.dtype(DTYPES[e.dtype][1]))
        covered = np.zeros(e.shape, bool)
        for extents, sub in subs:
            index = tuple(
                slice(0, n) if length < 0 else slice(start, start + length)
                for (start, length), n in zip(extents, e.shape, strict=True)
            )
            out[index] = self._read(f"{name} slice {extents}", sub)
            covered[index] = True
        if not covered.all():
            raise ValueError(f"{self.prefix}: the slices of {name!r} do not cover it")
        return out

    def _read(self, name: str, e: BundleEntry) -> np.ndarray:
        if e.dtype not in DTYPES:
            raise NotImplementedError(
                f"{name}: dtype {e.dtype_name} is not read by the TF-free reader"
            )
        if e.shape is None:
            raise ValueError(f"{self.prefix}: {name!r} has an unknown rank")
        if len(e.shape) > _NUMPY_MAX_RANK:  # TF holds 254; TF's own reader fails here too
            raise NotImplementedError(
                f"{self.prefix}: {name}: rank {len(e.shape)}: NumPy holds at most "
                f"{_NUMPY_MAX_RANK} dimensions"
            )
        dt = np.dtype(self.byte_order + DTYPES[e.dtype][1])
        raw = self._entry_bytes(name, e)  # its size was checked against shape and dtype
        out = np.frombuffer(raw, dtype=dt, count=math.prod(e.shape)).reshape(e.shape)
        if e.dtype == 14:  # bfloat16: the high half of a float32
            out = (out.astype(np.uint32) << 16).view(np.float32)
        return out.astype(dt.newbyteorder("=") if e.dtype != 14 else np.float32)
