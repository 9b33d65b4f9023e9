"""Fuzzes every reader of `torch-lstm-grad convert` (and `torch_lstm_grad.load`) with mutants of
valid files: a corrupt or hostile file must end in a clean refusal (exit 2, one line naming the
file) or a conversion, never a traceback, a crash, a hang or a runaway allocation.

    python harness/fuzz_readers.py --mutants 2000 --seed 0 [--formats keras,h5,...]
        [--readers tensorflow,tensorbundle] [--timeout 20] [--seeds DIR] [--keep-bad DIR]
    python harness/fuzz_readers.py --one tf2_ckpt:17 --seed 0 --keep-bad /tmp/m

Seeds: tests/data/fuzz_seeds/ (written by `harness/fuzz_seeds.py` with TF and Keras) and
two committed tf_keras files of tests/data/keras2/; the `.pt` seed is converted from the
`.keras` one at the start of the run. Mutant `i` of a format is a function of (--seed, format,
i): `--one FORMAT:I` reruns it alone and `--keep-bad` keeps the files of every bad one.

Mutations (one per mutant, on one of the format's files): truncation at a random offset, 1-8
flipped bits, a 10-byte run of huge length fields (0xff bytes, the largest varint, int64 max),
a zeroed run of up to 4 KiB, random bytes, a duplicated or removed chunk. Half the mutants of a
zip (.keras, .pt) mutate one member and rewrite the archive with correct CRCs, and half those of
a TensorBundle mutate a block of the index or one tensor's bytes and recompute the crc32c
(the block's, or the tensor's and its index block's), so the parsers behind the checksums are
fuzzed too (a hostile file, not a damaged one).

Each mutant runs in a child forked from this process, which has imported TensorFlow, h5py and
the package already: the child runs `cli.main(["convert", SRC, "-o", OUT, ...])` (a `.pt`:
`porting.load`) with the checkpoint reader chosen by TORCH_LSTM_GRAD_CHECKPOINT_READER, stdout
discarded, RLIMIT_DATA at its parent's data size + 1 GiB (RLIMIT_AS cannot be used: TensorFlow
maps a few GiB of address space it never touches). Outcomes:

* ok: converted (or loaded). A flipped weight in a file without checksums reads as another
  number; that is no error. A `.pt` that loads must give the seed's tensors: else `tampered`.
* refused: exit 2, a message naming the file (the source given, or the mutated file);
  `unnamed`: exit 2 without the file's name.
* traceback: any other exception (its type and last line are listed), `memory`: MemoryError or
  an allocation refused past the limit, or a peak RSS more than 1 GiB above the parent's;
  `crash`: killed by a signal; `hang`: past --timeout seconds (killed).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import io
import json
import os
import platform
import resource
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
import zipfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "tests", "data", "fuzz_seeds")
KERAS2 = os.path.join(ROOT, "tests", "data", "keras2")
BAD = ("unnamed", "tampered", "traceback", "memory", "crash", "hang")
OUTCOMES = ("ok", "refused", *BAD)
READERS = ("tensorflow", "tensorbundle")
_MEM_LIMIT = 1 << 30  # bytes a child may allocate on top of its parent
_TRACEBACK, _MEMORY = 70, 71  # the child's exit codes for an exception and a MemoryError


@dataclasses.dataclass(frozen=True)
class Format:
    """One seed: `src` (relative to its directory) is what convert is given, `targets` the
    files mutated, `extra` more convert arguments, `bundles` the TensorBundle prefixes (resealed
    mutants), `checkpoint`: read through the checkpoint reader (run with both)."""

    name: str
    seed_dir: str
    src: str
    targets: tuple[str, ...]
    extra: tuple[str, ...] = ()
    bundles: tuple[str, ...] = ()
    zip: bool = False
    load: bool = False

    @property
    def checkpoint(self) -> bool:
        return bool(self.bundles)


def formats(seeds: str = SEEDS) -> dict[str, Format]:
    ck = "ckpt.data-00000-of-00001"
    var = "variables/variables"
    out = [
        Format("keras", f"{seeds}/keras", "model.keras", ("model.keras",), zip=True),
        Format("h5", f"{seeds}/h5", "model.h5", ("model.h5",)),
        Format("h5_tf_keras", KERAS2, "model.h5", ("model.h5",)),
        Format(
            "weights_h5",
            f"{seeds}/weights_h5",
            "model.weights.h5",
            ("model.weights.h5", "config.json"),
            extra=("--config", "config.json"),
        ),
        Format("tf2_ckpt", f"{seeds}/tf2_ckpt", "ckpt", ("ckpt.index", ck), bundles=("ckpt",)),
        Format(
            "tf1_ckpt",
            f"{seeds}/tf1_ckpt",
            "model",
            ("model.index", "model.data-00000-of-00001", "model.meta"),
            bundles=("model",),
        ),
        Format(
            "saved_model",
            f"{seeds}/saved_model",
            ".",
            ("saved_model.pb", f"{var}.index", f"{var}.data-00000-of-00001"),
            bundles=(var,),
        ),
        Format(
            "saved_model_tf_keras",
            f"{KERAS2}/saved_model",
            ".",
            ("saved_model.pb", "keras_metadata.pb", f"{var}.index", f"{var}.data-00000-of-00001"),
            bundles=(var,),
        ),
        Format("frozen_pb", f"{seeds}/frozen_pb", "frozen.pb", ("frozen.pb",)),
        Format("pbtxt", f"{seeds}/pbtxt", "frozen.pbtxt", ("frozen.pbtxt",)),
        Format("pt", "", "model.pt", ("model.pt",), zip=True, load=True),
    ]
    return {f.name: f for f in out}


# -- mutations ----------------------------------------------------------------------------------

_HUGE = (b"\xff" * 10, b"\xff" * 9 + b"\x01", struct.pack("<Qh", 2**63 - 1, 0x7FFF))
_SAME_LENGTH = ("flip", "huge", "zero", "random")
KINDS = ("truncate", *_SAME_LENGTH, "duplicate", "remove")


def mutate(data: bytes, kind: str, rng, lo: int = 0, hi: int | None = None) -> bytes:
    """`data` with one mutation of `kind` inside [lo, hi) (the whole of it by default)."""
    hi = len(data) if hi is None else hi
    b = bytearray(data)
    if hi <= lo:
        return bytes(b[:lo])
    at = int(rng.integers(lo, hi))
    if kind == "truncate":
        return bytes(b[:at])
    if kind == "flip":
        for _ in range(int(rng.integers(1, 9))):
            pos = int(rng.integers(lo, hi))
            b[pos] ^= 1 << int(rng.integers(0, 8))
    elif kind == "huge":
        run = _HUGE[int(rng.integers(0, len(_HUGE)))]
        end = min(at + len(run), hi)
        b[at:end] = run[: end - at]
    elif kind == "zero":
        end = min(at + int(rng.integers(1, 4097)), hi)
        b[at:end] = bytes(end - at)
    elif kind == "random":
        for _ in range(int(rng.integers(1, 9))):
            b[int(rng.integers(lo, hi))] = int(rng.integers(0, 256))
    elif kind == "duplicate":
        start = int(rng.integers(lo, hi))
        chunk = b[start : start + int(rng.integers(1, 513))]
        b[at:at] = chunk
    elif kind == "remove":
        del b[at : at + int(rng.integers(1, 513))]
    else:
        raise ValueError(kind)
    return bytes(b)


def _zip_member_mutant(data: bytes, rng) -> bytes:
    """A zip whose one member is mutated, rewritten with correct CRCs and sizes."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    pick = int(rng.integers(0, len(members)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for k, (info, body) in enumerate(members):
            if k == pick:
                body = mutate(body, KINDS[int(rng.integers(0, len(KINDS)))], rng)
            z.writestr(info, body, compress_type=info.compress_type)
    return out.getvalue()


def _varint_at(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _blocks(index: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every block of a valid SSTable: the index block, then the data blocks
    (the metaindex block is empty and never read)."""
    footer_at = len(index) - 48
    _, pos = _varint_at(index, footer_at)
    _, pos = _varint_at(index, pos)
    off, pos = _varint_at(index, pos)
    size, _ = _varint_at(index, pos)
    out = [(off, size)]
    for _, value_at, _ in _block_entries(index, off, size):
        h_off, p = _varint_at(index, value_at)
        h_size, _ = _varint_at(index, p)
        out.append((h_off, h_size))
    return out


def _block_entries(data: bytes, off: int, size: int):
    """(key, value offset, value size) of the entries of a valid block."""
    block_end = off + size
    (restarts,) = struct.unpack_from("<I", data, block_end - 4)
    end = block_end - 4 * (restarts + 1)
    pos, key = off, b""
    while pos < end:
        shared, pos = _varint_at(data, pos)
        non_shared, pos = _varint_at(data, pos)
        vlen, pos = _varint_at(data, pos)
        key = key[:shared] + data[pos : pos + non_shared]
        pos += non_shared
        yield key, pos, vlen
        pos += vlen


def _reseal(index: bytearray, off: int, size: int) -> None:
    from torch_lstm_grad.porting.formats.tensorbundle import masked_crc32c

    struct.pack_into("<I", index, off + size + 1, masked_crc32c(bytes(index[off : off + size + 1])))


def _string_crc(raw: bytes, count: int) -> int | None:
    """TF's checksum of a string tensor's bytes (see tensorbundle.get_strings), or None when
    the lengths do not parse."""
    from torch_lstm_grad.porting.formats.tensorbundle import crc32c, mask_crc

    try:
        pos, lengths = 0, []
        for _ in range(count):
            n, pos = _varint_at(raw, pos)
            lengths.append(n)
    except IndexError:
        return None
    c = 0
    for n in lengths:
        c = crc32c(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little"), c)
    return mask_crc(crc32c(raw[pos:], c))


def _sealed_bundle_mutant(files: dict[str, bytes], prefix: str, rng) -> str:
    """Mutates a block of `<prefix>.index` (resealed) or one tensor's bytes in the data file
    (its crc32c in the index and that index block resealed); returns the file changed."""
    from torch_lstm_grad.porting.formats.tensorbundle import masked_crc32c

    index_name = f"{prefix}.index"
    index = bytearray(files[index_name])
    blocks = _blocks(bytes(index))
    kind = _SAME_LENGTH[int(rng.integers(0, len(_SAME_LENGTH)))]
    if rng.random() < 0.5:
        off, size = blocks[int(rng.integers(0, len(blocks)))]
        index[off : off + size] = mutate(bytes(index[off : off + size]), kind, rng)
        _reseal(index, off, size)
        files[index_name] = bytes(index)
        return index_name
    data_name = next(n for n in files if n.startswith(f"{prefix}.data-"))
    data = bytearray(files[data_name])
    entries = []  # (block, value offset, value size) of the entries with bytes
    for off, size in blocks[1:]:
        for key, at, vlen in _block_entries(bytes(index), off, size):
            if key and key[:1] != b"\x00":
                entries.append(((off, size), at, vlen))
    block, at, vlen = entries[int(rng.integers(0, len(entries)))]
    f = _proto_positions(bytes(index[at : at + vlen]))
    if 5 not in f or 6 not in f:  # no bytes or no checksum
        files[data_name] = mutate(bytes(data), kind, rng)
        return data_name
    t_off = f.get(4, (0, 0))[0]
    t_size = f[5][0]
    data[t_off : t_off + t_size] = mutate(bytes(data[t_off : t_off + t_size]), kind, rng)
    raw = bytes(data[t_off : t_off + t_size])
    if f[1][0] == 7:  # a string tensor: TF's own checksum of the lengths and bytes
        crc = _string_crc(raw, 1)
    else:
        crc = masked_crc32c(raw)
    if crc is not None:
        struct.pack_into("<I", index, at + f[6][1], crc)
        _reseal(index, *block)
    files[data_name], files[index_name] = bytes(data), bytes(index)
    return data_name


def _proto_positions(buf: bytes) -> dict[int, tuple[int, int]]:
    """Field -> (varint or fixed32 value, its offset in `buf`) for a valid flat message."""
    out, pos = {}, 0
    while pos < len(buf):
        tag, pos = _varint_at(buf, pos)
        field, wire = tag >> 3, tag & 7
        start = pos
        if wire == 0:
            value, pos = _varint_at(buf, pos)
        elif wire == 5:
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        elif wire == 1:
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        else:
            n, pos = _varint_at(buf, pos)
            value, pos = None, pos + n
        out[field] = (value, start)
    return out


def make_mutant(fmt: Format, seed_files: dict[str, bytes], seed: int, i: int):
    """`(files, description)`: the seed's files with mutant `i`'s mutation applied."""
    import numpy as np

    rng = np.random.default_rng([seed, zlib.crc32(fmt.name.encode()), i])
    files = dict(seed_files)
    if fmt.zip and rng.random() < 0.5:
        name = fmt.targets[0]
        files[name] = _zip_member_mutant(files[name], rng)
        return files, f"{name}: a member mutated, the zip rewritten"
    if fmt.bundles and rng.random() < 0.5:
        prefix = fmt.bundles[int(rng.integers(0, len(fmt.bundles)))]
        changed = _sealed_bundle_mutant(files, prefix, rng)
        return files, f"{changed}: mutated with its crc32c recomputed"
    name = fmt.targets[int(rng.integers(0, len(fmt.targets)))]
    kind = KINDS[int(rng.integers(0, len(KINDS)))]
    files[name] = mutate(files[name], kind, rng)
    return files, f"{name}: {kind}"


# -- running one mutant -------------------------------------------------------------------------


def _status(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _child(fmt: Format, src: str, out: str, reader: str, err_path: str) -> None:
    """Runs in the forked child; never returns."""
    code = _TRACEBACK
    try:
        limit = _status("VmData") + _MEM_LIMIT
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        # as Python's own stderr: a message's lone surrogates (JSON escapes) print escaped
        sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
        os.environ["TORCH_LSTM_GRAD_CHECKPOINT_READER"] = reader
        from torch_lstm_grad import porting
        from torch_lstm_grad.tools import cli

        if fmt.load:
            try:
                porting.load(src)
                code = 0
            except ValueError as err:
                print(f"load: {err}", file=sys.stderr)
                code = 2
        else:
            extra = [os.path.join(os.path.dirname(src), e) if e.endswith(".json") else e
                     for e in fmt.extra]  # fmt: skip
            code = cli.main(["convert", src, "-o", out, *extra])
    except MemoryError:
        traceback.print_exc()
        code = _MEMORY
    except BaseException:  # noqa: BLE001 - what the fuzz run looks for
        traceback.print_exc()
        code = _TRACEBACK
    finally:
        sys.stderr.flush()
        os._exit(code)


@dataclasses.dataclass
class Result:
    outcome: str
    detail: str  # the refusal's line, the exception's last line, the signal
    seconds: float
    rss_growth: int


def run_one(fmt: Format, workdir: str, reader: str, timeout: float, expect=None) -> Result:
    """Runs convert (or load) on the files in `workdir` in a forked child and classifies it.
    `expect`: the seed's tensors, for a `.pt` that loads (tampering must not go unseen)."""
    src = os.path.normpath(os.path.join(workdir, fmt.src))
    out = os.path.join(workdir, "_out.pt")
    err_path = os.path.join(workdir, "_stderr")
    sys.stdout.flush()
    sys.stderr.flush()
    rss = _status("VmRSS")
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(fmt, src, out, reader, err_path)
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    seconds = time.perf_counter() - start
    growth = usage.ru_maxrss * 1024 - rss
    with open(err_path, errors="replace") as fh:
        err = fh.read()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if not ready:
        return Result("hang", f"killed after {timeout:.0f} s", seconds, growth)
    if growth > _MEM_LIMIT:
        return Result("memory", f"peak RSS {growth / 2**20:.0f} MiB above the parent", seconds,
                      growth)  # fmt: skip
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        what = "memory" if "bad_alloc" in err or "memory" in last.lower() else "crash"
        return Result(what, f"{sig}: {last[:200]}", seconds, growth)
    code = os.WEXITSTATUS(status)
    if code == _MEMORY:
        return Result("memory", last[:200], seconds, growth)
    if code == _TRACEBACK:
        return Result("traceback", last[:600], seconds, growth)
    if code == 0:
        if fmt.load and expect is not None and _tensors(src) != expect:
            return Result("tampered", "loaded with other values than the seed's", seconds, growth)
        return Result("ok", "", seconds, growth)
    line = next((ln for ln in lines if ln.startswith(("torch-lstm-grad convert:", "load:"))), "")
    if code == 2 and line:
        names = [src, *(os.path.normpath(os.path.join(workdir, t)) for t in fmt.targets)]
        if "allocat" in line.lower() and "memory" in line.lower():
            return Result("memory", line[:600], seconds, growth)
        named = any(n in line for n in names)
        return Result("refused" if named else "unnamed", line[:600], seconds, growth)
    return Result("traceback", f"exit {code}: {last[:600]}", seconds, growth)


def _tensors(path: str) -> dict | None:
    """Every module's parameters and buffers of a converted file, as bytes (None: unreadable)."""
    try:
        from torch_lstm_grad import porting

        mods = porting.load(path)
    except Exception:  # noqa: BLE001
        return None
    return {
        f"{m}.{k}": (str(t.dtype), tuple(t.shape), t.detach().numpy().tobytes())
        for m, mod in mods.items()
        for k, t in mod.state_dict().items()
    }


# -- the run ------------------------------------------------------------------------------------


def _read_tree(root: str, names) -> dict[str, bytes]:
    out = {}
    for base, _, files in os.walk(root):
        for name in files:
            full = os.path.join(base, name)
            rel = os.path.relpath(full, root)
            if names is None or rel in names:
                with open(full, "rb") as fh:
                    out[rel] = fh.read()
    return out


def _write_tree(root: str, files: dict[str, bytes]) -> None:
    shutil.rmtree(root, ignore_errors=True)
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)


def seed_files(fmt: Format, tmp: str, timeout: float, seeds: str) -> dict[str, bytes]:
    """The seed's files, relative to its directory (the `.pt`: converted from the `.keras`
    seed in a child)."""
    if fmt.load:
        keras = formats(seeds)["keras"]
        work = os.path.join(tmp, "pt-seed")
        _write_tree(work, _read_tree(keras.seed_dir, None))
        res = run_one(keras, work, "tensorbundle", timeout)
        if res.outcome != "ok":
            raise RuntimeError(f"the .pt seed: converting the .keras seed gave {res}")
        with open(os.path.join(work, "_out.pt"), "rb") as fh:
            return {"model.pt": fh.read()}
    if fmt.seed_dir == KERAS2:  # the committed tf_keras files: only the one used
        return _read_tree(fmt.seed_dir, {fmt.src})
    files = _read_tree(fmt.seed_dir, None)
    return {k: v for k, v in files.items() if k != "fingerprint.pb"}


def prepare(tensorflow: bool = True) -> None:
    """What every child needs, imported once here (a child then starts in milliseconds)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import h5py  # noqa: F401
    import torch

    torch.set_num_threads(1)  # no thread pool a forked child would inherit half-built
    import torch_lstm_grad.porting  # noqa: F401
    from torch_lstm_grad.tools import cli  # noqa: F401

    if tensorflow:
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass


def fuzz(
    names,
    readers,
    mutants: int,
    seed: int,
    timeout: float = 20.0,
    seeds: str = SEEDS,
    keep_bad: str | None = None,
    only: int | None = None,
    log=print,
):
    """Runs `mutants` mutants of every format in `names` (with each reader in `readers` where
    the format reads a checkpoint). Returns {(format, reader): Counter of outcomes},
    {(format, reader): [(index, mutation, Result)] of the bad ones}, {(format, reader): s}."""
    prepare()
    table = formats(seeds)
    counts, bad, seconds = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="fuzz-readers-") as tmp:
        for name in names:
            fmt = table[name]
            files = seed_files(fmt, tmp, timeout, seeds)
            expect = None
            work = os.path.join(tmp, "m")
            for reader in readers if fmt.checkpoint else readers[:1]:
                key = (name, reader if fmt.checkpoint else "-")
                _write_tree(work, files)
                if fmt.load:
                    expect = _tensors(os.path.join(work, fmt.src))
                base = run_one(fmt, work, reader, timeout, expect)
                if base.outcome != "ok":
                    raise RuntimeError(f"{name} seed with {reader}: {base}")
                counts[key], bad[key] = collections.Counter(), []
                start = time.perf_counter()
                indices = [only] if only is not None else range(mutants)
                for i in indices:
                    mutant, how = make_mutant(fmt, files, seed, i)
                    _write_tree(work, mutant)
                    res = run_one(fmt, work, reader, timeout, expect)
                    counts[key][res.outcome] += 1
                    if res.outcome in BAD:
                        bad[key].append((i, how, res))
                        log(f"  {name} {key[1]} #{i} ({how}): {res.outcome}: {res.detail}")
                        if keep_bad:
                            _write_tree(os.path.join(keep_bad, f"{name}-{key[1]}-{i}"), mutant)
                    elif only is not None:
                        log(f"  {name} {key[1]} #{i} ({how}): {res.outcome}: {res.detail}")
                seconds[key] = time.perf_counter() - start
                log(f"{name:22} {key[1]:13} " + _row(counts[key]) + f"  {seconds[key]:.0f} s")
    return counts, bad, seconds


def _row(c) -> str:
    return "  ".join(f"{o} {c[o]}" for o in OUTCOMES if c[o])


def table_markdown(counts, seconds) -> str:
    lines = [
        "| format | checkpoint reader | mutants | " + " | ".join(OUTCOMES) + " | time |",
        "|---" * (len(OUTCOMES) + 4) + "|",
    ]
    for (name, reader), c in counts.items():
        cells = " | ".join(str(c[o]) for o in OUTCOMES)
        total = sum(c.values())
        lines.append(f"| {name} | {reader} | {total} | {cells} | {seconds[name, reader]:.0f} s |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--formats", default=",".join(formats()))
    parser.add_argument("--readers", default=",".join(READERS))
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--seeds", default=SEEDS, help="the seed files (fuzz_seeds.py)")
    parser.add_argument("--keep-bad", metavar="DIR", help="keep every bad mutant's files here")
    parser.add_argument("--one", metavar="FORMAT:I", help="run mutant I of FORMAT alone")
    parser.add_argument("--markdown", metavar="FILE", help="write the table here too")
    parser.add_argument("--json", metavar="FILE", help="write the counts and bad mutants here")
    args = parser.parse_args(argv)
    names, only = args.formats.split(","), None
    if args.one:
        name, _, i = args.one.partition(":")
        names, only = [name], int(i)
    readers = tuple(args.readers.split(","))
    start = time.perf_counter()
    counts, bad, seconds = fuzz(
        names, readers, args.mutants, args.seed, args.timeout, args.seeds, args.keep_bad, only
    )
    total = time.perf_counter() - start
    md = table_markdown(counts, seconds)
    print(md)
    nbad = sum(c[o] for c in counts.values() for o in BAD)
    print(f"{sum(sum(c.values()) for c in counts.values())} mutants, {nbad} bad, {total:.0f} s "
          f"({platform.processor() or platform.machine()}, seed {args.seed})")  # fmt: skip
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(md + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "counts": {f"{f}/{r}": dict(c) for (f, r), c in counts.items()},
                    "seconds": {f"{f}/{r}": t for (f, r), t in seconds.items()},
                    "bad": [
                        {
                            "format": f,
                            "reader": r,
                            "mutant": i,
                            "mutation": how,
                            "outcome": res.outcome,
                            "detail": res.detail,
                        }
                        for (f, r), rows in bad.items()
                        for i, how, res in rows
                    ],
                },
                fh,
                indent=1,
            )
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    raise SystemExit(main())
