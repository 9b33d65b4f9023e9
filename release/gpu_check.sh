#!/usr/bin/env bash
# The check a lent GPU machine runs, one device call of at most 8 minutes on an H100/H200:
#
#   bash release/gpu_check.sh [OUT_DIR]      (default: $OUT, else gpu-check-out)
#
# from the repository root, with .gpu-prebuilt carried (benchmarks/gpu_prebuild.sh builds it on
# a CPU machine beforehand: the GPU machine's own build takes 3.5-6 minutes). Steps, each under
# `timeout`, each writing its log as it runs (a killed call still returns what it had):
#   env      nvidia-smi, torch, cuDNN, the prebuilt's record                      -> env.txt
#   install  the prebuilt .so, only if the machine's torch (version and git hash) and these
#            sources (release/sources_hash.py) are the ones it was built for; else a build
#            here (minutes: the later steps may then not fit)                      -> env.txt
#   doctor   python -m torch_lstm_grad doctor                                      -> env.txt
#   (no CUDA device: stops here with exit code 2, the dry run on a CPU machine)
#   tests    pytest -m cuda: the GPU against the CPU kernels per op, module, dtype; converted
#            tf_keras files and cutkum's frozen graph against TF's stored numbers -> tests.log
#   real_sizes  tests/ops/test_cuda_real_sizes.py: projections, stacks with lengths, T = 10,000,
#            B = 512, dropout's gradient, TF32 on, torch.compile, CUDA graphs (REAL_SIZES=0
#            skips it where the call's time is short)                          -> tests.log
#   layout   the params layout against cudnnGetRNNWeightParams, every configuration
#                                                                    -> tests.log, layout.json
#   weights  torch's flattened cuDNN weights (release/cudnn_weight_order.py) against
#            tests/data/cudnn_weight_order_h200.txt, the CPU tests' copy       -> tests.log
#   memcheck compute-sanitizer memcheck over every CUDA kernel (release/gpu_memcheck.py,
#            float32) without the caching allocator                           -> sanitizer.log
#   bench    benchmarks/bench_gpu.py's grid for BENCH_BUDGET s (40), paired with torch.nn
#                                                                   -> bench.log, bench.json
# summary.txt: one line per step. Seven files in all (the device tool returns eight at most).
# Environment: PYTHON (default python3), PREBUILT (default .gpu-prebuilt), BENCH_BUDGET,
# COMMIT, REAL_SIZES.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
OUT_DIR=${1:-${OUT:-gpu-check-out}}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
SUMMARY="$OUT_DIR/summary.txt"
PREBUILT=${PREBUILT:-.gpu-prebuilt}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
: >"$SUMMARY"
failed=0
started=$(date +%s)

note() { echo "$*" | tee -a "$SUMMARY"; }

step() {  # step NAME SECONDS LOGFILE CMD...: CMD under timeout, its output to LOGFILE
  local name=$1 limit=$2 log=$3 start rc
  shift 3
  start=$(date +%s)
  echo "=== $name (limit ${limit} s) $(date -u +%H:%M:%SZ): $*" >>"$OUT_DIR/$log"
  timeout -k 10 "$limit" "$@" >>"$OUT_DIR/$log" 2>&1
  rc=$?
  local what="exit $rc"
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && what="timed out after ${limit} s"
  note "$name: $what, $(($(date +%s) - start)) s (log: $log)"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git rev-parse HEAD 2>/dev/null || echo "(not a git checkout)"
  nvidia-smi 2>&1 || echo "nvidia-smi: not found"
  command -v nvcc >/dev/null && nvcc --version | tail -2
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__,
'git', torch.version.git_version, 'cuda', torch.version.cuda, 'cudnn',
torch.backends.cudnn.version(), 'available', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
  if [ -f "$PREBUILT/PREBUILT.txt" ]; then
    echo "--- $PREBUILT"; cat "$PREBUILT/PREBUILT.txt" "$PREBUILT/_build_info.py"
  fi
} >"$OUT_DIR/env.txt" 2>&1
has_gpu=0
"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && has_gpu=1

# The prebuilt extension, where it was built for this torch and these sources: why not, or nothing.
prebuilt_problem() {
  "$PY" - "$PREBUILT" <<'EOF'
import pathlib, runpy, sys
import torch
sys.path.insert(0, "release")
from sources_hash import sources_hash
pre = pathlib.Path(sys.argv[1])
if not (pre / "_C.abi3.so").is_file():
    sys.exit(f"no {pre}/_C.abi3.so (run benchmarks/gpu_prebuild.sh and carry {pre})")
info = runpy.run_path(str(pre / "_build_info.py"))
built = runpy.run_path(str(pre / "PREBUILT.txt"))
problems = []
if info["TORCH_VERSION"] != torch.__version__:
    problems.append(f"built for torch {info['TORCH_VERSION']}, this is {torch.__version__}")
if info["TORCH_GIT_VERSION"] != torch.version.git_version:
    problems.append(f"built for torch's commit {info['TORCH_GIT_VERSION']}, this torch is "
                    f"{torch.version.git_version}")
if not info.get("WITH_CUDA"):
    problems.append("built without CUDA")
here = sources_hash(pathlib.Path("."))
if built["SOURCES_HASH"] != here:
    problems.append(f"built from other sources (hash {built['SOURCES_HASH'][:12]}, these "
                    f"{here[:12]}): run benchmarks/gpu_prebuild.sh again")
if problems:
    sys.exit("; ".join(problems))
EOF
}

# The tree's own build (a CPU machine's dry run) is set aside and put back on exit: the prebuilt
# is for the GPU machine's Python and torch, and left in place it would break this one's import.
SET_ASIDE=$(mktemp -d)
restore_own_build() {
  if compgen -G "$SET_ASIDE/*" >/dev/null; then
    rm -f torch_lstm_grad/_C.*.so torch_lstm_grad/_build_info.py
    mv "$SET_ASIDE"/* torch_lstm_grad/
  fi
  rmdir "$SET_ASIDE"
}
trap restore_own_build EXIT

install_prebuilt() {
  local f
  for f in torch_lstm_grad/_C.*.so torch_lstm_grad/_build_info.py; do
    [ -e "$f" ] && mv "$f" "$SET_ASIDE/"
  done
  cp "$PREBUILT/_C.abi3.so" "$PREBUILT/_build_info.py" torch_lstm_grad/
}

if problem=$(prebuilt_problem 2>&1); then
  install_prebuilt || { note "install: copying $PREBUILT failed"; exit 1; }
  note "install: the prebuilt extension (built $(sed -n "s/^BUILT = //p" "$PREBUILT/PREBUILT.txt"))"
else
  note "install: not using $PREBUILT: $problem"
  if [ "$has_gpu" -eq 0 ]; then
    note "gpu_check: no CUDA device visible to torch (see env.txt), and no usable prebuilt" \
      "extension: not building here; stopping"
    exit 2
  fi
  step build 420 env.txt env MAX_JOBS="$(nproc)" "$PY" setup.py build_ext --inplace || {
    note "gpu_check: the build failed; see env.txt"
    exit 1
  }
fi
step doctor 60 env.txt "$PY" -m torch_lstm_grad doctor
if [ "$has_gpu" -eq 0 ]; then
  note "gpu_check: no CUDA device visible to torch (see env.txt): the extension loads; nothing" \
    "more to check here"
  exit 2
fi

per_test=()
"$PY" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout 60)
step tests 170 tests.log "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda "${per_test[@]}" \
  tests/ops/test_cuda.py tests/modules/test_modules_cuda.py tests/porting/test_cuda.py \
  tests/ops/test_raw_ops_cudnn_rnn.py tests/ops/integration/test_cudnn_rnn.py \
  tests/ops/integration/test_block_ops.py tests/ops/test_cuda_persistent.py
# real sizes, long sequences, TF32, torch.compile (inductor compiles for tens of seconds), graphs
if [ "${REAL_SIZES:-1}" = 1 ]; then
  step real_sizes 120 tests.log "$PY" -m pytest -q -rs -p no:cacheprovider -m cuda \
    "${per_test[@]}" tests/ops/test_cuda_real_sizes.py
fi
step layout 50 tests.log "$PY" release/cudnn_layout_check.py --json "$OUT_DIR/layout.json"
# cuDNN's weight space through torch's flatten_parameters, against the copy the CPU tests hold.
step weights 30 tests.log bash -c "diff <(\"$PY\" release/cudnn_weight_order.py) \
  tests/data/cudnn_weight_order_h200.txt && echo 'weights: as recorded'"
if command -v compute-sanitizer >/dev/null; then
  step memcheck 120 sanitizer.log env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer \
    --tool memcheck --error-exitcode 3 --leak-check no "$PY" release/gpu_memcheck.py
  grep -q "Device not supported" "$OUT_DIR/sanitizer.log" \
    && note "memcheck: compute-sanitizer does not support this machine's runtime (gVisor?)"
else
  note "memcheck: compute-sanitizer not found"
fi
# the full grid in its order (T = 100 first, the small hidden sizes first), rows started while
# BENCH_BUDGET lasts; COMMIT names the sources measured (this copy of the tree has no git)
step bench $((${BENCH_BUDGET:-40} + 90)) bench.log "$PY" benchmarks/bench_gpu.py --grid full \
  --min-run-time 0.2 --budget "${BENCH_BUDGET:-40}" ${COMMIT:+--commit "$COMMIT"} \
  --json "$OUT_DIR/bench.json"
note "gpu_check: done in $(($(date +%s) - started)) s, $([ $failed -eq 0 ] && echo 'every step passed' \
  || echo 'some step failed')"
exit $failed
