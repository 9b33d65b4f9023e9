import contextlib
import os

import pytest
import torch

# TensorFlow turns its oneDNN CPU kernels on by default only on CPUs with AVX-512 VNNI, BF16 or
# AMX; without them its CPU Conv2D refuses channels_first (NCHW), so Keras' channels_first
# convolutions cannot run as the oracle on an AVX2-only CPU such as Zen 2. Turned on, TF runs
# the kernels it runs on an AVX-512 CPU. Set before anything imports TensorFlow.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# TORCH_LSTM_GRAD_REQUIRE_TF=1 (set by .ci/run): TF-dependent skips fail (tests/tf_required.py).
from tests.tf_required import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

# TensorFlow 2.21 and triton 3.9 (torch 2.15's) each carry LLVM: importing triton after
# TensorFlow aborts the process ("LLVM ERROR: inconsistency in registered CommandLine options"),
# the other order works. torch imports triton when a test first traces or compiles, by which
# time the TF-oracle tests have imported TensorFlow; so triton is imported here, first.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401

from tests.helpers import CUDA_OK, CUDA_SKIP  # noqa: E402

DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP)]
    ),
]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def no_tf32():
    """TF32 off for the test (CUDA matmuls and cuDNN): the GPU-against-CPU comparisons hold
    float32 to float32's tolerances."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
