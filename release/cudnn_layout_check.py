"""Does cuDNN place every matrix and bias where `params_layout` (the CPU kernels' and the params
ops' layout) says? One CudnnRNNV3 call per configuration on the GPU; the CUDA op compares every
pseudo-layer's `cudnnGetRNNWeightParams` addresses with the layout on its first use of a model
and raises, naming cuDNN's offsets, where they differ. Every mode, 1-3
layers, both directions, projection (LSTM), skip_input, float16/float32/float64; each case also
runs the CPU op on the same buffer and compares outputs, so a layout both sides misread alike
would still show.

    python release/cudnn_layout_check.py [--json FILE]

Exits 2 without a CUDA device / CUDA build; 1 when any configuration fails.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

import torch_lstm_grad
from torch_lstm_grad import raw_ops as R

TOL = {torch.float64: 1e-9, torch.float32: 3e-5, torch.float16: 3e-2}


def _configs():
    for mode, L, direction, skip, dtype in itertools.product(
        ("lstm", "gru", "rnn_tanh", "rnn_relu"), (1, 2, 3), ("unidirectional", "bidirectional"),
        (False, True), (torch.float16, torch.float32, torch.float64),
    ):  # fmt: skip
        for proj in (0, 3) if mode == "lstm" else (0,):
            yield mode, L, direction, skip, proj, dtype


def _check(mode, L, direction, skip, proj, dtype):
    H, B, T = 6, 3, 4
    I = H if skip else 5  # noqa: E741 (skip_input needs input_size == num_units)
    D = 2 if direction == "bidirectional" else 1
    input_mode = "skip_input" if skip else "linear_input"
    size = int(R.CudnnRNNParamsSize(num_layers=L, num_units=H, input_size=I, T=dtype,
                                    S=torch.int64, rnn_mode=mode, input_mode=input_mode,
                                    direction=direction, num_proj=proj)[0])  # fmt: skip
    g = torch.Generator().manual_seed(0)
    n = proj or H
    cpu = [torch.randn(T, B, I, generator=g).to(dtype), torch.randn(L * D, B, n, generator=g)
           .to(dtype), (torch.randn(L * D, B, H, generator=g) if mode == "lstm"
                        else torch.zeros(())).to(dtype),
           (torch.randn(size, generator=g) * 0.3).to(dtype)]  # fmt: skip
    attrs = dict(rnn_mode=mode, input_mode=input_mode, direction=direction, num_proj=proj,
                 is_training=False)  # fmt: skip
    want = R.CudnnRNNV3(*cpu, None, **attrs)
    got = R.CudnnRNNV3(*[t.cuda() for t in cpu], None, **attrs)
    err = max(float((a.double() - b.cpu().double()).abs().max()) for a, b in
              zip(want[:3], got[:3], strict=True))  # fmt: skip
    return err


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write every configuration's result here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available() or not torch_lstm_grad.built_with_cuda():
        print("cudnn_layout_check: needs a CUDA device and a CUDA build of torch_lstm_grad "
              f"(cuda available: {torch.cuda.is_available()}, built with CUDA: "
              f"{torch_lstm_grad.built_with_cuda()})", file=sys.stderr)  # fmt: skip
        return 2
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    results, failed = [], 0
    for cfg in _configs():
        mode, L, direction, skip, proj, dtype = cfg
        row = {"mode": mode, "layers": L, "direction": direction, "skip_input": skip,
               "num_proj": proj, "dtype": str(dtype)}  # fmt: skip
        try:
            err = _check(*cfg)
            row |= {"ok": err <= TOL[dtype], "max_abs_err": err}
        except Exception as e:  # the op's layout check, or cuDNN refusing the configuration
            row |= {"ok": False, "error": f"{type(e).__name__}: {e}"}
        failed += not row["ok"]
        results.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    print(f"{len(results) - failed} of {len(results)} configurations ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
