"""TensorFlow's fused RNN raw ops, by their TF names.

Each function takes `tf.raw_ops.<Op>`'s arguments (same names, order and defaults; `name` is
accepted and ignored) and returns a NamedTuple with TF's output names. A port replaces
`tf.raw_ops.BlockLSTM(...)` with `torch_lstm_grad.raw_ops.BlockLSTM(...)`.

Inputs are torch tensors; numpy arrays and Python scalars/lists are converted as TF's eager ops
convert them (floats to the dtype and device of the op's first float torch tensor, `seq_len_max`
to int64, `sequence_lengths` keeping their integer dtype; docs/api.md). Every forward op is
differentiable: its backward is the Grad/Backprop op of the same name (see autograd.py).
Layouts: time-major `[T, B, ...]`; LSTM gate blocks ICFO (BlockLSTM, LSTMBlockCell) or IFCO
(BlockLSTMV2, CudnnRNN*); the CudnnRNN params layout and canonical order are those of
docs/tf-semantics.md §7 (see `_library/cudnn_rnn_config.params_layout`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ._library.checks import dtype_name, shape_str
from ._library.cudnn_rnn_config import ParamsLayout, params_layout
from .autograd import call, cudnn_forward_name

__all__ = [
    "BlockLSTM",
    "BlockLSTMGrad",
    "BlockLSTMGradV2",
    "BlockLSTMV2",
    "CudnnRNN",
    "CudnnRNNBackprop",
    "CudnnRNNBackpropV2",
    "CudnnRNNBackpropV3",
    "CudnnRNNCanonicalToParams",
    "CudnnRNNCanonicalToParamsV2",
    "CudnnRNNParamsSize",
    "CudnnRNNParamsToCanonical",
    "CudnnRNNParamsToCanonicalV2",
    "CudnnRNNV2",
    "CudnnRNNV3",
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
    """A torch tensor as it is; a numpy array with its dtype, Python numbers and lists with
    torch's default (float32, TF's too); converted to `like`'s dtype and device when given."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray | np.generic):
        t = torch.from_numpy(np.array(value, copy=True))
    else:
        t = torch.as_tensor(value)
    return t if like is None else t.to(dtype=like.dtype, device=like.device)


def _type_source(values) -> int:
    """Which of an op's inputs of one type T decides T, as in TF's eager ops: the first torch
    tensor among them, else the first value (converted alone)."""
    return next((k for k, v in enumerate(values) if isinstance(v, torch.Tensor)), 0)


def _floats(*values) -> tuple[torch.Tensor, ...]:
    """An op's inputs of one type T, converted as TF's eager ops convert them (T from
    _type_source): numpy arrays, Python numbers and lists become T on that tensor's device;
    tensors stay as they are (one of another dtype is the op's TypeError, as in TF)."""
    like = _to_tensor(values[_type_source(values)])
    return tuple(_to_tensor(v, like) for v in values)


def _seq_len_max(value) -> torch.Tensor:
    # Keeps the value's own dtype: a float is rejected by the op (TypeError), not truncated.
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value))


def LSTMBlockCell(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias=1, cell_clip=3,
                  use_peephole=False, name=None) -> LSTMBlockCellOutput:  # fmt: skip
    """One LSTM step, ICFO gates: x [B, I], cs_prev/h_prev [B, H], w [I + H, 4H], b [4H],
    peepholes wci/wcf/wco [H] (ignored unless use_peephole). Clips cs to ±cell_clip when > 0."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    out = call("torch_lstm_grad::lstm_block_cell", *args, float(forget_bias), float(cell_clip),
               bool(use_peephole))  # fmt: skip
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
    out = call("torch_lstm_grad::block_lstm", _seq_len_max(seq_len_max), *args,
               float(forget_bias), float(cell_clip), bool(use_peephole))  # fmt: skip
    return BlockLSTMOutput(*out)


def BlockLSTMV2(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, cell_clip=0,
                use_peephole=False, name=None) -> BlockLSTMV2Output:  # fmt: skip
    """BlockLSTM with IFCO gates (Keras order) and no forget_bias; clipping off by default."""
    args = _floats(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    out = call("torch_lstm_grad::block_lstm_v2", _seq_len_max(seq_len_max), *args,
               float(cell_clip), bool(use_peephole))  # fmt: skip
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
    args = _floats(x, h_prev, w_ru, w_c, b_ru, b_c)
    return GRUBlockCellOutput(*call("torch_lstm_grad::gru_block_cell", *args))


def GRUBlockCellGrad(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h,
                     name=None) -> GRUBlockCellGradOutput:  # fmt: skip
    """Backward of one GRUBlockCell step given its outputs r, u, c and the grad of h."""
    args = _floats(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h)
    return GRUBlockCellGradOutput(*_ops.gru_block_cell_grad(*args))


# ---------------------------------------------------------------------------------------------
# CudnnRNN family (docs/tf-semantics.md §6–7). CudnnRNN and CudnnRNNV2 run as CudnnRNNV3 with every
# length = T, time-major, no projection (TF with cuDNN 9 refuses them; docs/differences.md).


class CudnnRNNOutput(NamedTuple):
    output: torch.Tensor  # [T, B, D * P] ([B, T, D * P] batch-major); P = num_proj or H
    output_h: torch.Tensor  # input_h's shape
    output_c: torch.Tensor  # input_c's shape (lstm); a 0-d dummy for the other modes
    reserve_space: torch.Tensor  # opaque, for the Backprop op; 0-d when is_training=False


class CudnnRNNV2Output(NamedTuple):
    output: torch.Tensor
    output_h: torch.Tensor
    output_c: torch.Tensor
    reserve_space: torch.Tensor
    host_reserved: torch.Tensor  # int8, 0-d (nothing is autotuned)


CudnnRNNV3Output = CudnnRNNV2Output


class CudnnRNNBackpropOutput(NamedTuple):
    input_backprop: torch.Tensor  # input's shape
    input_h_backprop: torch.Tensor  # input_h's shape
    input_c_backprop: torch.Tensor  # input_c's shape (lstm); 0-d for the other modes
    params_backprop: torch.Tensor  # params' shape


CudnnRNNBackpropV2Output = CudnnRNNBackpropOutput
CudnnRNNBackpropV3Output = CudnnRNNBackpropOutput


class CudnnRNNParamsToCanonicalOutput(NamedTuple):
    weights: list[torch.Tensor]  # 2-D [out, in], canonical order
    biases: list[torch.Tensor]  # 1-D [H], canonical order


CudnnRNNParamsToCanonicalV2Output = CudnnRNNParamsToCanonicalOutput


def _sequence_lengths(value) -> torch.Tensor | None:
    """None (every row runs T steps), a tensor as it is, or a numpy array / Python list with
    its own integer dtype: the op reads any integer dtype and checks each value against [0, T],
    where narrowing to int32 (TF's dtype) would wrap 2**32 + 2 to a valid 2. Bools become 0/1
    as TF converts them; a float array keeps its dtype so the op rejects it."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    t = torch.from_numpy(np.array(value, copy=True))
    return t.int() if t.dtype == torch.bool else t


def _cudnn_rnn(op_name, input, input_h, input_c, params, sequence_lengths, rnn_mode, input_mode,
               direction, dropout, seed, seed2, num_proj, is_training, time_major):  # fmt: skip
    args = (*_floats(input, input_h, input_c, params), _sequence_lengths(sequence_lengths),
            rnn_mode, input_mode, direction, float(dropout), int(seed), int(seed2), int(num_proj),
            bool(is_training), bool(time_major))  # fmt: skip
    if is_training or torch.compiler.is_compiling():
        return call("torch_lstm_grad::cudnn_rnn", *args)
    with cudnn_forward_name(op_name):  # TF's is_training error names the op that was called
        return call("torch_lstm_grad::cudnn_rnn", *args)


def CudnnRNN(input, input_h, input_c, params, rnn_mode="lstm", input_mode="linear_input",
             direction="unidirectional", dropout=0, seed=0, seed2=0, is_training=True,
             name=None) -> CudnnRNNOutput:  # fmt: skip
    """CudnnRNNV3 with every sequence running T steps, time-major, without host_reserved."""
    out = _cudnn_rnn("CudnnRNN", input, input_h, input_c, params, None, rnn_mode, input_mode,
                     direction, dropout, seed, seed2, 0, is_training, True)  # fmt: skip
    return CudnnRNNOutput(*out[:4])


def CudnnRNNV2(input, input_h, input_c, params, rnn_mode="lstm", input_mode="linear_input",
               direction="unidirectional", dropout=0, seed=0, seed2=0, is_training=True,
               name=None) -> CudnnRNNV2Output:  # fmt: skip
    """CudnnRNNV3 with every sequence running T steps, time-major; host_reserved is int8 0-d."""
    out = _cudnn_rnn("CudnnRNNV2", input, input_h, input_c, params, None, rnn_mode, input_mode,
                     direction, dropout, seed, seed2, 0, is_training, True)  # fmt: skip
    return CudnnRNNV2Output(*out)


def CudnnRNNV3(input, input_h, input_c, params, sequence_lengths, rnn_mode="lstm",
               input_mode="linear_input", direction="unidirectional", dropout=0, seed=0, seed2=0,
               num_proj=0, is_training=True, time_major=True,
               name=None) -> CudnnRNNV3Output:  # fmt: skip
    """A cuDNN-style RNN (lstm, gru, rnn_tanh, rnn_relu) over `input` [T, B, I] ([B, T, I] when
    not time_major), `num_layers = input_h.shape[0 or 1] // D` layers, from the states input_h
    [L·D, B, P] and (lstm) input_c [L·D, B, H] (batch-major: [B, L·D, ·], whose memory is read
    as [L·D, B, ·] as TF does), with the weights in `params` (CudnnRNNParamsSize elements).

    sequence_lengths: B integers in [0, T] (row b runs its first ℓ_b steps; outputs beyond are
    zero; ℓ_b = 0 keeps the initial state), or None for all T. Dropout (training only) applies
    between layers. Differentiable (backward: CudnnRNNBackpropV3).
    """
    out = _cudnn_rnn("CudnnRNNV3", input, input_h, input_c, params, sequence_lengths, rnn_mode,
                     input_mode, direction, dropout, seed, seed2, num_proj, is_training,
                     time_major)  # fmt: skip
    return CudnnRNNV3Output(*out)


def _cudnn_rnn_backprop(input, input_h, input_c, params, sequence_lengths, output, output_h,
                        output_c, output_backprop, output_h_backprop, output_c_backprop,
                        reserve_space, host_reserved, rnn_mode, input_mode, direction, dropout,
                        seed, seed2, num_proj, time_major) -> CudnnRNNBackpropOutput:  # fmt: skip
    floats = _floats(input, input_h, input_c, params, output, output_h, output_c, output_backprop,
                     output_h_backprop, output_c_backprop, reserve_space)  # fmt: skip
    input, input_h, input_c, params, output, output_h, output_c = floats[:7]
    out = _ops.cudnn_rnn_backprop(
        input, input_h, input_c, params, _sequence_lengths(sequence_lengths), output, output_h,
        output_c, *floats[7:], _to_tensor(host_reserved), rnn_mode, input_mode, direction,
        float(dropout), int(seed), int(seed2), int(num_proj), bool(time_major),
    )  # fmt: skip
    return CudnnRNNBackpropOutput(*out)


def CudnnRNNBackprop(input, input_h, input_c, params, output, output_h, output_c, output_backprop,
                     output_h_backprop, output_c_backprop, reserve_space, rnn_mode="lstm",
                     input_mode="linear_input", direction="unidirectional", dropout=0, seed=0,
                     seed2=0, name=None) -> CudnnRNNBackpropOutput:  # fmt: skip
    """Backprop of CudnnRNN given its outputs, their grads and its reserve_space."""
    return _cudnn_rnn_backprop(input, input_h, input_c, params, None, output, output_h, output_c,
                               output_backprop, output_h_backprop, output_c_backprop,
                               reserve_space, torch.zeros((), dtype=torch.int8), rnn_mode,
                               input_mode, direction, dropout, seed, seed2, 0, True)  # fmt: skip


def CudnnRNNBackpropV2(input, input_h, input_c, params, output, output_h, output_c,
                       output_backprop, output_h_backprop, output_c_backprop, reserve_space,
                       host_reserved, rnn_mode="lstm", input_mode="linear_input",
                       direction="unidirectional", dropout=0, seed=0, seed2=0,
                       name=None) -> CudnnRNNBackpropV2Output:  # fmt: skip
    """Backprop of CudnnRNNV2 (host_reserved is accepted and not read)."""
    return _cudnn_rnn_backprop(input, input_h, input_c, params, None, output, output_h, output_c,
                               output_backprop, output_h_backprop, output_c_backprop,
                               reserve_space, host_reserved, rnn_mode, input_mode, direction,
                               dropout, seed, seed2, 0, True)  # fmt: skip


def CudnnRNNBackpropV3(input, input_h, input_c, params, sequence_lengths, output, output_h,
                       output_c, output_backprop, output_h_backprop, output_c_backprop,
                       reserve_space, host_reserved, rnn_mode="lstm", input_mode="linear_input",
                       direction="unidirectional", dropout=0, seed=0, seed2=0, num_proj=0,
                       time_major=True, name=None) -> CudnnRNNBackpropV3Output:  # fmt: skip
    """Backprop of CudnnRNNV3: the attributes must repeat the forward's. Gradients at padded
    positions (t >= sequence_lengths[b]) are zero; output_backprop there is ignored."""
    return _cudnn_rnn_backprop(input, input_h, input_c, params, sequence_lengths, output, output_h,
                               output_c, output_backprop, output_h_backprop, output_c_backprop,
                               reserve_space, host_reserved, rnn_mode, input_mode, direction,
                               dropout, seed, seed2, num_proj, time_major)  # fmt: skip


# -- params buffer <-> canonical tensors ------------------------------------------------------

_CUDNN_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _int_scalar(value, name: str) -> int:
    """num_layers / num_units / input_size: a Python int or an integer scalar tensor (TF: int32)."""
    if isinstance(value, torch.Tensor | np.ndarray | np.generic):
        t = _to_tensor(value)
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer scalar (TF uses int32), got dtype "
                            f"{dtype_name(t.dtype)}")  # fmt: skip
        if t.dim() != 0:
            raise ValueError(f"{name}: expected a scalar (0-d) tensor, got shape "
                             f"{shape_str(t.shape)}")  # fmt: skip
        return int(t.item())
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: expected an int or an integer scalar tensor (TF uses int32), "
                        f"got {type(value).__name__}")  # fmt: skip
    return value


def _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction,
                   num_proj) -> ParamsLayout:  # fmt: skip
    return params_layout(rnn_mode, input_mode, direction, _int_scalar(num_layers, "num_layers"),
                         _int_scalar(num_units, "num_units"),
                         _int_scalar(input_size, "input_size"), int(num_proj))  # fmt: skip


def CudnnRNNParamsSize(num_layers, num_units, input_size, T, S, rnn_mode="lstm",
                       input_mode="linear_input", direction="unidirectional", dropout=0, seed=0,
                       seed2=0, num_proj=0, name=None) -> torch.Tensor:  # fmt: skip
    """The element count of the params buffer, as a shape-[1] tensor of dtype S. T (the params'
    dtype: float16, bfloat16, float32 or float64) and S (int32 or int64) are torch dtypes; the
    size does not depend on T (the layout has no padding). dropout/seed/seed2 are ignored."""
    if T not in _CUDNN_FLOATS:
        raise TypeError(f"T: expected torch.float16, torch.bfloat16, torch.float32 or "
                        f"torch.float64, got {T!r}")  # fmt: skip
    if S not in (torch.int32, torch.int64):
        raise TypeError(f"S: expected torch.int32 or torch.int64, got {S!r}")
    layout = _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction,
                            num_proj)  # fmt: skip
    return torch.tensor([layout.size], dtype=S)


def _count_message(name: str, what: str, expected: int, formula: str, layout: ParamsLayout,
                   rnn_mode: str, got) -> str:  # fmt: skip
    return (f"{name}: expected {formula} = {expected}{what} (G = {layout.gates} for "
            f"rnn_mode='{rnn_mode}'), got {got}")  # fmt: skip


def _formulas(layout: ParamsLayout) -> tuple[str, str]:
    """How the canonical list lengths are counted (weights, biases), for the messages."""
    projecting = layout.proj_units != layout.num_units
    weights = "num_layers * D * (2G + 1)" if projecting else "num_layers * D * 2G"
    return weights, "num_layers * D * 2G"


def _expect_count(name: str, got, expected: int, formula: str, layout: ParamsLayout,
                  rnn_mode: str) -> None:  # fmt: skip
    if int(got) != expected:
        raise ValueError(_count_message(name, "", expected, formula, layout, rnn_mode, got))


def _params_to_canonical(layout: ParamsLayout, params) -> CudnnRNNParamsToCanonicalOutput:
    params = _to_tensor(params)
    if params.dtype not in _CUDNN_FLOATS:
        raise TypeError("params: expected dtype float16, bfloat16, float32 or float64, got "
                        f"{dtype_name(params.dtype)}")  # fmt: skip
    if params.dim() != 1 or params.numel() != layout.size:
        raise ValueError(f"params: expected a 1-D tensor of CudnnRNNParamsSize = {layout.size} "
                         f"elements for this model, got shape "
                         f"{shape_str(params.shape)}")  # fmt: skip

    # Copies (TF's outputs are their own buffers), differentiable back into params.
    def region(offset, shape):
        if offset is None:  # skip_input: layer 0 has no input matrices
            return params.new_empty(shape)
        n = int(np.prod(shape))
        return params.narrow(0, offset, n).view(shape).clone()

    weights = [region(off, shape) for off, shape in layout.canonical_weights()]
    biases = [region(off, shape) for off, shape in layout.canonical_biases()]
    return CudnnRNNParamsToCanonicalOutput(weights, biases)


def CudnnRNNParamsToCanonical(num_layers, num_units, input_size, params, num_params,
                              rnn_mode="lstm", input_mode="linear_input",
                              direction="unidirectional", dropout=0, seed=0, seed2=0,
                              name=None) -> CudnnRNNParamsToCanonicalOutput:  # fmt: skip
    """Splits `params` into TF's canonical tensors (docs/tf-semantics.md §7.1), per pseudo-layer
    k = layer·D + direction: weights W_0..W_{G-1} [H, in_l], R_0..R_{G-1} [H, H]; biases
    bW_0..bW_{G-1}, bR_0..bR_{G-1} [H]. G = 4 (lstm i, f, c, o), 3 (gru r, z, h), 1 (rnn_*).
    num_params (TF's attribute, checked) is each list's length, num_layers·D·2G.

    skip_input: layer 0 has no input matrices (x feeds the gates directly), but its slots stay
    in the list as empty [H, 0] tensors, so the lists always hold num_layers·D·2G entries, the
    index of every tensor does not depend on input_mode, and V1's single num_params counts
    both lists (cuDNN reports those regions with size 0; TF crashed on them). The input biases
    bW of layer 0 exist and are used. CudnnRNNCanonicalToParams takes any 0-element tensor in
    those slots. The outputs are copies; dropout/seed/seed2 are ignored.
    """
    layout = _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, 0)
    expected = len(layout.canonical_weights())
    _expect_count("num_params", num_params, expected, _formulas(layout)[0], layout, rnn_mode)
    return _params_to_canonical(layout, params)


def CudnnRNNParamsToCanonicalV2(num_layers, num_units, input_size, params, num_params_weights,
                                num_params_biases, rnn_mode="lstm", input_mode="linear_input",
                                direction="unidirectional", dropout=0, seed=0, seed2=0,
                                num_proj=0,
                                name=None) -> CudnnRNNParamsToCanonicalV2Output:  # fmt: skip
    """CudnnRNNParamsToCanonical with projection (lstm, 0 < num_proj < num_units): R_k are
    [H, P], layers above the first take D·P inputs, and each pseudo-layer's weights end with
    W_proj [P, H]; so num_params_weights = num_layers·D·(2G + 1) and num_params_biases =
    num_layers·D·2G. skip_input as in CudnnRNNParamsToCanonical."""
    layout = _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction,
                            num_proj)  # fmt: skip
    w_formula, b_formula = _formulas(layout)
    _expect_count("num_params_weights", num_params_weights, len(layout.canonical_weights()),
                  w_formula, layout, rnn_mode)  # fmt: skip
    _expect_count("num_params_biases", num_params_biases, len(layout.canonical_biases()),
                  b_formula, layout, rnn_mode)  # fmt: skip
    return _params_to_canonical(layout, params)


def _canonical_to_params(layout: ParamsLayout, weights, biases, rnn_mode: str) -> torch.Tensor:
    w_spec, b_spec = layout.canonical_weights(), layout.canonical_biases()
    weights, biases = list(weights), list(biases)
    w_formula, b_formula = _formulas(layout)
    for name, values, spec, formula in (("weights", weights, w_spec, w_formula),
                                        ("biases", biases, b_spec, b_formula)):  # fmt: skip
        if len(values) != len(spec):
            raise ValueError(_count_message(name, " tensors", len(spec), formula, layout,
                                            rnn_mode, len(values)))  # fmt: skip
    named = [(f"weights[{k}]", v, s) for k, (v, s) in enumerate(zip(weights, w_spec, strict=True))]
    named += [(f"biases[{k}]", v, s) for k, (v, s) in enumerate(zip(biases, b_spec, strict=True))]
    # The tensors that have a region decide dtype and device as an op's inputs of one type
    # do (_type_source); numpy arrays and lists are converted to them, as in TF.
    regioned = [item for item in named if item[2][0] is not None]
    ref_name, ref_value, _ = regioned[_type_source([value for _, value, _ in regioned])]
    ref = _to_tensor(ref_value)
    if ref.dtype not in _CUDNN_FLOATS:
        raise TypeError(f"{ref_name}: expected dtype float16, bfloat16, float32 or float64, got "
                        f"{dtype_name(ref.dtype)}")  # fmt: skip
    pieces = []
    for name, value, (offset, shape) in named:
        t = _to_tensor(value, like=ref)
        n = int(np.prod(shape))
        if t.numel() != n:
            raise ValueError(f"{name}: expected {n} elements (canonical shape "
                             f"{shape_str(shape)}), got shape {shape_str(t.shape)}")  # fmt: skip
        if offset is None:  # skip_input's absent input matrix: nothing to store
            continue
        if t.dtype != ref.dtype:
            raise TypeError(f"{name}: expected dtype {dtype_name(ref.dtype)} (the dtype of "
                            f"{ref_name}), got {dtype_name(t.dtype)}")  # fmt: skip
        if t.device != ref.device:
            raise ValueError(f"{name}: expected a tensor on {ref.device} (the device of "
                             f"{ref_name}), got {t.device}")  # fmt: skip
        pieces.append((offset, t.reshape(-1)))
    pieces.sort(key=lambda p: p[0])  # layout order
    return torch.cat([t for _, t in pieces])


def CudnnRNNCanonicalToParams(num_layers, num_units, input_size, weights, biases, rnn_mode="lstm",
                              input_mode="linear_input", direction="unidirectional", dropout=0,
                              seed=0, seed2=0, name=None) -> torch.Tensor:  # fmt: skip
    """The inverse of CudnnRNNParamsToCanonical: one params buffer from the canonical lists
    (any shapes with the right element counts; num_layers·D·2G each). Differentiable (one
    torch.cat). Under skip_input, layer 0's input-matrix slots take any 0-element tensor."""
    layout = _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction, 0)
    return _canonical_to_params(layout, weights, biases, rnn_mode)


def CudnnRNNCanonicalToParamsV2(num_layers, num_units, input_size, weights, biases,
                                rnn_mode="lstm", input_mode="linear_input",
                                direction="unidirectional", dropout=0, seed=0, seed2=0,
                                num_proj=0, name=None) -> torch.Tensor:  # fmt: skip
    """CudnnRNNCanonicalToParams with projection: each pseudo-layer's weights end with W_proj
    [P, H] (see CudnnRNNParamsToCanonicalV2)."""
    layout = _params_layout(num_layers, num_units, input_size, rnn_mode, input_mode, direction,
                            num_proj)  # fmt: skip
    return _canonical_to_params(layout, weights, biases, rnn_mode)
