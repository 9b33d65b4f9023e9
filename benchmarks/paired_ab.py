"""Paired in-process A/B of two variants of the CPU kernels, against torch.nn.LSTM.

How this project's kernel variants are compared (docs/performance.md): build both variants
into one extension behind a temporary switch that the C++ reads on every call, e.g.

    const char* v = std::getenv("TLG_VARIANT"); const bool b = v && v[0] == '1';

then run `python benchmarks/paired_ab.py block 50,32,256,256 20`. A (TLG_VARIANT=0), B (=1)
(other settings: TLG_AB=1,2 runs A with 1, B with 2) and nn.LSTM are timed in rounds of one
call each, in a shuffled order (the pairing of `torch-lstm-grad bench`), for the given seconds
each; the figure is the median of the per-round differences B - A with its quartiles. On a
shared VM whose speed drifts by ±20% between minutes this resolves differences of a few tenths
of a millisecond, where timing each variant in a process of its own did not resolve 2 ms. The
switch is not part of any commit.

What is timed (the first argument), each against nn.LSTM doing the same:
- `block`: the bench's BlockLSTM fwd+bwd (peepholes, clip, the grads of every input);
  `block-fwd`: its forward alone (the graph recorded, as the bench's fwd column);
- `cudnn`: the bench's CudnnRNNV3 lstm fwd+bwd, every length T;
- `fused-` / `cudnnlstm-` + `fwd`, `fwdbwd` or `inf`: the module LSTMBlockFusedCell or
  CudnnLSTM (one layer, nn.LSTM's math) as `bench --modules` times it: the forward with the
  graph recorded, fwd+bwd, or the forward under `torch.inference_mode()` (`bench --mode
  inference`).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys

import torch

from torch_lstm_grad.tools import bench as _bench


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in _KINDS:
        print(f"usage: paired_ab.py {'|'.join(_KINDS)} T,B,I,H [SECONDS]", file=sys.stderr)
        return 2
    T, B, I, H = _bench._shape(argv[1])  # noqa: E741
    seconds = float(argv[2]) if len(argv) > 2 else 20.0
    inputs = _bench._inputs(T, B, I, H, seed=0)
    kind = argv[0]
    nn_fwd, nn_fwd_bwd = _bench._nn_lstm(inputs, 0)
    if kind == "block":
        fwd_bwd, baseline = _bench._ours(T, inputs)[1], nn_fwd_bwd
    elif kind == "block-fwd":
        fwd_bwd, baseline = _bench._ours(T, inputs)[0], nn_fwd
    elif kind == "cudnn":
        fwd_bwd, baseline = _bench._cudnn_v3(inputs, torch.full((B,), T)), nn_fwd_bwd
    else:
        module, part = kind.split("-")
        fwd, fwd_bwd = _bench._module_fns(inputs, 0)[_MODULES[module]]
        fwd_bwd, baseline = (fwd_bwd, nn_fwd_bwd) if part == "fwdbwd" else (fwd, nn_fwd)
    context = torch.inference_mode() if kind.endswith("-inf") else contextlib.nullcontext()
    with context:
        return _compare(fwd_bwd, baseline, seconds)


_MODULES = {"fused": "LSTMBlockFusedCell", "cudnnlstm": "CudnnLSTM"}
_KINDS = ("block", "block-fwd", "cudnn") + tuple(
    f"{m}-{p}" for m in _MODULES for p in ("fwd", "fwdbwd", "inf")
)


def _outputs(result) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    return [t for r in result for t in _outputs(r)]


def _compare(fwd_bwd, baseline, seconds: float) -> int:
    def variant(v):
        def run():
            os.environ["TLG_VARIANT"] = v
            return fwd_bwd()

        return run

    # TLG_AB="1,2" compares variants 1 and 2 of a switch with more than two settings.
    a, b = map(variant, os.environ.get("TLG_AB", "0,1").split(","))
    pairs = zip(_outputs(a()), _outputs(b()), strict=True)
    gap = max((x - y).abs().max().item() for x, y in pairs)
    print(f"max |A - B| over the outputs: {gap:.2e}")
    times = _bench._time_paired({"A": a, "B": b, "nn.LSTM": baseline}, seconds)
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
