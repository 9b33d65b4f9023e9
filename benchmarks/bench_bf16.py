"""bfloat16 against float32 for the block ops on CPU (bfloat16 is meant to be the faster one
where the CPU has bf16 instructions).

BlockLSTM (peepholes, cell_clip=3) forward + backward through BlockLSTMGrad, the default shapes
of the bench command, each dtype timed over the same wall time; prints ms and the bf16/fp32
ratio. Example::

    python benchmarks/bench_bf16.py --seconds 2
"""

from __future__ import annotations

import argparse
import time

import torch

from torch_lstm_grad import raw_ops

SHAPES = [(50, 32, 256, 256), (100, 16, 128, 512), (20, 64, 512, 512)]


def _time(fn, seconds: float) -> float:
    """The 20th percentile of per-call times over `seconds`, in ms (low, but not the minimum)."""
    for _ in range(2):
        fn()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 5] * 1e3


def _fwd_bwd(shape, dtype):
    T, B, I, H = shape  # noqa: E741
    g = torch.Generator().manual_seed(0)

    def leaf(*size, scale=1.0):
        return (torch.randn(*size, generator=g) * scale).to(dtype).requires_grad_()

    x, w, b = leaf(T, B, I), leaf(I + H, 4 * H, scale=0.05), leaf(4 * H, scale=0.1)
    wci, wcf, wco = (leaf(H, scale=0.1) for _ in range(3))
    cs0, h0 = torch.zeros(B, H, dtype=dtype), torch.zeros(B, H, dtype=dtype)

    def run():
        out = raw_ops.BlockLSTM(T, x, cs0, h0, w, wci, wcf, wco, b, cell_clip=3.0,
                                use_peephole=True)  # fmt: skip
        out.h.float().sum().backward()

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="timing per dtype and shape")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(" shape T,B,I,H   float32 ms  bfloat16 ms  bf16/fp32")
    for shape in SHAPES:
        f32 = _time(_fwd_bwd(shape, torch.float32), args.seconds)
        bf16 = _time(_fwd_bwd(shape, torch.bfloat16), args.seconds)
        name = ",".join(map(str, shape))
        print(f"{name:>14}  {f32:11.2f}  {bf16:11.2f}  {bf16 / f32:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
