"""The graph readers against TF running rewired graphs (harness/rewire_graphs.py): TF1 cells frozen
from static_rnn and dynamic_rnn, and Keras 3 exports, one operand of one op of the step read from
another tensor of the same shape; each conversion must be refused, or agree with TF running the
rewired file, never be a port of the cell TF no longer computes. A seeded sample of each artifact
runs here (the whole run: docs/porting.md, "Corrupt and hostile files"). A second test disables one
reader check at a time and checks the harness reports the silent wrong ports that check prevents,
so the first cannot pass by seeing nothing.

The harness runs in a subprocess of its own (it converts and verifies in one process, which
imports TF and Keras once).
"""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT as ROOT
from tests.helpers import needs_tf

pytestmark = needs_tf


HARNESS = os.path.join(ROOT, "harness", "rewire_graphs.py")
LIMIT = 8  # rewires per artifact (14 artifacts)


def _run(tmp_path, *args):
    out = tmp_path / "rewire.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, HARNESS, *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_every_rewire_is_refused_or_agrees_with_tf(tmp_path):
    proc, result = _run(tmp_path, "--limit", str(LIMIT), "--seed", "1")
    arts = result["artifacts"]
    assert len(arts) == 14 and {a[:3] for a in arts} == {"tf1", "k3_"}
    for name, r in arts.items():
        assert r["run"] == min(LIMIT, r["rewires"]) and r["rewires"] >= 20, (name, r)
        assert r["FAIL"] == r["error"] == 0, (name, r["notes"])
    assert sum(r["refused"] for r in arts.values()) >= 90
    assert proc.returncode == 0, proc.stdout[-2000:]


@pytest.mark.parametrize(
    "plant, artifact, only, fails",
    [
        # c = f·o + i·act(j) and the like: c_prev read from the step itself
        ("tf1_closed", "tf1_lstm_projection", "mul", 4),
        # the GRU's input bias added to h·R, its recurrent bias to x·K
        ("keras_bias_rows", "k3_gru", "Squeeze", 2),
    ],
)
def test_a_disabled_check_shows_up_as_silent_wrong_ports(tmp_path, plant, artifact, only, fails):
    proc, result = _run(tmp_path, "--plant", plant, "--artifacts", artifact, "--only", only)
    r = result["artifacts"][artifact]
    assert r["FAIL"] == fails and r["error"] == 0, r["notes"]
    assert proc.returncode == 1
