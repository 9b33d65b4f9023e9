"""Where the GPU time goes: for each shape, ours and nn.LSTM (cuDNN)
fwd+bwd, the time the host takes to enqueue a call (no synchronisation), the wall time of a
synchronised call, the device's kernel time per call and its kernels (torch.profiler), so that
a launch-bound case (host time = wall time, kernels idle between launches) tells itself apart
from a device-bound one, and the GEMM kernels cuBLAS picks are named.

    python benchmarks/gpu_profile.py [--shape T,B,H ...] [--top N] [--json FILE]

Cases per shape: BlockLSTM float32 and bfloat16 against nn.LSTM of that dtype (bench_gpu.py's
cases), CudnnRNNV3 float32 with equal lengths against nn.LSTM. TF32 off. Exits 2 without a CUDA
device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from bench_gpu import _cases, _cudnn_cases
from torch.profiler import ProfilerActivity, profile


def _timed(fn, n):
    host, wall = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        host.append(t1 - t0)
        wall.append(t2 - t0)
    return statistics.median(host) * 1e3, statistics.median(wall) * 1e3


def _kernels(fn, n):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        r = rows.setdefault(e.name, [0, 0.0])
        r[0] += 1
        r[1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    total = sum(v[1] for v in rows.values()) / n / 1e3
    count = sum(v[0] for v in rows.values()) / n
    top = sorted(rows.items(), key=lambda kv: -kv[1][1])
    return total, count, [(name[:90], c / n, t / n / 1e3) for name, (c, t) in top]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", action="append", help="T,B,H (default: 100,1,256 100,32,512 "
                   "100,128,1024)")  # fmt: skip
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--json")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_profile: no CUDA device visible", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    shapes = ([tuple(int(v) for v in s.split(",")) for s in args.shape] if args.shape
              else [(100, 1, 256), (100, 32, 512), (100, 128, 1024)])  # fmt: skip
    out = []
    for T, B, H in shapes:
        cases = {}
        for dtype in (torch.float32, torch.bfloat16):
            _, _, torch_fb, block_fb, _ = _cases(T, B, H, dtype)
            name = str(dtype)[6:]
            cases[f"block {name}"] = block_fb
            cases[f"nn.LSTM {name}"] = torch_fb
        o_eq, t_eq, _, _ = _cudnn_cases(T, B, H)
        cases["CudnnRNNV3 equal"] = o_eq
        cases["nn.LSTM f32 (cudnn case)"] = t_eq
        for name, fn in cases.items():
            for _ in range(3):
                fn()
            host, wall = _timed(fn, 10)
            dev, count, top = _kernels(fn, 3)
            rec = {"T": T, "B": B, "H": H, "case": name, "host_ms": host, "wall_ms": wall,
                   "kernel_ms": dev, "kernels": count, "top": top}  # fmt: skip
            out.append(rec)
            print(f"{T},{B},{H} {name:<26} host {host:8.3f} ms  wall {wall:8.3f} ms  "
                  f"kernels {dev:8.3f} ms in {count:6.0f}", flush=True)  # fmt: skip
            for kname, c, t in top[: args.top]:
                print(f"      {t:8.3f} ms {c:6.0f}x  {kname}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
