"""The suite's own checks: with TORCH_LSTM_GRAD_REQUIRE_TF=1 (.ci/run sets it) a
TensorFlow-dependent test that skips is a failure (tests/tf_required.py), so a CI run without
TF cannot pass having checked no parity; without the variable it skips as before; other skips
(no CUDA device) are untouched either way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TESTS_DIR

TESTS = Path(TESTS_DIR)

MODULE = '''
import pytest

@pytest.mark.skipif(True, reason="TensorFlow is not installed")
def test_needs_tf():
    pass

def test_needs_keras():
    pytest.importorskip("no_such_keras_module_here", reason="Keras on TensorFlow is missing")

@pytest.mark.skipif(True, reason="no CUDA device visible")
def test_needs_cuda():
    pass

@pytest.mark.xfail(reason="a TensorFlow difference, expected")
def test_xfail():
    assert False
'''


MODULE_SKIPPED = '''
import pytest

pytest.importorskip("no_such_tensorflow_module_here", reason="TensorFlow is not installed")

def test_never_collected():
    pass
'''


def _run(tmp_path, require):
    (tmp_path / "test_mod.py").write_text(MODULE)
    (tmp_path / "test_mod_skipped.py").write_text(MODULE_SKIPPED)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LSTM_GRAD_REQUIRE_TF"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    if require:
        env["TORCH_LSTM_GRAD_REQUIRE_TF"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tf_required", "-p", "no:cacheprovider",
         "-rA", "--continue-on-collection-errors", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("require", [False, True], ids=["default", "required"])
def test_tf_dependent_skips_fail_when_tf_is_required(tmp_path, require):
    result = _run(tmp_path, require)
    out = result.stdout
    if require:
        assert result.returncode == 1, out
        # A skip at setup (skipif) reports as an error, one in the call (importorskip) as a
        # failure: either fails the run.
        # (and a module-level importorskip at collection, as an error; without
        # --continue-on-collection-errors, as in CI, that one stops the run: exit code 2).
        assert "1 failed, 1 skipped, 1 xfailed, 2 errors" in out, out
        assert out.count("TORCH_LSTM_GRAD_REQUIRE_TF is set") >= 3, out
    else:
        assert result.returncode == 0, out
        assert "4 skipped" in out and "1 xfailed" in out, out


def test_ci_run_requires_tf():
    """.ci/run exports the variable before the README's test command."""
    ci = (TESTS.parent / ".ci" / "run").read_text()
    assert "export TORCH_LSTM_GRAD_REQUIRE_TF=1" in ci
