#!/usr/bin/env bash
# The 2026-11-27 GPU session's first call (the twenty-first session), run from the repository
# root with .gpu-prebuilt carried (benchmarks/gpu_prebuild.sh; the six mutant files below were
# written into .gpu-prebuilt/mutants/ by benchmarks/mutation_run.py's mutants_of, ids 444, 446,
# 447, 448, 449, 517 of torch_lstm_grad/autograd.py at 897e2df):
#   1. benchmarks/gpu_check.sh (the CUDA tests, layout, weights, memcheck, bench);
#   2. the six autograd.py mutants the CPU cannot kill (mutation_equivalents.txt: "GPU only"),
#      each against tests/test_cuda.py's consuming-reserve test, after the unmutated file;
#   3. a longer paired run (1.5 s a case) at the two shapes left over issue 33's targets;
#   4. a profile of those shapes.
# Everything ends in $OUT/all.tgz (the device tool returns 8 files), summaries beside it.
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT/check" "$OUT/extra"
X="$OUT/extra/extra.log"
export PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/all.tgz" -C "$OUT" check extra && cp "$OUT/check/summary.txt" "$OUT/summary.txt"; }
trap pack EXIT
left() { echo $((${DEADLINE:-460} - SECONDS)); }

timeout -k 5 260 bash benchmarks/gpu_check.sh "$OUT/check"
echo "gpu_check: exit $? at ${SECONDS} s" >>"$X"

cp torch_lstm_grad/autograd.py /tmp/autograd.orig
for m in /tmp/autograd.orig .gpu-prebuilt/mutants/autograd_*.py; do
  [ "$(left)" -gt 150 ] || { echo "mutants: out of time before $m" >>"$X"; break; }
  cp "$m" torch_lstm_grad/autograd.py
  timeout -k 5 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py \
    -k consumes_the_reserve >/tmp/mut.log 2>&1
  rc=$?
  echo "=== mutant $m: pytest exit $rc ($([ $rc -eq 0 ] && echo survived || echo killed))" >>"$X"
  grep -E "passed|failed|error|Error" /tmp/mut.log | tail -4 >>"$X"
done
cp /tmp/autograd.orig torch_lstm_grad/autograd.py

[ "$(left)" -gt 100 ] && timeout -k 5 110 python3 benchmarks/bench_gpu.py --min-run-time 1.5 \
  --shape 100,128,1024 --shape 100,128,256 --json "$OUT/extra/long.json" >"$OUT/extra/long.log" 2>&1
echo "long bench: exit $? at ${SECONDS} s" >>"$X"
[ "$(left)" -gt 40 ] && timeout -k 5 60 python3 benchmarks/gpu_profile.py --shape 100,128,256 \
  --shape 100,128,1024 --json "$OUT/extra/profile.json" >"$OUT/extra/profile.log" 2>&1
echo "profile: exit $? at ${SECONDS} s" >>"$X"
