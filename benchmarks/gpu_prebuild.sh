#!/usr/bin/env bash
# Builds, on a CPU machine, the extension a lent GPU machine runs: that machine has Python
# 3.12, torch 2.11.0+cu130 (PyPI's CUDA 13.0 build), cuDNN 9 and an H100/H200 (sm_90), no
# package registry and little time, which a 3.5-6 minute build there would eat.
#
#   bash benchmarks/gpu_prebuild.sh [DIR]        (default DIR: .gpu-prebuilt, ignored by git)
#
# 1. a Python 3.12 venv (pyenv's 3.12, or python3.12 on PATH) with torch==2.11.0 from PyPI
#    (kept in ~/.cache/torch_lstm_grad and reused);
# 2. the tracked sources copied to a scratch directory and built there for sm_90 (one
#    _C.abi3.so: CPU + CUDA kernels, -O3 -g0);
# 3. DIR/_C.abi3.so, DIR/_build_info.py (torch version and git hash, archs, cuDNN) and
#    DIR/PREBUILT.txt (the sources' hash, date, machine), at most 64 MiB in all (the device
#    tool's carry limit);
# 4. a check that the .so loads into that torch here (no GPU needed: the ops register; the
#    CUDA kernels are not run).
# The GPU call carries DIR; release/gpu_check.sh installs it only when the machine's torch
# (version and git hash) and the sources' hash match, and refuses it otherwise.
# Environment: GPU_PYTHON (an interpreter to use), GPU_TORCH (default torch==2.11.0),
# GPU_ARCHS (default 9.0), GPU_VENV (the venv's directory), MAX_JOBS (default: the cores).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=$(mkdir -p "${1:-$ROOT/.gpu-prebuilt}" && cd "${1:-$ROOT/.gpu-prebuilt}" && pwd)
TORCH_SPEC=${GPU_TORCH:-torch==2.11.0}
ARCHS=${GPU_ARCHS:-9.0}
VENV=${GPU_VENV:-$HOME/.cache/torch_lstm_grad/gpu-venv-py312-${TORCH_SPEC//[^A-Za-z0-9.]/_}}
start=$(date +%s)
say() { echo "gpu_prebuild: $*" >&2; }

find_python() {
  if [ -n "${GPU_PYTHON:-}" ]; then echo "$GPU_PYTHON"; return; fi
  if command -v pyenv >/dev/null; then
    local v
    v=$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.[0-9]+)?$' | sort -V | tail -1 || true)
    if [ -n "$v" ]; then echo "$(pyenv root)/versions/$v/bin/python"; return; fi
  fi
  command -v python3.12 || true
}

if [ ! -x "$VENV/bin/python" ]; then
  PY=$(find_python)
  [ -n "$PY" ] || { say "no Python 3.12 found (pyenv install 3.12, or set GPU_PYTHON)"; exit 1; }
  say "creating $VENV with $("$PY" --version 2>&1) and $TORCH_SPEC (a few GB of CUDA wheels)"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "$TORCH_SPEC" numpy ninja "setuptools>=70.1" wheel
fi
"$VENV/bin/python" - "$TORCH_SPEC" <<'EOF'
import sys, torch
want = sys.argv[1].split("==")[-1]
if not torch.__version__.startswith(want) or torch.version.cuda is None:
    sys.exit(f"gpu_prebuild: the venv has torch {torch.__version__} (CUDA {torch.version.cuda}), "
             f"not {sys.argv[1]} with CUDA: remove it and run again")
EOF

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tlg-gpu-prebuild.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The tracked files as they are in the working tree (uncommitted edits included).
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | grep -zv '^tests/data/' \
  | xargs -0 cp --parents -t "$WORK")
SOURCES_HASH=$(cd "$ROOT" && "$VENV/bin/python" release/sources_hash.py)
say "building for sm_${ARCHS/./} against $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') in $WORK"
(cd "$WORK" && TORCH_CUDA_ARCH_LIST=$ARCHS MAX_JOBS=${MAX_JOBS:-$(nproc)} \
  "$VENV/bin/python" setup.py build_ext --inplace >"$WORK/build.log" 2>&1) || {
  grep -E -m 30 "error|Error" "$WORK/build.log" >&2
  tail -40 "$WORK/build.log" >&2
  say "the build failed (log above: its errors, then its end)"
  exit 1
}

rm -f "$DEST"/_C.* "$DEST"/_build_info.py "$DEST"/PREBUILT.txt
cp "$WORK/torch_lstm_grad/_C.abi3.so" "$WORK/torch_lstm_grad/_build_info.py" "$DEST/"
{
  echo "SOURCES_HASH = '$SOURCES_HASH'"
  echo "BUILT = '$(date -u +%Y-%m-%dT%H:%M:%SZ)'"
  echo "BUILT_ON = '$(uname -m), $(nproc) cores, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)'"
  echo "GIT_HEAD = '$(cd "$ROOT" && git rev-parse HEAD 2>/dev/null || echo unknown)'"
  echo "BUILD_SECONDS = $(($(date +%s) - start))"
} >"$DEST/PREBUILT.txt"
bytes=$(du -cb "$DEST"/* | tail -1 | cut -f1)
if [ "$bytes" -gt $((64 * 1024 * 1024)) ]; then
  say "$DEST holds $bytes bytes, over the 64 MiB the device tool carries"
  exit 1
fi

# Loads into that torch here: the .so and its build info beside a copy of the Python package,
# every symbol bound at load (LD_BIND_NOW): one that torch's libraries do not export fails here,
# not on the GPU machine.
(cd "$WORK" && cp "$DEST/_C.abi3.so" "$DEST/_build_info.py" torch_lstm_grad/ \
  && LD_BIND_NOW=1 "$VENV/bin/python" -c "
import torch, torch_lstm_grad
assert torch_lstm_grad.built_with_cuda(), 'built without CUDA'
ops = torch.ops.torch_lstm_grad
for name in ('cudnn_rnn', 'block_lstm', 'keras_gru', '_cudnn_rnn_backprop_consuming'):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f'torch_lstm_grad::{name}', 'CUDA'), name
print('gpu_prebuild: loads into torch', torch.__version__, '(CUDA kernels registered)')
") >&2
say "done in $(($(date +%s) - start)) s: $DEST ($((bytes / 1024 / 1024)) MiB); carry it to the GPU call"
