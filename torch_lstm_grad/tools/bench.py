"""CPU benchmarks: BlockLSTM (``--op block_lstm``, default) and CudnnRNNV3 (``--op cudnn_rnn``)
forward and forward+backward against torch.nn.LSTM and TensorFlow; the modules' inference.

The logic behind ``torch-lstm-grad bench`` and ``benchmarks/bench_block_lstm.py``. Per shape
(T, B, I, H), float32, time-major:

* ours: ``raw_ops.BlockLSTM`` with peepholes and cell_clip=3, backward by autograd:
  ``torch.autograd.grad(cs.sum() + h.sum(), (x, cs_prev, h_prev, w, wci, wcf, wco, b))``;
* ``torch.nn.LSTM`` (one layer, oneDNN on CPU): ``grad(out.sum(), (x, h0, c0, *parameters))``;
* TF: ``tf.raw_ops.BlockLSTM`` then ``tf.raw_ops.BlockLSTMGrad`` (grads of ones), same attributes.

``--op cudnn_rnn``: ``raw_ops.CudnnRNNV3`` (lstm, one layer, params from the same weights) against
``torch.nn.LSTM``, fwd+bwd with every length T ("fwd+bwd"), and with lengths spread over
[T/2, T] ("varied"), where the nn.LSTM column is ``pack_padded_sequence`` + nn.LSTM +
``pad_packed_sequence``. TF has no CPU kernel for CudnnRNN.

``--modules``: the modules ``LSTMBlockFusedCell``, ``CudnnLSTM`` and ``keras_layers.KerasLSTM``
(one layer, no peepholes or clip: nn.LSTM's math; KerasLSTM as ``convert`` builds Keras' LSTM
layer, time-major here) too, in the same rounds: fwd, and fwd+bwd with
``grad(out.sum(), (x, c0, h0, *parameters))``.

``--mode inference``: the modules against nn.LSTM under ``torch.inference_mode()`` (what a
server runs), on INFERENCE_SHAPES (B = 1, 4, 8, 64) unless ``--shape``; with each one's time per
step (ms / T, the step latency at B = 1). ``--mode all``: the inference shapes, then the training
shapes with ``--modules``, in one run.

"fwd" is the training forward (inputs require grad, so autograd records and oneDNN saves its
workspace), i.e. the forward part of "fwd+bwd". Thread counts are printed and saved with
``--json``.

Timing: ours and torch.nn.LSTM are timed *paired*: rounds of one call each, in a shuffled order,
until each has had ``--min-run-time`` seconds per ``--rounds``; the times are the medians and
ours/nn.LSTM is the median of the per-round ratios. On a shared VM whose speed drifts by ±20%
between minutes this compares the two under the same conditions, where timing each for a second in
turn did not (unpaired, one build's ratio moved by a fifth between two runs). TF runs in blocks of
its own (median of repeats, timeit-style): interleaved with torch's calls, each library's idle
worker threads would spin on the CPUs the other one is using.

Page faults: each paired implementation's minor page faults per call are saved
(``page_faults_per_call``) and printed from 100 a call. glibc gives large freed buffers back to
the kernel, or keeps them, depending on where they lie in its heap, which differs from process
to process: the same forward measured 9.5-9.8 ms in some processes (0 faults a call) and 17.4 ms
in others (5,900), so a ratio is only that process's (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` make glibc keep its memory: README, Benchmarks).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

import torch

from .. import raw_ops

try:
    import resource  # POSIX: the page-fault counts
except ImportError:  # Windows
    resource = None

DEFAULT_SHAPES = ((50, 32, 256, 256), (100, 16, 128, 512), (20, 64, 512, 512))
# Serving shapes: B = 1 and 8 at H = 256 and 512, a long sequence at B = 4, B = 64.
INFERENCE_SHAPES = (
    (50, 1, 256, 256),
    (50, 8, 256, 256),
    (100, 1, 512, 512),
    (20, 64, 512, 512),
    (200, 4, 128, 256),
)
MODULES = ("LSTMBlockFusedCell", "CudnnLSTM", "KerasLSTM")
IMPLS = ("ours", "nn.LSTM", "TF")
PASSES = ("fwd", "fwd+bwd")


def _shape(text: str) -> tuple[int, int, int, int]:
    try:
        shape = tuple(int(v) for v in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 4 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected T,B,I,H (four positive ints), got {text!r}")
    return shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        type=_shape,
        action="append",
        metavar="T,B,I,H",
        help="a shape to time (repeatable); replaces the default shapes "
        "unless --default-shapes is given",
    )
    parser.add_argument(
        "--default-shapes",
        action="store_true",
        help="time the default shapes as well as each --shape",
    )
    parser.add_argument(
        "--op",
        choices=("block_lstm", "cudnn_rnn"),
        default="block_lstm",
        help="what to time: BlockLSTM (vs nn.LSTM and TF) or CudnnRNNV3 (vs nn.LSTM, packed)",
    )
    parser.add_argument(
        "--mode",
        choices=("training", "inference", "all"),
        default="training",
        help="training: fwd and fwd+bwd (default); inference: the modules vs nn.LSTM under "
        "inference_mode; all: both, the training one with --modules",
    )
    parser.add_argument(
        "--modules",
        action="store_true",
        help="training mode: time LSTMBlockFusedCell, CudnnLSTM and KerasLSTM too "
        "(--op block_lstm)",
    )
    parser.add_argument("--no-tf", action="store_true", help="skip TensorFlow")
    parser.add_argument(
        "--min-run-time",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds of timing per implementation and measurement (default 1.0)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="multiply the timing per measurement by N (default 1)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch threads and TF intra-op threads (default: each library's own default)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results and machine info")
    parser.add_argument("--plot", metavar="FILE", help="bar chart of fwd+bwd times (matplotlib)")
    parser.add_argument("--seed", type=int, default=0)


def _inputs(T, B, I, H, seed):  # noqa: E741 (TF's names)
    g = torch.Generator().manual_seed(seed)
    s = H**-0.5

    def u(*shape):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * s).requires_grad_()

    return dict(
        x=torch.randn(T, B, I, generator=g).requires_grad_(),
        cs_prev=u(B, H),
        h_prev=u(B, H),
        w=u(I + H, 4 * H),
        wci=u(H),
        wcf=u(H),
        wco=u(H),
        b=u(4 * H),
    )


def _ours(T, inputs):
    seq_len_max = torch.tensor(T, dtype=torch.int64)
    leaves = tuple(inputs.values())

    def fwd():
        return raw_ops.BlockLSTM(seq_len_max, **inputs, cell_clip=3.0, use_peephole=True)

    def fwd_bwd():
        out = fwd()
        return torch.autograd.grad(out.cs.sum() + out.h.sum(), leaves)

    return fwd, fwd_bwd


def _nn_lstm(inputs, seed):
    T, B, I = inputs["x"].shape  # noqa: E741
    H = inputs["cs_prev"].shape[1]
    torch.manual_seed(seed)
    lstm = torch.nn.LSTM(I, H)
    x = inputs["x"].detach().clone().requires_grad_()
    h0 = inputs["h_prev"].detach()[None].clone().requires_grad_()
    c0 = inputs["cs_prev"].detach()[None].clone().requires_grad_()
    leaves = (x, h0, c0, *lstm.parameters())

    def fwd():
        return lstm(x, (h0, c0))

    def fwd_bwd():
        out, _ = fwd()
        return torch.autograd.grad(out.sum(), leaves)

    return fwd, fwd_bwd


def _module_fns(inputs, seed):
    """{name: (fwd, fwd_bwd)} for LSTMBlockFusedCell, CudnnLSTM and KerasLSTM (one layer,
    nn.LSTM's math; KerasLSTM as `convert` builds Keras' LSTM layer, whole sequence out, here
    time-major); under inference_mode, fwd is the inference forward (nothing is recorded)."""
    from ..keras_layers import KerasLSTM
    from ..modules import CudnnLSTM, LSTMBlockFusedCell

    I, H = inputs["x"].shape[2], inputs["cs_prev"].shape[1]  # noqa: E741
    torch.manual_seed(seed)
    fused, cudnn = LSTMBlockFusedCell(H, I), CudnnLSTM(1, H, I)
    keras = KerasLSTM(H, I, return_sequences=True, time_major=True)
    calls = {
        "LSTMBlockFusedCell": (fused, lambda x, c0, h0: fused(x, (c0, h0))[0]),
        "CudnnLSTM": (cudnn, lambda x, c0, h0: cudnn(x, (h0[None], c0[None]))[0]),
        "KerasLSTM": (keras, lambda x, c0, h0: keras(x, initial_state=[h0, c0])),
    }
    fns = {}
    for name, (module, call) in calls.items():
        leaves = [inputs[k].detach().clone().requires_grad_() for k in ("x", "cs_prev", "h_prev")]
        grads = (*leaves, *module.parameters())

        def fwd(call=call, leaves=leaves):
            return call(*leaves)

        def fwd_bwd(fwd=fwd, grads=grads):
            return torch.autograd.grad(fwd().sum(), grads)

        fns[name] = (fwd, fwd_bwd)
    return fns


def _varied_lengths(T, B):
    """B lengths spread evenly over [T/2, T], longest first (a typical padded batch)."""
    return torch.linspace(T, max(1, T // 2), B).round().to(torch.int64)


def _cudnn_v3(inputs, lengths):
    """CudnnRNNV3 (lstm) on the weights of _nn_lstm's module: same math, same work."""
    T, B, I = inputs["x"].shape  # noqa: E741
    H = inputs["cs_prev"].shape[1]
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H)
    params = torch.cat([p.detach().flatten() for p in lstm.parameters()]).requires_grad_()
    x = inputs["x"].detach().clone().requires_grad_()
    h0 = inputs["h_prev"].detach()[None].clone().requires_grad_()
    c0 = inputs["cs_prev"].detach()[None].clone().requires_grad_()
    seq = lengths.to(torch.int32)

    def fwd_bwd():
        out = raw_ops.CudnnRNNV3(x, h0, c0, params, seq)
        return torch.autograd.grad(out.output.sum(), (x, h0, c0, params))

    return fwd_bwd


def _packed_lstm(inputs, lengths):
    T = inputs["x"].shape[0]
    I, H = inputs["x"].shape[2], inputs["cs_prev"].shape[1]  # noqa: E741
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H)
    x = inputs["x"].detach().clone().requires_grad_()
    h0 = inputs["h_prev"].detach()[None].clone().requires_grad_()
    c0 = inputs["cs_prev"].detach()[None].clone().requires_grad_()
    leaves = (x, h0, c0, *lstm.parameters())
    pack, pad = torch.nn.utils.rnn.pack_padded_sequence, torch.nn.utils.rnn.pad_packed_sequence

    def fwd_bwd():
        out, _ = lstm(pack(x, lengths, enforce_sorted=False), (h0, c0))
        out, _ = pad(out, total_length=T)
        return torch.autograd.grad(out.sum(), leaves)

    return fwd_bwd


def _tf_fns(tf, T, inputs):
    """tf.function(jit_compile=False) around the raw ops, so a call costs one Python dispatch
    instead of one per op (eager raw ops would add Python overhead ours does not have)."""
    args = [tf.constant(T, dtype=tf.int64)] + [
        tf.constant(v.detach().numpy()) for v in inputs.values()
    ]
    ones = tf.ones(inputs["x"].shape[:2] + inputs["cs_prev"].shape[1:])
    names = list(inputs)

    @tf.function(jit_compile=False)
    def fwd(seq_len_max, *ins):
        return tf.raw_ops.BlockLSTM(
            seq_len_max=seq_len_max,
            **dict(zip(names, ins, strict=True)),
            cell_clip=3.0,
            use_peephole=True,
        )

    @tf.function(jit_compile=False)
    def fwd_bwd(seq_len_max, *ins):
        kw = dict(zip(names, ins, strict=True))
        out = tf.raw_ops.BlockLSTM(seq_len_max=seq_len_max, **kw, cell_clip=3.0, use_peephole=True)
        grads = dict(cs_grad=ones, h_grad=ones, use_peephole=True)
        return tf.raw_ops.BlockLSTMGrad(seq_len_max=seq_len_max, **kw, **out._asdict(), **grads)

    return (lambda: fwd(*args)), (lambda: fwd_bwd(*args))


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt if resource else 0


def _time_paired(fns: dict, min_run_time: float,
                 faults: dict | None = None) -> dict[str, list[float]]:  # fmt: skip
    """Seconds per call of each of `fns`, timed in rounds that call every one once (a batch of
    calls where one call is under 2 ms), in a shuffled order: list k of each is round k.
    `faults`, if given, gets each one's minor page faults per call (the process's, so its
    worker threads' too): glibc hands large freed buffers back to the kernel or keeps them,
    depending on the heap's layout, which differs from process to process, and the same code
    then runs up to 1.8x slower (docs/performance.md)."""
    number = {}
    for name, fn in fns.items():
        fn()  # warm-up (oneDNN primitive creation, allocator)
        start = time.perf_counter()
        fn()
        number[name] = max(1, int(2e-3 / max(time.perf_counter() - start, 1e-9)))
    per_call = {name: [] for name in fns}
    fault_count, calls = dict.fromkeys(fns, 0), dict.fromkeys(fns, 0)
    order, rng = list(fns), random.Random(0)
    deadline = time.perf_counter() + min_run_time * len(fns)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection would land in one member of a pair
    try:
        while len(per_call[order[0]]) < 7 or time.perf_counter() < deadline:
            rng.shuffle(order)
            for name in order:
                fn, n = fns[name], number[name]
                faults_before = _minor_faults()
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                per_call[name].append((time.perf_counter() - start) / n)
                fault_count[name] += _minor_faults() - faults_before
                calls[name] += n
    finally:
        if gc_was_enabled:
            gc.enable()
    if faults is not None:
        faults.update({name: fault_count[name] / max(calls[name], 1) for name in fns})
    return per_call


def _fault_note(faults: dict) -> None:
    """Says which implementations took page faults on every call (memory glibc returned to the
    kernel and took back: time that another process's heap layout may not spend)."""
    many = {k: v for k, v in faults.items() if v >= 100}
    if many:
        _progress("  page faults a call: " + ", ".join(f"{k} {v:.0f}" for k, v in many.items()))


def _time_tf(fn, min_run_time: float) -> float:
    """Median seconds per call over repeats of `number` calls (timeit-style)."""
    fn()  # traces the tf.function
    start = time.perf_counter()
    fn()
    number = max(1, int(0.05 / max(time.perf_counter() - start, 1e-9)))
    per_call, deadline = [], time.perf_counter() + min_run_time
    while len(per_call) < 5 or time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(number):
            fn()  # CPU eager execution is synchronous: the outputs exist on return
        per_call.append((time.perf_counter() - start) / number)
    return statistics.median(per_call)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            model = _cpuinfo_model(f.read())
    except OSError:
        model = None
    return model or platform.processor() or "unknown"


def _cpuinfo_model(text: str) -> str | None:
    """The first CPU's model name from /proc/cpuinfo's text, with its family and model numbers
    where x86 gives them: one name ("AMD EPYC") covers CPUs whose caches and vector units differ
    (Zen 4 is family 25, Zen 5 family 26), and the figures differ with them."""
    fields = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first CPU's block ends here
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name")
    if not name:
        return None
    if fields.get("cpu family") and fields.get("model"):
        return f"{name} (cpu family {fields['cpu family']}, model {fields['model']})"
    return name


def _fmt_ms(ms):
    return "-" if ms is None else f"{ms:.3f}"


def _fmt_ratio(ratio):
    return "-" if ratio is None else f"{ratio:.2f}x"


def _print_table(results, out=None):
    """One table per kind of row (training, inference): the times of every implementation a row
    has, then its ratios (and, for inference, the time per step)."""
    for kind in ("training", "inference"):
        rows = [r for r in results if (r["pass"] == "inference") == (kind == "inference")]
        if not rows:
            continue
        impls = [k for k in rows[0]["ms"] if any(r["ms"][k] is not None for r in rows)]
        ratios = [k for k in rows[0]["ratio"] if any(r["ratio"][k] is not None for r in rows)]
        steps = [k for k in rows[0].get("us_per_step", {})]
        head = ("shape T,B,I,H", "pass", *(f"{k} ms" for k in impls), *ratios,
                *(f"{k} us/step" for k in steps))  # fmt: skip
        lines = [head]
        for r in rows:
            lines.append(
                (
                    ",".join(map(str, r["shape"])),
                    r["pass"],
                    *(_fmt_ms(r["ms"][k]) for k in impls),
                    *(_fmt_ratio(r["ratio"][k]) for k in ratios),
                    *(f"{r['us_per_step'][k]:.1f}" for k in steps),
                )
            )
        widths = [max(len(row[c]) for row in lines) for c in range(len(head))]
        for row in lines:
            print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)),
                  file=out or sys.stdout)  # fmt: skip


def _plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r["pass"] == "fwd+bwd"]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(2 + 2 * len(rows), 4))
    impls = [impl for impl in IMPLS if any(r["ms"][impl] is not None for r in rows)]
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        xs = [j + k * width for j in range(len(rows))]
        ax.bar(xs, [r["ms"][impl] for r in rows], width, label=impl)
    ax.set_xticks(
        [j + width * (len(impls) - 1) / 2 for j in range(len(rows))],
        ["T={} B={}\nI={} H={}".format(*r["shape"]) for r in rows],
    )
    ax.set_ylabel("fwd+bwd ms (CPU, float32)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def machine_info(tf, min_run_time: float, rounds: int) -> dict:
    """The machine, the libraries and the settings a benchmark ran under (its JSON's `meta`)."""
    return dict(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        commit=source_commit(),
        processor=platform.processor(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        # What the kernels ran: the package's choice (ATEN_CPU_CAPABILITY honoured), ATen's (for
        # nn.LSTM's pointwise work), oneDNN's cap (nn.LSTM's and brgemm's GEMMs) and MKL's (the
        # packed sgemm of the recurrent products, ATen's GEMMs): an AVX2 row measured on an
        # AVX-512 CPU needs all three lowered.
        kernels_isa=str(torch.ops.torch_lstm_grad._cpu_isa()),
        aten_cpu_capability=torch.backends.cpu.get_cpu_capability(),
        onednn_max_cpu_isa=os.environ.get("ONEDNN_MAX_CPU_ISA", "(not set)"),
        mkl_enable_instructions=os.environ.get("MKL_ENABLE_INSTRUCTIONS", "(not set)"),
        torch_version=torch.__version__,
        torch_threads=torch.get_num_threads(),
        torch_interop_threads=torch.get_num_interop_threads(),
        mkldnn_enabled=torch.backends.mkldnn.enabled,
        tf_version=tf.__version__ if tf else None,
        # 0 means TF's default: one thread per schedulable CPU.
        tf_intra_op_threads=tf.config.threading.get_intra_op_parallelism_threads() if tf else None,
        tf_inter_op_threads=tf.config.threading.get_inter_op_parallelism_threads() if tf else None,
        min_run_time_s=min_run_time,
        rounds=rounds,
        load_average_1min=os.getloadavg()[0],
    )


def source_commit() -> str | None:
    """The git commit of the package's source tree (short hash, "-dirty" with uncommitted
    changes), or None where this file is not tracked by a git checkout (an installed package,
    also one inside a user's own repository)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        run = dict(cwd=here, capture_output=True, text=True, timeout=10, check=True)
        subprocess.run(["git", "ls-files", "--error-unmatch", os.path.basename(__file__)], **run)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               **run).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def _progress(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)


def _run_inference(shapes, seed: int, run_time: float) -> list[dict]:
    results = []
    for n, (T, B, I, H) in enumerate(shapes, 1):  # noqa: E741
        inputs = _inputs(T, B, I, H, seed)
        fns = {k: v[0] for k, v in _module_fns(inputs, seed).items()}
        fns["nn.LSTM"] = _nn_lstm(inputs, seed)[0]
        _progress(f"[inference {n}/{len(shapes)}] T={T} B={B} I={I} H={H} ...", end="")
        faults: dict[str, float] = {}
        with torch.inference_mode():
            paired = _time_paired(fns, run_time, faults)
        ms = {k: statistics.median(v) * 1e3 for k, v in paired.items()}
        _progress(" " + " / ".join(f"{v:.3f}" for v in ms.values()) + " ms")
        _fault_note(faults)
        results.append(
            {
                "shape": [T, B, I, H],
                "pass": "inference",
                "ms": ms,
                "ratio": {
                    f"{k}/nn.LSTM": statistics.median(
                        a / b for a, b in zip(paired[k], paired["nn.LSTM"], strict=True)
                    )
                    for k in MODULES
                },
                "us_per_step": {k: v * 1e3 / T for k, v in ms.items()},
                "paired_rounds": len(paired["nn.LSTM"]),
                "page_faults_per_call": faults,
            }
        )
    return results


def _run_training(shapes, args, tf, modules: bool, run_time: float) -> list[dict]:
    cudnn = args.op == "cudnn_rnn"
    passes = ("fwd+bwd", "varied") if cudnn else PASSES
    steps = 2 if tf else 1  # per shape and pass: the paired implementations, then TF
    total, done, results = len(shapes) * len(passes) * steps, 0, []
    impls = IMPLS + (MODULES if modules else ())
    for T, B, I, H in shapes:  # noqa: E741
        inputs = _inputs(T, B, I, H, args.seed)
        if cudnn:
            lengths = _varied_lengths(T, B)
            fns = {
                "ours": (_cudnn_v3(inputs, torch.full((B,), T)), _cudnn_v3(inputs, lengths)),
                "nn.LSTM": (_nn_lstm(inputs, 0)[1], _packed_lstm(inputs, lengths)),
            }
        else:
            fns = {"ours": _ours(T, inputs), "nn.LSTM": _nn_lstm(inputs, args.seed)}
            if modules:
                fns.update(_module_fns(inputs, args.seed))
        if tf:
            fns["TF"] = _tf_fns(tf, T, inputs)
        paired_impls = [k for k in fns if k != "TF"]
        for k, p in enumerate(passes):
            ms = dict.fromkeys(impls)
            done += 1
            _progress(f"[{done}/{total}] T={T} B={B} I={I} H={H} {p} "
                      f"{', '.join(paired_impls)} ...", end="")  # fmt: skip
            faults: dict[str, float] = {}
            paired = _time_paired({impl: fns[impl][k] for impl in paired_impls}, run_time, faults)
            for impl, secs in paired.items():
                ms[impl] = statistics.median(secs) * 1e3
            ratio = {
                f"{impl}/nn.LSTM": statistics.median(
                    a / b for a, b in zip(paired[impl], paired["nn.LSTM"], strict=True)
                )
                for impl in paired_impls
                if impl != "nn.LSTM"
            }
            _progress(" " + " / ".join(f"{ms[impl]:.3f}" for impl in paired_impls) + " ms")
            _fault_note(faults)
            if tf:
                done += 1
                _progress(f"[{done}/{total}] T={T} B={B} I={I} H={H} {p} TF ...", end="")
                ms["TF"] = _time_tf(fns["TF"][k], run_time) * 1e3
                _progress(f" {ms['TF']:.3f} ms")
            ratio["ours/TF"] = ms["ours"] / ms["TF"] if ms["TF"] else None
            results.append(
                {
                    "shape": [T, B, I, H],
                    "pass": p,
                    "ms": ms,
                    "ratio": ratio,
                    "paired_rounds": len(paired["ours"]),
                    "page_faults_per_call": faults,
                }
            )
    return results


def run(args: argparse.Namespace) -> int:
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("--plot needs matplotlib (pip install matplotlib); nothing was run", file=sys.stderr)
        return 2
    cudnn = args.op == "cudnn_rnn"
    modules = args.modules or args.mode == "all"
    if modules and cudnn:
        print("--modules and --mode all time BlockLSTM's shapes (--op block_lstm)", file=sys.stderr)
        return 2

    def shapes_for(defaults):
        shapes = list(args.shape or [])
        return list(defaults) + shapes if args.default_shapes or not shapes else shapes

    tf = None
    if not args.no_tf and not cudnn and args.mode != "inference":
        from .check import import_tf

        try:
            tf = import_tf()
        except ImportError:
            print("TensorFlow is not installed: timing without it (--no-tf)", file=sys.stderr)
    if args.threads:
        torch.set_num_threads(args.threads)
        if tf:  # before TF runs its first op, which fixes its thread pools
            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    info = machine_info(tf, args.min_run_time, args.rounds)
    if info["load_average_1min"] > 0.5 * (info["cpu_count"] or 1):
        print(
            f"warning: load average {info['load_average_1min']:.1f} on {info['cpu_count']} "
            "CPUs: other processes are running and the timings will be noisy",
            file=sys.stderr,
        )
    print(
        f"threads: torch {info['torch_threads']} (interop {info['torch_interop_threads']}), "
        f"TF intra-op {info['tf_intra_op_threads']} / inter-op {info['tf_inter_op_threads']} "
        f"(0 = TF default, one per CPU; {info['cpu_count']} CPUs: {info['cpu_model']})"
    )
    print(
        f"instruction set: kernels {info['kernels_isa']}, ATen {info['aten_cpu_capability']}, "
        f"ONEDNN_MAX_CPU_ISA {info['onednn_max_cpu_isa']}, "
        f"MKL_ENABLE_INSTRUCTIONS {info['mkl_enable_instructions']}"
    )
    run_time = args.min_run_time * args.rounds
    results = []
    if args.mode in ("inference", "all"):
        results += _run_inference(shapes_for(INFERENCE_SHAPES), args.seed, run_time)
    if args.mode in ("training", "all"):
        results += _run_training(shapes_for(DEFAULT_SHAPES), args, tf, modules, run_time)
    _print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(info, op=args.op, mode=args.mode, dtype="float32", device="cpu",
                     results=results),
                f,
                indent=2,
            )  # fmt: skip
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        _plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_block_lstm", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
