#!/usr/bin/env bash
# The second call: call 1's steps 3 and 4, which failed there for want of PYTHONPATH (the
# package is not installed on the GPU machine; gpu_check.sh sets it for its own steps).
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
cp .gpu-prebuilt/_C.abi3.so .gpu-prebuilt/_build_info.py torch_lstm_grad/
timeout -k 5 150 python3 benchmarks/bench_gpu.py --min-run-time 1.5 --shape 100,128,1024 \
  --shape 100,128,256 --json "$OUT/long.json" 2>&1 | tee "$OUT/long.log"
timeout -k 5 90 python3 benchmarks/gpu_profile.py --shape 100,128,256 --shape 100,128,1024 \
  --json "$OUT/profile.json" >"$OUT/profile.log" 2>&1
echo "profile: exit $?"
