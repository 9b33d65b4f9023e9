#!/usr/bin/env bash
# Does the CPU extension build for aarch64 (Graviton, Ampere, Linux on Apple Silicon)? A
# cross-compile check, on an x86-64 machine without an aarch64 one:
#
#   bash release/aarch64_cross_check.sh [WORK_DIR]      (default /tmp/tlg-aarch64)
#
# 1. torch's aarch64 wheel from PyPI (TORCH_SPEC, default torch==2.13.0; ~430 MB, kept in
#    WORK_DIR) unpacked for its headers and libraries;
# 2. every C++ source setup.py compiles for a CPU build (csrc/*.cpp, csrc/cpu/*.cpp) compiled by
#    Debian's aarch64 cross g++ (`apt-get install g++-aarch64-linux-gnu`) with setup.py's flags,
#    its defines (abi3, the extension name) and torch's include directories;
# 3. the objects linked into _C.abi3.so against the wheel's libc10 / libtorch_cpu / libtorch_python,
#    and every symbol the .so needs (its strong undefined references) looked up in those
#    libraries, libgomp, libstdc++, libm and libc (Python's own symbols, which the interpreter
#    provides, are counted apart);
# 4. the x86 kernels' absence checked: no AVX instruction in the aarch64 objects, and the
#    generic path's loops vectorised for NEON (-fopt-info-vec counts per file).
# Exit 0 when it compiles, links and every non-Python symbol resolves.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-/tmp/tlg-aarch64}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
CXX=${CXX_AARCH64:-aarch64-linux-gnu-g++}
mkdir -p "$WORK/obj"
command -v "$CXX" >/dev/null || {
  echo "aarch64_cross_check: $CXX not found (apt-get install g++-aarch64-linux-gnu)" >&2
  exit 2
}
PYVER=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
whl=$(ls "$WORK"/torch-*-manylinux_2_28_aarch64.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 \
    --python-version "$PYVER" --implementation cp "$TORCH_SPEC" -d "$WORK"
  whl=$(ls "$WORK"/torch-*-manylinux_2_28_aarch64.whl | head -1)
fi
if [ ! -d "$WORK/wheel/torch/include" ]; then
  # The headers and the libraries the extension links (not the CUDA ones: ~1 GB more).
  python3 - "$whl" "$WORK/wheel" <<'EOF'
import re, sys, zipfile
keep = re.compile(r"torch/(include/.*|version\.py|lib/lib(c10|torch|torch_cpu|torch_python)\.so)$")
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if keep.match(n)])
EOF
fi
T=$WORK/wheel/torch
echo "aarch64_cross_check: $(basename "$whl"), $("$CXX" --version | head -1)"
# Python's headers: the interpreter's own (the limited API's declarations do not depend on the
# architecture; both are LP64).
PYINC=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
FLAGS=(-fPIC -O3 -g0 -std=c++20 -fno-math-errno -fno-trapping-math -Wno-psabi -fopenmp
  -DTORCH_API_INCLUDE_EXTENSION_H -DPy_LIMITED_API=0x030A0000 -DTORCH_EXTENSION_NAME=_C
  -D_GLIBCXX_USE_CXX11_ABI=1 -I"$T/include" -I"$T/include/torch/csrc/api/include" -I"$PYINC")
cd "$ROOT"
objs=()
for src in csrc/*.cpp csrc/cpu/*.cpp; do
  obj="$WORK/obj/$(basename "${src%.cpp}").o"
  start=$(date +%s)
  "$CXX" -c "$src" -o "$obj" "${FLAGS[@]}" -fopt-info-vec-optimized 2>"$obj.vec"
  echo "  compiled $src ($(($(date +%s) - start)) s, $(grep -c 'loop vectorized' "$obj.vec" || true) loops vectorised)"
  objs+=("$obj")
done
so="$WORK/_C.abi3.so"
"$CXX" -shared -fopenmp -o "$so" "${objs[@]}" -L"$T/lib" -lc10 -ltorch_cpu -ltorch -ltorch_python \
  -Wl,-rpath-link,"$T/lib"
echo "  linked $so ($(du -k "$so" | cut -f1) KiB)"
# No x86 instruction can have survived: the AVX kernels are behind __x86_64__.
if aarch64-linux-gnu-objdump -d "$so" | grep -qE '\b(vfmadd|vmovups|vbroadcastss|vpermps)\b'; then
  echo "aarch64_cross_check: x86 instructions in the aarch64 .so" >&2
  exit 1
fi
# Strong references only: a weak one (MKL's packed sgemm, which gemm.h asks for as weak and
# uses only where present; the toolchain's own) may stay unresolved.
aarch64-linux-gnu-nm -D --undefined-only "$so" | awk '$1 == "U" {print $2}' | sed 's/@.*//' \
  | sort -u >"$WORK/undefined.txt"
provided="$WORK/provided.txt"
: >"$provided"
sysroot=/usr/aarch64-linux-gnu/lib
for lib in "$T"/lib/libc10.so "$T"/lib/libtorch_cpu.so "$T"/lib/libtorch.so \
  "$T"/lib/libtorch_python.so "$sysroot"/libc.so.6 "$sysroot"/libm.so.6 \
  "$(dirname "$("$CXX" -print-file-name=libstdc++.so)")"/libstdc++.so \
  "$(dirname "$("$CXX" -print-file-name=libgomp.so)")"/libgomp.so \
  "$(dirname "$("$CXX" -print-file-name=libgcc_s.so.1)")"/libgcc_s.so.1; do
  [ -e "$lib" ] || continue
  aarch64-linux-gnu-nm -D --defined-only "$lib" 2>/dev/null | awk '{print $3}' | sed 's/@.*//' >>"$provided"
done
sort -u -o "$provided" "$provided"
missing=$(comm -23 "$WORK/undefined.txt" "$provided" | grep -v '^_\?Py' || true)
python_syms=$(comm -23 "$WORK/undefined.txt" "$provided" | grep -c '^_\?Py' || true)
echo "  undefined symbols: $(wc -l <"$WORK/undefined.txt"), of them Python's (the interpreter's):" \
  "$python_syms"
if [ -n "$missing" ]; then
  echo "aarch64_cross_check: symbols no library provides:" >&2
  echo "$missing" | head -20 >&2
  exit 1
fi
echo "aarch64_cross_check: ok (compiles, links, every non-Python symbol resolves)"
