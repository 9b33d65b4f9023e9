#!/usr/bin/env bash
# Everything issue 18 asks of a GPU session, in one call (the device tool: run from the
# repository root, `bash benchmarks/gpu_check.sh` with $OUT set; or give a directory):
#   1. the environment (nvidia-smi, torch, cuDNN, nvcc);
#   2. the build against the machine's torch: pip install --no-deps --no-build-isolation -e .;
#      then `torch-lstm-grad doctor`;
#   3. the CUDA tests (GPU against the CPU kernels per op and dtype, TF32 off; zero-length rows,
#      retain_graph, fp16/bf16, dropout reproducibility) and the rest of the suite (TF-free
#      parts: the GPU machines have no TensorFlow);
#   4. the params layout against cudnnGetRNNWeightParams for every configuration
#      (benchmarks/cudnn_layout_check.py);
#   5. compute-sanitizer --tool memcheck over a short CUDA subset;
#   6. the GPU benchmarks (benchmarks/bench_gpu.py), paired against nn.LSTM / cuDNN.
# Each step's log goes to $OUT (at most 8 files come back from the device tool); summary.txt
# holds one line per step. Without a GPU it stops at step 1 with exit code 2, naming why.
set -uo pipefail
OUT_DIR=${1:-${OUT:-gpu-check-out}}
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
: >"$SUMMARY"
failed=0

step() {  # step NAME LOGFILE CMD...: runs CMD, its output to LOGFILE, one line to the summary
  local name=$1 log=$2 start rc
  shift 2
  start=$(date +%s)
  "$@" >>"$OUT_DIR/$log" 2>&1
  rc=$?
  echo "$name: exit $rc, $(($(date +%s) - start)) s (log: $log)" | tee -a "$SUMMARY"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git rev-parse HEAD 2>/dev/null || true
  nvidia-smi 2>&1 || echo "nvidia-smi: not found"
  command -v nvcc >/dev/null && nvcc --version | tail -2
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'cudnn', torch.backends.cudnn.version(), 'available', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
} >"$OUT_DIR/env.txt" 2>&1
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_check: no CUDA device visible to torch (see env.txt): nothing to check here" \
    | tee -a "$SUMMARY" >&2
  exit 2
fi

step build build.log "$PY" -m pip install --no-deps --no-build-isolation -v -e . || {
  echo "gpu_check: the build failed; see build.log" | tee -a "$SUMMARY" >&2
  exit 1
}
step doctor env.txt torch-lstm-grad doctor
step cuda-tests tests.log "$PY" -m pytest -q -rs -m cuda tests
step other-tests tests.log "$PY" -m pytest -q -x -m "not cuda" tests
step layout layout.log "$PY" benchmarks/cudnn_layout_check.py --json "$OUT_DIR/layout.json"
if command -v compute-sanitizer >/dev/null; then
  step memcheck sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 3 \
    "$PY" -m pytest -q -x -m cuda tests/test_cuda.py -k "lstm_block_ops or cudnn_rnn_v3" \
    -p no:cacheprovider
else
  echo "memcheck: compute-sanitizer not found" | tee -a "$SUMMARY"
fi
step bench bench.log "$PY" benchmarks/bench_gpu.py --json "$OUT_DIR/bench.json"
echo "gpu_check: done, $([ $failed -eq 0 ] && echo 'every step passed' || echo 'some step failed')" \
  | tee -a "$SUMMARY"
exit $failed
