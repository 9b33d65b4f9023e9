"""torch_lstm_grad: TensorFlow's fused RNN raw ops for PyTorch, forward and backward.

`torch_lstm_grad.raw_ops.<Op>` mirrors `tf.raw_ops.<Op>` (same names, keywords, defaults and
output names); every forward op is differentiable through the matching Grad op. `modules` holds
TF's layers with TF's parameter layouts, `layouts` the explicit converters, `porting` the
checkpoint readers (`load`). See README.md.
"""

import sys

import torch

from ._library import extension as _extension

# Loads torch_lstm_grad._C, whose static initialisers register the ops; a .so built against
# another torch raises ImportError saying to rebuild. `torch-lstm-grad doctor` is the one
# command that runs then: it reports the mismatch instead.
try:
    _extension.load()
except ImportError as _err:
    if not _extension.doctor_requested():
        raise
    from .tools import doctor as _doctor

    raise SystemExit(_doctor.main(sys.argv[2:], load_problem=str(_err))) from None

# Order matters: the ops must be registered (above) before their fakes and autograd.
from ._library import registrations as _registrations  # noqa: E402, F401, I001
from . import keras_layers, layouts, modules, ops, porting, raw_ops, reference  # noqa: E402
from .autograd import (  # noqa: E402
    BlockLSTMExFunction,
    BlockLSTMFunction,
    BlockLSTMV2Function,
    CudnnRNNFunction,
    GRUBlockCellFunction,
    KerasGRUFunction,
    LSTMBlockCellFunction,
)
from .modules import (  # noqa: E402
    CudnnGRU,
    CudnnLSTM,
    CudnnRNNRelu,
    CudnnRNNTanh,
    GRUBlockCell,
    GRUBlockFusedCell,
    LSTMBlockCell,
    LSTMBlockFusedCell,
)
from .porting import load, load_model, verify  # noqa: E402

__version__ = "0.1.0"


def built_with_cuda() -> bool:
    """True when this build of the extension contains the CUDA kernels."""
    return bool(torch.ops.torch_lstm_grad._built_with_cuda())


__all__ = [
    "BlockLSTMExFunction",
    "BlockLSTMFunction",
    "BlockLSTMV2Function",
    "CudnnGRU",
    "CudnnLSTM",
    "CudnnRNNFunction",
    "CudnnRNNRelu",
    "CudnnRNNTanh",
    "GRUBlockCell",
    "GRUBlockCellFunction",
    "GRUBlockFusedCell",
    "KerasGRUFunction",
    "LSTMBlockCell",
    "LSTMBlockCellFunction",
    "LSTMBlockFusedCell",
    "built_with_cuda",
    "keras_layers",
    "layouts",
    "load",
    "load_model",
    "modules",
    "ops",
    "porting",
    "verify",
    "raw_ops",
    "reference",
]
