"""Paired in-process A/B of two variants of the CPU kernels, against torch.nn.LSTM.

How this project's speed experiments are measured (benchmarks/results/README.md, fifth session):
build both variants into one extension behind a temporary switch that the C++ reads on every
call, e.g.

    const char* v = std::getenv("TLG_VARIANT"); const bool b = v && v[0] == '1';

then run `python benchmarks/paired_ab.py block 50,32,256,256 60`. Each round calls A
(TLG_VARIANT=0), B (=1) and nn.LSTM once, in a shuffled order; the figure is the median of the
per-round differences B - A with its quartiles. On a shared VM whose speed drifts by ±20%
between minutes this resolves differences of a few tenths of a millisecond, where timing each
variant in a process of its own did not resolve 2 ms. The switch is not part of any commit.

op: `block` (BlockLSTM with peepholes and clip, backward through the grad of h) or `cudnn`
(CudnnRNNV3 lstm, every length T, backward through the grad of the output).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

import torch

from torch_lstm_grad import raw_ops


def _case(op: str, T: int, B: int, I: int, H: int):  # noqa: E741 (TF's names)
    torch.manual_seed(0)
    if op == "block":
        x = torch.randn(T, B, I).requires_grad_()
        w = (torch.randn(I + H, 4 * H) * 0.05).requires_grad_()
        b = torch.zeros(4 * H, requires_grad=True)
        wc = [(torch.randn(H) * 0.1).requires_grad_() for _ in range(3)]
        cs0, h0 = torch.zeros(B, H), torch.zeros(B, H)

        def out():
            return raw_ops.BlockLSTM(T, x, cs0, h0, w, *wc, b, cell_clip=3.0, use_peephole=True).h

    elif op == "cudnn":
        size = int(raw_ops.CudnnRNNParamsSize(num_layers=1, num_units=H, input_size=I,
                                              T=torch.float32, S=torch.int32)[0])  # fmt: skip
        params = (torch.randn(size) * 0.05).requires_grad_()
        x = torch.randn(T, B, I, requires_grad=True)
        h0, c0 = torch.zeros(1, B, H), torch.zeros(1, B, H)
        seq = torch.full((B,), T, dtype=torch.int32)

        def out():
            return raw_ops.CudnnRNNV3(x, h0, c0, params, seq).output

    else:
        raise SystemExit(f"op: expected block or cudnn, got {op!r}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        print("usage: paired_ab.py block|cudnn T,B,I,H [ROUNDS]", file=sys.stderr)
        return 2
    op, shape = argv[0], [int(v) for v in argv[1].split(",")]
    rounds = int(argv[2]) if len(argv) > 2 else 60
    T, B, I, H = shape  # noqa: E741
    out = _case(op, T, B, I, H)
    lstm, xx = torch.nn.LSTM(I, H), torch.randn(T, B, I, requires_grad=True)
    results = {}
    for variant in "01":
        os.environ["TLG_VARIANT"] = variant
        results[variant] = out().detach().clone()
    print(f"max |A - B| of the output: {(results['0'] - results['1']).abs().max().item():.2e}")

    def run(variant):
        os.environ["TLG_VARIANT"] = variant
        out().sum().backward()

    def nn():
        y, _ = lstm(xx)
        y.sum().backward()

    calls = {"A": lambda: run("0"), "B": lambda: run("1"), "nn.LSTM": nn}
    for fn in (*calls.values(), *calls.values()):
        fn()  # warm-up
    times = {name: [] for name in calls}
    order, rng = list(calls), random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    diff = sorted(b - a for a, b in zip(times["A"], times["B"], strict=True))
    q = [statistics.quantiles(diff, n=4)[k] * 1e3 for k in range(3)]
    wins = sum(d < 0 for d in diff)
    meds = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    print("median ms: " + ", ".join(f"{k} {v:.2f}" for k, v in meds.items()))
    print(f"B - A: median {q[1]:.2f} ms [q25 {q[0]:.2f}, q75 {q[2]:.2f}]; B faster in "
          f"{wins}/{rounds} rounds")  # fmt: skip
    for name in ("A", "B"):
        ratio = statistics.median(a / n for a, n in zip(times[name], times["nn.LSTM"], strict=True))
        print(f"{name} / nn.LSTM (median of per-round ratios): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
