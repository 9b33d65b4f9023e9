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
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

from . import proto

__all__ = ["TensorBundleReader", "crc32c", "masked_crc32c"]

_MAGIC = 0xDB4775248B80FB57
_FOOTER = 48

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
_UNREADABLE = {_STRING: "string", 20: "resource", 21: "variant"}


# -- crc32c (Castagnoli), pure Python: optional verification only -----------------------------

_CRC_TABLE: list[int] = []


def crc32c(data: bytes, crc: int = 0) -> int:
    """The (unmasked) CRC-32C of `data`. Uses the `crc32c` package when installed, else a
    table-driven pure-Python loop (about 1-2 MB/s: meant for small files and tests)."""
    try:
        import crc32c as _fast  # type: ignore[import-not-found]

        return _fast.crc32c(data, crc) if crc else _fast.crc32c(data)
    except ImportError:
        pass
    if not _CRC_TABLE:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    table, c = _CRC_TABLE, crc ^ 0xFFFFFFFF
    for byte in data:
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


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
    crc32c: int | None
    slices: tuple[tuple[tuple[int, int], ...], ...]  # per slice, per dim (start, length | -1)

    @property
    def sliced(self) -> bool:
        return bool(self.slices)

    @property
    def dtype_name(self) -> str:
        if self.dtype in DTYPES:
            return DTYPES[self.dtype][0]
        return _UNREADABLE.get(self.dtype, f"DataType {self.dtype}")


def _parse_entry(value: bytes) -> BundleEntry:
    f = proto.fields(value)
    shape: tuple[int, ...] | None = ()
    if 2 in f:
        sf = proto.fields(f[2][-1])
        if proto.last(sf, 3):
            shape = None
        else:
            shape = tuple(proto.int64(proto.last(proto.fields(d), 1)) for d in sf.get(2, []))
    return BundleEntry(
        dtype=proto.last(f, 1),
        shape=shape,
        shard_id=proto.last(f, 3),
        offset=proto.int64(proto.last(f, 4)),
        size=proto.int64(proto.last(f, 5)),
        crc32c=proto.last(f, 6, None),
        slices=tuple(
            tuple(
                (proto.int64(proto.last(ef, 1)), proto.int64(ef[2][-1]) if 2 in ef else -1)
                for ef in map(proto.fields, proto.fields(sp).get(1, []))
            )
            for sp in f.get(7, [])
        ),
    )


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


def _block(data: bytes, handle: bytes, where: str, verify: bool) -> bytes:
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
            raise ValueError(f"{where}: block checksum mismatch at offset {off}")
    return contents


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


def read_table(path: str, verify: bool = False) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of an SSTable file, in file order."""
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
    index = _block(data, footer[pos:], f"{path} (index block)", verify)
    out = []
    for _, handle in _block_entries(index, f"{path} (index block)"):
        out.extend(_block_entries(_block(data, handle, path, verify), path))
    return out


# -- the bundle -----------------------------------------------------------------------------


class TensorBundleReader:
    """`TensorBundleReader(prefix)`: `entries` (tensor name -> BundleEntry), `get_tensor(name)`
    (a NumPy array), `get_variable_to_shape_map()` / `get_variable_to_dtype_map()` (dtype names).
    `verify_crc=True` checks the index blocks' and every read tensor's crc32c (slow without the
    optional `crc32c` package)."""

    def __init__(self, prefix: str | os.PathLike, verify_crc: bool = False):
        self.prefix = os.fspath(prefix)
        self.verify_crc = verify_crc
        index = self.prefix + ".index"
        if not os.path.isfile(index):
            raise FileNotFoundError(f"{index}: no such file (not a TF checkpoint prefix)")
        self.entries: dict[str, BundleEntry] = {}
        self._slices: dict[bytes, bytes] = {}
        header = None
        for key, value in read_table(index, verify_crc):
            if key == b"":
                header = proto.fields(value)
            elif key[:1] == b"\x00":
                self._slices[key] = value  # a slice of a partitioned variable
            else:
                self.entries[key.decode("utf-8")] = _parse_entry(value)
        if header is None:
            raise ValueError(f"{index}: no BundleHeaderProto (empty key) in the index")
        self.num_shards = proto.last(header, 1, 1)
        endianness = proto.last(header, 2, 0)
        if endianness not in (0, 1):
            raise ValueError(f"{index}: unknown endianness {endianness}")
        self.byte_order = "<" if endianness == 0 else ">"
        self._shards: dict[int, bytes] = {}

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
        if e.offset < 0 or e.offset + e.size > len(data):
            raise ValueError(
                f"{name}: bytes [{e.offset}, +{e.size}) lie outside "
                f"{self.shard_path(e.shard_id)} ({len(data)} bytes)"
            )
        raw = data[e.offset : e.offset + e.size]
        if (self.verify_crc and e.dtype != _STRING and e.crc32c is not None
                and masked_crc32c(raw) != e.crc32c):  # fmt: skip
            raise ValueError(f"{name}: data checksum mismatch (crc32c)")
        return raw

    def get_strings(self, name: str) -> list[bytes]:
        """The elements of a string tensor, flattened (a scalar gives one)."""
        e = self.entries[name]
        if e.dtype != _STRING or e.sliced or e.shape is None:
            raise ValueError(f"{name}: not an unpartitioned string tensor ({e.dtype_name})")
        count = int(np.prod(e.shape, dtype=np.int64))
        raw = self._entry_bytes(name, e)
        lengths, pos = [], 0
        for _ in range(count):
            n, pos = proto.varint(raw, pos)
            lengths.append(n)
        pos += 4  # the checksum of the lengths
        if pos + sum(lengths) != len(raw):
            raise ValueError(f"{name}: string lengths {lengths} do not fill its {len(raw)} bytes")
        if self.verify_crc and e.crc32c is not None:
            # TF's writer sums each length as a fixed uint32 (uint64 above 2^32 - 1), then the
            # lengths' masked checksum as written, then the strings' bytes.
            c = 0
            for n in lengths:
                c = crc32c(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little"), c)
            c = crc32c(raw[pos - 4 : len(raw)], c)
            if mask_crc(c) != e.crc32c:
                raise ValueError(f"{name}: data checksum mismatch (crc32c)")
        out = []
        for n in lengths:
            out.append(raw[pos : pos + n])
            pos += n
        return out

    def _assemble(self, name: str, e: BundleEntry) -> np.ndarray:
        """A partitioned variable: each slice's entry sits under its OrderedCode key."""
        if e.shape is None or e.dtype not in DTYPES:
            raise NotImplementedError(
                f"{name}: a partitioned {e.dtype_name} variable of shape {e.shape} is not read by "
                "the TF-free reader"
            )
        out = np.zeros(e.shape, np.float32 if e.dtype == 14 else np.dtype(DTYPES[e.dtype][1]))
        covered = np.zeros(e.shape, bool)
        for extents in e.slices:
            full = len(extents) == 0
            if not full and len(extents) != len(e.shape):
                raise ValueError(f"{name}: slice {extents} does not match shape {e.shape}")
            value = self._slices.get(slice_key(name, extents))
            if value is None:
                raise ValueError(f"{name}: slice {extents} listed but not found in the index")
            index = tuple(
                slice(0, n) if length < 0 else slice(start, start + length)
                for (start, length), n in zip(extents, e.shape, strict=True)
            )
            sub = _parse_entry(value)
            if sub.dtype != e.dtype:
                raise ValueError(f"{name}: slice {extents} has dtype {sub.dtype_name}")
            out[index] = self._read(f"{name} slice {extents}", sub)
            covered[index] = True
        if not covered.all():
            raise ValueError(f"{name}: its slices do not cover the whole tensor")
        return out

    def _read(self, name: str, e: BundleEntry) -> np.ndarray:
        if e.dtype not in DTYPES:
            raise NotImplementedError(
                f"{name}: dtype {e.dtype_name} is not read by the TF-free reader"
            )
        if e.shape is None:
            raise ValueError(f"{name}: unknown rank")
        kind = DTYPES[e.dtype][1]
        dt = np.dtype(self.byte_order + kind)
        count = int(np.prod(e.shape, dtype=np.int64))
        if e.size != count * dt.itemsize or e.shard_id >= self.num_shards:
            raise ValueError(
                f"{name}: entry {e} does not fit shape {list(e.shape)} of {e.dtype_name}"
            )
        raw = self._entry_bytes(name, e)
        out = np.frombuffer(raw, dtype=dt, count=count).reshape(e.shape)
        if e.dtype == 14:  # bfloat16: the high half of a float32
            out = (out.astype(np.uint32) << 16).view(np.float32)
        return out.astype(dt.newbyteorder("=") if e.dtype != 14 else np.float32)
