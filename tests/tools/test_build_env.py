"""What setup.py finds for a CUDA build (torch_lstm_grad/tools/build_env.py), on fake install trees:
toolkits behind wrapper scripts, CUDA_HOME, the CUDA 12 and CUDA 13 wheel layouts, cuDNN, the
default architectures, and the one message a CUDA torch without a toolkit stops with."""

import os
import stat
import types

import pytest

from torch_lstm_grad.tools import build_env as B

LIBRARY_HEADERS = ("cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h")


def _touch(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _script(path, body):
    _touch(path, "#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def _toolkit(root, version="13.0"):
    """A toolkit whose nvcc prints its version and, on a dry run, its own directory."""
    bin_dir = os.path.join(root, "bin")
    _script(
        os.path.join(bin_dir, "nvcc"),
        f'case "$*" in *--dryrun*) echo "#$ _HERE_={bin_dir}" >&2;; esac\n'
        f'echo "Cuda compilation tools, release {version}, V{version}.1"\n',
    )
    _touch(os.path.join(root, "include", "cuda_runtime_api.h"))
    return str(root)


def _torch(cuda="13.0", gpus=(), arch_list=("sm_80", "sm_90")):
    cuda_ns = types.SimpleNamespace(
        is_available=lambda: bool(gpus),
        device_count=lambda: len(gpus),
        get_device_capability=lambda i: gpus[i],
        get_arch_list=lambda: list(arch_list),
    )
    return types.SimpleNamespace(
        __version__="2.11.0", version=types.SimpleNamespace(cuda=cuda), cuda=cuda_ns
    )


@pytest.fixture(autouse=True)
def _no_default_toolkit(monkeypatch, tmp_path):
    monkeypatch.setattr(B, "DEFAULT_HOME", str(tmp_path / "no-such-cuda"))


def test_wrapper_script_on_path_resolves_to_the_real_toolkit(tmp_path):
    home = _toolkit(tmp_path / "cuda-13.0")
    _script(tmp_path / "wrappers" / "nvcc", f'exec {home}/bin/nvcc "$@"\n')
    toolkit, rejected = B.find_toolkit("13.0", {"PATH": str(tmp_path / "wrappers")})
    assert toolkit.home == home and toolkit.version == "13.0"
    assert "runs" in toolkit.found_by and rejected == []


def test_cuda_home_wins_and_a_bad_one_is_reported(tmp_path):
    home = _toolkit(tmp_path / "cuda")
    other = _toolkit(tmp_path / "other")
    env = {"PATH": os.path.join(other, "bin"), "CUDA_HOME": home}
    assert B.find_toolkit("13.0", env)[0].home == home
    env = {"PATH": os.path.join(other, "bin"), "CUDA_PATH": str(tmp_path)}
    toolkit, rejected = B.find_toolkit("13.0", env)
    assert toolkit is None and rejected == [f"{tmp_path} (CUDA_PATH) has no bin/nvcc"]


def test_toolkit_of_another_cuda_major_is_passed_over(tmp_path, monkeypatch):
    old = _toolkit(tmp_path / "cuda-12.8", "12.8")
    new = _toolkit(tmp_path / "cuda-13.0", "13.0")
    monkeypatch.setattr(B, "DEFAULT_HOME", new)
    toolkit, rejected = B.find_toolkit("13.0", {"PATH": os.path.join(old, "bin")})
    assert toolkit.home == new
    assert rejected == [f"{old} (nvcc on PATH) is CUDA 12.8, torch needs 13.x"]


def test_a_bin_without_headers_is_not_a_toolkit(tmp_path):
    _script(tmp_path / "bin" / "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.1"\n')
    toolkit, rejected = B.find_toolkit("13.0", {"PATH": str(tmp_path / "bin")})
    assert toolkit is None
    assert rejected[0] == f"{tmp_path} (nvcc on PATH) has no include/cuda_runtime_api.h"


def _cu13_wheels(root):
    for h in LIBRARY_HEADERS + ("cuda_runtime_api.h",):
        _touch(os.path.join(root, "nvidia", "cu13", "include", h))
    _touch(os.path.join(root, "nvidia", "cu13", "lib", "libcudart.so.13"))
    _touch(os.path.join(root, "nvidia", "cudnn", "include", "cudnn.h"))
    _touch(
        os.path.join(root, "nvidia", "cudnn", "include", "cudnn_version.h"),
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n",
    )
    _touch(os.path.join(root, "nvidia", "cudnn", "lib", "libcudnn.so.9"))
    return os.path.join(root, "nvidia")


def _cu12_wheels(root):
    for lib, h in zip(("cublas", "cublas", "cusparse", "cusolver"), LIBRARY_HEADERS, strict=True):
        _touch(os.path.join(root, "nvidia", lib, "include", h))
    _touch(os.path.join(root, "nvidia", "cuda_runtime", "include", "cuda_runtime_api.h"))
    _touch(os.path.join(root, "nvidia", "cudnn", "include", "cudnn.h"))
    _touch(os.path.join(root, "nvidia", "cudnn", "lib", "libcudnn.so.9"))
    return os.path.join(root, "nvidia")


def test_cu13_wheel_layout(tmp_path):
    root = _cu13_wheels(tmp_path / "site")
    os.makedirs(os.path.join(root, "cu12", "include"))  # another major's tree: left out
    home = _toolkit(tmp_path / "cuda")
    build = B.configure_cuda(_torch("13.0"), {"CUDA_HOME": home}, roots=[root])
    assert build.include_dirs == [os.path.join(root, d, "include") for d in ("cu13", "cudnn")]
    assert build.cudnn_include == os.path.join(root, "cudnn", "include")
    assert build.library_dirs == [os.path.join(root, "cudnn", "lib")]
    assert build.link_args == ["-l:libcudnn.so.9"]
    assert build.cudnn_version == "9.19.0" and build.cudnn_from.startswith("nvidia-cudnn wheel")
    assert build.archs == B.DEFAULT_ARCHS == "8.0;8.6;8.9;9.0+PTX"


def test_cu12_wheel_layout(tmp_path):
    root = _cu12_wheels(tmp_path / "site")
    home = _toolkit(tmp_path / "cuda", "12.8")
    build = B.configure_cuda(_torch("12.8"), {"CUDA_HOME": home}, roots=[root])
    expected = ("cublas", "cuda_runtime", "cudnn", "cusolver", "cusparse")
    assert build.include_dirs == [os.path.join(root, d, "include") for d in expected]


def test_cudnn_home_wins_over_the_wheel(tmp_path):
    root = _cu13_wheels(tmp_path / "site")
    cudnn = tmp_path / "cudnn"
    _touch(os.path.join(cudnn, "include", "cudnn.h"))
    _touch(os.path.join(cudnn, "lib64", "libcudnn.so"))
    env = {"CUDA_HOME": _toolkit(tmp_path / "cuda"), "CUDNN_HOME": str(cudnn)}
    build = B.configure_cuda(_torch(), env, roots=[root])
    assert build.library_dirs == [os.path.join(cudnn, "lib64")] and build.link_args == ["-lcudnn"]
    assert build.cudnn_include == os.path.join(cudnn, "include")


def test_cuda_torch_without_toolkit_stops_with_one_message(tmp_path):
    root = _cu13_wheels(tmp_path / "site")
    _script(tmp_path / "bin" / "nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.1"\n')
    with pytest.raises(B.BuildError) as err:
        B.configure_cuda(_torch(), {"PATH": str(tmp_path / "bin")}, roots=[root])
    message = str(err.value)
    assert "a CUDA 13.x toolkit" in message and "has no include/cuda_runtime_api.h" in message
    assert "TORCH_LSTM_GRAD_FORCE_CPU=1 pip install --no-build-isolation -e ." in message
    assert "cusparse.h" not in message  # the wheels have the library headers


def test_missing_library_headers_and_cudnn_are_named(tmp_path):
    env = {"CUDA_HOME": _toolkit(tmp_path / "cuda")}
    with pytest.raises(B.BuildError) as err:
        B.configure_cuda(_torch(), env, roots=[])
    message = str(err.value)
    assert all(h in message for h in LIBRARY_HEADERS) and "cudnn.h" in message
    assert "toolkit" not in message.split("missing:")[1].split("Either")[0]


def test_cpu_torch_and_force_cpu_build_no_cuda(tmp_path):
    assert B.configure_cuda(_torch(cuda=None), {}, roots=[]) is None
    assert B.configure_cuda(_torch(), {B.FORCE_CPU: "1"}, roots=[]) is None


def test_default_archs():
    assert B.default_archs(_torch(), {"TORCH_CUDA_ARCH_LIST": "9.0"}) == (
        "9.0",
        "TORCH_CUDA_ARCH_LIST",
    )
    assert B.default_archs(_torch(), {})[0] == "8.0;8.6;8.9;9.0+PTX"
    gpus = ((8, 6), (8, 0), (12, 0), (8, 6))  # sm_120 is beyond torch's newest (sm_90): clamped
    assert B.default_archs(_torch(gpus=gpus), {}) == ("8.0;8.6;9.0+PTX", "visible GPUs")
