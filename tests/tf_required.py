"""pytest plugin (loaded by conftest.py): with TORCH_LSTM_GRAD_REQUIRE_TF=1, a test skipped
because TensorFlow (or Keras on it) is missing fails instead.

Most of the suite's parity tests need TensorFlow, the oracle, and skip without it so the
package can be tested where TF is not installed. `.ci/run` sets the variable: CI installs TF
(the `test` extra), and a CI run in which the TF-dependent tests all skipped would otherwise
pass having checked no parity at all. Skips for other reasons (no CUDA device) are untouched.
"""

from __future__ import annotations

import os
import re

import pytest

REQUIRE_TF_ENV = "TORCH_LSTM_GRAD_REQUIRE_TF"
# The reasons the suite's TF-dependent skips give: skipif(reason="TensorFlow is not
# installed"), importorskip("tensorflow" / "keras") ("could not import 'tensorflow'"), "Keras
# backend is jax, not tensorflow".
_TF_REASON = re.compile(r"tensorflow|keras", re.IGNORECASE)


def _required() -> bool:
    return os.environ.get(REQUIRE_TF_ENV, "") not in ("", "0")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(
        longrepr)  # fmt: skip
    return reason.removeprefix("Skipped: ")


def _fail_tf_skip(report, what: str) -> None:
    if not report.skipped or hasattr(report, "wasxfail") or not _required():
        return
    reason = _skip_reason(report)
    if _TF_REASON.search(reason):
        report.outcome = "failed"
        report.longrepr = (f"{REQUIRE_TF_ENV} is set, and this TensorFlow-dependent {what} "
                           f"skipped: {reason}")  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_tf_skip(outcome.get_result(), "test")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module-level importorskip("tensorflow") skips the whole module at collection."""
    outcome = yield
    _fail_tf_skip(outcome.get_result(), "module")
