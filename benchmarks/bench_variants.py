"""Speed of the issue-16 variants against the sigmoid/tanh path, paired in one run.

For each shape T,B,I,H: BlockLSTM (the raw op, TF's sigmoid/tanh: the baseline),
block_lstm_ex with TF's attributes, and block_lstm_ex with each variant (gate_activation,
activation, clip_gradient="zero"), all with peepholes and cell_clip=3 as `torch-lstm-grad bench`
times BlockLSTM; then keras_gru (reset_after=True) sigmoid/tanh (the GRU baseline) against its
variants and reset_after=False. Forward + backward (the gradients of every input), CPU,
float32, timed call by call in shuffled rounds (`_bench._time_paired`, the bench's pairing);
each figure is the median over rounds of (variant time / baseline time in the same round).

    python benchmarks/bench_variants.py [--seconds 4] [--shapes 50,32,256,256 ...] [--threads N]
                                        [--kinds lstm gru lstmp] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from torch_lstm_grad import ops
from torch_lstm_grad.tools import bench as _bench

SHAPES = ["50,32,256,256", "100,16,128,512", "20,64,512,512"]
LSTM_VARIANTS = {
    "ex sigmoid/tanh": {},
    "hard_sigmoid_keras2": {"gate_activation": "hard_sigmoid_keras2"},
    "hard_sigmoid_keras3": {"gate_activation": "hard_sigmoid_keras3"},
    "relu": {"activation": "relu"},
    "linear": {"activation": "linear"},
    "clip_gradient zero": {"clip_gradient": "zero"},
    "keras2 + relu + zero": {
        "gate_activation": "hard_sigmoid_keras2",
        "activation": "relu",
        "clip_gradient": "zero",
    },
}
GRU_VARIANTS = {
    "hard_sigmoid_keras2": {"gate_activation": "hard_sigmoid_keras2"},
    "hard_sigmoid_keras3": {"gate_activation": "hard_sigmoid_keras3"},
    "relu": {"activation": "relu"},
    "linear": {"activation": "linear"},
}


def lstm_fns(T, inputs):
    leaves = tuple(inputs.values())
    fns = {"BlockLSTM": _bench._ours(T, inputs)[1]}
    for name, variant in LSTM_VARIANTS.items():

        def fwd_bwd(variant=variant):
            out = ops.block_lstm_ex(
                inputs["x"],
                inputs["cs_prev"],
                inputs["h_prev"],
                inputs["w"],
                inputs["b"],
                wci=inputs["wci"],
                wcf=inputs["wcf"],
                wco=inputs["wco"],
                cell_clip=3.0,
                use_peephole=True,
                **variant,
            )
            return torch.autograd.grad(out.cs.sum() + out.h.sum(), leaves)

        fns[name] = fwd_bwd
    return fns


def gru_fns(T, B, I, H):  # noqa: E741
    g = torch.Generator().manual_seed(0)
    s = H**-0.5

    def u(*shape):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * s).requires_grad_()

    x, h0 = torch.randn(T, B, I, generator=g).requires_grad_(), u(B, H)
    k, rk = u(I, 3 * H), u(H, 3 * H)
    b2, b1 = u(2, 3 * H), u(3 * H)

    def make(variant, reset_after=True):
        bias = b2 if reset_after else b1
        leaves = (x, h0, k, rk, bias)

        def fwd_bwd():
            h = ops.keras_gru(x, h0, k, rk, bias, reset_after=reset_after, **variant).h
            return torch.autograd.grad(h.sum(), leaves)

        return fwd_bwd

    fns = {"keras_gru sigmoid/tanh": make({})}
    fns.update({name: make(v) for name, v in GRU_VARIANTS.items()})
    fns["reset_after=False"] = make({}, reset_after=False)
    return fns


def lstmp_fns(T, B, I, H):  # noqa: E741
    """TF1 LSTMCell(num_proj=H/2, proj_clip, peepholes, cell_clip, clip_gradient="zero") on
    block_lstm_ex against torch.nn.LSTM(proj_size=H/2) (which has no oneDNN path for a
    projection) and BlockLSTM without one."""
    P = H // 2
    g = torch.Generator().manual_seed(0)
    s = H**-0.5

    def u(*shape):
        return ((torch.rand(*shape, generator=g) * 2 - 1) * s).requires_grad_()

    x = torch.randn(T, B, I, generator=g).requires_grad_()
    c0, h0, w, wp, b = u(B, H), u(B, P), u(I + P, 4 * H), u(H, P), u(4 * H)
    pe = [u(H) for _ in range(3)]
    leaves = (x, c0, h0, w, wp, b, *pe)

    def lstmp():
        out = ops.block_lstm_ex(
            x,
            c0,
            h0,
            w,
            b,
            wci=pe[0],
            wcf=pe[1],
            wco=pe[2],
            w_proj=wp,
            cell_clip=3.0,
            proj_clip=3.0,
            use_peephole=True,
            clip_gradient="zero",
        )
        return torch.autograd.grad(out.cs.sum() + out.h.sum(), leaves)

    lstm = torch.nn.LSTM(I, H, proj_size=P)
    xx = x.detach().clone().requires_grad_()
    hh, cc = h0.detach()[None].clone().requires_grad_(), c0.detach()[None].clone().requires_grad_()
    nn_leaves = (xx, hh, cc, *lstm.parameters())

    def nn_lstmp():
        out, _ = lstm(xx, (hh, cc))
        return torch.autograd.grad(out.sum(), nn_leaves)

    inputs = _bench._inputs(T, B, I, H, seed=0)
    return {
        "nn.LSTM(proj_size=H/2)": nn_lstmp,
        "block_lstm_ex LSTMP": lstmp,
        "BlockLSTM (no projection)": _bench._ours(T, inputs)[1],
    }


def make_case(kind, T, B, I, H, inputs):  # noqa: E741
    """(functions, baseline name) of one kind."""
    if kind == "lstm":
        return lstm_fns(T, inputs), "BlockLSTM"
    if kind == "gru":
        return gru_fns(T, B, I, H), "keras_gru sigmoid/tanh"
    if kind == "lstmp":
        return lstmp_fns(T, B, I, H), "nn.LSTM(proj_size=H/2)"
    raise ValueError(f"--kinds: expected lstm, gru or lstmp, got {kind!r}")


def ratios(times, base):
    return {
        name: statistics.median(t / b for t, b in zip(ts, times[base], strict=True))
        for name, ts in times.items()
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="per function and shape")
    parser.add_argument("--shapes", nargs="*", default=SHAPES)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument(
        "--kinds", nargs="*", default=["lstm", "gru"], help="of lstm, gru, lstmp (num_proj)"
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {_bench._cpu_model()}")
    results = {}
    for text in args.shapes:
        T, B, I, H = _bench._shape(text)  # noqa: E741
        inputs = _bench._inputs(T, B, I, H, seed=0)
        cases = [(kind, *make_case(kind, T, B, I, H, inputs)) for kind in args.kinds]
        for kind, fns, base in cases:
            times = _bench._time_paired(fns, args.seconds)
            r = ratios(times, base)
            ms = {n: statistics.median(t) * 1e3 for n, t in times.items()}
            results[f"{kind} {text}"] = {"ms": ms, "ratio": r, "rounds": len(times[base])}
            print(f"\n{kind} T,B,I,H = {text} ({len(times[base])} rounds), fwd+bwd:")
            for n in fns:
                print(f"  {n:24s} {ms[n]:8.2f} ms   {r[n]:.3f}x {base}")
    if args.json:
        info = {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu": _bench._cpu_model(),
            "seconds": args.seconds,
            "loadavg": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        }
        with open(args.json, "w") as f:
            json.dump({"machine": info, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
