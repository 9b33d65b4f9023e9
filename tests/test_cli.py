"""The torch-lstm-grad command: `check` with both oracles, a detected miss, `bench`, `convert`."""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

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


def test_bench_runs_on_a_tiny_shape(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = cli.main(
        ["bench", "--shape", "2,2,3,4", "--no-tf", "--min-run-time", "0.01", "--json", str(out)]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "2,2,3,4" in table and "fwd+bwd" in table
    data = json.loads(out.read_text())
    assert {"date", "cpu_model", "torch_version", "torch_threads", "results"} <= set(data)
    assert [r["pass"] for r in data["results"]] == ["fwd", "fwd+bwd"]
    assert all(r["ms"]["ours"] > 0 and r["ms"]["nn.LSTM"] > 0 for r in data["results"])
    assert all(r["ms"]["TF"] is None for r in data["results"])
    # ours/nn.LSTM is the median of paired per-round ratios, not the ratio of the medians.
    assert all(r["ratio"]["ours/nn.LSTM"] > 0 and r["paired_rounds"] >= 7 for r in data["results"])
    assert all(r["ratio"]["ours/TF"] is None for r in data["results"])


def test_bench_inference_and_module_rows(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = cli.main(
        ["bench", "--mode", "all", "--shape", "3,1,3,4", "--no-tf", "--min-run-time", "0.01",
         "--json", str(out)]
    )  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    assert "inference" in table and "CudnnLSTM/nn.LSTM" in table and "us/step" in table
    rows = json.loads(out.read_text())["results"]
    assert [r["pass"] for r in rows] == ["inference", "fwd", "fwd+bwd"]
    names = ("LSTMBlockFusedCell", "CudnnLSTM")
    for r in rows:
        assert all(r["ms"][k] > 0 and r["ratio"][f"{k}/nn.LSTM"] > 0 for k in names)
    assert rows[0]["us_per_step"]["nn.LSTM"] == pytest.approx(rows[0]["ms"]["nn.LSTM"] * 1e3 / 3)
    assert rows[1]["ratio"]["ours/nn.LSTM"] > 0


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's mmap threshold; ru_minflt")
def test_bench_counts_page_faults_per_call():
    """The bench's page-fault count per call: a buffer above glibc's largest mmap threshold
    (32 MB) is mapped afresh and faulted in on every call (8,192 pages of 4 KB at 32 MB; fewer
    with huge pages), a call that allocates nothing takes none."""
    from torch_lstm_grad.tools import bench as _bench

    faults = {}
    _bench._time_paired({"fresh": lambda: torch.ones(64 << 20, dtype=torch.uint8),
                         "none": lambda: None}, 0.05, faults)  # fmt: skip
    assert faults["none"] < 5
    assert faults["fresh"] > 10


def test_bench_rejects_a_bad_shape(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--shape", "2,2,3", "--no-tf"])
    assert exc.value.code == 2
    assert "T,B,I,H" in capsys.readouterr().err


def test_convert_needs_an_output(capsys):
    assert cli.main(["convert", "model.ckpt"]) == 2
    assert "-o/--output OUT.pt is required" in capsys.readouterr().err


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
