"""torch_lstm_grad: TensorFlow's fused RNN raw ops for PyTorch, forward and backward.

`torch_lstm_grad.raw_ops.<Op>` mirrors `tf.raw_ops.<Op>` (same names, keywords, defaults and
output names); every forward op is differentiable through the matching Grad op. See README.md.
"""

import torch  # noqa: F401  (loads libtorch, which _C links against)

try:
    from . import _C  # noqa: F401  (loading the .so registers the ops)
except ImportError as err:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "torch_lstm_grad's compiled extension (torch_lstm_grad._C) is missing or was built "
        "against another torch. Build it against the installed torch with\n"
        "    pip install --no-build-isolation -e .\n"
        f"(original error: {err})"
    ) from err

from . import _registrations  # noqa: F401,E402  (fake kernels and autograd)
from . import raw_ops, reference  # noqa: E402
from .autograd import (  # noqa: E402
    BlockLSTMFunction,
    BlockLSTMV2Function,
    CudnnRNNFunction,
    GRUBlockCellFunction,
    LSTMBlockCellFunction,
)

__version__ = "0.1.0"


def built_with_cuda() -> bool:
    """True when this build of the extension contains the CUDA kernels."""
    import torch

    return bool(torch.ops.torch_lstm_grad._built_with_cuda())


__all__ = [
    "BlockLSTMFunction",
    "BlockLSTMV2Function",
    "CudnnRNNFunction",
    "GRUBlockCellFunction",
    "LSTMBlockCellFunction",
    "built_with_cuda",
    "raw_ops",
    "reference",
]
