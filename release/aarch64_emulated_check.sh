#!/usr/bin/env bash
# Do the aarch64 kernels compute the right numbers? Run, on an x86-64 machine, under qemu-user:
#
#   bash release/aarch64_emulated_check.sh [WORK_DIR] [PYTEST_ARGS...]   (default /tmp/tlg-aarch64)
#
# The extension is cross-compiled by release/aarch64_cross_check.sh (into WORK_DIR/cross), then
# loaded into Debian 12's aarch64 Python 3.11 with torch 2.13.0's aarch64 wheel, all run by
# qemu-aarch64-static, which executes the aarch64 and NEON instructions exactly (not their speed:
# no timing from here means anything). It runs `torch-lstm-grad check` (every op against the
# float64 reference and torch.nn) and pytest on PYTEST_ARGS (default: every test directory but
# tests/robustness, whose file parsing and fuzzing is the same Python on every CPU and takes
# hours emulated, and tests/tools/test_doctor.py, whose doctor reads the CUDA libraries'
# versions, stubs here; the tests that need TensorFlow, a GPU or an x86 level skip themselves).
#
# What it sets up, under WORK_DIR, with nothing installed system-wide but the prerequisites:
# - root/: the arm64 .debs of Python 3.11 and its libraries (`apt-get download`), and the cross
#   toolchain's libc, libstdc++ and libgomp: the guest's sysroot (QEMU_LD_PREFIX);
# - root/proc/cpuinfo and root/sys/devices/system/cpu: a 2-core Neoverse N1 as Linux describes
#   it, which qemu reads before the host's files (torch's cpuinfo and oneDNN's aarch64 JIT read
#   them at load; the host's x86 /proc/cpuinfo makes cpuinfo crash);
# - site/: torch's aarch64 wheel unpacked and its pure-Python dependencies, numpy's aarch64
#   wheel, pytest; stubs/: release/aarch64_stubs.py's stand-ins for the CUDA libraries the wheel
#   links (torch's aarch64 wheels are CUDA builds; no GPU is used);
# - pkg/: this commit's package, tests and benchmarks, with the aarch64 _C.abi3.so.
# Prerequisites (Debian/Ubuntu): apt-get install qemu-user-static g++-aarch64-linux-gnu;
# dpkg --add-architecture arm64 && apt-get update (for `apt-get download ...:arm64`); qemu
# registered with binfmt_misc for aarch64 binaries (systemd does it on install; in a container:
# mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc, then write
# /usr/lib/binfmt.d/qemu-aarch64.conf into its `register`), so that tests that start a Python
# of their own (sys.executable) can.
# Exit 0 when `check` and the tests pass.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(realpath -m "${1:-/tmp/tlg-aarch64}")
shift || true
PYTEST_ARGS=("$@")
[ ${#PYTEST_ARGS[@]} -eq 0 ] && PYTEST_ARGS=(tests/ops tests/modules tests/keras_layers tests/layouts
  tests/porting tests/tools tests/benchmarks --ignore=tests/tools/test_doctor.py)
for tool in qemu-aarch64-static aarch64-linux-gnu-g++ aarch64-linux-gnu-readelf; do
  command -v "$tool" >/dev/null || {
    echo "aarch64_emulated_check: $tool not found (apt-get install qemu-user-static" \
      "g++-aarch64-linux-gnu)" >&2
    exit 2
  }
done
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || {
  echo "aarch64_emulated_check: aarch64 binaries do not run through qemu here (binfmt_misc:" \
    "see this script's prerequisites)" >&2
  exit 2
}
dpkg --print-foreign-architectures | grep -qx arm64 || {
  echo "aarch64_emulated_check: no arm64 packages to download (dpkg --add-architecture arm64" \
    "&& apt-get update)" >&2
  exit 2
}
mkdir -p "$WORK"
# REUSE_BUILD=1 keeps a WORK_DIR/cross/_C.abi3.so built before (from the same sources).
if [ -z "${REUSE_BUILD:-}" ] || [ ! -e "$WORK/cross/_C.abi3.so" ]; then
  bash "$ROOT/release/aarch64_cross_check.sh" "$WORK/cross"
fi

R=$WORK/root
if [ ! -x "$R/usr/bin/python3.11" ]; then
  mkdir -p "$WORK/debs" "$R/lib"
  (cd "$WORK/debs" && apt-get download -q python3.11-minimal:arm64 libpython3.11-minimal:arm64 \
    libpython3.11-stdlib:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64 libssl3:arm64 \
    libbz2-1.0:arm64 liblzma5:arm64 libsqlite3-0:arm64 libncursesw6:arm64 libtinfo6:arm64 \
    libreadline8:arm64 libuuid1:arm64 libcrypt1:arm64 libzstd1:arm64 >/dev/null)
  for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$R"; done
  cp -a /usr/aarch64-linux-gnu/lib/. "$R/usr/lib/aarch64-linux-gnu/"
  ln -sf ../usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1 "$R/lib/ld-linux-aarch64.so.1"
fi
cpus=$R/sys/devices/system/cpu
mkdir -p "$R/proc"
: >"$R/proc/cpuinfo"
for i in 0 1; do
  mkdir -p "$cpus/cpu$i/regs/identification"
  echo 0x00000000413fd0c1 >"$cpus/cpu$i/regs/identification/midr_el1"
  printf '%s\n' "processor	: $i" "BogoMIPS	: 50.00" \
    "Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp" \
    "CPU implementer	: 0x41" "CPU architecture: 8" "CPU variant	: 0x3" "CPU part	: 0xd0c" \
    "CPU revision	: 1" "" >>"$R/proc/cpuinfo"
done
for f in possible present online; do echo 0-1 >"$cpus/$f"; done

S=$WORK/site
if [ ! -d "$S/torch/lib" ]; then
  mkdir -p "$S"
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" \
    "$(ls "$WORK"/cross/torch-*-manylinux_2_28_aarch64.whl | head -1)" "$S"
  python3 -m pip install -q --no-deps --target "$S" --platform manylinux_2_28_aarch64 \
    --platform manylinux2014_aarch64 --python-version 3.11 --implementation cp \
    --only-binary=:all: filelock typing-extensions sympy mpmath networkx jinja2 markupsafe \
    fsspec numpy h5py pytest iniconfig pluggy packaging pygments expecttest setuptools
fi
python3 "$ROOT/release/aarch64_stubs.py" "$S/torch/lib" /usr/aarch64-linux-gnu/lib \
  "$R/lib/aarch64-linux-gnu" "$R/usr/lib/aarch64-linux-gnu" "$WORK/stubs"

rm -rf "$WORK/pkg" && mkdir -p "$WORK/pkg"
git -C "$ROOT" archive HEAD torch_lstm_grad tests benchmarks pyproject.toml | tar -x -C "$WORK/pkg"
cp "$WORK/cross/_C.abi3.so" "$WORK/pkg/torch_lstm_grad/_C.abi3.so"

guest() {
  (cd "$WORK/pkg" && QEMU_LD_PREFIX=$R \
    QEMU_SET_ENV="LD_LIBRARY_PATH=$WORK/stubs:$R/lib/aarch64-linux-gnu:$R/usr/lib/aarch64-linux-gnu,LD_PRELOAD=$WORK/stubs/libtlg_unversioned_stub.so" \
    PYTHONPATH="$WORK/pkg:$S" qemu-aarch64-static "$R/usr/bin/python3.11" -W ignore "$@")
}
guest -c "import platform, torch; print('aarch64_emulated_check:', platform.machine(), 'torch',
  torch.__version__, 'capability', torch.backends.cpu.get_cpu_capability(), 'cuda',
  torch.cuda.is_available())" 2>"$WORK/guest.err"
# stderr (torch's warning that no CUDA device answers, anything else) goes to WORK_DIR/guest.err.
guest -m torch_lstm_grad check 2>>"$WORK/guest.err" | tail -1
guest -m pytest -q -p no:cacheprovider "${PYTEST_ARGS[@]}" 2>>"$WORK/guest.err" | tail -3
echo "aarch64_emulated_check: ok"
