"""What a build of ``torch_lstm_grad._C`` needs, found on this machine: the CUDA toolkit, the
CUDA library headers of the ``nvidia-*`` wheels, cuDNN, the GPU architectures and the compiler.

Used by ``setup.py`` (loaded by file path: the package cannot be imported before its extension
exists) and by ``torch-lstm-grad doctor``. Standard library only; ``torch`` is passed in.

A CUDA torch builds the CUDA kernels, or stops with one :class:`BuildError` that names what is
missing and the two ways out; it never falls back to a CPU-only build by itself
(``TORCH_LSTM_GRAD_FORCE_CPU=1`` asks for one).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

FORCE_CPU = "TORCH_LSTM_GRAD_FORCE_CPU"
# Ampere (A100, A10/RTX 30), Ada (L4, L40, RTX 40), Hopper; PTX of the last for newer GPUs.
DEFAULT_ARCHS = "8.0;8.6;8.9;9.0+PTX"
DEFAULT_HOME = "/usr/local/cuda"  # torch's last guess too
# Headers the CUDA sources reach through ATen/cuda/CUDAContext.h and ATen/cudnn.
TOOLKIT_HEADERS = ("cuda_runtime_api.h",)
LIBRARY_HEADERS = ("cublas_v2.h", "cublasLt.h", "cusparse.h", "cusolverDn.h")


class BuildError(Exception):
    """The CUDA build cannot go ahead; the message says what is missing and what to do."""


@dataclass
class Toolkit:
    home: str  # the directory with bin/nvcc and include/
    nvcc: str
    version: str  # "13.0"
    found_by: str  # how it was found, for the build notice and doctor


@dataclass
class CudaBuild:
    toolkit: Toolkit
    archs: str  # TORCH_CUDA_ARCH_LIST syntax
    archs_from: str
    include_dirs: list[str] = field(default_factory=list)  # the wheels'
    cudnn_include: str = ""
    library_dirs: list[str] = field(default_factory=list)
    link_args: list[str] = field(default_factory=list)
    cudnn_version: str | None = None
    cudnn_from: str = ""


def _run(args: list[str]) -> str | None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None


def nvcc_version(nvcc: str) -> str | None:
    out = _run([nvcc, "--version"]) or ""
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


def real_nvcc(nvcc: str) -> str:
    """The nvcc binary behind ``nvcc``, through symlinks and wrapper scripts: nvcc's dry run
    prints the directory of the real driver (``_HERE_``) whatever started it."""
    out = _run([nvcc, "--dryrun", "-c", "-x", "cu", os.devnull, "-o", os.devnull]) or ""
    match = re.search(r"^#\$ _HERE_=(.+)$", out, re.MULTILINE)
    if match:
        candidate = os.path.join(match.group(1).strip(), os.path.basename(nvcc))
        if os.path.isfile(candidate):
            return os.path.realpath(candidate)
    return os.path.realpath(nvcc)


def _check_toolkit(home: str, found_by: str) -> tuple[Toolkit | None, str]:
    """(toolkit, "") when ``home`` has a working nvcc and the CUDA runtime headers, else
    (None, why not)."""
    nvcc = os.path.join(home, "bin", "nvcc")
    if not os.path.isfile(nvcc):
        return None, f"{home} ({found_by}) has no bin/nvcc"
    version = nvcc_version(nvcc)
    if version is None:
        return None, f"{nvcc} ({found_by}) does not run or print its version"
    missing = [h for h in TOOLKIT_HEADERS if not os.path.isfile(os.path.join(home, "include", h))]
    if missing:
        return None, f"{home} ({found_by}) has no include/{missing[0]}"
    return Toolkit(home, nvcc, version, found_by), ""


def find_toolkit(torch_cuda: str, env=os.environ) -> tuple[Toolkit | None, list[str]]:
    """The CUDA toolkit to build with, and why each other candidate was passed over.

    CUDA_HOME (else CUDA_PATH) when set is the only candidate, as in torch. Otherwise the real
    nvcc on PATH, then /usr/local/cuda: the first one whose major version is torch's.
    """
    major = torch_cuda.split(".")[0]
    from_env = next(((env[v], v) for v in ("CUDA_HOME", "CUDA_PATH") if env.get(v)), None)
    candidates = [from_env] if from_env else []
    nvcc = None if from_env else shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        real = real_nvcc(nvcc)
        how = "nvcc on PATH" + (f": {nvcc} runs {real}" if real != nvcc else "")
        candidates.append((os.path.dirname(os.path.dirname(real)), how))
    if not from_env:
        candidates.append((DEFAULT_HOME, "default location"))
    rejected: list[str] = []
    seen: set[str] = set()
    for home, how in candidates:
        if os.path.realpath(home) in seen:
            continue
        seen.add(os.path.realpath(home))
        toolkit, why = _check_toolkit(home, how)
        if toolkit is None:
            rejected.append(why)
        elif toolkit.version.split(".")[0] != major:
            rejected.append(f"{home} ({how}) is CUDA {toolkit.version}, torch needs {major}.x")
        else:
            return toolkit, rejected
    return None, rejected


def nvidia_roots() -> list[str]:
    """The ``nvidia`` namespace directories the CUDA wheels install into (site-packages/nvidia)."""
    spec = importlib.util.find_spec("nvidia")
    return list(spec.submodule_search_locations or []) if spec else []


def wheel_include_dirs(cuda_major: str, roots: list[str]) -> list[str]:
    """Include dirs of the nvidia-* wheels: the CUDA 13 wheels share one tree,
    ``nvidia/cu13/include``; the CUDA 12 ones have a tree each, ``nvidia/cublas/include``, ...;
    cuDNN has its own in both (``nvidia/cudnn/include``). Other CUDA majors' shared trees
    (``cu12`` under a CUDA 13 torch) are left out. Their libraries are not linked: torch's
    libraries already depend on them, and cuDNN's directory comes from :func:`find_cudnn`."""
    includes: list[str] = []
    for root in roots:
        shared = os.path.join(root, f"cu{cuda_major}")
        trees = [shared] if os.path.isdir(shared) else []
        trees += sorted(
            d
            for d in glob.glob(os.path.join(root, "*"))
            if os.path.isdir(d) and not re.fullmatch(r"cu\d+", os.path.basename(d))
        )
        includes += [
            os.path.join(t, "include") for t in trees if os.path.isdir(os.path.join(t, "include"))
        ]
    return includes


def _header_version(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    parts = [
        re.search(rf"#define {prefix}{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCHLEVEL")
    ]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def find_cudnn(env, roots: list[str], toolkit_home: str) -> tuple[str, str, str] | None:
    """(include dir, lib dir, how found) for cuDNN: CUDNN_HOME/CUDNN_PATH, else the
    nvidia-cudnn wheel, else the toolkit or the system (/usr/include)."""
    candidates = [(env[v], v) for v in ("CUDNN_HOME", "CUDNN_PATH") if env.get(v)]
    candidates += [(os.path.join(r, "cudnn"), "nvidia-cudnn wheel") for r in roots]
    candidates += [(toolkit_home, "CUDA toolkit"), ("/usr", "system")]
    for root, how in candidates:
        include = os.path.join(root, "include")
        if os.path.isfile(os.path.join(include, "cudnn.h")):
            libs = [
                d
                for d in ("lib", "lib64", "lib/x86_64-linux-gnu")
                if os.path.isdir(os.path.join(root, d))
            ]
            return include, os.path.join(root, libs[0]) if libs else "", f"{how}: {root}"
        if how in ("CUDNN_HOME", "CUDNN_PATH"):
            return None  # set by hand: used or reported, never skipped
    return None


def cudnn_link_args(lib_dir: str) -> list[str]:
    """-lcudnn, or the wheel's versioned file by name: it ships libcudnn.so.9 without the
    unversioned link."""
    if not lib_dir or os.path.exists(os.path.join(lib_dir, "libcudnn.so")):
        return ["-lcudnn"]
    versioned = sorted(f for f in os.listdir(lib_dir) if re.fullmatch(r"libcudnn\.so\.\d+", f))
    return [f"-l:{versioned[0]}"] if versioned else ["-lcudnn"]


def default_archs(torch, env=os.environ) -> tuple[str, str]:
    """(TORCH_CUDA_ARCH_LIST, where it came from): the variable when set, else the visible GPUs'
    (clamped to what torch supports, PTX of the newest), else :data:`DEFAULT_ARCHS`."""
    if env.get("TORCH_CUDA_ARCH_LIST"):
        return env["TORCH_CUDA_ARCH_LIST"], "TORCH_CUDA_ARCH_LIST"
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        return DEFAULT_ARCHS, "default, no GPU visible"
    supported = [int(a[3:]) for a in torch.cuda.get_arch_list() if re.fullmatch(r"sm_\d+", a)]
    newest = max(((s // 10, s % 10) for s in supported), default=(9, 0))
    caps = {min(newest, torch.cuda.get_device_capability(i)) for i in range(count)}
    archs = [f"{major}.{minor}" for major, minor in sorted(caps)]
    return ";".join(archs) + "+PTX", "visible GPUs"


def configure_cuda(torch, env=os.environ, roots: list[str] | None = None) -> CudaBuild | None:
    """The CUDA build for this torch, None for a CPU-only one (CPU torch, or FORCE_CPU=1).
    Raises :class:`BuildError` when torch has CUDA and something the build needs is missing.
    ``roots``: the nvidia wheels' directories (default: :func:`nvidia_roots`)."""
    if env.get(FORCE_CPU, "0") == "1" or torch.version.cuda is None:
        return None
    torch_cuda = torch.version.cuda
    toolkit, rejected = find_toolkit(torch_cuda, env)
    missing: list[str] = []
    if toolkit is None:
        missing.append(
            f"a CUDA {torch_cuda.split('.')[0]}.x toolkit (nvcc and the CUDA runtime headers)"
            + "".join(
                f"\n    - {why}"
                for why in rejected or [f"no nvcc on PATH, CUDA_HOME unset, no {DEFAULT_HOME}"]
            )
        )
    roots = nvidia_roots() if roots is None else roots
    includes = wheel_include_dirs(torch_cuda.split(".")[0], roots)
    searched = ([os.path.join(toolkit.home, "include")] if toolkit else []) + includes
    for header in LIBRARY_HEADERS:
        if not any(os.path.isfile(os.path.join(d, header)) for d in searched):
            missing.append(
                f"{header} (CUDA library headers; looked in {', '.join(searched) or 'nothing'})"
            )
    cudnn = find_cudnn(env, roots, toolkit.home if toolkit else DEFAULT_HOME)
    if cudnn is None:
        where = " or ".join(f"{v}={env[v]}" for v in ("CUDNN_HOME", "CUDNN_PATH") if env.get(v))
        missing.append(
            "cudnn.h (cuDNN; " + (where or "no nvidia-cudnn wheel, CUDNN_HOME unset") + ")"
        )
    if missing:
        raise BuildError(missing_message(torch, missing))
    cudnn_include, cudnn_lib, cudnn_from = cudnn
    archs, archs_from = default_archs(torch, env)
    return CudaBuild(
        toolkit=toolkit,
        archs=archs,
        archs_from=archs_from,
        include_dirs=includes,
        cudnn_include=cudnn_include,
        library_dirs=[cudnn_lib] if cudnn_lib else [],
        link_args=cudnn_link_args(cudnn_lib),
        cudnn_version=_header_version(os.path.join(cudnn_include, "cudnn_version.h"), "CUDNN_"),
        cudnn_from=cudnn_from,
    )


def missing_message(torch, missing: list[str]) -> str:
    return (
        f"torch_lstm_grad: torch {torch.__version__} is a CUDA {torch.version.cuda} build, so its "
        "CUDA kernels are compiled too, but this is missing:\n"
        + "".join(f"  - {m}\n" for m in missing)
        + "Either install it (a CUDA toolkit of torch's major version: its nvcc on PATH or "
        "CUDA_HOME=/path/to/cuda; torch's pip wheels bring the library headers and cuDNN), or "
        f"build the CPU kernels only:\n    {FORCE_CPU}=1 pip install --no-build-isolation -e ."
    )


def compiler_version(cxx: str | None = None) -> str:
    cxx = cxx or os.environ.get("CXX", "c++")
    out = _run([cxx, "--version"])
    return out.splitlines()[0].strip() if out else f"{cxx}: not found"
