"""GPU benchmarks, paired as on the CPU: ours and the torch.nn baseline called in shuffled rounds
of one call each, every call followed by a device synchronisation, the ratio the median of the
per-round ratios (`torch_lstm_grad.tools.bench._time_paired`, docs/performance.md §2). TF32 off.

Per shape (T, B, H; I = H), one row per op, mode and dtype (`op` / `baseline`):

* `BlockLSTM` (no peepholes, no clip: nn.LSTM's math) vs `nn.LSTM`: fwd+bwd and inference,
  float32 and bfloat16; `BlockLSTM persistent` the same under
  TORCH_LSTM_GRAD_CUDA_RECURRENT=persistent (one kernel a pass, the recurrent weights kept in
  shared memory, csrc/cuda/lstm_persistent.cuh; the steps path where it does not fit);
* `CudnnRNNV3 equal` (lstm, every length T) vs `nn.LSTM`: fwd+bwd and inference (is_training
  False), float32;
  `CudnnRNNV3 equal auto` the same under TORCH_LSTM_GRAD_CUDNN_RNN_ALGO=auto (cuDNN's
  persistent small-H algorithm where torch.nn takes it, docs/cudnn.md §8);
* `CudnnRNNV3 varied` (lengths over [T/2, T], B >= 8) vs `nn.LSTM packed` (pack, nn.LSTM,
  unpack): fwd+bwd, float32;
* `LSTMBlockCell loop` (T steps from Python) vs `nn.LSTMCell loop`: fwd+bwd, float32; the loops
  step through `x.unbind(0)`, whose backward is one stack, where `x[t]` would add a zeroed
  [T, B, I] gradient a step, the same on both sides, to both times;
* `CudnnRNNV3 GRU equal` (and `... auto`) vs `nn.GRU`: fwd+bwd and inference, float32;
* `keras_gru` (reset_after: cuDNN's GRU) vs `nn.GRU`: fwd+bwd and inference, float32 and
  bfloat16; `keras_gru persistent` the same under TORCH_LSTM_GRAD_CUDA_RECURRENT=persistent;
* `GRUBlockCell loop` (TF's reset-before GRU, T steps) vs `nn.GRUCell loop`: fwd+bwd, float32;
  `GRUBlockCell loop x constant` the same with no gradient for x (a first layer fed data).

Each row: device, date, commit (and torch, cudnn, tf32), op, baseline, mode, dtype, T, B, I, H,
ratio (ours ÷ baseline), ours_ms, baseline_ms, rounds, and the peak memory of one call of each
above what was allocated before it (ours_peak_mib, baseline_peak_mib; CUDA only). `--json`
writes the rows as a list.

The grid (`--grid full`): H in {64, 128, 192, 256, 512, 1024} x B in {1, 8, 32, 128} x T in
{100, 500}; `--grid small` is H in {64, 128, 256} x B in {1, 32} x T = 100. `--shape T,B,H`
(repeatable) replaces the grid, `--ops` / `--modes` / `--dtypes` filter it, and `--budget S`
stops starting rows after S seconds (the rows done are written). Targets: docs/performance.md.

    python benchmarks/bench_gpu.py --grid full --budget 400 --commit abc1234 --json F

`--device cpu` runs the same rows on the CPU: the script's check, and the CPU figures of the
cell loops (the fused ops' CPU benchmark is `torch-lstm-grad bench`). Exits 2 without a CUDA
device or a CUDA build of the extension, saying which.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch

import torch_lstm_grad
from torch_lstm_grad import ops
from torch_lstm_grad import raw_ops as R
from torch_lstm_grad.tools.bench import _time_paired, _varied_lengths, source_commit

GRIDS = {
    "full": [(T, B, H) for T in (100, 500) for H in (64, 128, 192, 256, 512, 1024)
             for B in (1, 8, 32, 128)],
    "small": [(100, B, H) for H in (64, 128, 256) for B in (1, 32)],
}  # fmt: skip
OPS = ("BlockLSTM", "BlockLSTM persistent", "CudnnRNNV3 equal", "CudnnRNNV3 equal auto",
       "CudnnRNNV3 varied", "LSTMBlockCell loop", "CudnnRNNV3 GRU equal",
       "CudnnRNNV3 GRU equal auto", "keras_gru", "keras_gru persistent",
       "GRUBlockCell loop", "GRUBlockCell loop x constant")  # fmt: skip
# op -> (baseline, modes, dtypes)
PLAN = {
    "BlockLSTM": ("nn.LSTM", ("fwd+bwd", "inference"), ("float32", "bfloat16")),
    "BlockLSTM persistent": ("nn.LSTM", ("fwd+bwd", "inference"), ("float32", "bfloat16")),
    "CudnnRNNV3 equal": ("nn.LSTM", ("fwd+bwd", "inference"), ("float32",)),
    "CudnnRNNV3 equal auto": ("nn.LSTM", ("fwd+bwd", "inference"), ("float32",)),
    "CudnnRNNV3 varied": ("nn.LSTM packed", ("fwd+bwd",), ("float32",)),
    "LSTMBlockCell loop": ("nn.LSTMCell loop", ("fwd+bwd",), ("float32",)),
    "CudnnRNNV3 GRU equal": ("nn.GRU", ("fwd+bwd", "inference"), ("float32",)),
    "CudnnRNNV3 GRU equal auto": ("nn.GRU", ("fwd+bwd", "inference"), ("float32",)),
    "keras_gru": ("nn.GRU", ("fwd+bwd", "inference"), ("float32", "bfloat16")),
    "keras_gru persistent": ("nn.GRU", ("fwd+bwd", "inference"), ("float32", "bfloat16")),
    "GRUBlockCell loop": ("nn.GRUCell loop", ("fwd+bwd",), ("float32",)),
    "GRUBlockCell loop x constant": ("nn.GRUCell loop x constant", ("fwd+bwd",), ("float32",)),
}


def _run(fn, mode, leaves):
    """`fn()`'s outputs summed and differentiated with respect to `leaves` (fwd+bwd), or
    `fn()` under no_grad (inference)."""
    if mode == "inference":
        with torch.no_grad():
            return fn()
    outs = fn()
    return torch.autograd.grad(sum(o.float().sum() for o in outs), leaves)


class _Shape:
    """One shape's inputs and torch.nn modules, built once for every op of the shape."""

    def __init__(self, T, B, H, dtype, device):
        torch.manual_seed(0)
        self.T, self.B, self.H, self.dtype, self.device = T, B, H, dtype, device
        new = dict(device=device, dtype=dtype)
        self.x = torch.randn(T, B, H, **new).requires_grad_()
        self.h0 = torch.zeros(1, B, H, **new).requires_grad_()
        self.c0 = torch.zeros(1, B, H, **new).requires_grad_()

    def lstm(self):
        return torch.nn.LSTM(self.H, self.H).to(self.device, self.dtype)

    def gru(self):
        return torch.nn.GRU(self.H, self.H).to(self.device, self.dtype)


def _block_weights(lstm):
    """BlockLSTM's / LSTMBlockCell's w [I + H, 4H] (ICFO) and b [4H] on nn.LSTM's weights."""
    w_ih, w_hh = lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()
    w = torch.cat([w_ih, w_hh], 1)
    w = torch.cat([w.chunk(4, 0)[k] for k in (0, 2, 1, 3)]).t().contiguous().requires_grad_()
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    b = torch.cat([b.chunk(4)[k] for k in (0, 2, 1, 3)]).requires_grad_()
    return w, b


def _block_lstm(s: _Shape):
    """BlockLSTM on nn.LSTM's weights, vs that nn.LSTM."""
    lstm = s.lstm()
    w, b = _block_weights(lstm)
    zeros = torch.zeros(s.H, device=s.device, dtype=s.dtype)
    seq = torch.tensor(s.T, dtype=torch.int64)

    def ours():
        out = R.BlockLSTM(seq, s.x, s.c0[0], s.h0[0], w, zeros, zeros, zeros, b, forget_bias=0.0,
                          cell_clip=-1.0, use_peephole=False)  # fmt: skip
        return (out.h,)

    return ours, (s.x, w, b), _nn(lstm, s, lstm=True)


def _nn(module, s: _Shape, lstm: bool):
    def theirs():
        out, _ = module(s.x, (s.h0, s.c0) if lstm else s.h0)
        return (out,)

    return theirs, (s.x, s.h0, *((s.c0,) if lstm else ()), *module.parameters())


def _cudnn(s: _Shape, mode: str, varied: bool):
    module = s.lstm() if mode == "lstm" else s.gru()
    params = torch.cat([p.detach().flatten() for p in module.parameters()]).requires_grad_()
    lengths = _varied_lengths(s.T, s.B) if varied else torch.full((s.B,), s.T)
    lengths32 = lengths.to(torch.int32)
    c0 = s.c0 if mode == "lstm" else s.c0.new_zeros(())

    def ours():
        # Inference rows run what inference calls run, is_training=False (no reserve: TF's
        # default, True, fills and returns one, for a backward the rows do not take).
        return (R.CudnnRNNV3(s.x, s.h0, c0, params, lengths32, rnn_mode=mode,
                             is_training=torch.is_grad_enabled()).output,)  # fmt: skip

    leaves = (s.x, s.h0, *((s.c0,) if mode == "lstm" else ()), params)
    if not varied:
        return ours, leaves, _nn(module, s, lstm=mode == "lstm")
    pack, pad = torch.nn.utils.rnn.pack_padded_sequence, torch.nn.utils.rnn.pad_packed_sequence

    def packed():
        out, _ = module(pack(s.x, lengths, enforce_sorted=False), (s.h0, s.c0))
        return (pad(out, total_length=s.T)[0],)

    return ours, leaves, (packed, (s.x, s.h0, s.c0, *module.parameters()))


def _lstm_cell_loop(s: _Shape):
    w, b = _block_weights(s.lstm())
    zeros = torch.zeros(s.H, device=s.device, dtype=s.dtype)
    cell = torch.nn.LSTMCell(s.H, s.H).to(s.device, s.dtype)

    def ours():
        c, h, hs = s.c0[0], s.h0[0], []
        for x_t in s.x.unbind(0):
            out = R.LSTMBlockCell(x_t, c, h, w, zeros, zeros, zeros, b, forget_bias=0.0,
                                  cell_clip=-1.0)  # fmt: skip
            c, h = out.cs, out.h
            hs.append(h)
        return (torch.stack(hs),)

    def theirs():
        c, h, hs = s.c0[0], s.h0[0], []
        for x_t in s.x.unbind(0):
            h, c = cell(x_t, (h, c))
            hs.append(h)
        return (torch.stack(hs),)

    return ours, (s.x, w, b), (theirs, (s.x, *cell.parameters()))


def _keras_gru(s: _Shape):
    gru = s.gru()
    # nn.GRU's r, z, n blocks as Keras' z, r, h columns; its two biases as Keras' rows
    order = (1, 0, 2)
    kernel = torch.cat([gru.weight_ih_l0.detach().chunk(3)[k] for k in order]).t().contiguous()
    recurrent = torch.cat([gru.weight_hh_l0.detach().chunk(3)[k] for k in order]).t().contiguous()
    bias = torch.stack([torch.cat([b.detach().chunk(3)[k] for k in order])
                        for b in (gru.bias_ih_l0, gru.bias_hh_l0)])  # fmt: skip
    leaves = tuple(t.requires_grad_() for t in (kernel, recurrent, bias))

    def ours():
        if not torch.is_grad_enabled():
            return (ops.keras_gru_inference(s.x, s.h0[0], *leaves),)
        return (ops.keras_gru(s.x, s.h0[0], *leaves).h,)

    return ours, (s.x, *leaves), _nn(gru, s, lstm=False)


def _gru_cell_loop(s: _Shape, x_grad: bool = True):
    H = s.H
    x = s.x if x_grad else s.x.detach()
    new = dict(device=s.device, dtype=s.dtype)
    w_ru = (0.1 * torch.randn(2 * H, 2 * H, **new)).requires_grad_()
    w_c = (0.1 * torch.randn(2 * H, H, **new)).requires_grad_()
    b_ru = torch.ones(2 * H, **new).requires_grad_()
    b_c = torch.zeros(H, **new).requires_grad_()
    cell = torch.nn.GRUCell(H, H).to(s.device, s.dtype)

    def ours():
        h, hs = s.h0[0], []
        for x_t in x.unbind(0):
            h = R.GRUBlockCell(x_t, h, w_ru, w_c, b_ru, b_c).h
            hs.append(h)
        return (torch.stack(hs),)

    def theirs():
        h, hs = s.h0[0], []
        for x_t in x.unbind(0):
            h = cell(x_t, h)
            hs.append(h)
        return (torch.stack(hs),)

    xs = (x,) if x_grad else ()
    return ours, (*xs, w_ru, w_c, b_ru, b_c), (theirs, (*xs, *cell.parameters()))


def _under(name, value, case):
    """A case whose op runs with the environment variable `name` = `value` (the extension reads
    its settings at each call, so it is set around each call; the baseline's untouched)."""
    ours, leaves, baseline = case

    def under():
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            return ours()
        finally:
            if before is None:
                del os.environ[name]
            else:
                os.environ[name] = before

    return under, leaves, baseline


def _auto(case):
    """Under TORCH_LSTM_GRAD_CUDNN_RNN_ALGO=auto (docs/cudnn.md §8)."""
    return _under("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO", "auto", case)


BUILD = {
    "BlockLSTM": _block_lstm,
    "BlockLSTM persistent": lambda s: _under(
        "TORCH_LSTM_GRAD_CUDA_RECURRENT", "persistent", _block_lstm(s)
    ),
    "CudnnRNNV3 equal": lambda s: _cudnn(s, "lstm", varied=False),
    "CudnnRNNV3 equal auto": lambda s: _auto(_cudnn(s, "lstm", varied=False)),
    "CudnnRNNV3 GRU equal auto": lambda s: _auto(_cudnn(s, "gru", varied=False)),
    "CudnnRNNV3 varied": lambda s: _cudnn(s, "lstm", varied=True),
    "LSTMBlockCell loop": _lstm_cell_loop,
    "CudnnRNNV3 GRU equal": lambda s: _cudnn(s, "gru", varied=False),
    "keras_gru": _keras_gru,
    "keras_gru persistent": lambda s: _under(
        "TORCH_LSTM_GRAD_CUDA_RECURRENT", "persistent", _keras_gru(s)
    ),
    "GRUBlockCell loop": _gru_cell_loop,
    "GRUBlockCell loop x constant": lambda s: _gru_cell_loop(s, x_grad=False),
}


def _synced(fn, mode, leaves, sync):
    """One timed call: `fn` run (`_run`) and the device synchronised."""

    def call():
        out = _run(fn, mode, leaves)
        sync()
        return out

    return call


def _peak_mib(call, device) -> float | None:
    """The memory one call allocates at its peak above what was allocated before it."""
    if device != "cuda":
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def _commit(given: str | None) -> str:
    return given or source_commit() or "unknown (pass --commit)"


def rows(shapes, op_names, modes, dtypes, device, min_run_time, budget, head):
    """The benchmark's rows (dicts), one at a time, `head`'s fields first."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    started = time.perf_counter()
    for T, B, H in shapes:
        for op in op_names:
            baseline, op_modes, op_dtypes = PLAN[op]
            if op == "CudnnRNNV3 varied" and B < 8:
                continue  # one or a few rows: lengths that vary prove nothing
            for dtype_name in (d for d in op_dtypes if d in dtypes):
                dtype = getattr(torch, dtype_name)
                s = _Shape(T, B, H, dtype, device)
                ours, ours_leaves, (theirs, their_leaves) = BUILD[op](s)
                for mode in (m for m in op_modes if m in modes):
                    if budget is not None and time.perf_counter() - started > budget:
                        return

                    a = _synced(ours, mode, ours_leaves, sync)
                    b = _synced(theirs, mode, their_leaves, sync)
                    t = _time_paired({"ours": a, "baseline": b}, min_run_time)
                    ratios = [x / y for x, y in zip(t["ours"], t["baseline"], strict=True)]
                    yield {**head, "op": op, "baseline": baseline, "mode": mode,
                           "dtype": dtype_name, "T": T, "B": B, "I": H, "H": H,
                           "ratio": round(statistics.median(ratios), 4),
                           "ours_ms": round(statistics.median(t["ours"]) * 1e3, 4),
                           "baseline_ms": round(statistics.median(t["baseline"]) * 1e3, 4),
                           "rounds": len(ratios), "ours_peak_mib": _peak_mib(a, device),
                           "baseline_peak_mib": _peak_mib(b, device)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the rows here (a list of objects)")
    p.add_argument("--min-run-time", type=float, default=0.2, help="seconds per row and side")
    p.add_argument("--grid", choices=sorted(GRIDS), default="small")
    p.add_argument("--shape", action="append", help="T,B,H (repeatable; replaces the grid)")
    p.add_argument("--ops", help=f"comma-separated, of: {', '.join(OPS)} (default: all)")
    p.add_argument("--modes", default="fwd+bwd,inference")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--budget", type=float, help="start no row after this many seconds")
    p.add_argument("--commit", help="the commit measured (default: git's HEAD, where there is one)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("bench_gpu: no CUDA device visible (torch.cuda.is_available() is False)",
                  file=sys.stderr)  # fmt: skip
            return 2
        if not torch_lstm_grad.built_with_cuda():
            print("bench_gpu: torch_lstm_grad was built without CUDA kernels (see "
                  "`torch-lstm-grad doctor`)", file=sys.stderr)  # fmt: skip
            return 2
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    op_names = [o.strip() for o in args.ops.split(",")] if args.ops else list(OPS)
    unknown = [o for o in op_names if o not in PLAN]
    if unknown:
        p.error(f"--ops: unknown {unknown}; expected some of {list(OPS)}")
    shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape
              else GRIDS[args.grid])  # fmt: skip
    device_name = (torch.cuda.get_device_name() if args.device == "cuda"
                   else f"cpu ({torch.get_num_threads()} threads)")  # fmt: skip
    head = {"device": device_name,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": _commit(args.commit), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version() if args.device == "cuda" else None,
            "tf32": False}  # fmt: skip
    print(json.dumps(head))
    print(f"{'T':>4} {'B':>4} {'H':>5}  {'op':<21} {'mode':<9} {'dtype':<8} {'ours ms':>9} "
          f"{'base ms':>9} {'ratio':>6}  peak MiB ours/base")  # fmt: skip
    out = []
    for r in rows(shapes, op_names, args.modes.split(","), args.dtypes.split(","), args.device,
                  args.min_run_time, args.budget, head):  # fmt: skip
        out.append(r)
        peak = (f"{r['ours_peak_mib']:.1f}/{r['baseline_peak_mib']:.1f}"
                if r["ours_peak_mib"] is not None else "-")  # fmt: skip
        print(f"{r['T']:>4} {r['B']:>4} {r['H']:>5}  {r['op']:<21} {r['mode']:<9} "
              f"{r['dtype']:<8} {r['ours_ms']:>9.3f} {r['baseline_ms']:>9.3f} "
              f"{r['ratio']:>6.3f}  {peak}", flush=True)  # fmt: skip
        if args.json:  # rewritten after every row: a run cut short keeps what it measured
            with open(args.json, "w") as fh:
                json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
