"""Per-step overhead of LSTMBlockCell inference in a Python loop (B = 1, float32, CPU).

At B = 1 a step's arithmetic is a [1, I + H] x [I + H, 4H] GEMV and 7H pointwise values, a few
microseconds, so what a Python loop over steps pays is mostly call overhead. Timed per call with
``torch.utils.benchmark.Timer`` (the lowest median of ``--rounds`` interleaved
``blocked_autorange`` runs, which keeps a shared machine's load bursts out), for H = 128 and 512
(I = H), at torch's default intra-op thread count and at 1 thread:

* ``raw_ops``      ``raw_ops.LSTMBlockCell(x, cs, h, w, wci, wcf, wco, b)`` (TF defaults:
                   forget_bias=1, cell_clip=3, no peepholes);
* ``torch.ops``    ``torch.ops.torch_lstm_grad.lstm_block_cell(...)`` (the OpOverloadPacket);
* ``.default``     ``torch.ops.torch_lstm_grad.lstm_block_cell.default(...)`` (the OpOverload);
* ``Function``     ``LSTMBlockCellFunction.apply(...)``;
* ``nn.LSTMCell``  ``torch.nn.LSTMCell(I, H)(x, (h, c))``, for comparison,

under ``torch.no_grad()`` ("no_grad"), with grad enabled and the weights requiring grad as
module parameters do ("grad": each call records an autograd node), and under
``torch.inference_mode()`` ("inference", where the Autograd dispatch key is skipped). Then the
breakdown (raw op wrapper = raw_ops - torch.ops, ...); the pieces of the raw_ops call timed one
by one, with candidate replacements and the saving each would bring (the two "below Autograd"
candidates are Python forms; the cell's autograd is C++, csrc/autograd.cpp, so their lines
show what the Python forms would cost against it); and the kernel's own parts
(GEMV, the MKL weight packing it redoes per call) against nn.LSTMCell. ``--no-pieces`` skips
those; ``--cprofile`` adds a cProfile listing of the raw_ops call.

Example::

    python benchmarks/bench_cell_step.py
    python benchmarks/bench_cell_step.py --sizes 128 --threads 1 --cprofile
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import ctypes
import inspect
import io
import os
import platform
import pstats

import torch
from torch.utils.benchmark import Timer

import torch_lstm_grad
from torch_lstm_grad import raw_ops
from torch_lstm_grad.autograd import LSTMBlockCellFunction
from torch_lstm_grad.raw_ops import LSTMBlockCellOutput, _floats

OP = torch.ops.torch_lstm_grad.lstm_block_cell
VARIANTS = ("raw_ops", "torch.ops", ".default", "Function", "nn.LSTMCell")
MODES = ("no_grad", "grad", "inference")
_MODE_CTX = {
    "no_grad": torch.no_grad,
    "grad": contextlib.nullcontext,
    "inference": torch.inference_mode,
}

# The statement each variant times; `a` is (x, cs, h, w, wci, wcf, wco, b).
STMTS = {
    "raw_ops": "raw_ops.LSTMBlockCell(*a)",
    "torch.ops": "OP(*a, 1.0, 3.0, False)",
    ".default": "OPD(*a, 1.0, 3.0, False)",
    "Function": "Fn.apply(*a, 1.0, 3.0, False)",
    "nn.LSTMCell": "cell(x, hc)",
}


def _inputs(H: int, requires_grad: bool):
    """B = 1, I = H; weights like a module's parameters (requiring grad in "grad" mode)."""
    g = torch.Generator().manual_seed(0)
    I = H  # noqa: E741

    def u(*shape, scale=1.0):
        return torch.empty(shape).uniform_(-scale, scale, generator=g)

    x, cs, h = u(1, I), u(1, H), u(1, H)
    weights = [u(I + H, 4 * H, scale=H**-0.5), u(H), u(H), u(H), u(4 * H, scale=0.1)]
    for t in weights:
        t.requires_grad_(requires_grad)
    cell = torch.nn.LSTMCell(I, H)
    cell.requires_grad_(requires_grad)
    return (x, cs, h, *weights), cell, (h.clone(), cs.clone())


def _time(stmt: str, env: dict, threads: int, min_run_time: float) -> float:
    """Median seconds per call of one blocked_autorange."""
    t = Timer(stmt=stmt, globals=env, num_threads=threads)
    return t.blocked_autorange(min_run_time=min_run_time).median


def _best_of(stmts: dict, env: dict, threads: int, min_run_time: float, rounds: int) -> dict:
    """{name: seconds}: the variants timed in turn, `rounds` times, keeping each one's lowest
    median. Interleaving and the minimum keep a shared machine's load bursts (other processes
    taking the cores for a while) out of the comparison."""
    best = dict.fromkeys(stmts, float("inf"))
    for _ in range(rounds):
        for name, stmt in stmts.items():
            best[name] = min(best[name], _time(stmt, env, threads, min_run_time))
    return best


def _env(H: int, mode: str) -> dict:
    a, cell, hc = _inputs(H, requires_grad=(mode == "grad"))
    return dict(
        raw_ops=raw_ops,
        OP=OP,
        OPD=OP.default,
        Fn=LSTMBlockCellFunction,
        a=a,
        cell=cell,
        x=a[0],
        hc=hc,
    )


def time_table(sizes, threads: int, min_run_time: float, rounds: int) -> dict:
    """{(H, mode, variant): microseconds per call}."""
    res = {}
    for H in sizes:
        for mode in MODES:
            env = _env(H, mode)
            # Timer runs the statement in this thread, so under the grad mode set here.
            with _MODE_CTX[mode]():
                for stmt in STMTS.values():  # first calls (allocator, MKL init) untimed
                    eval(compile(stmt, "<warm-up>", "eval"), env)
                best = _best_of(STMTS, env, threads, min_run_time, rounds)
            for variant, sec in best.items():
                res[H, mode, variant] = sec * 1e6
    return res


def print_table(res: dict, sizes, threads: int) -> None:
    cols = [(H, m) for H in sizes for m in MODES]

    def row(label, values):
        print(f"{label:24}" + "".join(f"{v:>11.2f}" for v in values))

    print(f"\nµs per step (B=1, I=H, float32, {threads} intra-op thread(s))")
    print(f"{'':24}" + "".join(f"{f'H={H}':>11}" for H, _ in cols))
    print(f"{'':24}" + "".join(f"{m:>11}" for _, m in cols))
    for v in VARIANTS:
        row(v, [res[H, m, v] for H, m in cols])
    print("breakdown (µs)")
    for label, a, b in (
        ("wrapper: raw_ops-t.ops", "raw_ops", "torch.ops"),
        ("packet: t.ops-.default", "torch.ops", ".default"),
        ("raw_ops - Function", "raw_ops", "Function"),
        ("raw_ops - nn.LSTMCell", "raw_ops", "nn.LSTMCell"),
    ):
        row(label, [res[H, m, a] - res[H, m, b] for H, m in cols])
    print("autograd kernel (µs): .default under no_grad / grad minus under inference_mode")
    for H in sizes:
        floor = res[H, "inference", ".default"]
        print(
            f"  H={H}: .default under inference_mode {floor:.2f}; no_grad "
            f"+{res[H, 'no_grad', '.default'] - floor:.2f} (the C++ Autograd kernel, "
            f"csrc/autograd.cpp, redispatching); grad +{res[H, 'grad', '.default'] - floor:.2f} "
            "(plus recording the node)"
        )


# -- the raw_ops wrapper, piece by piece -----------------------------------------------------


def _fast_floats(x, *others):
    """Candidate fast path for _floats: all torch tensors -> as they are."""
    T = torch.Tensor
    if type(x) is T and all(type(t) is T for t in others):
        return (x, *others)
    return _floats(x, *others)


class _LeanCell(torch.autograd.Function):
    """Candidate: an old-style Function (no setup_context, so no per-call signature binding)
    that runs the op below the Autograd key (so not the op's Autograd kernel), with
    LSTMBlockCellFunction's own context and backward: the Python form the C++ node replaced."""

    @staticmethod
    def forward(ctx, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, peep):
        args = (x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, peep)
        with torch._C._AutoDispatchBelowAutograd():
            out = OP.default(*args)
        LSTMBlockCellFunction.setup_context(ctx, args, out)
        return out

    @staticmethod
    def backward(ctx, *grads):
        return LSTMBlockCellFunction.backward(ctx, *grads)


# (label, statement, grad mode): the pieces of raw_ops.LSTMBlockCell and what is under it.
PIECES = [
    ("whole raw_ops.LSTMBlockCell call", "raw_ops.LSTMBlockCell(*a)", "no_grad"),
    ("_floats(8 tensors): _to_tensor x 8", "_floats(*a)", "no_grad"),
    ("  candidate: type(t) is Tensor fast path", "_fast(*a)", "no_grad"),
    ("float(fb), float(clip), bool(pp)", "float(fb); float(clip); bool(pp)", "no_grad"),
    ("_ops.lstm_block_cell attribute lookup", "ops.lstm_block_cell", "no_grad"),
    ("LSTMBlockCellOutput(*out)", "Out(*out)", "no_grad"),
    ("  candidate: tuple.__new__(LSTMBlockCellOutput, out)", "tuple_new(Out, out)", "no_grad"),
    ("OpOverloadPacket call (torch.ops...lstm_block_cell)", "OP(*a, 1.0, 3.0, False)", "no_grad"),
    ("OpOverload call (.default)", "OPD(*a, 1.0, 3.0, False)", "no_grad"),
    (
        "  candidate: .default under _AutoDispatchBelowAutograd",
        "with below(): OPD(*args)",
        "no_grad",
    ),
    ("  .default under inference_mode (no Autograd key)", "OPD(*args)", "inference"),
    ("whole raw_ops.LSTMBlockCell call, grad", "raw_ops.LSTMBlockCell(*ag)", "grad"),
    (
        "  torch's autograd_impl: fill_defaults(schema, args)",
        "fill_defaults(schema, args, {})",
        "grad",
    ),
    ("  candidate: old-style Function below Autograd", "Lean.apply(*ag, 1.0, 3.0, False)", "grad"),
    ("LSTMBlockCellFunction.apply, grad", "Fn.apply(*ag, 1.0, 3.0, False)", "grad"),
    (
        "  its per-call inspect.signature(forward).bind(...)",
        "inspect.signature(Fn.forward).bind(*args).apply_defaults()",
        "grad",
    ),
]


def time_pieces(H: int, threads: int, min_run_time: float, rounds: int) -> dict:
    """{label: seconds} for PIECES at B = 1."""
    a, _, _ = _inputs(H, requires_grad=False)
    ag, _, _ = _inputs(H, requires_grad=True)
    with torch.no_grad():
        out = OP.default(*a, 1.0, 3.0, False)
    env = dict(
        raw_ops=raw_ops,
        OP=OP,
        OPD=OP.default,
        a=a,
        ag=ag,
        args=(*a, 1.0, 3.0, False),
        out=out,
        fb=1,
        clip=3,
        pp=False,
        Out=LSTMBlockCellOutput,
        _floats=_floats,
        _fast=_fast_floats,
        tuple_new=tuple.__new__,
        ops=torch.ops.torch_lstm_grad,
        below=torch._C._AutoDispatchBelowAutograd,
        schema=OP.default._schema,
        fill_defaults=torch._library.utils.fill_defaults,
        Lean=_LeanCell,
        Fn=LSTMBlockCellFunction,
        inspect=inspect,
    )
    best = {}
    for mode in MODES:
        stmts = {label: stmt for label, stmt, m in PIECES if m == mode}
        with _MODE_CTX[mode]():
            best |= _best_of(stmts, env, threads, min_run_time, rounds)
    return {label: best[label] for label, _, _ in PIECES}


def print_pieces(pieces: dict, H: int, threads: int) -> None:
    print(f"\nraw_ops.LSTMBlockCell, piece by piece (H={H}, {threads} thread(s); µs per call)")
    for label, sec in pieces.items():
        print(f"  {label:56}{sec * 1e6:9.3f}")
    p = {label.strip(): sec * 1e6 for label, sec in pieces.items()}
    whole, whole_grad = (
        p["whole raw_ops.LSTMBlockCell call"],
        p["whole raw_ops.LSTMBlockCell call, grad"],
    )
    saves = [
        (
            "Python wrapper: _floats fast path when every input is a torch.Tensor",
            p["_floats(8 tensors): _to_tensor x 8"] - p["candidate: type(t) is Tensor fast path"],
            whole,
        ),
        (
            "Python wrapper: NamedTuple via tuple.__new__(cls, out)",
            p["LSTMBlockCellOutput(*out)"]
            - p["candidate: tuple.__new__(LSTMBlockCellOutput, out)"],
            whole,
        ),
        (
            "Python wrapper: call .default (bound once) instead of the packet",
            p["OpOverloadPacket call (torch.ops...lstm_block_cell)"]
            - p["OpOverload call (.default)"],
            whole,
        ),
        (
            "Python wrapper: drop float()/bool() (all three)",
            p["float(fb), float(clip), bool(pp)"],
            whole,
        ),
        (
            "no_grad: run the op below Autograd (skip its C++ Autograd kernel)",
            p["OpOverload call (.default)"]
            - p["candidate: .default under _AutoDispatchBelowAutograd"],
            whole,
        ),
        (
            "grad: the raw op's whole call (the C++ node) over a bare old-style Python"
            " Function below Autograd",
            whole_grad - p["candidate: old-style Function below Autograd"],
            whole_grad,
        ),
    ]
    print("\nestimated saving per call (µs, and share of the whole raw_ops call)")
    for label, us, of in saves:
        print(f"  {us:8.2f}  {100 * us / of:5.1f}%  {label}")


def _mkl_pack():
    """MKL's cblas_sgemm_pack_get_size / cblas_sgemm_pack from libtorch_cpu (what
    csrc/cpu/gemm.h calls), or None where this torch build does not export them."""
    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        size, pack = lib.cblas_sgemm_pack_get_size, lib.cblas_sgemm_pack
    except (OSError, AttributeError):
        return None
    size.restype, size.argtypes = ctypes.c_size_t, [ctypes.c_int] * 4
    pack.restype = None
    pack.argtypes = [ctypes.c_int] * 6 + [
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    return size, pack


def time_kernel_pieces(H: int, threads: int, min_run_time: float, rounds: int) -> dict:
    """Seconds: the op below the Python layers (inference_mode), nn.LSTMCell, the GEMV alone,
    and the MKL packing of the recurrent weight that the kernel's RecurrentGemm redoes on every
    call (LSTMBlockCell runs lstm_forward with L = 1: a packed weight used for one product)."""
    a, cell, hc = _inputs(H, requires_grad=False)
    x, w = a[0], a[3]
    xh = torch.cat([x, hc[0]], dim=1)
    env = dict(OPD=OP.default, a=a, cell=cell, x=x, hc=hc, xh=xh, w=w, torch=torch, H=H)
    stmts = {
        "lstm_block_cell.default (inference_mode)": "OPD(*a, 1.0, 3.0, False)",
        "nn.LSTMCell (inference_mode)": "cell(x, hc)",
        "GEMV [1, I+H] x [I+H, 4H] (torch.mm)": "torch.mm(xh, w)",
        "two GEMVs, x·Wx and h·Wh (as the kernel)": "torch.mm(x, w[:H]); torch.mm(hc[0], w[H:])",
    }
    mkl = _mkl_pack()
    if mkl is not None:
        size, pack = mkl
        K, N = H, 4 * H
        wh = w[H:]  # the [H, 4H] recurrent slice, row-major, ld = 4H
        nbytes = size(162, 1, N, K)  # CblasBMatrix, m = B = 1

        def pack_once():  # as PackedWeight's constructor: buffer + pack
            buf = torch.empty((nbytes + 3) // 4)
            pack(101, 162, 111, 1, N, K, 1.0, wh.data_ptr(), N, buf.data_ptr())

        env["pack_once"] = pack_once
        stmts[f"MKL pack of Wh [H, 4H] for m=1 ({nbytes / 2**20:.1f} MiB buffer)"] = "pack_once()"
    with torch.inference_mode():
        return _best_of(stmts, env, threads, min_run_time, rounds)


def print_kernel_pieces(pieces: dict, H: int, threads: int) -> None:
    print(f"\nbelow Python: the kernel's parts (H={H}, {threads} thread(s); µs per call)")
    for label, s in pieces.items():
        print(f"  {label:52}{s * 1e6:9.2f}")


def print_cprofile(H: int, calls: int = 20000, top: int = 14) -> None:
    a, _, _ = _inputs(H, requires_grad=False)
    prof = cProfile.Profile()
    with torch.no_grad():
        raw_ops.LSTMBlockCell(*a)
        prof.enable()
        for _ in range(calls):
            raw_ops.LSTMBlockCell(*a)
        prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    print(
        f"\ncProfile, {calls} calls of raw_ops.LSTMBlockCell (H={H}, no_grad), by tottime "
        "(cProfile inflates Python-level calls):"
    )
    print("\n".join(line for line in buf.getvalue().splitlines()[4:] if line.strip()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="128,512", help="hidden sizes H (I = H), comma list")
    parser.add_argument(
        "--threads",
        default=None,
        help="intra-op thread counts, comma list (default: torch's default, "
        "and 1 if that is not 1)",
    )
    parser.add_argument(
        "--min-run-time",
        type=float,
        default=0.2,
        metavar="S",
        help="per blocked_autorange (default 0.2)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds per variant; the lowest median is kept",
    )
    parser.add_argument("--no-pieces", action="store_true", help="skip the wrapper breakdown")
    parser.add_argument("--cprofile", action="store_true", help="add a cProfile listing")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    default = torch.get_num_threads()
    threads = (
        [int(t) for t in args.threads.split(",")]
        if args.threads
        else sorted({default, 1}, reverse=True)
    )
    print(
        f"torch {torch.__version__}, torch_lstm_grad {torch_lstm_grad.__version__}, "
        f"python {platform.python_version()}, {platform.machine()}, default threads "
        f"{default}"
    )
    for n in threads:
        print_table(time_table(sizes, n, args.min_run_time, args.rounds), sizes, n)
    if not args.no_pieces:
        print_pieces(time_pieces(sizes[0], 1, args.min_run_time, args.rounds), sizes[0], 1)
        for H in sizes:
            print_kernel_pieces(time_kernel_pieces(H, 1, args.min_run_time, args.rounds), H, 1)
    if args.cprofile:
        print_cprofile(sizes[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
