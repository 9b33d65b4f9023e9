"""Ops beyond TensorFlow's raw ops: the LSTM and GRU variants real TF/Keras layers use and TF's
fused ops lack, as fused C++ kernels with their backward.

`block_lstm_ex` is BlockLSTM (time-major, the seven outputs) with:

- `gate_activation` for i, f, o: `"sigmoid"` (TF's block ops), `"hard_sigmoid_keras2"`
  (Keras 2.x, `clip(0.2·x + 0.5, 0, 1)`), `"hard_sigmoid_keras3"` (Keras 3, `relu6(x + 3) / 6`);
- `activation` for ci = act(gc) and co = act(cs): `"tanh"`, `"relu"`, `"linear"`;
- `clip_gradient`: `"straight_through"` (TF's block ops: the clip has no gradient effect) or
  `"zero"` (TF1 `LSTMCell`'s `clip_by_value`: zero gradient where the state was clipped);
- `w_proj [H, P]` (TF1 `LSTMCell(num_proj=P, proj_clip=p)`, variable `projection/kernel`):
  `h = clip(o ⊙ act(cs) · w_proj, ±proj_clip)` (clipped when `proj_clip > 0`, zero gradient
  where clipped) is the output and the recurrent input: `h_prev [B, P]`, `w [I + P, 4H]`;
- `gate_order`: `"icfo"` (BlockLSTM, TF1 LSTMCell) or `"ifco"` (Keras, BlockLSTMV2).

The backward derives each activation's derivative from the stored outputs, as TF's block
kernels do; at the kinks that is TF's gradient, except Keras 2's hard sigmoid exactly at
x = ±2.5 (TF passes 0.2 there, this gives 0) and a cell state exactly at ±cell_clip before the
clip with `clip_gradient="zero"` (TF passes, this gives 0): a stored, clipped value cannot tell
"clipped" from "exactly at the bound".
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._library.checks import LSTM_EX_CHOICES, check_choice
from .autograd import call, call_no_grad

__all__ = [
    "BlockLSTMExOutput",
    "BlockLSTMInferenceOutput",
    "KerasGRUOutput",
    "block_lstm_ex",
    "block_lstm_inference",
    "keras_gru",
    "keras_gru_inference",
    "pack_recurrent_weight",
]


class BlockLSTMExOutput(NamedTuple):
    """[T, B, H] each; h is [T, B, P] with a projection. Only cs and h are differentiable."""

    i: torch.Tensor
    cs: torch.Tensor
    f: torch.Tensor
    o: torch.Tensor
    ci: torch.Tensor
    co: torch.Tensor
    h: torch.Tensor


def block_lstm_ex(
    x: torch.Tensor,
    cs_prev: torch.Tensor,
    h_prev: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    *,
    seq_len_max: int | torch.Tensor | None = None,
    wci: torch.Tensor | None = None,
    wcf: torch.Tensor | None = None,
    wco: torch.Tensor | None = None,
    w_proj: torch.Tensor | None = None,
    forget_bias: float = 1.0,
    cell_clip: float = 0.0,
    proj_clip: float = 0.0,
    use_peephole: bool = False,
    gate_order: str = "icfo",
    gate_activation: str = "sigmoid",
    activation: str = "tanh",
    clip_gradient: str = "straight_through",
) -> BlockLSTMExOutput:
    """The `torch_lstm_grad::block_lstm_ex` op, differentiable (backward: block_lstm_ex_grad).

    x [T, B, I] (time-major), cs_prev [B, H], h_prev [B, P], w [I + P, 4H] (rows x then h),
    b [4H], peepholes wci/wcf/wco [H] (with `use_peephole`; None: zeros), w_proj [H, P] or None
    (then P = H). `seq_len_max` None runs all T steps (outputs beyond it are zero, as
    BlockLSTM's). `forget_bias` is added to the f pre-activation; `cell_clip`, `proj_clip`
    apply when > 0. Attributes as in the module docstring.
    """
    for name, value in (("gate_order", gate_order), ("gate_activation", gate_activation),
                        ("activation", activation), ("clip_gradient", clip_gradient)):  # fmt: skip
        check_choice(value, name, LSTM_EX_CHOICES[name])
    H = cs_prev.shape[-1]
    wci, wcf, wco = (x.new_zeros(H) if t is None else t for t in (wci, wcf, wco))
    slm = x.shape[0] if seq_len_max is None else seq_len_max
    if not isinstance(slm, torch.Tensor):
        slm = torch.tensor(int(slm), dtype=torch.int64)
    out = call(
        "torch_lstm_grad::block_lstm_ex", slm, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
        float(forget_bias), float(cell_clip), float(proj_clip), bool(use_peephole), gate_order,
        gate_activation, activation, clip_gradient,
    )  # fmt: skip
    return BlockLSTMExOutput(*out)


class BlockLSTMInferenceOutput(NamedTuple):
    """h [T, B, P]; the final state cs [B, H], h_last [B, P]."""

    h: torch.Tensor
    cs: torch.Tensor
    h_last: torch.Tensor


def pack_recurrent_weight(w: torch.Tensor, gates: int = 4) -> torch.Tensor:
    """The recurrent weight `w [K, gates·H]` (gate blocks of H columns, e.g. BlockLSTM's
    `w[I:]`) in the layout the small-batch CPU kernels read it in: `[ceil(H / 16), gates, K,
    16]`, a copy. Not differentiable; prepare it once per weight version and pass it as
    `packed_w` (and a kernel's input rows `w[:I]` as `packed_x`) to `block_lstm_inference` (the
    modules keep them keyed by the parameter's version)."""
    return torch.ops.torch_lstm_grad.pack_recurrent_weight(w, int(gates))


def block_lstm_inference(
    x: torch.Tensor,
    cs_prev: torch.Tensor,
    h_prev: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    *,
    wci: torch.Tensor | None = None,
    wcf: torch.Tensor | None = None,
    wco: torch.Tensor | None = None,
    w_proj: torch.Tensor | None = None,
    packed_w: torch.Tensor | None = None,
    packed_x: torch.Tensor | None = None,
    sequence_length: torch.Tensor | None = None,
    forget_bias: float = 1.0,
    cell_clip: float = 0.0,
    proj_clip: float = 0.0,
    use_peephole: bool = False,
    gate_order: str = "icfo",
    gate_activation: str = "sigmoid",
    activation: str = "tanh",
) -> BlockLSTMInferenceOutput:
    """`block_lstm_ex`'s forward for a caller that records no gradient: returns only the
    outputs h [T, B, P] and the final state (cs [B, H], h_last [B, P]), without writing the
    gate activations and cell states of every step. Arguments as `block_lstm_ex`, plus:
    `sequence_length [B]` (ints, or None: every row runs T steps): the steps run to its
    largest value, each row's h is zero from its length on and its final state is the one at
    its length (the initial state for length 0), as TF1's LSTMBlockFusedCell; `packed_w`,
    `packed_x`: `pack_recurrent_weight(w[I:])` and `pack_recurrent_weight(w[:I])`, or None (the
    CPU kernels then prepare them per call where they use them; the numbers are the same). The
    numbers are block_lstm_ex's. Not differentiable (its backward raises)."""
    for name, value in (("gate_order", gate_order), ("gate_activation", gate_activation),
                        ("activation", activation)):  # fmt: skip
        check_choice(value, name, LSTM_EX_CHOICES[name])
    H = cs_prev.shape[-1]
    wci, wcf, wco = (x.new_zeros(H) if t is None else t for t in (wci, wcf, wco))
    if sequence_length is not None and not isinstance(sequence_length, torch.Tensor):
        sequence_length = torch.as_tensor(sequence_length, dtype=torch.int64)
    out = call_no_grad(
        torch.ops.torch_lstm_grad.block_lstm_inference.default, x, cs_prev, h_prev, w, wci, wcf,
        wco, b, w_proj, packed_w, sequence_length, float(forget_bias), float(cell_clip),
        float(proj_clip), bool(use_peephole), gate_order, gate_activation, activation, packed_x,
    )  # fmt: skip
    return BlockLSTMInferenceOutput(*out)


class KerasGRUOutput(NamedTuple):
    """[T, B, H] each, zero beyond seq_len_max. Only h is differentiable."""

    z: torch.Tensor
    r: torch.Tensor
    hh: torch.Tensor  # the candidate act(...)
    hr: torch.Tensor  # what the reset multiplied: h·R_h + b_rec_h (reset_after) or r ⊙ h_prev
    h: torch.Tensor


def _gru_seq_len_max(x, seq_len_max, gate_activation, activation) -> torch.Tensor:
    """keras_gru's attributes checked, and its seq_len_max as the op takes it."""
    check_choice(gate_activation, "gate_activation", LSTM_EX_CHOICES["gate_activation"])
    check_choice(activation, "activation", LSTM_EX_CHOICES["activation"])
    slm = x.shape[0] if seq_len_max is None else seq_len_max
    return slm if isinstance(slm, torch.Tensor) else torch.tensor(int(slm), dtype=torch.int64)


def keras_gru(
    x: torch.Tensor,
    h_prev: torch.Tensor,
    kernel: torch.Tensor,
    recurrent_kernel: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    seq_len_max: int | torch.Tensor | None = None,
    reset_after: bool = True,
    gate_activation: str = "sigmoid",
    activation: str = "tanh",
) -> KerasGRUOutput:
    """The `torch_lstm_grad::keras_gru` op (Keras' GRU layer, fused), differentiable (backward:
    keras_gru_grad).

    x [T, B, I] (time-major), h_prev [B, H], kernel [I, 3H], recurrent_kernel [H, 3H] (Keras'
    gate order z, r, h), bias [2, 3H] (reset_after=True: input row, recurrent row), [3H]
    (reset_after=False) or None (use_bias=False). `gate_activation` is Keras'
    `recurrent_activation` (z, r), `activation` the candidate's; values as in `block_lstm_ex`.
    reset_after=True is cuDNN's GRU and Keras 3's default, reset_after=False TF's GRUBlockCell
    math. `seq_len_max` None runs all T steps.
    """
    slm = _gru_seq_len_max(x, seq_len_max, gate_activation, activation)
    out = call("torch_lstm_grad::keras_gru", slm, x, h_prev, kernel, recurrent_kernel, bias,
               bool(reset_after), gate_activation, activation)  # fmt: skip
    return KerasGRUOutput(*out)


def keras_gru_inference(
    x: torch.Tensor,
    h_prev: torch.Tensor,
    kernel: torch.Tensor,
    recurrent_kernel: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    seq_len_max: int | torch.Tensor | None = None,
    reset_after: bool = True,
    gate_activation: str = "sigmoid",
    activation: str = "tanh",
) -> torch.Tensor:
    """`keras_gru`'s h [T, B, H] for a caller that records no gradient: the same numbers,
    without keeping each step's gates (`torch_lstm_grad::keras_gru_inference`; it has no
    gradient, and raises where one is asked of it). Arguments as `keras_gru`'s."""
    slm = _gru_seq_len_max(x, seq_len_max, gate_activation, activation)
    return call_no_grad(torch.ops.torch_lstm_grad.keras_gru_inference.default, slm, x, h_prev,
                        kernel, recurrent_kernel, bias, bool(reset_after), gate_activation,
                        activation)  # fmt: skip
