"""`torch-lstm-grad doctor`, and the import of a .so built against another torch: a clear error
saying to rebuild instead of an undefined-symbol traceback, and doctor still reports."""

import json
import os
import subprocess
import sys
import types

import pytest
import torch

import torch_lstm_grad
from torch_lstm_grad._library import extension as _extension
from torch_lstm_grad.tools import cli


def test_doctor_reports_the_matching_build(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    info = _extension.build_info()
    assert info is not None and info.TORCH_VERSION == torch.__version__
    assert f"torch {torch.__version__}" in out
    assert "matches torch    yes" in out and "loads            yes" in out
    compiled = "CPU + CUDA kernels" if torch_lstm_grad.built_with_cuda() else "CPU kernels only"
    assert compiled in out


def test_doctor_json(capsys):
    assert cli.main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ext = data["extension"]
    assert data["torch"]["version"] == torch.__version__
    assert ext["matches_torch"] and ext["loads"] and ext["problem"] is None
    assert ext["cuda_kernels"] == torch_lstm_grad.built_with_cuda() == ext["built"]["WITH_CUDA"]
    if ext["built"]["WITH_CUDA"]:
        assert ext["built"]["CUDA_ARCHS"]
    assert data["rebuild_would_use"]["compiler"]


def test_mismatch_names_both_torches_and_the_rebuild_command():
    assert _extension.mismatch(_extension.build_info()) is None
    message = _extension.mismatch(types.SimpleNamespace(TORCH_VERSION="2.0.0+cu118"))
    assert f"built against torch 2.0.0+cu118, but torch {torch.__version__} is installed" in (
        message
    )
    assert "pip install --no-build-isolation -e ." in message
    # The same version from another commit (a prebuilt .so on another machine's torch).
    other = types.SimpleNamespace(TORCH_VERSION=torch.__version__, TORCH_GIT_VERSION="0" * 40)
    message = _extension.mismatch(other)
    assert f"from commit {'0' * 40}" in message and torch.version.git_version in message


def _package_built_for_another_torch(root):
    """A copy of the installed package (links to its files) whose _build_info.py says the .so
    was built against torch 2.0.0."""
    src = os.path.dirname(torch_lstm_grad.__file__)
    dst = root / "torch_lstm_grad"
    dst.mkdir()
    for name in os.listdir(src):
        if name not in ("_build_info.py", "__pycache__"):
            os.symlink(os.path.join(src, name), dst / name)
    info = {k: v for k, v in vars(_extension.build_info()).items() if k.isupper()}
    info["TORCH_VERSION"] = "2.0.0"
    (dst / "_build_info.py").write_text("".join(f"{k} = {v!r}\n" for k, v in info.items()))


def test_import_refuses_a_so_built_for_another_torch(monkeypatch):
    other = types.SimpleNamespace(TORCH_VERSION="2.0.0")
    monkeypatch.setattr(_extension, "build_info", lambda: other)
    with pytest.raises(
        ImportError,
        match=r"was built against torch 2\.0\.0, but torch .* is "
        r"installed(.|\n)*pip install --no-build-isolation -e \.",
    ):
        _extension.load()


def test_doctor_runs_when_the_so_was_built_for_another_torch(tmp_path):
    """`python -m torch_lstm_grad doctor` in a process whose package import cannot load the .so:
    the report instead of a traceback, exit code 1."""
    _package_built_for_another_torch(tmp_path)
    doctor = subprocess.run(
        [sys.executable, "-m", "torch_lstm_grad", "doctor"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert doctor.returncode == 1, doctor.stderr
    assert "built against    torch 2.0.0" in doctor.stdout
    assert "matches torch    NO" in doctor.stdout and "loads            NO" in doctor.stdout
    assert f"but torch {torch.__version__} is installed" in doctor.stdout
    assert "Traceback" not in doctor.stderr


def test_cpu_isa_op(capsys):
    """The instruction set the CPU kernels run follows ATen's (ATEN_CPU_CAPABILITY lowers it),
    and doctor prints it."""
    ops = torch.ops.torch_lstm_grad
    isa = ops._cpu_isa()
    names = {"AVX512": "avx512", "AVX2": "avx2"}
    assert isa == names.get(torch.backends.cpu.get_cpu_capability(), "default")
    code = "import torch, torch_lstm_grad; print(torch.ops.torch_lstm_grad._cpu_isa())"
    for cap in ("default", "avx2"):
        if cap == "avx2" and isa == "default":
            continue  # no AVX2 here: ATen keeps its default
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300).stdout.strip()  # fmt: skip
        assert got == cap
    cli.main(["doctor"])
    assert f"CPU kernels run  {isa} (ATEN_CPU_CAPABILITY lowers it)" in capsys.readouterr().out
