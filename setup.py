"""Build the torch_lstm_grad._C extension against the torch that is already installed.

CPU-only torch: a CppExtension from csrc/*.cpp and csrc/cpu/*.cpp.
CUDA torch (torch.version.cuda set and a CUDA toolkit found): a CUDAExtension that adds
csrc/cuda/* and defines TORCH_LSTM_GRAD_WITH_CUDA. TORCH_LSTM_GRAD_FORCE_CPU=1 forces the
CPU-only build. DEBUG=1 builds with -O0 -g. Ninja is used when it is installed.
"""

import glob
import os
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension


def _sources(*patterns: str) -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        found += sorted(glob.glob(os.path.join("csrc", pattern)))
    return found


def _with_cuda() -> bool:
    if os.environ.get("TORCH_LSTM_GRAD_FORCE_CPU", "0") == "1":
        return False
    # Decided from the torch build and the toolkit, never from torch.cuda.is_available():
    # a GPU is not needed to compile GPU code.
    return torch.version.cuda is not None and CUDA_HOME is not None


def _cudnn_link() -> tuple[list[str], list[str], list[str]]:
    """(include_dirs, library_dirs, link args) for cuDNN: CUDNN_HOME/CUDNN_PATH if set, else the
    nvidia-cudnn wheel a pip-installed CUDA torch depends on (cpp_extension adds neither). The
    wheel ships only libcudnn.so.<major>, so it is linked by file name."""
    root = os.environ.get("CUDNN_HOME") or os.environ.get("CUDNN_PATH")
    if root is None:
        try:
            import nvidia.cudnn  # the wheel's namespace package

            root = list(nvidia.cudnn.__path__)[0]
        except ImportError:
            return [], [], ["-lcudnn"]
    lib = os.path.join(root, "lib")
    if os.path.exists(os.path.join(lib, "libcudnn.so")):
        return [os.path.join(root, "include")], [lib], ["-lcudnn"]
    versioned = (
        sorted(f for f in os.listdir(lib) if f.startswith("libcudnn.so."))
        if os.path.isdir(lib)
        else []
    )
    name = versioned[0] if versioned else "libcudnn.so"
    return [os.path.join(root, "include")], [lib], [f"-l:{name}"]


def get_extensions():
    debug = os.environ.get("DEBUG", "0") == "1"
    cxx = ["-O0", "-g"] if debug else ["-O3"]
    # torch 2.13 headers are C++20 (they warn under C++17).
    # -fno-trapping-math (as torch itself uses) lets GCC if-convert the clamps in the pointwise
    # loops, which is what lets them vectorise.
    cxx += ["-std=c++20", "-fno-math-errno", "-fno-trapping-math"]
    # at::parallel_for is a header template that is parallel only where _OPENMP is defined, i.e.
    # in code compiled with -fopenmp; without it every parallel_for here runs on one thread.
    # Linking with -fopenmp records libgomp.so.1, which resolves to the copy torch has loaded.
    openmp = [] if sys.platform == "darwin" else ["-fopenmp"]
    cxx += openmp
    sources = _sources("*.cpp", "cpu/*.cpp")
    with_cuda = _with_cuda()
    if not with_cuda:
        return [
            CppExtension(
                "torch_lstm_grad._C",
                sources,
                extra_compile_args={"cxx": cxx},
                extra_link_args=openmp,
            )
        ]

    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")  # H100/H200; keeps compile time down
    include_dirs, library_dirs, link_args = _cudnn_link()
    nvcc = ["-O0", "-g", "-G"] if debug else ["-O3"]
    nvcc += ["-std=c++20"]
    return [
        CUDAExtension(
            "torch_lstm_grad._C",
            sources + _sources("cuda/*.cpp", "cuda/*.cu"),
            define_macros=[("TORCH_LSTM_GRAD_WITH_CUDA", None)],
            extra_compile_args={"cxx": cxx, "nvcc": nvcc},
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            extra_link_args=link_args + openmp,
        )
    ]


class BuildWithNotice(BuildExtension):
    """Says which configuration is compiled before the (slow, first-time) compile starts."""

    def run(self):
        config = "CPU + CUDA/cuDNN" if _with_cuda() else "CPU-only"
        files = sum(len(e.sources) for e in self.extensions)
        print(
            f"torch_lstm_grad: compiling the {config} extension ({files} source files) against "
            f"torch {torch.__version__}; a first build takes a few minutes on 2 cores, later "
            "builds only recompile what changed.",
            file=sys.stderr,
            flush=True,
        )
        super().run()


setup(ext_modules=get_extensions(), cmdclass={"build_ext": BuildWithNotice})
