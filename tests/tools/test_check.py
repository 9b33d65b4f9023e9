"""`torch-lstm-grad check`: every op passes against both oracles (the float64 reference and TF),
a perturbed output or an op that raises is reported as a miss, an unknown op is refused, and
CudnnRNNV3 (TF has no CPU kernel) is checked against torch.nn."""

import importlib.util
import subprocess
import sys

import pytest

from torch_lstm_grad import raw_ops
from torch_lstm_grad.tools import check as _parity
from torch_lstm_grad.tools import cli

ALL_OPS = tuple(_parity.OPS)
TF_AVAILABLE = importlib.util.find_spec("tensorflow") is not None


def _run_check(*args):
    return subprocess.run(
        [sys.executable, "-m", "torch_lstm_grad", "check", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ops_in_table(stdout, oracle):
    return {line.split()[0] for line in stdout.splitlines() if f" {oracle} " in line}


@pytest.mark.parametrize(
    "oracle",
    ["reference", pytest.param("tf", marks=pytest.mark.skipif(
        not TF_AVAILABLE, reason="TensorFlow is not installed"))],  # fmt: skip
)
def test_check_passes_for_every_op(oracle):
    result = _run_check("--oracle", oracle)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _ops_in_table(result.stdout, oracle) == set(ALL_OPS)
    assert "MISS" not in result.stdout


def test_check_reports_a_perturbed_output(monkeypatch, capsys):
    real = raw_ops.GRUBlockCell

    def perturbed(*args, **kwargs):
        out = real(*args, **kwargs)
        return out._replace(h=out.h + 1e-3)

    monkeypatch.setattr(raw_ops, "GRUBlockCell", perturbed)
    code = cli.main(["check", "--oracle", "reference", "--ops", "GRUBlockCell,GRUBlockCellGrad"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    misses = {(line.split()[0], line.split()[4]) for line in lines if line.endswith("MISS")}
    # float16's tolerance (1e-2) is above the perturbation; float64 and float32 catch it.
    assert misses == {("GRUBlockCell", "h")}
    assert sum(line.endswith("MISS") for line in lines) == 2


def test_check_reports_an_op_that_raises(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(raw_ops, "LSTMBlockCell", broken)
    assert cli.main(["check", "--oracle", "reference", "--ops", "LSTMBlockCell"]) == 1
    assert "raised RuntimeError: boom" in capsys.readouterr().out


def test_check_rejects_an_unknown_op(capsys):
    assert cli.main(["check", "--oracle", "reference", "--ops", "BlockLSTMV3"]) == 2
    assert "BlockLSTMV3" in capsys.readouterr().err


def test_check_covers_cudnn_rnn_against_torch_nn(monkeypatch, capsys):
    """CudnnRNNV3 (TF has no CPU kernel) is checked against torch.nn, and a wrong output shows."""
    assert cli.main(["check", "--oracle", "reference", "--ops", "CudnnRNNV3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("CudnnRNNV3")]
    assert {line.split()[-1] for line in rows} == {"ok"} and len(rows) == len(
        [n for case in _parity.CUDNN_CASES for n in _cudnn_outputs(case[1])]
    ) * len(_parity.CUDNN_TOLERANCES)

    real = raw_ops.CudnnRNNV3

    def perturbed(*args, **kwargs):
        out = real(*args, **kwargs)
        return out._replace(output_h=out.output_h + 1e-3)

    monkeypatch.setattr(raw_ops, "CudnnRNNV3", perturbed)
    assert cli.main(["check", "--oracle", "reference", "--ops", "CudnnRNNV3"]) == 1
    misses = [line for line in capsys.readouterr().out.splitlines() if line.endswith("MISS")]
    assert misses and all(line.split()[-4] == "output_h" for line in misses)


def _cudnn_outputs(mode):
    lstm = mode == "lstm"
    return ["output", "output_h", "input_backprop", "input_h_backprop", "params_backprop"] + (
        ["output_c", "input_c_backprop"] if lstm else []
    )
