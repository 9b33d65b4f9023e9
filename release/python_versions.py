"""One `_C.abi3.so` for several Pythons: build the extension once with the first venv's Python,
then import that very file and run the block-op tests with each venv's Python (each venv holds
the same torch; the .so is built against torch's C++ ABI, which is per torch version, and
Python's limited API 3.10, which is not per Python).

    python release/python_versions.py VENV_BUILD VENV [VENV ...] [--tests T ...] [--report F]

Each VENV is a virtual environment with torch, numpy, pytest and expecttest installed (the
same torch in every one). The tree is copied to a scratch directory, built there by
`VENV_BUILD/bin/python setup.py build_ext --inplace` (TORCH_LSTM_GRAD_FORCE_CPU=1: the CPU
kernels; a CUDA torch would otherwise need the whole CUDA build), and each VENV runs
`python -m pytest TESTS` with that copy on PYTHONPATH, so every Python imports the one .so.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = [
    "tests/ops/test_raw_ops_lstm_block.py",
    "tests/ops/test_raw_ops_gru_block_cell.py",
    "tests/ops/test_reference.py",
    "tests/ops/test_ops_lstm_variants.py",
    "tests/ops/integration/test_lstm_variants.py",
]


def _run(cmd, cwd, env=None) -> tuple[int, str, float]:
    start = time.time()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.time() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venvs", nargs="+")
    parser.add_argument("--tests", nargs="+", default=TESTS)
    parser.add_argument("--report")
    args = parser.parse_args(argv)
    tree = tempfile.mkdtemp(prefix="tlg-abi3-")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    for f in files.stdout.split():
        os.makedirs(os.path.join(tree, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), os.path.join(tree, f))
    env = dict(os.environ, TORCH_LSTM_GRAD_FORCE_CPU="1")
    py = [os.path.join(v, "bin", "python") for v in args.venvs]
    rc, out, took = _run([py[0], "setup.py", "build_ext", "--inplace"], tree, env)
    lines = [f"# One _C.abi3.so, several Pythons ({time.strftime('%Y-%m-%d')})", ""]
    built = glob.glob(os.path.join(tree, "torch_lstm_grad", "_C*.so"))
    lines.append(f"Built by {py[0]} in {took:.0f} s: {[os.path.basename(b) for b in built]}")
    if rc != 0 or len(built) != 1 or ".abi3." not in built[0]:
        print(out[-3000:], file=sys.stderr)
        lines.append("build FAILED")
        print("\n".join(lines))
        return 1
    lines += ["", "| Python | torch | tests | result |", "|---|---|---|---|"]
    ok = True
    for p in py:
        version = _run([p, "-c", "import sys, torch; print(sys.version.split()[0], "
                        "torch.__version__)"], tree)[1].strip()  # fmt: skip
        test_env = dict(os.environ, PYTHONPATH=tree)
        rc, out, took = _run([p, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.tests],
                             tree, test_env)  # fmt: skip
        last = [line for line in out.splitlines() if line.strip()][-1]
        ok &= rc == 0
        lines.append(f"| {version.split()[0]} | {version.split()[-1]} | {' '.join(args.tests)} "
                     f"| {'pass' if rc == 0 else 'FAIL'}: {last} ({took:.0f} s) |")  # fmt: skip
    report = "\n".join(lines) + "\n"
    print(report)
    if args.report:
        with open(args.report, "w") as fh:
            fh.write(report)
    shutil.rmtree(tree, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
