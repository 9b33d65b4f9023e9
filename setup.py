"""Build the torch_lstm_grad._C extension against the torch that is already installed.

CPU-only torch: a CppExtension from csrc/*.cpp and csrc/cpu/*.cpp.
CUDA torch: a CUDAExtension that adds csrc/cuda/* and defines TORCH_LSTM_GRAD_WITH_CUDA. The CUDA
toolkit, the nvidia-* wheels' headers, cuDNN and the GPU architectures are found by
torch_lstm_grad/tools/build_env.py; anything missing stops the build with one message, before any
compiling (TORCH_LSTM_GRAD_FORCE_CPU=1 builds the CPU kernels only).
Objects are kept in build/<python>-torch<version>-<cpu|cuda>/ (pip's own build directory is
temporary), so ninja recompiles only what changed. What was built is written to
torch_lstm_grad/_build_info.py, which the package compares with the running torch at import.
DEBUG=1 builds with -O0 -g.
"""

import glob
import importlib.util
import os
import sys

import setuptools
import torch
from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))

# pip builds a wheel even for an editable install: setuptools does that itself from 70.1 on, older
# ones need the wheel package, and --no-build-isolation installs neither (a fresh Python 3.11 venv
# has setuptools 65; torch >= 2.13 brings a newer one, torch 2.11 does not).
_setuptools = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
if _setuptools < (70, 1) and importlib.util.find_spec("wheel") is None:
    sys.exit(
        f"torch_lstm_grad: setuptools {setuptools.__version__} cannot build the (editable) wheel "
        "pip asks for without the wheel package. Install it (or setuptools >= 70.1), then run "
        "the same command again:\n    pip install wheel"
    )


def _load_build_env():
    path = os.path.join(ROOT, "torch_lstm_grad", "tools", "build_env.py")
    spec = importlib.util.spec_from_file_location("_torch_lstm_grad_build_env", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_env = _load_build_env()
try:
    CUDA = build_env.configure_cuda(torch)
except build_env.BuildError as err:
    sys.exit(str(err))
if CUDA is not None:
    # Read by torch.utils.cpp_extension when it is imported (below): torch's own guess from PATH
    # takes a wrapper script's directory for the toolkit.
    os.environ["CUDA_HOME"] = CUDA.toolkit.home
    os.environ["TORCH_CUDA_ARCH_LIST"] = CUDA.archs
try:
    # The pip package's ninja, first on PATH whenever it is installed: its binary may not be on
    # PATH (a venv that is not active), and a system ninja of another version would find the
    # other's .ninja_log unreadable and recompile everything (the README's second command would
    # rebuild all after the first had built with /usr/bin/ninja).
    import ninja

    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
except ImportError:
    pass

from torch.utils.cpp_extension import (  # noqa: E402
    BuildExtension,
    CppExtension,
    CUDAExtension,
    is_ninja_available,
)

DEBUG = os.environ.get("DEBUG", "0") == "1"


def _files(*patterns: str) -> list[str]:
    return [f for p in patterns for f in sorted(glob.glob(os.path.join("csrc", p)))]


def get_extensions():
    # -g0: Python's own CFLAGS (which torch passes first) ask for -g; the templates' debug
    # information is most of the objects (lstm_block_ex.o: 43 MB with it, 7 MB without) and a
    # good part of the compile time.
    cxx = ["-O0", "-g"] if DEBUG else ["-O3", "-g0"]
    # torch 2.13 headers are C++20 (they warn under C++17).
    # -fno-trapping-math (as torch itself uses) lets GCC if-convert the clamps in the pointwise
    # loops, which is what lets them vectorise.
    cxx += ["-std=c++20", "-fno-math-errno", "-fno-trapping-math"]
    # The AVX2 rows compute on eight-float GCC vectors (csrc/cpu/activations.h's f32x8) in
    # always-inlined functions: no call passes one, so the note that such a call's ABI depends
    # on AVX (GCC's and clang's -Wpsabi, once per instantiation) does not apply.
    cxx += ["-Wno-psabi"]
    # at::parallel_for is a header template that is parallel only where _OPENMP is defined, i.e.
    # in code compiled with -fopenmp; without it every parallel_for here runs on one thread.
    # Linking with -fopenmp records libgomp.so.1, which resolves to the copy torch has loaded.
    openmp = [] if sys.platform == "darwin" else ["-fopenmp"]
    cxx += openmp
    sources = _files("*.cpp", "cpu/*.cpp")
    # Without ninja, setuptools skips an extension that is newer than these.
    depends = _files("*.h", "cpu/*.h", "cuda/*.h", "cuda/*.cuh")
    if CUDA is None:
        return [
            CppExtension(
                "torch_lstm_grad._C",
                sources,
                depends=depends,
                extra_compile_args={"cxx": cxx},
                extra_link_args=openmp,
                py_limited_api=True,
            )
        ]
    nvcc = ["-O0", "-g", "-G"] if DEBUG else ["-O3"]
    nvcc += ["-std=c++20"]
    ext = CUDAExtension(
        "torch_lstm_grad._C",
        sources + _files("cuda/*.cpp", "cuda/*.cu"),
        depends=depends,
        define_macros=[("TORCH_LSTM_GRAD_WITH_CUDA", None)],
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        library_dirs=CUDA.library_dirs,
        extra_link_args=CUDA.link_args + openmp,
        py_limited_api=True,
    )
    # The cuDNN that was found comes first; the wheels' headers only fill in what the toolkit
    # lacks (cuBLAS, cuSPARSE, cuSOLVER): after torch's and the toolkit's include directories.
    ordered = [CUDA.cudnn_include] + ext.include_dirs + CUDA.include_dirs
    ext.include_dirs = list(dict.fromkeys(ordered))
    return [ext]


# ninja's status line with the time since the build began, for every file it starts (shown by
# `pip install -v` or `python setup.py build_ext`): a first build is never silent for minutes.
os.environ.setdefault("NINJA_STATUS", "[%f/%t files, %es] ")


def _build_key() -> str:
    config = "cuda" if CUDA is not None else "cpu"
    return f"{sys.implementation.cache_tag}-torch{torch.__version__}-{config}" + (
        "-debug" if DEBUG else ""
    )


def _build_info() -> dict:
    info = {
        "TORCH_VERSION": torch.__version__,
        "TORCH_GIT_VERSION": torch.version.git_version,
        "WITH_CUDA": CUDA is not None,
        "DEBUG": DEBUG,
        "COMPILER": build_env.compiler_version(),
        "PYTHON": sys.version.split()[0],
    }
    if CUDA is not None:
        info.update(
            CUDA_TOOLKIT=f"{CUDA.toolkit.version} at {CUDA.toolkit.home} ({CUDA.toolkit.found_by})",
            CUDNN=f"{CUDA.cudnn_version or 'unknown version'} ({CUDA.cudnn_from})",
            CUDA_ARCHS=CUDA.archs,
            CUDA_ARCHS_FROM=CUDA.archs_from,
        )
    return info


class BuildWithNotice(BuildExtension):
    """Keeps the objects in build/, says what it compiles before the (slow, first-time)
    compile starts, and records what it built in _build_info.py beside the .so."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", _build_key())

    def run(self):
        files = sum(len(e.sources) for e in self.extensions)
        if CUDA is None:
            config = "CPU-only" + (
                f" ({build_env.FORCE_CPU}=1)" if torch.version.cuda is not None else ""
            )
        else:
            config = (
                f"CPU + CUDA extension for {CUDA.archs} ({CUDA.archs_from}) with CUDA "
                f"{CUDA.toolkit.version} from {CUDA.toolkit.home} and cuDNN "
                f"{CUDA.cudnn_version} ({CUDA.cudnn_from})"
            )
        cache = (
            "ninja recompiles only what changed since the last build"
            if self.use_ninja and is_ninja_available()
            else "ninja is not installed, so every file is compiled (pip install ninja)"
        )
        print(
            f"torch_lstm_grad: compiling the {config}: {files} source files against torch "
            f"{torch.__version__} in {self.build_temp}; a first build takes a few minutes on "
            f"2 cores, {cache}.",
            file=sys.stderr,
            flush=True,
        )
        super().run()
        info = "".join(f"{k} = {v!r}\n" for k, v in _build_info().items())
        header = "# Written by setup.py with torch_lstm_grad._C; checked at import. Not in git.\n"
        targets = {os.path.dirname(self.get_ext_fullpath("torch_lstm_grad._C"))}
        if self.inplace or getattr(self, "editable_mode", False):
            targets.add(os.path.join(ROOT, "torch_lstm_grad"))
        built = os.path.basename(self.get_ext_fullpath("torch_lstm_grad._C"))
        for target in targets:
            os.makedirs(target, exist_ok=True)
            with open(os.path.join(target, "_build_info.py"), "w") as f:
                f.write(header + info)
            # Another build's _C.cpython-3XX-*.so would be imported before this _C.abi3.so
            # (the import system tries the interpreter's own suffix first).
            for stale in glob.glob(os.path.join(target, "_C.*")):
                if os.path.basename(stale) != built and stale.endswith((".so", ".pyd")):
                    os.remove(stale)


# One _C.abi3.so for CPython 3.10 and later: the extension uses Python's C API only to create
# its (empty) module, and torch compiles it with Py_LIMITED_API = 3.10 and without
# libtorch_python (py_limited_api above); the ops are reached through torch.ops.
setup(
    ext_modules=get_extensions(),
    cmdclass={"build_ext": BuildWithNotice},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
