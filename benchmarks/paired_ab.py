"""Paired in-process A/B of two variants of the CPU kernels, against torch.nn.LSTM.

How this project's speed experiments are measured (benchmarks/results/README.md, fifth session):
build both variants into one extension behind a temporary switch that the C++ reads on every
call, e.g.

    const char* v = std::getenv("TLG_VARIANT"); const bool b = v && v[0] == '1';

then run `python benchmarks/paired_ab.py block 50,32,256,256 20`. A (TLG_VARIANT=0), B (=1)
and nn.LSTM are timed in rounds of one call each, in a shuffled order (the pairing of
`torch-lstm-grad bench`), for the given seconds each; the figure is the median of the per-round
differences B - A with its quartiles. On a shared VM whose speed drifts by ±20% between minutes
this resolves differences of a few tenths of a millisecond, where timing each variant in a
process of its own did not resolve 2 ms. The switch is not part of any commit.

op: `block` (the bench's BlockLSTM fwd+bwd: peepholes, clip, the grads of every input) or
`cudnn` (the bench's CudnnRNNV3 lstm fwd+bwd, every length T).
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

from torch_lstm_grad import _bench


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in ("block", "cudnn"):
        print("usage: paired_ab.py block|cudnn T,B,I,H [SECONDS]", file=sys.stderr)
        return 2
    T, B, I, H = _bench._shape(argv[1])  # noqa: E741
    seconds = float(argv[2]) if len(argv) > 2 else 20.0
    inputs = _bench._inputs(T, B, I, H, seed=0)
    if argv[0] == "block":
        fwd_bwd = _bench._ours(T, inputs)[1]
    else:
        fwd_bwd = _bench._cudnn_v3(inputs, torch.full((B,), T))

    def variant(v):
        def run():
            os.environ["TLG_VARIANT"] = v
            return fwd_bwd()

        return run

    a, b = variant("0"), variant("1")
    gap = max((x - y).abs().max().item() for x, y in zip(a(), b(), strict=True))
    print(f"max |A - B| over the gradients: {gap:.2e}")
    times = _bench._time_paired({"A": a, "B": b, "nn.LSTM": _bench._nn_lstm(inputs, 0)[1]},
                                seconds)  # fmt: skip
    diff = [y - x for x, y in zip(times["A"], times["B"], strict=True)]
    q1, med, q3 = (v * 1e3 for v in statistics.quantiles(diff, n=4))
    medians = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print("median ms: " + ", ".join(f"{k} {v:.2f}" for k, v in medians.items()))
    print(f"B - A: median {med:.2f} ms [q25 {q1:.2f}, q75 {q3:.2f}]; B faster in "
          f"{sum(d < 0 for d in diff)}/{len(diff)} rounds")  # fmt: skip
    for name in ("A", "B"):
        ratio = statistics.median(x / n for x, n in zip(times[name], times["nn.LSTM"], strict=True))
        print(f"{name} / nn.LSTM (median of per-round ratios): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
