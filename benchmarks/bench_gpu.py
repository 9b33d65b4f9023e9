"""GPU benchmarks, paired as on the CPU: ours and torch.nn.LSTM (cuDNN) called in
shuffled rounds of one call each, every call followed by a device synchronisation, the ratio the
median of the per-round ratios (`torch_lstm_grad.tools.bench._time_paired`).

Per shape (T, B, H; I = H), fwd+bwd, TF32 off:

* block: `raw_ops.BlockLSTM` (no peepholes, no clip: nn.LSTM's math) vs `nn.LSTM`, float32 and
  bfloat16;
* cell loop: `raw_ops.LSTMBlockCell` stepped T times vs `nn.LSTM` (float32; TF1's cell loop);
* cudnn equal: `raw_ops.CudnnRNNV3` (every length T) vs `nn.LSTM`, float32;
* cudnn varied: CudnnRNNV3 with lengths spread over [T/2, T] vs `pack_padded_sequence` +
  `nn.LSTM` + `pad_packed_sequence`, float32.

Targets (docs/performance.md): block fwd+bwd <= 1.0x nn.LSTM; CudnnRNNV3 <= 1.0x with equal
lengths and <= 0.8x packed nn.LSTM with varied lengths. The full grid is 9
shapes; release/gpu_check.sh runs three of them.

    python benchmarks/bench_gpu.py [--json FILE] [--min-run-time S] [--shape T,B,H ...]

Exits 2 without a CUDA device or a CUDA build of the extension, saying which.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys

import torch

import torch_lstm_grad
from torch_lstm_grad import raw_ops as R
from torch_lstm_grad.tools.bench import _time_paired, _varied_lengths

# The default grid: T = 100, H = 256 / 512 / 1024, B = 1 / 32 / 128.
SHAPES = [(100, B, H) for H in (256, 512, 1024) for B in (1, 32, 128)]


def _synced(fn):
    def call():
        out = fn()
        torch.cuda.synchronize()
        return out

    return call


def _lstm(I, H, dtype, seed=0):  # noqa: E741
    torch.manual_seed(seed)
    return torch.nn.LSTM(I, H).to(device="cuda", dtype=dtype)


def _block_from_lstm(lstm: torch.nn.LSTM):
    """BlockLSTM's w [I + H, 4H] and b [4H] (ICFO) computing the same function as `lstm`."""
    w_ih, w_hh = lstm.weight_ih_l0.detach(), lstm.weight_hh_l0.detach()
    b = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    w = torch.cat([w_ih, w_hh], 1)
    w = torch.cat([w.chunk(4, 0)[k] for k in (0, 2, 1, 3)]).t().contiguous()
    b = torch.cat([b.chunk(4)[k] for k in (0, 2, 1, 3)])
    return w.requires_grad_(), b.requires_grad_()


def _cases(T, B, H, dtype):
    I = H  # noqa: E741
    lstm = _lstm(I, H, dtype)
    x = torch.randn(T, B, I, device="cuda", dtype=dtype).requires_grad_()
    h0 = torch.zeros(1, B, H, device="cuda", dtype=dtype).requires_grad_()
    c0 = torch.zeros(1, B, H, device="cuda", dtype=dtype).requires_grad_()
    leaves = (x, h0, c0, *lstm.parameters())

    def torch_fb():
        out, _ = lstm(x, (h0, c0))
        return torch.autograd.grad(out.sum(), leaves)

    w, b = _block_from_lstm(lstm)
    zeros = torch.zeros(H, device="cuda", dtype=dtype)
    seq = torch.tensor(T, dtype=torch.int64)

    def block_fb():
        out = R.BlockLSTM(seq, x, c0[0], h0[0], w, zeros, zeros, zeros, b, forget_bias=0.0,
                          cell_clip=-1.0, use_peephole=False)  # fmt: skip
        return torch.autograd.grad(out.h.sum(), (x, w, b))

    def cell_fb():
        c, h = c0[0], h0[0]
        hs = []
        for t in range(T):
            out = R.LSTMBlockCell(x[t], c, h, w, zeros, zeros, zeros, b, forget_bias=0.0,
                                  cell_clip=-1.0)  # fmt: skip
            c, h = out.cs, out.h
            hs.append(h)
        return torch.autograd.grad(torch.stack(hs).sum(), (x, w, b))

    return lstm, (x, h0, c0), torch_fb, block_fb, cell_fb


def _cudnn_cases(T, B, H):
    I = H  # noqa: E741
    lstm = _lstm(I, H, torch.float32)
    params = torch.cat([p.detach().flatten() for p in lstm.parameters()]).requires_grad_()
    x = torch.randn(T, B, I, device="cuda").requires_grad_()
    h0 = torch.zeros(1, B, H, device="cuda").requires_grad_()
    c0 = torch.zeros(1, B, H, device="cuda").requires_grad_()
    equal = torch.full((B,), T, dtype=torch.int32)
    varied = _varied_lengths(T, B)
    leaves = (x, h0, c0, *lstm.parameters())
    pack, pad = torch.nn.utils.rnn.pack_padded_sequence, torch.nn.utils.rnn.pad_packed_sequence

    def ours(lengths):
        def fb():
            out = R.CudnnRNNV3(x, h0, c0, params, lengths)
            return torch.autograd.grad(out.output.sum(), (x, h0, c0, params))

        return fb

    def torch_equal():
        out, _ = lstm(x, (h0, c0))
        return torch.autograd.grad(out.sum(), leaves)

    def torch_packed():
        out, _ = lstm(pack(x, varied, enforce_sorted=False), (h0, c0))
        out, _ = pad(out, total_length=T)
        return torch.autograd.grad(out.sum(), leaves)

    return ours(equal), torch_equal, ours(varied.to(torch.int32)), torch_packed


def _pair(ours, theirs, min_run_time):
    t = _time_paired({"ours": _synced(ours), "torch": _synced(theirs)}, min_run_time)
    ratios = [a / b for a, b in zip(t["ours"], t["torch"], strict=True)]
    return {"ours_ms": statistics.median(t["ours"]) * 1e3,
            "torch_ms": statistics.median(t["torch"]) * 1e3,
            "ratio": statistics.median(ratios), "rounds": len(ratios)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--min-run-time", type=float, default=0.4, help="seconds per case and impl")
    p.add_argument("--shape", action="append", help="T,B,H (repeatable; default: the grid above)")
    args = p.parse_args(argv)
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
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape else SHAPES
    results = []
    print(f"{'T':>4} {'B':>4} {'H':>5}  {'case':<16} {'ours ms':>9} {'torch ms':>9} {'ratio':>6}")
    for T, B, H in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            _, _, torch_fb, block_fb, cell_fb = _cases(T, B, H, dtype)
            cases = {f"block {str(dtype)[6:]}": (block_fb, torch_fb)}
            if dtype == torch.float32:
                cases["cell loop"] = (cell_fb, torch_fb)
            for name, (ours, theirs) in cases.items():
                r = {"T": T, "B": B, "H": H, "case": name, **_pair(ours, theirs,
                                                                   args.min_run_time)}  # fmt: skip
                results.append(r)
                print(f"{T:>4} {B:>4} {H:>5}  {name:<16} {r['ours_ms']:>9.3f} "
                      f"{r['torch_ms']:>9.3f} {r['ratio']:>6.3f}", flush=True)  # fmt: skip
        o_eq, t_eq, o_var, t_pack = _cudnn_cases(T, B, H)
        for name, (ours, theirs) in {"cudnn equal": (o_eq, t_eq),
                                     "cudnn varied": (o_var, t_pack)}.items():  # fmt: skip
            r = {"T": T, "B": B, "H": H, "case": name, **_pair(ours, theirs, args.min_run_time)}
            results.append(r)
            print(f"{T:>4} {B:>4} {H:>5}  {name:<16} {r['ours_ms']:>9.3f} {r['torch_ms']:>9.3f} "
                  f"{r['ratio']:>6.3f}", flush=True)  # fmt: skip
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version(), "tf32": False,
            "min_run_time": args.min_run_time}  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"info": info, "results": results}, fh, indent=1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
