"""`torch-lstm-grad bench`: a tiny shape runs and writes its JSON (paired ratios), the inference
and module rows, the page-fault count per call, a bad shape refused, the CPU named with its
family and model."""

import json
import sys

import pytest
import torch

from torch_lstm_grad.tools import bench, cli


def test_bench_runs_on_a_tiny_shape(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = cli.main(
        ["bench", "--shape", "2,2,3,4", "--no-tf", "--min-run-time", "0.01", "--json", str(out)]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "2,2,3,4" in table and "fwd+bwd" in table
    data = json.loads(out.read_text())
    assert {"date", "commit", "cpu_model", "torch_version", "torch_threads", "results"} <= set(data)
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
    names = ("LSTMBlockFusedCell", "CudnnLSTM", "KerasLSTM")
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


def test_cpu_model_names_the_family_and_model():
    # The first block of a Zen 4 VM's /proc/cpuinfo (trimmed), then the second CPU's.
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n"
    )
    assert bench._cpuinfo_model(text) == "AMD EPYC (cpu family 25, model 17)"
    # aarch64 kernels print no model name: the caller falls back to platform.processor().
    assert bench._cpuinfo_model("processor\t: 0\nBogoMIPS\t: 50.00\n") is None
    assert bench._cpuinfo_model("model name\t: Some CPU\n") == "Some CPU"


def test_source_commit_names_this_checkout():
    """In a git checkout, the JSON's commit is git's HEAD (with "-dirty" for uncommitted changes
    to tracked files); outside one, None."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True, cwd=bench.__file__.rsplit("/", 1)[0])
    except (OSError, subprocess.CalledProcessError):
        assert bench.source_commit() is None
        return
    assert bench.source_commit() in (head.stdout.strip(), head.stdout.strip() + "-dirty")


def test_source_commit_is_none_for_a_copy_inside_another_repository(tmp_path, monkeypatch):
    """A package installed inside someone else's git repository (a venv inside a project) is not
    at that repository's commit: the file must be tracked where HEAD is read."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    copy = tmp_path / "site" / "bench.py"
    copy.parent.mkdir()
    copy.write_text("")
    monkeypatch.setattr(bench, "__file__", str(copy))
    assert bench.source_commit() is None
