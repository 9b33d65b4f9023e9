"""Checks an HDF5 file's structure before HDF5 (through h5py) reads it: HDF5 allocates what a
length field says before it finds that the length runs past the end of the file, and loops for
ever on some corrupt structures.

`check_hdf5(data)` walks, from the superblock, the structures of the layout h5py writes by
default and every Keras file uses (superblock version 0 or 1, version 1 object headers, groups
as symbol tables: v1 B-trees, symbol table nodes and local heaps) and refuses (ValueError):

* an object header whose first chunk or a continuation chunk (its length: HDF5 allocates it)
  runs past the end of the file, or a message that runs past its chunk;
* a local heap whose data segment, a B-tree or symbol table node whose entries, lie outside the
  file or exceed what the superblock's K allows;
* an attribute whose values do not fit its message, or a variable-length value (a string)
  longer than the file: HDF5 allocates that length before it looks the value up; an
  attribute's or a dataset's datatype of an unknown class, version or variable-length kind
  (h5py crashes on the last);
* a global heap collection ("GCOL", where variable-length strings live) that runs past the end
  of the file, or whose objects do not tile it: HDF5 walks a collection by each object's size
  and loops for ever on an object of size 0 (a zeroed run of the file).

Structures of newer layouts (superblock 2 and 3, version 2 object headers, dense link storage in
fractal heaps) are not walked: HDF5's own checks stand there. The walk visits each address once
and stops past a work budget proportional to the file's size.
"""

from __future__ import annotations

__all__ = ["check_hdf5"]

_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_UNDEFINED = -1


class _Walk:
    def __init__(self, data, origin: int, offsets: int, lengths: int, leaf_k: int, node_k: int):
        self.data, self.origin = data, origin
        self.offsets, self.lengths = offsets, lengths
        self.leaf_k, self.node_k = leaf_k, node_k
        self.eof = len(data)
        self.seen: set[tuple[str, int]] = set()
        self.budget = 64 * len(data) + (1 << 20)  # bytes parsed; a valid file parses ~once
        self.todo: list[tuple[str, int]] = []  # what is left to walk (no recursion)
        self.lengths_at: dict[int, int] = {}  # continuation chunks' lengths

    def fail(self, what: str) -> None:
        raise ValueError(f"HDF5 structure: {what}")

    def spend(self, n: int) -> None:
        self.budget -= n
        if self.budget < 0:
            self.fail("more structure than the file's size can hold (overlapping nodes)")

    def uint(self, pos: int, size: int) -> int:
        if pos < 0 or pos + size > self.eof:
            self.fail(f"a field at {pos} past the end of the file ({self.eof} bytes)")
        return int.from_bytes(self.data[pos : pos + size], "little")

    def addr(self, pos: int) -> int:
        """An address field: the file position it names, or _UNDEFINED (all bits set)."""
        a = self.uint(pos, self.offsets)
        return _UNDEFINED if a == (1 << 8 * self.offsets) - 1 else self.origin + a

    def region(self, start: int, size: int, what: str) -> None:
        if start < 0 or size < 0 or start + size > self.eof:
            self.fail(f"{what} [{start}, +{size}) runs past the end of the file ({self.eof})")

    def visit(self, kind: str, pos: int) -> None:
        if pos != _UNDEFINED and (kind, pos) not in self.seen:
            self.seen.add((kind, pos))
            self.todo.append((kind, pos))

    def run(self) -> None:
        while self.todo:
            kind, pos = self.todo.pop()
            getattr(self, kind)(pos)

    # -- structures ---------------------------------------------------------------------------

    def entry(self, pos: int) -> None:
        """A symbol table entry (the link name's heap offset: a length; the object header's
        address; the cache type, 4 reserved bytes, a 16-byte scratch pad): its object header,
        and a cached group's B-tree and heap."""
        o, n = self.offsets, self.lengths
        self.visit("header", self.addr(pos + n))
        if self.uint(pos + n + o, 4) == 1:  # cache type 1: the scratch pad holds a group's
            self.visit("btree", self.addr(pos + n + o + 8))
            self.visit("heap", self.addr(pos + n + 2 * o + 8))

    def header(self, pos: int) -> None:
        if self.uint(pos, 1) != 1:
            return  # a version 2 header ("OHDR") or none: HDF5 checks it
        size = self.uint(pos + 8, 4)
        self.region(pos + 16, size, f"object header at {pos}")
        self.chunk(pos + 16, size)

    def continuation(self, pos: int) -> None:
        self.chunk(pos, self.lengths_at[pos])

    def chunk(self, start: int, size: int) -> None:
        """A version 1 object header chunk: messages of type (2), size (2), flags (1), 3
        reserved bytes, then the data."""
        self.spend(size)
        o, n = self.offsets, self.lengths
        pos, end = start, start + size
        while pos + 8 <= end:
            kind, msize = self.uint(pos, 2), self.uint(pos + 2, 2)
            data = pos + 8
            if data + msize > end:
                self.fail(f"object header message at {pos} runs past its chunk")
            if kind == 0x10:  # continuation: the next chunk's address and length
                at, length = self.addr(data), self.uint(data + o, n)
                if at != _UNDEFINED:
                    self.region(at, length, f"object header continuation at {data}")
                    self.lengths_at[at] = length
                    self.visit("continuation", at)
            elif kind == 0x11:  # symbol table: the group's B-tree and local heap
                self.visit("btree", self.addr(data))
                self.visit("heap", self.addr(data + o))
            elif kind == 0x0C:
                self.attribute(data, data + msize)
            elif kind == 0x03:  # a dataset's datatype
                self.datatype(data, data + msize, 0)
            pos = data + msize

    def attribute(self, pos: int, end: int) -> None:
        """An attribute message: its data must fit the message, and a variable-length value's
        length (HDF5 allocates it before it looks the value up) the file."""
        version, flags = self.uint(pos, 1), self.uint(pos + 1, 1)
        if version not in (1, 2, 3) or (version > 1 and flags & 3):
            return  # HDF5 refuses the version; a shared datatype or dataspace is elsewhere
        name, dt_size, ds_size = self.uint(pos + 2, 2), self.uint(pos + 4, 2), self.uint(pos + 6, 2)
        if version == 1:  # each part padded to 8 bytes
            dt = pos + 8 + (name + 7) // 8 * 8
            ds = dt + (dt_size + 7) // 8 * 8
            at = ds + (ds_size + 7) // 8 * 8
        else:
            dt = pos + 8 + (version == 3) + name
            ds, at = dt + dt_size, dt + dt_size + ds_size
        if at > end:
            self.fail(f"attribute message at {pos}: its parts run past it")
        self.datatype(dt, ds, 0)
        count = self.elements(ds)
        if count is None:
            return
        vlen = self.uint(dt, 1) & 0x0F == 9
        width = 4 + self.offsets + 4 if vlen else self.uint(dt + 4, 4)
        if count * width > end - at:
            self.fail(f"attribute at {pos}: {count} values of {width} bytes in {end - at}")
        if vlen:  # each value: its length (4), its global heap collection and index
            base = max(self.uint(dt + 12, 4), 1)  # the base type's size
            for i in range(count):
                length = self.uint(at + i * width, 4)
                if length * base > self.eof:
                    self.fail(f"attribute at {pos}: a value {length} x {base} bytes long")

    def datatype(self, pos: int, end: int, depth: int) -> None:
        """A datatype message's class, version and the bit fields h5py converts by: HDF5 takes
        a variable-length type of kind 2-15 (only 0, a sequence, and 1, a string, exist) and
        h5py then crashes (SIGSEGV) reading the value. A variable-length type's base type (its
        properties) is checked likewise."""
        if pos + 8 > end or depth > 8:
            self.fail(f"datatype at {pos}: past its message or nested {depth} deep")
        head, bits = self.uint(pos, 1), self.uint(pos + 1, 3)
        cls, version = head & 0x0F, head >> 4
        if not 1 <= version <= 5 or cls > 10:
            self.fail(f"datatype at {pos}: class {cls} version {version}")
        if cls == 3 and (bits & 0x0F > 2 or bits >> 4 & 0x0F > 1):  # padding, character set
            self.fail(f"datatype at {pos}: a string of padding {bits & 0x0F}, set {bits >> 4}")
        if cls == 9:
            if bits & 0x0F > 1 or bits >> 4 & 0x0F > 2 or bits >> 8 & 0x0F > 1:
                self.fail(f"datatype at {pos}: a variable-length type with bits {bits:#x}")
            self.datatype(pos + 8, end, depth + 1)

    def elements(self, pos: int) -> int | None:
        """The number of elements of a dataspace message, None for a version HDF5 refuses."""
        version, rank = self.uint(pos, 1), self.uint(pos + 1, 1)
        if version == 1:
            dims = pos + 8
        elif version == 2:
            if self.uint(pos + 3, 1) == 2:  # a null dataspace
                return 0
            dims = pos + 4
        else:
            return None
        count = 1
        for i in range(rank):
            count *= self.uint(dims + i * self.lengths, self.lengths)
        return count

    def heap(self, pos: int) -> None:
        n = self.lengths
        if bytes(self.data[pos : pos + 4]) != b"HEAP":
            return  # HDF5 refuses a heap without its signature
        size = self.uint(pos + 8, n)
        at = self.addr(pos + 8 + 2 * n)
        if at != _UNDEFINED:
            self.region(at, size, f"local heap data segment of the heap at {pos}")
        self.spend(size)

    def btree(self, pos: int) -> None:
        o, n = self.offsets, self.lengths
        if bytes(self.data[pos : pos + 4]) != b"TREE":
            return
        kind, level, used = self.uint(pos + 4, 1), self.uint(pos + 5, 1), self.uint(pos + 6, 2)
        if kind != 0:
            return  # a chunked dataset's B-tree (Keras writes contiguous datasets)
        if used > 2 * self.node_k:
            self.fail(f"B-tree node at {pos}: {used} entries, K is {self.node_k}")
        first = pos + 8 + 2 * o
        self.region(first, used * (n + o) + n, f"B-tree node at {pos}")
        self.spend(used * (n + o))
        for i in range(used):
            child = self.addr(first + n + i * (n + o))
            self.visit("btree" if level else "snod", child)

    def snod(self, pos: int) -> None:
        if bytes(self.data[pos : pos + 4]) != b"SNOD":
            return
        count, width = self.uint(pos + 6, 2), self.lengths + self.offsets + 24  # entries
        if count > 2 * self.leaf_k:
            self.fail(f"symbol table node at {pos}: {count} entries, K is {self.leaf_k}")
        self.region(pos + 8, count * width, f"symbol table node at {pos}")
        self.spend(count * width)
        for i in range(count):
            self.entry(pos + 8 + i * width)


def _superblock(data) -> int | None:
    base = 0
    while base + 16 <= len(data):  # at 0, 512, 1024, 2048, ...
        if bytes(data[base : base + 8]) == _SIGNATURE:
            return base
        base = 512 if base == 0 else base * 2
    return None


def check_hdf5(data) -> set[tuple[str, int]]:
    """Raises ValueError where `data` (an HDF5 file's bytes: bytes or a memory map) holds a
    structure HDF5 would allocate or loop on without bound (see the module docstring). Not HDF5
    (no superblock): returns, h5py says so. Returns what it walked, as (kind, file position):
    "header", "continuation", "btree", "snod", "heap" (tests compare it with HDF5's own)."""
    sb = _superblock(data)
    if sb is None:
        return set()
    version = data[sb + 8]
    if version >= 2:
        offsets, lengths = data[sb + 9], data[sb + 10]
    else:
        offsets, lengths = data[sb + 13], data[sb + 14]
    if offsets not in (2, 4, 8) or lengths not in (2, 4, 8):
        raise ValueError(f"HDF5 superblock: sizes of offsets {offsets}, of lengths {lengths}")
    _check_global_heaps(data, lengths)
    if version > 1:
        return set()
    walk = _Walk(data, sb, offsets, lengths, 1, 1)
    walk.leaf_k, walk.node_k = walk.uint(sb + 16, 2), walk.uint(sb + 18, 2)
    if not walk.leaf_k or not walk.node_k:
        walk.fail(f"group K values {walk.leaf_k}, {walk.node_k}")
    root = sb + (24 if version == 0 else 28) + 4 * offsets
    walk.entry(root)
    walk.run()
    return walk.seen


def _check_global_heaps(data, lengths: int) -> None:
    """Walks every global heap collection as HDF5 decodes one: after the header (the signature,
    version 1, 3 reserved bytes, the collection's size; padded to 8), objects of index (2),
    reference count (2), 4 reserved bytes, size (padded to 8), then the data padded to 8;
    index 0 is the free space, whose size covers the rest. A random "GCOL" inside other data
    is taken for one only with its version and reserved bytes (2^-64 for random bytes)."""
    header = obj_header = (8 + lengths + 7) // 8 * 8  # HDF5 pads both to 8 (H5HG_ALIGN)
    at = data.find(b"GCOL")
    while at >= 0:
        if bytes(data[at + 4 : at + 8]) == b"\x01\x00\x00\x00" and at + header <= len(data):
            size = int.from_bytes(data[at + 8 : at + 8 + lengths], "little")
            end = at + size
            if size < header or end > len(data):
                raise ValueError(
                    f"HDF5 global heap collection at {at}: size {size} does not fit the file "
                    f"({len(data)} bytes)"
                )
            p = at + header
            while p + obj_header <= end:
                index = int.from_bytes(data[p : p + 2], "little")
                obj = int.from_bytes(data[p + 8 : p + 8 + lengths], "little")
                need = obj if index == 0 else obj_header + (obj + 7) // 8 * 8
                if need <= 0 or p + need > end:
                    raise ValueError(
                        f"HDF5 global heap collection at {at}: object {index} of size {obj} at "
                        f"{p} does not fit it (HDF5 would loop or read past it)"
                    )
                p += need
        at = data.find(b"GCOL", at + 1)
