"""TensorFlow's fused RNN raw ops, by their TF names.

Each function takes `tf.raw_ops.<Op>`'s arguments (same names, order and defaults; `name` is
accepted and ignored) and returns a NamedTuple with TF's output names. A port replaces
`tf.raw_ops.BlockLSTM(...)` with `torch_lstm_grad.raw_ops.BlockLSTM(...)`.

Inputs are torch tensors; numpy arrays and Python scalars/lists are converted (floats to x's
dtype and device, `seq_len_max` to int64). Every forward op is differentiable: its backward is
the Grad op of the same name (see autograd.py). Layouts: time-major `[T, B, ...]`; LSTM gate
blocks ICFO (BlockLSTM, LSTMBlockCell) or IFCO (BlockLSTMV2).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

__all__ = [
    "BlockLSTM",
    "BlockLSTMGrad",
    "BlockLSTMGradV2",
    "BlockLSTMV2",
    "GRUBlockCell",
    "GRUBlockCellGrad",
    "LSTMBlockCell",
    "LSTMBlockCellGrad",
]

_ops = torch.ops.torch_lstm_grad


class LSTMBlockCellOutput(NamedTuple):
    """Outputs of LSTMBlockCell, BlockLSTM and BlockLSTMV2: [B, H] (cell) or [T, B, H]."""

    i: torch.Tensor
    cs: torch.Tensor
    f: torch.Tensor
    o: torch.Tensor
    ci: torch.Tensor
    co: torch.Tensor
    h: torch.Tensor


BlockLSTMOutput = LSTMBlockCellOutput
BlockLSTMV2Output = LSTMBlockCellOutput


class LSTMBlockCellGradOutput(NamedTuple):
    cs_prev_grad: torch.Tensor  # [B, H]
    dicfo: torch.Tensor  # [B, 4H] pre-activation gate grads, ICFO
    wci_grad: torch.Tensor
    wcf_grad: torch.Tensor
    wco_grad: torch.Tensor


class BlockLSTMGradOutput(NamedTuple):
    x_grad: torch.Tensor  # [T, B, I]
    cs_prev_grad: torch.Tensor  # [B, H]
    h_prev_grad: torch.Tensor  # [B, H]
    w_grad: torch.Tensor  # [I + H, 4H]
    wci_grad: torch.Tensor
    wcf_grad: torch.Tensor
    wco_grad: torch.Tensor
    b_grad: torch.Tensor  # [4H]


BlockLSTMGradV2Output = BlockLSTMGradOutput


class GRUBlockCellOutput(NamedTuple):
    r: torch.Tensor
    u: torch.Tensor
    c: torch.Tensor
    h: torch.Tensor


class GRUBlockCellGradOutput(NamedTuple):
    d_x: torch.Tensor  # [B, I]
    d_h_prev: torch.Tensor  # [B, H]
    d_c_bar: torch.Tensor  # [B, H]
    d_r_bar_u_bar: torch.Tensor  # [B, 2H]


def _to_tensor(value, like: torch.Tensor | None = None) -> torch.Tensor:
    """A torch tensor as it is; a numpy array keeps its dtype; scalars and lists take `like`'s."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray | np.generic):
        t = torch.from_numpy(np.array(value, copy=True))
        return t if like is None else t.to(like.device)
    if like is None:
        return torch.as_tensor(value)
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def _floats(x, *others):
    """x first (it decides dtype/device for non-tensor inputs), then the other float inputs."""
    x = _to_tensor(x)
    return (x, *(_to_tensor(t, like=x) for t in others))


def _seq_len_max(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value), dtype=torch.int64)


def LSTMBlockCell(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias=1, cell_clip=3,
                  use_peephole=False, name=None) -> LSTMBlockCellOutput:  # fmt: skip
    """One LSTM step, ICFO gates: x [B, I], cs_prev/h_prev [B, H], w [I + H, 4H], b [4H],
    peepholes wci/wcf/wco [H] (ignored unless use_peephole). Clips cs to ±cell_clip when > 0."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    out = _ops.lstm_block_cell(*args, float(forget_bias), float(cell_clip), bool(use_peephole))
    return LSTMBlockCellOutput(*out)


def LSTMBlockCellGrad(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad,
                      h_grad, use_peephole, name=None) -> LSTMBlockCellGradOutput:  # fmt: skip
    """Backward of one LSTMBlockCell step given its saved outputs and the grads of cs and h."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad)
    return LSTMBlockCellGradOutput(*_ops.lstm_block_cell_grad(*args, bool(use_peephole)))


def BlockLSTM(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias=1, cell_clip=3,
              use_peephole=False, name=None) -> BlockLSTMOutput:  # fmt: skip
    """The LSTMBlockCell step over x [T, B, I] for t < seq_len_max; ICFO gates. Outputs are
    [T, B, H]; all seven are zero for t >= seq_len_max (TF zeroes only cs and h there)."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    out = _ops.block_lstm(_seq_len_max(seq_len_max), *args, float(forget_bias), float(cell_clip),
                          bool(use_peephole))  # fmt: skip
    return BlockLSTMOutput(*out)


def BlockLSTMV2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, cell_clip=0,
                use_peephole=False, name=None) -> BlockLSTMV2Output:  # fmt: skip
    """BlockLSTM with IFCO gates (Keras order) and no forget_bias; clipping off by default."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    out = _ops.block_lstm_v2(_seq_len_max(seq_len_max), *args, float(cell_clip),
                             bool(use_peephole))  # fmt: skip
    return BlockLSTMV2Output(*out)


def BlockLSTMGrad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                  cs_grad, h_grad, use_peephole, name=None) -> BlockLSTMGradOutput:  # fmt: skip
    """Backward of BlockLSTM (ICFO) given its outputs and the grads of cs and h, [T, B, H]."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad,
                   h_grad)  # fmt: skip
    out = _ops.block_lstm_grad(_seq_len_max(seq_len_max), *args, bool(use_peephole))
    return BlockLSTMGradOutput(*out)


def BlockLSTMGradV2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, use_peephole, name=None) -> BlockLSTMGradV2Output:  # fmt: skip
    """Backward of BlockLSTMV2 (IFCO)."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h, cs_grad,
                   h_grad)  # fmt: skip
    out = _ops.block_lstm_grad_v2(_seq_len_max(seq_len_max), *args, bool(use_peephole))
    return BlockLSTMGradV2Output(*out)


def GRUBlockCell(x, h_prev, w_ru, w_c, b_ru, b_c, name=None) -> GRUBlockCellOutput:
    """One step of TF's GRU (reset before the candidate GEMM): x [B, I], h_prev [B, H],
    w_ru [I + H, 2H] (r then u), w_c [I + H, H], b_ru [2H], b_c [H]."""
    return GRUBlockCellOutput(*_ops.gru_block_cell(*_floats(x, h_prev, w_ru, w_c, b_ru, b_c)))


def GRUBlockCellGrad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h,
                     name=None) -> GRUBlockCellGradOutput:  # fmt: skip
    """Backward of one GRUBlockCell step given its outputs r, u, c and the grad of h."""
    args = _floats(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h)
    return GRUBlockCellGradOutput(*_ops.gru_block_cell_grad(*args))
