"""The HDF5 structure check (`porting/formats/hdf5_check.py`) against HDF5 itself: on files h5py
writes (sizes of offsets and lengths, a user block, B-trees of two levels, continuation chunks,
attributes of every kind Keras writes; superblock 1, which h5py never writes, by hand) it walks
exactly the object headers, continuation chunks, B-tree nodes, symbol table nodes and local heaps
HDF5 reports or signs; and each bound it keeps is refused one past it, by name, and accepted at it.
(The same files end to end, in a forked reader: tests/robustness/test_fuzz_readers.py.)"""

import io

import numpy as np
import pytest

from torch_lstm_grad.porting.formats import hdf5_check
from torch_lstm_grad.porting.formats.hdf5_check import check_hdf5

h5py = pytest.importorskip("h5py", reason="h5py (TensorFlow's dependency) is not installed")


def _content(f) -> None:
    """What a Keras .h5 holds, and more: attributes of each kind (fixed and variable-length
    strings, arrays of both, numbers, an empty one), nested groups, a chunked dataset, a group
    with many members (several symbol table nodes under a B-tree of two levels) and one with
    many attributes (continuation chunks)."""
    f.attrs["backend"] = "tensorflow"  # a variable-length string
    f.attrs["keras_version"] = np.bytes_(b"2.21.0")  # a fixed-length one
    f.attrs["layer_names"] = np.array([b"lstm", b"dense_1"])
    f.attrs["names"] = np.array(["a", "bb", "ccc"], dtype=h5py.string_dtype())
    f.attrs["empty"] = h5py.Empty("f4")
    f.attrs["matrix"] = np.arange(6.0).reshape(2, 3)
    f.attrs["a_matrix"] = np.arange(6.0).reshape(2, 3)  # a name of 9 bytes: padded to 16
    f.attrs["scalar"] = np.int64(3)
    w = f.create_group("model_weights/lstm/lstm")
    w.create_dataset("kernel:0", data=np.arange(12, dtype="f4").reshape(3, 4))
    w.attrs["weight_names"] = np.array([b"lstm/kernel:0"])
    f.create_dataset("chunked", data=np.arange(64, dtype="f4"), chunks=(8,))
    many = f.create_group("many")
    for i in range(12):
        many.create_group(f"g{i:02d}")
    for i in range(300):  # links cost no object header: a B-tree of two levels
        many[f"l{i:03d}"] = h5py.SoftLink("/model_weights")
    attrs = f.create_group("attrs")
    for i in range(30):
        attrs.attrs[f"a{i}"] = np.arange(40.0) + i


def _content_small(f) -> None:
    """What fits a file of 2-byte offsets (64 KiB)."""
    f.attrs["backend"] = "tensorflow"
    f.attrs["names"] = np.array(["a", "bb"], dtype=h5py.string_dtype())
    f.create_group("g/h").create_dataset("d", data=np.arange(4, dtype="f4"))
    for i in range(12):
        f["g"].attrs[f"a{i}"] = np.arange(20.0)


def _file(tmp_path, sizes=(8, 8), userblock=0, latest=False, content=_content) -> bytes:
    """The bytes of an HDF5 file h5py writes with these file-creation properties (h5py sets
    no group K: 4 and 16, HDF5's defaults; so no superblock 1: _minimal)."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_sizes(*sizes)
    if userblock:
        fcpl.set_userblock(userblock)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    # The oldest format unless asked: superblock 0 and version 1 object headers, as Keras'
    # .h5 files hold them, which HDF5 2.0 (h5py >= 3.16) no longer writes by default.
    low = h5py.h5f.LIBVER_LATEST if latest else h5py.h5f.LIBVER_EARLIEST
    fapl.set_libver_bounds(low, h5py.h5f.LIBVER_LATEST)
    path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.h5"
    fid = h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    with h5py.File(fid) as f:
        content(f)
    return path.read_bytes()


def _signed(data: bytes, sig: bytes) -> list[int]:
    """Every position of `sig` in `data`."""
    out, at = [], data.find(sig)
    while at >= 0:
        out.append(at)
        at = data.find(sig, at + 1)
    return out


def _hdf5_says(data: bytes, base: int):
    """What HDF5 holds: its object headers' file positions (h5py), the continuation chunks
    they have (each chunk past the first), and the positions of the group B-tree nodes (type
    0), symbol table nodes and local heaps by their signatures."""
    headers, continuations = set(), 0
    with h5py.File(io.BytesIO(data), "r") as f:
        objects = [f]
        f.visititems(lambda name, obj: objects.append(obj))
        for obj in objects:
            info = h5py.h5o.get_info(obj.id)
            headers.add(("header", base + info.addr))
            continuations += info.hdr.nchunks - 1

    def signed(sig: bytes, kind: str):
        return {(kind, at) for at in _signed(data, sig) if sig != b"TREE" or data[at + 4] == 0}

    structures = headers | signed(b"TREE", "btree") | signed(b"SNOD", "snod")
    return structures | signed(b"HEAP", "heap"), continuations


def _assert_walks_what_hdf5_holds(data: bytes, base: int = 0) -> set:
    seen = check_hdf5(data)
    want, continuations = _hdf5_says(data, base)
    assert {s for s in seen if s[0] != "continuation"} == want
    assert sum(s[0] == "continuation" for s in seen) == continuations > 0
    return seen


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"sizes": (4, 4)},
        {"sizes": (4, 8)},
        {"sizes": (8, 4)},
        {"sizes": (2, 2), "content": _content_small},
    ],
    ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items() if k != "content") or "default",
)
def test_walks_every_structure_hdf5_holds(tmp_path, props):
    data = _file(tmp_path, **props)
    assert data[8] == 0  # superblock version 0
    seen = _assert_walks_what_hdf5_holds(data)
    if "content" not in props:  # "many": a root B-tree node and the nodes below it
        trees = {at for kind, at in seen if kind == "btree"}
        assert any(data[at + 5] == 1 for at in trees) and sum(data[at + 5] == 0 for at in trees) > 1


@pytest.mark.parametrize("userblock", [512, 1024, 2048, 4096])
def test_a_user_block_moves_every_address(tmp_path, userblock):
    """The superblock is found at 512, 1024, 2048, ... and addresses count from it."""
    data = _file(tmp_path, userblock=userblock)
    assert data[:8] != b"\x89HDF\r\n\x1a\n" and data[userblock : userblock + 4] == b"\x89HDF"
    _assert_walks_what_hdf5_holds(data, base=userblock)
    # and a corrupt structure past the user block is still found
    at = data.index(b"SNOD", userblock)
    bad = data[: at + 6] + (100).to_bytes(2, "little") + data[at + 8 :]
    with pytest.raises(ValueError, match=f"symbol table node at {at}: 100 entries, K is 4"):
        check_hdf5(bad)
    # A user block holds the user's bytes, "GCOL" among them: the heaps after it are walked.
    at = data.index(b"GCOL", userblock)
    with pytest.raises(ValueError, match=f"collection at {at}: object 0 of size 0"):
        check_hdf5(b"GCOL" + _zero_object(data, at)[4:])


def test_superblock_2_and_3_are_left_to_hdf5_but_global_heaps_are_not(tmp_path):
    data = _file(tmp_path, latest=True)
    assert data[8] in (2, 3)
    assert check_hdf5(data) == set()
    at = data.index(b"GCOL")
    with pytest.raises(ValueError, match=f"HDF5 global heap collection at {at}: object 0 of size"):
        check_hdf5(_zero_object(data, at))


def test_what_is_not_hdf5_is_left_to_h5py():
    sig = b"\x89HDF\r\n\x1a\n"
    for data in [b"", b"PK\x03\x04" + bytes(600), sig + bytes(7), bytes(512) + sig + bytes(7)]:
        assert check_hdf5(data) == set()
    for data in [sig + bytes(8), bytes(512) + sig + bytes(8), bytes(1024) + sig + bytes(8)]:
        with pytest.raises(ValueError, match="HDF5 superblock: sizes of offsets 0, of lengths 0"):
            check_hdf5(data)
    # the signature only at 0 and powers of two from 512
    assert check_hdf5(bytes(700) + sig + bytes(100)) == set()
    assert check_hdf5(bytes(1536) + sig + bytes(100)) == set()


@pytest.mark.parametrize("version, at", [(0, 13), (1, 13), (2, 9), (3, 9)])
def test_sizes_of_offsets_and_lengths_outside_2_4_8_are_refused(version, at):
    sig = b"\x89HDF\r\n\x1a\n"
    for offsets, lengths in [(3, 8), (8, 16), (0, 4), (16, 8)]:
        sb = bytearray(sig + bytes([version]) + bytes(120))
        sb[at], sb[at + 1] = offsets, lengths
        with pytest.raises(ValueError, match=f"sizes of offsets {offsets}, of lengths {lengths}"):
            check_hdf5(bytes(sb))


def test_group_k_of_zero_is_refused(tmp_path):
    data = _file(tmp_path)
    for at, ks in [(16, "0, 16"), (18, "4, 0")]:
        bad = data[:at] + b"\x00\x00" + data[at + 2 :]
        with pytest.raises(ValueError, match=f"HDF5 structure: group K values {ks}"):
            check_hdf5(bad)


def test_group_k_values_are_two_bytes_each(tmp_path):
    """The file consistency flags follow them: a writer that never closed the file leaves bit 0
    set, and HDF5 reads the file. K is still 16 there."""
    data = _file(tmp_path)
    left_open = data[:20] + b"\x01" + data[21:]
    with h5py.File(io.BytesIO(left_open), "r") as f:
        assert len(f["many"]) == 312
    tree, _ = _group_btree(left_open, "many")
    with pytest.raises(ValueError, match=f"B-tree node at {tree}: 33 entries, K is 16$"):
        check_hdf5(_put(left_open, tree + 6, 33, 2))


# -- each bound, one past it and at it ----------------------------------------------------


def _u(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "little")


def _put(data: bytes, at: int, value: int, size: int) -> bytes:
    return data[:at] + value.to_bytes(size, "little") + data[at + size :]


def _header_of(data: bytes, name: str) -> int:
    with h5py.File(io.BytesIO(data), "r") as f:
        return h5py.h5o.get_info(f[name].id if name != "/" else f.id).addr


def _messages(data: bytes, start: int, size: int):
    """(type, position of the message's data, its size) of a version 1 header chunk, by the
    format's specification (not by hdf5_check)."""
    pos, end = start, start + size
    while pos + 8 <= end:
        kind, msize = _u(data, pos, 2), _u(data, pos + 2, 2)
        yield kind, pos + 8, msize
        pos += 8 + msize


def test_an_object_header_past_the_end_is_refused(tmp_path):
    data = _file(tmp_path)
    pos = _header_of(data, "model_weights/lstm/lstm/kernel:0")
    room = len(data) - (pos + 16)
    with pytest.raises(ValueError, match=f"object header at {pos} \\[{pos + 16}, \\+{room + 1}\\)"):
        check_hdf5(_put(data, pos + 8, room + 1, 4))
    with pytest.raises(ValueError, match=f"runs past the end of the file \\({len(data)}\\)"):
        check_hdf5(_put(data, pos + 8, 0xFFFFFFFF, 4))


def test_a_message_past_its_chunk_is_refused(tmp_path):
    data = _file(tmp_path)
    pos = _header_of(data, "model_weights")
    size = _u(data, pos + 8, 4)
    kind, first, msize = next(_messages(data, pos + 16, size))
    room = pos + 16 + size - first
    with pytest.raises(ValueError, match=f"object header message at {first - 8} runs past"):
        check_hdf5(_put(data, first - 6, room + 1, 2))


def _message(data: bytes, name: str, kind: int) -> int:
    """The position of the data of the first message of `kind` in `name`'s header."""
    pos = _header_of(data, name)
    for k, at, _ in _messages(data, pos + 16, _u(data, pos + 8, 4)):
        if k == kind:
            return at
    raise AssertionError(f"{name} has no message of type {kind:#x}")


@pytest.mark.parametrize("sizes", [(8, 8), (4, 8), (8, 4)])
def test_a_continuation_past_the_end_is_refused(tmp_path, sizes):
    o, n = sizes
    data = _file(tmp_path, sizes=sizes)
    at = _message(data, "attrs", 0x10)  # a continuation
    chunk, length = _u(data, at, o), _u(data, at + o, n)
    assert chunk + length <= len(data)
    room, start = len(data) - chunk + 1, len(data) - length + 1
    for bad, what in [
        (_put(data, at + o, room, n), f"\\[{chunk}, \\+{room}\\)"),
        (_put(data, at + o, (1 << 8 * n) - 1, n), ".* runs past the end"),
        (_put(data, at, start, o), f"\\[{start}, \\+{length}\\)"),
    ]:
        with pytest.raises(ValueError, match=f"object header continuation at {at} {what}"):
            check_hdf5(bad)
    # an undefined address (all bits set) is no chunk: nothing to walk
    seen = check_hdf5(_put(data, at, (1 << 8 * o) - 1, o))
    assert ("continuation", chunk) not in seen


def test_overlapping_chunks_past_the_work_budget_are_refused(tmp_path):
    """Chunks that overlap (each continuation a different start in one run of bytes) make the
    walk parse more than the file holds; past 64 bytes per byte of the file (and 1 MiB) it
    stops, as HDF5 would go on."""
    data = _file(tmp_path)
    at = _message(data, "attrs", 0x10)
    run, count = 1 << 16, 200
    zeros = len(data) + 24 * count  # then a run of empty messages (type 0, size 0)
    table = b"".join(  # a chunk of `count` continuations, each into the run, 8 bytes apart
        (0x10).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes(4)
        + (zeros + 8 * i).to_bytes(8, "little") + (run - 8 * count).to_bytes(8, "little")
        for i in range(count)
    )  # fmt: skip
    bad = data + table + bytes(run)
    bad = _put(_put(bad, at, len(data), 8), at + 8, len(table), 8)
    budget = 64 * len(bad) + (1 << 20)
    assert count * (run - 8 * count) > budget  # what the walk would parse without the stop
    with pytest.raises(ValueError, match="more structure than the file's size can hold"):
        check_hdf5(bad)
    # fewer overlapping chunks, under the budget, are walked
    few = budget // (run - 8 * count) - 2
    seen = check_hdf5(_put(bad, at + 8, 24 * few, 8))
    assert ("continuation", zeros + 8 * (few - 1)) in seen
    assert ("continuation", zeros + 8 * few) not in seen


def test_spend_stops_past_the_budget_not_at_it():
    walk = hdf5_check._Walk(bytes(10), 0, 8, 8, 4, 16)
    assert walk.budget == 64 * 10 + (1 << 20)
    walk.spend(walk.budget)
    with pytest.raises(ValueError, match="more structure than"):
        walk.spend(1)


def _group_btree(data: bytes, name: str) -> tuple[int, int]:
    """(the B-tree's and the local heap's positions) of group `name`."""
    at = _message(data, name, 0x11)  # the symbol table
    return _u(data, at, 8), _u(data, at + 8, 8)


def test_a_btree_node_of_more_than_2k_entries_is_refused(tmp_path):
    data = _file(tmp_path)
    tree, _ = _group_btree(data, "many")
    assert data[tree : tree + 4] == b"TREE" and data[tree + 5] == 1
    limit = 2 * 16
    with pytest.raises(ValueError, match=f"B-tree node at {tree}: {limit + 1} entries, K is"):
        check_hdf5(_put(data, tree + 6, limit + 1, 2))
    check_hdf5(_put(data, tree + 6, limit, 2))  # a full node: its unused entries are zero


def test_a_btree_node_past_the_end_is_refused(tmp_path):
    """The group's B-tree node copied to the end of the file, its last key 1 byte short."""
    data = _file(tmp_path)
    message = _message(data, "model_weights", 0x11)
    tree = _u(data, message, 8)
    used = _u(data, tree + 6, 2)
    size = 24 + used * 16 + 8  # header, addresses; entries and the key after the last
    with pytest.raises(ValueError, match=f"B-tree node at {len(data)} \\[{len(data) + 24}, "
                       f"\\+{used * 16 + 8}\\) runs past the end"):  # fmt: skip
        check_hdf5(_put(data, message, len(data), 8) + data[tree : tree + size - 1])
    seen = check_hdf5(_put(data, message, len(data), 8) + data[tree : tree + size])
    assert ("btree", len(data)) in seen


def test_a_symbol_table_node_of_more_than_2k_entries_is_refused(tmp_path):
    data = _file(tmp_path)
    snod = data.index(b"SNOD")
    with pytest.raises(ValueError, match=f"symbol table node at {snod}: 9 entries, K is 4"):
        check_hdf5(_put(data, snod + 6, 9, 2))
    check_hdf5(_put(data, snod + 6, 8, 2))


def test_a_symbol_table_node_past_the_end_is_refused(tmp_path):
    """A symbol table node copied to the end of the file, its last entry 1 byte short."""
    data = _file(tmp_path)
    tree = _u(data, _message(data, "model_weights", 0x11), 8)
    assert data[tree + 5] == 0  # a leaf: its children are symbol table nodes
    child = tree + 24 + 8  # the first child's address, after the first key
    snod = _u(data, child, 8)
    count = _u(data, snod + 6, 2)
    size = 8 + count * 40
    with pytest.raises(ValueError, match=f"symbol table node at {len(data)} \\[{len(data) + 8}, "
                       f"\\+{count * 40}\\) runs past the end"):  # fmt: skip
        check_hdf5(_put(data, child, len(data), 8) + data[snod : snod + size - 1])
    seen = check_hdf5(_put(data, child, len(data), 8) + data[snod : snod + size])
    assert ("snod", len(data)) in seen and ("snod", snod) not in seen


def test_a_local_heap_past_the_end_is_refused(tmp_path):
    data = _file(tmp_path)
    _, heap = _group_btree(data, "many")
    assert data[heap : heap + 4] == b"HEAP"
    size, seg = _u(data, heap + 8, 8), _u(data, heap + 24, 8)
    with pytest.raises(ValueError, match=f"local heap data segment of the heap at {heap} "
                       f"\\[{seg}, \\+{len(data) - seg + 1}\\)"):  # fmt: skip
        check_hdf5(_put(data, heap + 8, len(data) - seg + 1, 8))
    with pytest.raises(ValueError, match=f"\\[{len(data) - size + 1}, \\+{size}\\)"):
        check_hdf5(_put(data, heap + 24, len(data) - size + 1, 8))
    check_hdf5(_put(data, heap + 8, len(data) - seg, 8))  # to the last byte


def test_local_heaps_that_share_their_data_spend_the_budget():
    """Heaps whose data segments all span the file (HDF5 reads each one): each costs its size,
    and past the budget (64 bytes per byte of the file, and 1 MiB) the walk stops."""
    eof = 1 << 16
    heap = b"HEAP" + bytes(4) + eof.to_bytes(8, "little") + bytes(8) + (0).to_bytes(8, "little")
    data = (heap * 100).ljust(eof, b"\x00")
    walk = hdf5_check._Walk(data, 0, 8, 8, 4, 16)
    fit = (64 * eof + (1 << 20)) // eof  # 80 heaps
    for k in range(fit):
        walk.heap(k * len(heap))
    assert walk.budget == 0
    with pytest.raises(ValueError, match="more structure than the file's size can hold"):
        walk.heap(fit * len(heap))


@pytest.mark.parametrize("kind", ["btree", "snod"])
def test_nodes_that_share_their_entries_spend_the_budget(kind):
    """B-tree nodes of 2000 entries (16 bytes each) or symbol table nodes of 2000 (40 bytes
    each), 24 bytes apart so that each reads the ones after it as its entries: each costs its
    entries, and past the budget the walk stops."""
    eof, used = 1 << 17, 2000
    sig, width = (b"TREE", 16) if kind == "btree" else (b"SNOD", 40)
    node = sig + bytes(2) + used.to_bytes(2, "little") + bytes(16)
    data = (node * 400).ljust(eof, b"\x00")
    walk = hdf5_check._Walk(data, 0, 8, 8, 1000, 1000)
    fit = (64 * eof + (1 << 20)) // (used * width)
    for k in range(fit):
        getattr(walk, kind)(k * len(node))
    assert 0 <= walk.budget < used * width
    with pytest.raises(ValueError, match="more structure than the file's size can hold"):
        getattr(walk, kind)(fit * len(node))


def test_a_chunked_dataset_s_b_tree_is_not_read_as_a_group_s(tmp_path):
    """A B-tree node of type 1 (a chunked dataset's: other keys, other children) reached where a
    group's belongs is left to HDF5, which refuses it; read as a group's node, its entry count
    would be checked against the group's K."""
    data = _file(tmp_path)
    chunks = next(at for at in _signed(data, b"TREE") if data[at + 4] == 1)
    root = 24 + 4 * 8
    pointed = _put(_put(data, root + 24, chunks, 8), chunks + 6, 33, 2)  # the root's cache
    check_hdf5(pointed)
    with pytest.raises(ValueError, match=f"B-tree node at {chunks}: 33 entries, K is 16"):
        check_hdf5(_put(pointed, chunks + 4, 0, 1))  # the same node as a group's


# -- attributes and datatypes ---------------------------------------------------------------


def _attribute(data: bytes, owner: str, name: str):
    """(message data position, message size, datatype position, dataspace position, values
    position) of attribute `name` of `owner`, by the format's specification: version 1
    attribute messages pad each part to 8 bytes; versions 2 and 3 do not, and 3 has the
    name's character set before the name."""
    pos = _header_of(data, owner)
    chunks = [(pos + 16, _u(data, pos + 8, 4))]
    while chunks:
        start, size = chunks.pop()
        for kind, at, msize in _messages(data, start, size):
            if kind == 0x10:
                chunks.append((_u(data, at, 8), _u(data, at + 8, 8)))
            if kind != 0x0C:
                continue
            version = data[at]
            assert version in (1, 2, 3)
            nlen, dt_size, ds_size = _u(data, at + 2, 2), _u(data, at + 4, 2), _u(data, at + 6, 2)
            first = at + 8 + (version == 3)
            if data[first : first + nlen] != name.encode() + b"\x00":
                continue
            if version > 1:
                return (
                    at,
                    msize,
                    first + nlen,
                    first + nlen + dt_size,
                    first + nlen + dt_size + ds_size,
                )
            dt = at + 8 + (nlen + 7) // 8 * 8
            ds = dt + (dt_size + 7) // 8 * 8
            return at, msize, dt, ds, ds + (ds_size + 7) // 8 * 8
    raise AssertionError(f"no attribute {name} on {owner}")


def _shared_datatype(f) -> None:
    """HDF5 writes a version 2 attribute message for an attribute of a committed (shared)
    datatype, even in a version 1 object header."""
    f["float64"] = np.dtype("<f8")
    f.attrs.create("shared", np.arange(3.0), dtype=f["float64"])
    f.attrs["matrix"] = np.arange(6.0).reshape(2, 3)


def _unpadded(data: bytes, owner: str, name: str, version: int) -> bytes:
    """`data` with attribute `name` rewritten in place as a version 2 or 3 message (h5py
    writes version 3, a name's character set, only in version 2 object headers): the same
    parts without padding, the rest of the message zero."""
    at, msize, dt, ds, values = _attribute(data, owner, name)
    nlen, dt_size, ds_size = _u(data, at + 2, 2), _u(data, at + 4, 2), _u(data, at + 6, 2)
    count = 1
    for i in range(data[ds + 1]):
        count *= _u(data, ds + 8 + 8 * i, 8)
    body = (bytes([version, 0]) + data[at + 2 : at + 8] + b"\x00" * (version == 3)
            + data[at + 8 : at + 8 + nlen] + data[dt : dt + dt_size] + data[ds : ds + ds_size]
            + data[values : values + count * _u(data, dt + 4, 4)])  # fmt: skip
    assert len(body) <= msize
    return data[:at] + body + bytes(msize - len(body)) + data[at + msize :]


def test_a_version_1_attribute_s_reserved_byte_shares_nothing(tmp_path):
    """In a version 1 attribute message the byte after the version is reserved (HDF5 reads the
    flags from version 2 on): set, the datatype is still the attribute's own and checked."""
    data = _file(tmp_path)
    at, _, dt, _, _ = _attribute(data, "/", "matrix")
    assert data[at] == 1
    flagged = _put(data, at + 1, 3, 1)
    with h5py.File(io.BytesIO(flagged), "r") as f:  # HDF5 reads it as before
        assert f.attrs["matrix"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    check_hdf5(flagged)
    with pytest.raises(ValueError, match=f"datatype at {dt}: class 11 version 1"):
        check_hdf5(_put(flagged, dt, 0x1B, 1))


def test_an_attribute_of_a_shared_datatype_is_left_to_hdf5(tmp_path):
    """Its datatype part is a reference to the committed type (a version 2 shared message:
    version, flags, the type's header address), not a datatype: read as one it would be
    refused, so the attribute's flags must be read."""
    data = _file(tmp_path, content=_shared_datatype)
    at, _, dt, _, _ = _attribute(data, "/", "shared")
    assert data[at] == 2 and data[at + 1] & 3 == 1  # version 2, a shared datatype
    assert data[dt] == 2 and _u(data, dt + 2, 8) == _header_of(data, "float64")
    check_hdf5(data)
    with h5py.File(io.BytesIO(data), "r") as f:
        assert f.attrs["shared"].tolist() == [0.0, 1.0, 2.0]
    # An attribute message version HDF5 does not know is left to HDF5 too, whatever it holds.
    check_hdf5(_put(data, at, 4, 1))


@pytest.mark.parametrize("version", [2, 3])
def test_version_2_and_3_attributes_are_read_without_padding(tmp_path, version):
    data = _unpadded(_file(tmp_path, content=_shared_datatype), "/", "matrix", version)
    with h5py.File(io.BytesIO(data), "r") as f:  # HDF5 reads the rewritten message
        assert f.attrs["matrix"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    at, msize, dt, ds, values = _attribute(data, "/", "matrix")
    assert data[at] == version and data[ds + 1] == 2 and _u(data, ds + 8, 8) == 2
    room = at + msize - values
    check_hdf5(_put(data, ds + 8, room // 24, 8))
    with pytest.raises(ValueError, match=f"attribute at {at}: {(room // 24 + 1) * 3} values of 8 "
                       f"bytes in {room}"):  # fmt: skip
        check_hdf5(_put(data, ds + 8, room // 24 + 1, 8))
    ds_size = _u(data, at + 6, 2)
    check_hdf5(_put(data, at + 6, ds_size + room - 48, 2))  # the values end the message
    with pytest.raises(ValueError, match=f"attribute at {at}: 6 values of 8 bytes in 47"):
        check_hdf5(_put(data, at + 6, ds_size + room - 47, 2))
    with pytest.raises(ValueError, match=f"attribute message at {at}: its parts run past it"):
        check_hdf5(_put(data, at + 6, ds_size + room + 1, 2))


@pytest.mark.parametrize("name", ["matrix", "a_matrix"])
def test_attribute_values_past_their_message_are_refused(tmp_path, name):
    data = _file(tmp_path)
    at, msize, dt, ds, values = _attribute(data, "/", name)
    assert data[ds] == 1 and data[ds + 1] == 2  # a version 1 dataspace of rank 2: (2, 3)
    room = at + msize - values
    assert room >= 6 * 8
    rows = room // 24 + 1  # (rows, 3) float64 values: one row more than the message holds
    with pytest.raises(ValueError, match=f"attribute at {at}: {rows * 3} values of 8 bytes in "
                       f"{room}"):  # fmt: skip
        check_hdf5(_put(data, ds + 8, rows, 8))
    check_hdf5(_put(data, ds + 8, room // 24, 8))
    with pytest.raises(ValueError, match=f"attribute at {at}: {2 * (1 << 40)} values"):
        check_hdf5(_put(data, ds + 16, 1 << 40, 8))


def test_attribute_parts_past_their_message_are_refused(tmp_path):
    data = _file(tmp_path)
    at, msize, dt, ds, values = _attribute(data, "/", "matrix")
    ds_size = _u(data, at + 6, 2)
    grow = at + msize - values + 1  # the dataspace 1 byte (8 when padded) longer than fits
    with pytest.raises(ValueError, match=f"attribute message at {at}: its parts run past it"):
        check_hdf5(_put(data, at + 6, ds_size + grow, 2))


def test_a_variable_length_value_longer_than_the_file_is_refused(tmp_path):
    data = _file(tmp_path)
    at, _, dt, ds, values = _attribute(data, "/", "names")
    assert data[dt] & 0x0F == 9  # variable-length
    for i in range(3):
        length = values + i * 16
        assert _u(data, length, 4) == i + 1  # "a", "bb", "ccc"
        with pytest.raises(ValueError, match=f"attribute at {at}: a value {len(data) + 1} x 1"):
            check_hdf5(_put(data, length, len(data) + 1, 4))
        check_hdf5(_put(data, length, len(data), 4))
    at, _, dt, ds, values = _attribute(data, "/", "backend")  # a scalar one
    with pytest.raises(ValueError, match=f"attribute at {at}: a value {len(data) + 1} x 1"):
        check_hdf5(_put(data, values, len(data) + 1, 4))


def _float_sequences(f) -> None:
    """A variable-length sequence of float64 (a datatype message of 28 bytes, padded to 32)."""
    f.attrs.create("seq", [np.arange(3.0), np.arange(5.0)], dtype=h5py.vlen_dtype(np.float64))


def test_a_variable_length_sequence_is_bounded_by_its_base_type_s_size(tmp_path):
    """A value's length counts elements of the base type (8 bytes here): the bound is the
    file's size in those; a base size of 0 counts as 1 byte; the base's own fields (its bit
    offset) are not its size."""
    data = _file(tmp_path, content=_float_sequences)
    at, _, dt, ds, values = _attribute(data, "/", "seq")
    assert data[dt] & 0x0F == 9 and _u(data, at + 4, 2) == 28 and _u(data, dt + 12, 4) == 8
    assert [_u(data, values + 16 * i, 4) for i in range(2)] == [3, 5]
    eof = len(data)
    check_hdf5(_put(data, values + 16, eof // 8, 4))
    with pytest.raises(ValueError, match=f"attribute at {at}: a value {eof // 8 + 1} x 8 bytes"):
        check_hdf5(_put(data, values + 16, eof // 8 + 1, 4))
    zero = _put(data, dt + 12, 0, 4)
    check_hdf5(_put(zero, values, eof, 4))
    with pytest.raises(ValueError, match=f"attribute at {at}: a value {eof + 1} x 1 bytes"):
        check_hdf5(_put(zero, values, eof + 1, 4))
    offset = _put(data, dt + 16, 1, 1)  # the base float's bit offset, 1
    check_hdf5(offset)
    with h5py.File(io.BytesIO(offset), "r") as f:
        assert [len(v) for v in f.attrs["seq"]] == [3, 5]


def _kept_or_refused(data: bytes, ok: bool, refusal: str) -> None:
    if ok:
        check_hdf5(data)
    else:
        with pytest.raises(ValueError, match=refusal):
            check_hdf5(data)


@pytest.mark.parametrize(
    "attr, head, ok",
    [
        ("matrix", 0x01, False),  # version 0
        ("matrix", 0x61, False),  # version 6
        ("matrix", 0x51, True),  # version 5
        ("matrix", 0x1A, True),  # class 10
        ("matrix", 0x1B, False),  # class 11
        ("matrix", 0x1F, False),
    ],
)
def test_a_datatype_of_an_unknown_class_or_version_is_refused(tmp_path, attr, head, ok):
    data = _file(tmp_path)
    _, _, dt, _, _ = _attribute(data, "/", attr)
    refusal = f"datatype at {dt}: class {head & 15} version {head >> 4}"
    _kept_or_refused(_put(data, dt, head, 1), ok, refusal)


@pytest.mark.parametrize("bits, ok", [(0x00, True), (0x02, True), (0x03, False), (0x10, True),
                                      (0x20, False), (0x12, True), (0x0F, False)])  # fmt: skip
def test_a_string_of_unknown_padding_or_set_is_refused(tmp_path, bits, ok):
    data = _file(tmp_path)
    _, _, dt, _, _ = _attribute(data, "/", "keras_version")
    assert data[dt] & 0x0F == 3  # a fixed-length string
    refusal = f"datatype at {dt}: a string of padding {bits & 15}"
    _kept_or_refused(_put(data, dt + 1, bits, 1), ok, refusal)


@pytest.mark.parametrize(
    "bits, ok",
    [(0x001, True), (0x000, True), (0x002, False), (0x00F, False), (0x021, True),
     (0x031, False), (0x101, True), (0x201, False), (0x10001, True), (0xF00, False)],
)  # fmt: skip
def test_a_variable_length_type_of_unknown_kind_is_refused(tmp_path, bits, ok):
    """Kind (0 sequence, 1 string), padding (0-2), character set (0-1): h5py crashed on kind
    5 of a string attribute."""
    data = _file(tmp_path)
    _, _, dt, _, _ = _attribute(data, "/", "backend")
    bad = _put(data, dt + 1, bits, 3)
    _kept_or_refused(bad, ok, f"datatype at {dt}: a variable-length type with bits {bits:#x}")


def test_a_variable_length_base_type_is_checked_too(tmp_path):
    data = _file(tmp_path)
    _, _, dt, _, _ = _attribute(data, "/", "backend")
    base = dt + 8
    assert data[base] == 0x10  # a variable-length string's base: a byte (class 0, version 1)
    with pytest.raises(ValueError, match=f"datatype at {base}: class 0 version 0"):
        check_hdf5(_put(data, base, 0x00, 1))


def _vlen_chain(depth: int) -> bytes:
    """`depth` variable-length sequence types, each the base of the one before, then a float."""
    vlen = bytes([0x19, 0, 0, 0]) + (16).to_bytes(4, "little")
    return vlen * depth + bytes([0x11, 0x20, 0x3F, 0]) + (8).to_bytes(4, "little") + bytes(12)


def _nested_in(where: str, chain: bytes) -> tuple[bytes, int]:
    """(bytes, the chain's position) of a datatype on its own, in a header chunk's datatype
    message (type 3, a dataset's), or in a hand-made version 1 attribute message (a 2-byte
    name, the chain, a scalar dataspace, one variable-length value of length 0)."""
    if where == "datatype":
        return chain, 0
    size = len(chain).to_bytes(2, "little")
    if where == "chunk":
        return (3).to_bytes(2, "little") + size + bytes(4) + chain, 8
    head = bytes([1, 0]) + (2).to_bytes(2, "little") + size + (8).to_bytes(2, "little")
    pad = bytes(-len(chain) % 8)
    return head + b"a\x00" + bytes(6) + chain + pad + bytes([1]) + bytes(7) + bytes(16), 16


@pytest.mark.parametrize("where", ["datatype", "chunk", "attribute"])
def test_datatypes_nest_at_most_8_deep(where):
    """Counted from 0 wherever a datatype starts."""
    for depth, ok in [(8, True), (9, False)]:
        data, at = _nested_in(where, _vlen_chain(depth))
        walk = hdf5_check._Walk(data, 0, 8, 8, 4, 16)
        run = getattr(walk, where)
        args = (0, len(data), 0) if where == "datatype" else (0, len(data))
        if ok:
            run(*args)
        else:
            with pytest.raises(ValueError, match=f"datatype at {at + 8 * 8 + 8}: .* nested 9 deep"):
                run(*args)


def test_a_datatype_past_its_message_is_refused():
    chain = _vlen_chain(1)
    walk = hdf5_check._Walk(chain, 0, 8, 8, 4, 16)
    walk.datatype(0, 16, 0)  # the base type's 8 header bytes end the message
    with pytest.raises(ValueError, match="datatype at 8: past its message or nested 1 deep"):
        walk.datatype(0, 15, 0)


def test_dataspaces_by_version():
    """Version 1 dims at 8, version 2 at 4 (a null one holds nothing), others unknown."""
    walk = hdf5_check._Walk(
        bytes([1, 2, 0, 0, 0, 0, 0, 0]) + (3).to_bytes(8, "little") + (5).to_bytes(8, "little")
        + bytes([2, 1, 0, 1]) + (7).to_bytes(8, "little")
        + bytes([2, 1, 0, 2]) + (7).to_bytes(8, "little")
        + bytes([3, 1, 0, 1]) + (7).to_bytes(8, "little")
        + bytes([2, 0, 0, 0]), 0, 8, 8, 4, 16)  # fmt: skip
    assert walk.elements(0) == 15
    assert walk.elements(24) == 7
    assert walk.elements(36) == 0
    assert walk.elements(48) is None
    assert walk.elements(60) == 1  # a scalar: rank 0


# -- global heap collections -------------------------------------------------------------


def _zero_object(data: bytes, at: int) -> bytes:
    """The collection at `at` with its first object's header zeroed: size 0, HDF5 loops."""
    first = at + 16
    return data[:first] + bytes(16) + data[first + 16 :]


def test_global_heap_objects_that_do_not_tile_their_collection_are_refused(tmp_path):
    data = _file(tmp_path)
    at = data.index(b"GCOL")
    size = _u(data, at + 8, 8)
    with pytest.raises(ValueError, match=f"global heap collection at {at}: object 0 of size 0"):
        check_hdf5(_zero_object(data, at))
    # the first object 8 bytes longer than the collection leaves
    first = at + 16
    osize = _u(data, first + 8, 8)
    grow = at + size - first - 16 - (osize + 7) // 8 * 8 + 8
    index = _u(data, first, 2)
    with pytest.raises(ValueError, match=f"object {index} of size {osize + grow} at {first}"):
        check_hdf5(_put(data, first + 8, osize + grow, 8))
    check_hdf5(_put(data, first + 8, osize + grow - 8, 8))  # filling it to its last byte


def _free_space(data: bytes, at: int) -> int:
    """The position of the free-space object (index 0) of the collection at `at`."""
    p = at + 16
    while _u(data, p, 2):
        p += 16 + (_u(data, p + 8, 8) + 7) // 8 * 8
    return p


def test_the_last_16_bytes_of_a_collection_hold_an_object_header(tmp_path):
    """HDF5 decodes an object header wherever one fits before the collection's end, its last
    16 bytes included: a free space of size 0 there loops HDF5, one of 16 ends the walk."""
    data = _file(tmp_path)
    at = data.index(b"GCOL")
    end, free = at + _u(data, at + 8, 8), _free_space(data, at)
    # the free space made an unused object 5 that leaves 16 bytes
    unused = _put(_put(data, free, 5, 2), free + 8, end - 16 - free - 16, 8)
    ok = _put(unused, end - 16, 16 << 64, 16)  # index 0, size 16
    check_hdf5(ok)
    with h5py.File(io.BytesIO(ok), "r") as f:
        assert list(f.attrs["names"]) == ["a", "bb", "ccc"]
    with pytest.raises(ValueError, match=f"collection at {at}: object 0 of size 0 at {end - 16}"):
        check_hdf5(_put(unused, end - 16, 0, 16))


def test_the_free_space_is_index_0_whatever_its_reference_count(tmp_path):
    """The index is two bytes; the reference count after it does not make the free space an
    object (HDF5 reads the file)."""
    data = _file(tmp_path)
    at = data.index(b"GCOL")
    counted = _put(data, _free_space(data, at) + 2, 1, 2)
    check_hdf5(counted)
    with h5py.File(io.BytesIO(counted), "r") as f:
        assert list(f.attrs["names"]) == ["a", "bb", "ccc"]


def test_a_free_space_of_one_byte_moves_the_walk_one_byte(tmp_path):
    """HDF5 steps over a free space by its size, aligned or not, and decodes the next header
    there (overlapping this one); only the last free space must be aligned. Written so, a file
    HDF5 reads: free space 1 at q; at q + 1 object 1280 (the count's byte 5 as the index's high
    byte), size 0; a free space of 7 at q + 17; at q + 24 object 1792 (that size's 7), size 0;
    the last free space from q + 40."""
    data = _file(tmp_path)
    at = data.index(b"GCOL")
    end, q = at + _u(data, at + 8, 8), _free_space(data, at)
    walk = data[:q] + bytes(56) + data[q + 56 :]
    for offset, value in [(2, 5), (8, 1), (25, 7)]:
        walk = _put(walk, q + offset, value, 1)
    walk = _put(walk, q + 48, end - q - 40, 8)
    check_hdf5(walk)
    with h5py.File(io.BytesIO(walk), "r") as f:
        assert list(f.attrs["names"]) == ["a", "bb", "ccc"]


def test_a_global_heap_collection_past_the_end_is_refused(tmp_path):
    data = _file(tmp_path)
    at = data.index(b"GCOL")
    with pytest.raises(ValueError, match=f"collection at {at}: size {len(data) - at + 1} does"):
        check_hdf5(_put(data, at + 8, len(data) - at + 1, 8))
    with pytest.raises(ValueError, match=f"collection at {at}: size 15 does not fit"):
        check_hdf5(_put(data, at + 8, 15, 8))
    check_hdf5(_put(data, at + 8, 16, 8))  # an empty collection: the header alone


def test_a_gcol_inside_other_data_is_no_collection():
    """Only with version 1 and its reserved bytes zero is "GCOL" a collection."""
    for head in [b"GCOL\x02\x00\x00\x00", b"GCOL\x01\x00\x00\x01", b"GCOL\x01\x00\x00"]:
        data = b"\x89HDF\r\n\x1a\n" + bytes([2, 8, 8]) + bytes(53) + head
        assert check_hdf5(data) == set()
    data = b"\x89HDF\r\n\x1a\n" + bytes([2, 8, 8]) + bytes(53) + b"GCOL\x01\x00\x00\x00"
    assert check_hdf5(data + bytes(7)) == set()  # its size field cut off: not taken for one
    with pytest.raises(ValueError, match="size 0 does not fit"):
        check_hdf5(data + bytes(8))


def test_every_collection_is_walked(tmp_path):
    data = _file(tmp_path)
    first = data.index(b"GCOL")
    second = data.find(b"GCOL", first + 1)
    last = second if second > 0 else first
    with pytest.raises(ValueError, match=f"collection at {last}: object 0 of size 0"):
        check_hdf5(_zero_object(data, last))


@pytest.mark.parametrize("lengths", [2, 4, 8])
def test_collections_by_the_size_of_lengths(tmp_path, lengths):
    data = _file(tmp_path, sizes=(8, lengths))
    at = data.index(b"GCOL")
    first = at + 16  # the header and each object's header padded to 8 bytes
    with pytest.raises(ValueError, match=f"collection at {at}: object 0 of size 0 at {first}"):
        check_hdf5(_zero_object(data, at))


def _minimal(version: int, header_at: int = 104) -> bytes:
    """A superblock of `version` 0 or 1 (1 holds the indexed storage K after the group K
    values: 4 bytes more), its root entry pointing to an object header at `header_at` whose
    one message is a continuation 2^40 bytes away (written by hand: h5py sets no indexed
    storage K, so never writes superblock 1)."""
    sb = b"\x89HDF\r\n\x1a\n" + bytes([version, 0, 0, 0, 0, 8, 8, 0])
    sb += (4).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes(4)
    if version == 1:
        sb += (32).to_bytes(2, "little") + bytes(2)
    undefined = b"\xff" * 8
    sb += bytes(8) + undefined + (200).to_bytes(8, "little") + undefined
    root = bytes(8) + header_at.to_bytes(8, "little") + bytes(24)
    header = bytes([1, 0, 1, 0]) + (1).to_bytes(4, "little") + (24).to_bytes(4, "little")
    message = (0x10).to_bytes(2, "little") + (16).to_bytes(2, "little") + bytes(4)
    message += (1 << 40).to_bytes(8, "little") + (16).to_bytes(8, "little")
    data = (sb + root).ljust(header_at, b"\x00") + header + bytes(4) + message
    return data.ljust(200, b"\x00")


@pytest.mark.parametrize("version", [0, 1])
def test_the_root_entry_of_superblock_0_and_1(version):
    data = _minimal(version)
    assert _u(data, (56 if version == 0 else 60) + 8, 8) == 104  # the root entry's header
    with pytest.raises(ValueError, match="object header continuation at 128 \\[1099511627776, "):
        check_hdf5(data)


def test_the_walk_keeps_each_k_for_its_nodes(tmp_path):
    """Symbol table nodes hold up to 2 x the leaf K, B-tree nodes up to 2 x the node K."""
    data = _file(tmp_path)
    snod = data.index(b"SNOD")
    tree, _ = _group_btree(data, "many")
    walk = hdf5_check._Walk(_put(data, snod + 6, 9, 2), 0, 8, 8, 4, 16)
    with pytest.raises(ValueError, match=f"symbol table node at {snod}: 9 entries, K is 4"):
        walk.snod(snod)
    walk = hdf5_check._Walk(_put(data, tree + 6, 33, 2), 0, 8, 8, 4, 16)
    with pytest.raises(ValueError, match=f"B-tree node at {tree}: 33 entries, K is 16"):
        walk.btree(tree)


def test_reads_and_regions_are_bounded_by_the_file(tmp_path):
    """A field is read only inside the file; a region (a heap's data, a chunk) may end at its
    last byte, be empty, start at 0; a negative start or size is refused."""
    walk = hdf5_check._Walk(bytes(10), 0, 8, 8, 4, 16)
    assert walk.uint(8, 2) == 0 and walk.uint(0, 1) == 0
    for pos, size in [(9, 2), (10, 1), (-1, 1), (-2, 2)]:
        with pytest.raises(ValueError, match=f"a field at {pos} past the end of the file \\(10"):
            walk.uint(pos, size)
    for start, size in [(0, 10), (10, 0), (0, 0), (3, 7)]:
        walk.region(start, size, "x")
    for start, size in [(0, 11), (-1, 1), (5, -1), (11, 0)]:
        with pytest.raises(ValueError, match=f"x \\[{start}, \\+{size}\\) runs past the end"):
            walk.region(start, size, "x")
    # a symbol table entry's object header past the end of the file: its version is no field
    data = _file(tmp_path)
    snod = data.index(b"SNOD")
    entry = snod + 8  # the first entry: its name offset (8 bytes), then its header's address
    with pytest.raises(ValueError, match=f"a field at {len(data) + 5} past the end of the file"):
        check_hdf5(_put(data, entry + 8, len(data) + 5, 8))


@pytest.mark.parametrize("sizes", [(8, 8), (4, 8), (8, 4)])
def test_a_cached_scratch_pad_is_walked_too(tmp_path, sizes):
    """The root entry caches its group's B-tree and heap addresses (cache type 1, a 4-byte
    field; the 4 reserved bytes after it are not part of it): nodes found only there are
    checked as well."""
    o, n = sizes
    data = _file(tmp_path, sizes=sizes)
    root = 24 + 4 * o  # the superblock's root entry: name offset (n), header (o), cache type
    assert _u(data, root + n + o, 4) == 1  # cache type 1
    data = _put(data, root + n + o + 4, 0xFFFFFFFF, 4)  # reserved
    end = len(data)
    node = b"TREE\x00\x00" + (33).to_bytes(2, "little") + bytes(2 * o)
    with pytest.raises(ValueError, match=f"B-tree node at {end}: 33 entries, K is 16"):
        check_hdf5(_put(data, root + n + o + 8, end, o) + node)
    heap = b"HEAP" + bytes(4) + (64).to_bytes(n, "little") + bytes(n) + end.to_bytes(o, "little")
    with pytest.raises(ValueError, match=f"local heap data segment of the heap at {end} "):
        check_hdf5(_put(data, root + n + 2 * o + 8, end, o) + heap)


def test_groups_without_cached_addresses_are_walked_through_their_headers(tmp_path):
    """With every symbol table entry's cache type 0 (no scratch pad), HDF5 finds a group's
    B-tree and heap in its header's symbol table message: so does the walk, every one."""
    data = _file(tmp_path)
    o = n = 8
    entries = [24 + 4 * o]  # the root entry
    for at in _signed(data, b"SNOD"):
        entries += [at + 8 + k * (n + o + 24) for k in range(_u(data, at + 6, 2))]
    cached = [e for e in entries if _u(data, e + n + o, 4) == 1]
    assert len(cached) > 10  # the root, the groups of _content
    for e in cached:
        data = _put(data, e + n + o, 0, 4)
    _assert_walks_what_hdf5_holds(data)


def test_a_header_s_reserved_bytes_are_not_its_size(tmp_path):
    """A version 1 header's size is 4 bytes; the 4 after it pad the prefix to 16 (HDF5 reads
    nothing there)."""
    data = _file(tmp_path)
    pos = _header_of(data, "model_weights")
    assert check_hdf5(data[: pos + 12] + b"\xff" * 4 + data[pos + 16 :]) == check_hdf5(data)


def test_a_message_in_the_last_8_bytes_of_a_chunk_is_read():
    """A chunk whose last 8 bytes are a message header (a continuation of size 0, its address
    and length in the bytes after it) is read to its end, as HDF5 reads it."""
    data = bytearray(_minimal(0))
    header = 104
    size = 16 + 8  # a null message of 8 bytes, then the continuation's 8-byte header
    data[header + 8 : header + 12] = size.to_bytes(4, "little")
    data[header + 16 : header + 40] = (
        bytes([0, 0, 8, 0]) + bytes(12) + (0x10).to_bytes(2, "little") + bytes(6)
    )
    data[header + 40 : header + 56] = (1 << 40).to_bytes(8, "little") + (16).to_bytes(8, "little")
    with pytest.raises(ValueError, match="object header continuation at 144 \\[1099511627776, "):
        check_hdf5(bytes(data))


def test_a_dataset_s_datatype_is_checked(tmp_path):
    """A dataset's datatype message (type 3) is checked as an attribute's is: a float of
    version 0 is refused."""
    data = _file(tmp_path)
    dt = _message(data, "model_weights/lstm/lstm/kernel:0", 0x03)
    assert data[dt] == 0x11  # version 1, class 1 (floating point)
    with pytest.raises(ValueError, match=f"datatype at {dt}: class 1 version 0"):
        check_hdf5(_put(data, dt, 0x01, 1))
