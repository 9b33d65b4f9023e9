"""benchmarks/bench_gpu.py, run on the CPU (`--device cpu`) at one tiny shape: every op's rows
come out with the fields the results' readers rely on, and the script exits 2 naming what is
missing when asked for CUDA where there is none. Its figures are not checked (speed lives in
benchmarks, not tests)."""

import importlib.util
import json
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIELDS = {"device", "date", "commit", "op", "baseline", "mode", "dtype", "T", "B", "I", "H",
          "ratio", "ours_ms", "baseline_ms", "rounds", "ours_peak_mib",
          "baseline_peak_mib"}  # fmt: skip


def _script():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_op_gives_its_rows_on_the_cpu(tmp_path, capsys):
    bench = _script()
    out = tmp_path / "rows.json"
    rc = bench.main(["--device", "cpu", "--shape", "3,8,4", "--min-run-time", "0.001",
                     "--commit", "abc1234", "--json", str(out)])  # fmt: skip
    assert rc == 0
    rows = json.loads(out.read_text())
    assert all(FIELDS <= set(r) for r in rows)
    want = {(op, mode, dtype) for op, (_, modes, dtypes) in bench.PLAN.items()
            for mode in modes for dtype in dtypes}  # fmt: skip
    assert {(r["op"], r["mode"], r["dtype"]) for r in rows} == want
    assert {r["commit"] for r in rows} == {"abc1234"}
    assert all(r["ratio"] > 0 and r["I"] == r["H"] == 4 for r in rows)


def test_varied_lengths_need_a_batch_of_eight(tmp_path):
    bench = _script()
    out = tmp_path / "rows.json"
    assert bench.main(["--device", "cpu", "--shape", "3,2,4", "--min-run-time", "0.001",
                       "--ops", "CudnnRNNV3 varied,BlockLSTM", "--modes", "fwd+bwd",
                       "--dtypes", "float32", "--json", str(out)]) == 0  # fmt: skip
    assert [r["op"] for r in json.loads(out.read_text())] == ["BlockLSTM"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_without_cuda_it_says_so(capsys):
    assert _script().main(["--shape", "3,2,4"]) == 2
    assert "no CUDA device visible" in capsys.readouterr().err
