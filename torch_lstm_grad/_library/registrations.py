"""Import-time registrations, and nothing else: fake kernels and autograd for every op.

Fake kernels give torch.compile / FakeTensor the output metadata without running a kernel;
they apply the same shape rules as the C++ kernels (`checks.py` mirrors `csrc/checks.h`,
`cudnn.py` mirrors `csrc/cudnn.h`) and return exactly what the C++ kernels return
(contiguous tensors of x's dtype and device).
"""

from __future__ import annotations

import torch

from ..autograd import DIFFERENTIABLE_OPS
from . import checks as C
from . import cudnn_rnn_config as cudnn

_LIB = "torch_lstm_grad::"
_LSTM_ACT_NAMES = ("i", "cs", "f", "o", "ci", "co")


def _empties(like: torch.Tensor, shape, n: int):
    return tuple(like.new_empty(shape) for _ in range(n))


def _lstm_fwd_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole):
    T, B, _, H = C.check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, True)
    C.check_seq_len_max(seq_len_max)
    return _empties(x, (T, B, H), 7)


@torch.library.register_fake(_LIB + "block_lstm")
def _block_lstm_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                     forget_bias, cell_clip, use_peephole):  # fmt: skip
    return _lstm_fwd_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole)


@torch.library.register_fake(_LIB + "block_lstm_v2")
def _block_lstm_v2_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                        cell_clip, use_peephole):  # fmt: skip
    return _lstm_fwd_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole)


@torch.library.register_fake(_LIB + "lstm_block_cell")
def _lstm_block_cell_fake(x, cs_prev, h_prev, w, wci, wcf, wco, b,
                          forget_bias, cell_clip, use_peephole):  # fmt: skip
    _, B, _, H = C.check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, False)
    return _empties(x, (B, H), 7)


def _block_lstm_grad_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                          i, cs, f, o, ci, co, h, cs_grad, h_grad, use_peephole):  # fmt: skip
    sizes = C.check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, True)
    named = list(zip((i, cs, f, o, ci, co), _LSTM_ACT_NAMES, strict=True))
    named += [(h, "h"), (cs_grad, "cs_grad"), (h_grad, "h_grad")]
    C.check_lstm_activations(named, x, sizes, True)
    C.check_seq_len_max(seq_len_max)
    return tuple(t.new_empty(t.shape) for t in (x, cs_prev, h_prev, w, wci, wcf, wco, b))


torch.library.register_fake(_LIB + "block_lstm_grad", _block_lstm_grad_fake)
torch.library.register_fake(_LIB + "block_lstm_grad_v2", _block_lstm_grad_fake)


@torch.library.register_fake(_LIB + "lstm_block_cell_grad")
def _lstm_block_cell_grad_fake(x, cs_prev, h_prev, w, wci, wcf, wco, b,
                               i, cs, f, o, ci, co, cs_grad, h_grad, use_peephole):  # fmt: skip
    sizes = C.check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, False)
    named = list(zip((i, cs, f, o, ci, co), _LSTM_ACT_NAMES, strict=True))
    named += [(cs_grad, "cs_grad"), (h_grad, "h_grad")]
    C.check_lstm_activations(named, x, sizes, False)
    _, B, _, H = sizes
    peepholes = tuple(t.new_empty(t.shape) for t in (wci, wcf, wco))
    return (x.new_empty((B, H)), x.new_empty((B, 4 * H)), *peepholes)


@torch.library.register_fake(_LIB + "_lstm_block_cell_backward")
def _lstm_block_cell_backward_fake(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
                                   cs_grad, h_grad, use_peephole, output_mask):  # fmt: skip
    _lstm_block_cell_grad_fake(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
                               cs_grad, h_grad, use_peephole)  # fmt: skip
    inputs = (x, cs_prev, h_prev, w, wci, wcf, wco, b)
    return tuple(t.new_empty(t.shape) if m else None
                 for t, m in zip(inputs, output_mask, strict=True))  # fmt: skip


@torch.library.register_fake(_LIB + "block_lstm_ex")
def _block_lstm_ex_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                        forget_bias, cell_clip, proj_clip, use_peephole, gate_order,
                        gate_activation, activation, clip_gradient):  # fmt: skip
    C.check_lstm_ex_attrs(gate_order=gate_order, gate_activation=gate_activation,
                          activation=activation, clip_gradient=clip_gradient)  # fmt: skip
    T, B, _, H, P = C.check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                           use_peephole)  # fmt: skip
    C.check_seq_len_max(seq_len_max)
    return (*_empties(x, (T, B, H), 6), x.new_empty((T, B, P)))


@torch.library.register_fake(_LIB + "block_lstm_ex_grad")
def _block_lstm_ex_grad_fake(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                             i, cs, f, o, ci, co, h, cs_grad, h_grad, cell_clip, proj_clip,
                             use_peephole, gate_order, gate_activation, activation,
                             clip_gradient):  # fmt: skip
    C.check_lstm_ex_attrs(gate_order=gate_order, gate_activation=gate_activation,
                          activation=activation, clip_gradient=clip_gradient)  # fmt: skip
    T, B, I, H, P = C.check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                           use_peephole)  # fmt: skip
    named = list(zip((i, cs, f, o, ci, co), _LSTM_ACT_NAMES, strict=True)) + [(cs_grad, "cs_grad")]
    C.check_lstm_activations(named, x, (T, B, I, H), True)
    layout = "[T, B, H]" if w_proj is None else "[T, B, P]"
    for t, name in ((h, "h"), (h_grad, "h_grad")):
        C.check_like(t, name, x)
        C.check_shape(t, name, [T, B, P], layout)
    C.check_seq_len_max(seq_len_max)
    grads = tuple(t.new_empty(t.shape) for t in (x, cs_prev, h_prev, w, wci, wcf, wco, b))
    return (*grads, x.new_empty((0,)) if w_proj is None else w_proj.new_empty(w_proj.shape))


def _check_packed(packed, name, ref, ref_name, K, H, G, layout):
    # Mirrors csrc/packed_weights.h.
    C.check_like(packed, name, ref, ref_name)
    C.check_shape(packed, name, [(H + 15) // 16, G, K, 16], layout)
    torch._check_value(
        packed.is_contiguous(),
        lambda: f"{name}: expected a contiguous tensor (as pack_recurrent_weight returns it)",
    )


def _check_packed_weight(packed, w, P, H):
    layout = "[ceil(H / 16), 4, P, 16] (pack_recurrent_weight of w's recurrent rows)"
    _check_packed(packed, "packed_w", w, "w", P, H, 4, layout)


def _check_packed_input_weight(packed, w, I, H):  # noqa: E741
    layout = "[ceil(H / 16), 4, I, 16] (pack_recurrent_weight of w's input rows)"
    _check_packed(packed, "packed_x", w, "w", I, H, 4, layout)


def _check_sequence_length(lengths, B):
    # Mirrors check_sequence_length (csrc/lstm_block.h) but for its values, which only the
    # kernel reads.
    torch._check_type(
        not (lengths.is_floating_point() or lengths.is_complex()) and lengths.dtype != torch.bool,
        lambda: f"sequence_length: expected an integer dtype, got {C.dtype_name(lengths.dtype)}",
    )
    torch._check_value(
        lengths.dim() == 1 and lengths.shape[0] == B,
        lambda: f"sequence_length: expected shape [B] = [{B}], got {C.shape_str(lengths.shape)}",
    )


@torch.library.register_fake(_LIB + "block_lstm_inference")
def _block_lstm_inference_fake(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, packed_w,
                               sequence_length, forget_bias, cell_clip, proj_clip, use_peephole,
                               gate_order, gate_activation, activation,
                               packed_x=None):  # fmt: skip
    C.check_lstm_ex_attrs(gate_order=gate_order, gate_activation=gate_activation,
                          activation=activation)  # fmt: skip
    T, B, I, H, P = C.check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                           use_peephole)  # fmt: skip
    if packed_w is not None:
        _check_packed_weight(packed_w, w, P, H)
    if packed_x is not None:
        _check_packed_input_weight(packed_x, w, I, H)
    if sequence_length is not None:
        _check_sequence_length(sequence_length, B)
    return x.new_empty((T, B, P)), x.new_empty((B, H)), x.new_empty((B, P))


def _check_gru_attrs(gate_activation, activation):
    C.check_lstm_ex_attrs(gate_activation=gate_activation, activation=activation)


@torch.library.register_fake(_LIB + "keras_gru")
def _keras_gru_fake(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, reset_after,
                    gate_activation, activation):  # fmt: skip
    _check_gru_attrs(gate_activation, activation)
    T, B, _, H = C.check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias, reset_after)
    C.check_seq_len_max(seq_len_max)
    return _empties(x, (T, B, H), 5)


@torch.library.register_fake(_LIB + "keras_gru_inference")
def _keras_gru_inference_fake(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, reset_after,
                              gate_activation, activation):  # fmt: skip
    _check_gru_attrs(gate_activation, activation)
    T, B, _, H = C.check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias, reset_after)
    C.check_seq_len_max(seq_len_max)
    return x.new_empty((T, B, H))


@torch.library.register_fake(_LIB + "keras_gru_grad")
def _keras_gru_grad_fake(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, z, r, hh, hr, h,
                         h_grad, reset_after, gate_activation, activation):  # fmt: skip
    _check_gru_attrs(gate_activation, activation)
    T, B, _, H = C.check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias, reset_after)
    for t, name in ((z, "z"), (r, "r"), (hh, "hh"), (hr, "hr"), (h, "h"), (h_grad, "h_grad")):
        C.check_like(t, name, x)
        C.check_shape(t, name, [T, B, H], "[T, B, H]")
    C.check_seq_len_max(seq_len_max)
    grads = tuple(t.new_empty(t.shape) for t in (x, h_prev, kernel, recurrent_kernel))
    return (*grads, x.new_empty((0,)) if bias is None else bias.new_empty(bias.shape))


@torch.library.register_fake(_LIB + "gru_block_cell")
def _gru_block_cell_fake(x, h_prev, w_ru, w_c, b_ru, b_c):
    B, _, H = C.check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c)
    return _empties(x, (B, H), 4)


@torch.library.register_fake(_LIB + "gru_block_cell_grad")
def _gru_block_cell_grad_fake(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h):
    B, _, H = C.check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c)
    for t, name in ((r, "r"), (u, "u"), (c, "c"), (d_h, "d_h")):
        C.check_like(t, name, x)
        C.check_shape(t, name, [B, H], "[B, H]")
    return x.new_empty(x.shape), x.new_empty((B, H)), x.new_empty((B, H)), x.new_empty((B, 2 * H))


@torch.library.register_fake(_LIB + "_gru_block_cell_backward")
def _gru_block_cell_backward_fake(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h, output_mask):
    _gru_block_cell_grad_fake(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h)
    B, I = x.shape
    H = h_prev.shape[1]
    shapes = ((B, I), (B, H), (I + H, 2 * H), (I + H, H), (2 * H,), (H,))
    return tuple(x.new_empty(s) if m else None for s, m in zip(shapes, output_mask, strict=True))


# CudnnRNN: the shape rules mirror csrc/cudnn.h and live in cudnn.py; the training
# reserve_space gets an unbacked size (its length is the device kernel's own choice).
torch.library.register_fake(_LIB + "cudnn_rnn", cudnn.cudnn_rnn_fake)
torch.library.register_fake(_LIB + "cudnn_rnn_backprop", cudnn.cudnn_rnn_backprop_fake)
# Mutating, so no autograd formula: autograd.py calls it only where no graph is recorded.
torch.library.register_fake(_LIB + "_cudnn_rnn_backprop_consuming",
                            cudnn.cudnn_rnn_backprop_fake)  # fmt: skip


@torch.library.register_fake(_LIB + "cudnn_rnn_inference")
def _cudnn_rnn_inference_fake(input, input_h, input_c, params, sequence_lengths, packed_r,
                              packed_x, rnn_mode, input_mode, direction, num_proj,
                              time_major):  # fmt: skip
    out = cudnn.cudnn_rnn_fake(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                                input_mode, direction, 0.0, 0, 0, num_proj, False,
                                time_major)  # fmt: skip
    if packed_r or packed_x:
        c = cudnn.check_cudnn_rnn_inputs(input, input_h, input_c, params, rnn_mode, input_mode,
                                          direction, num_proj, time_major)  # fmt: skip
    if packed_r:
        _check_packed_count(packed_r, "packed_r", c)
        for t in packed_r:
            _check_packed(t, "packed_r", input, "input", c.P, c.H, c.G,
                          "[ceil(H / 16), G, P, 16] (pack_recurrent_weight of Rᵀ)")  # fmt: skip
    if packed_x:
        torch._check_value(
            not c.skip_input,
            lambda: (
                "packed_x: expected none with input_mode skip_input (layer 0 has no input "
                f"weights), got {len(packed_x)} tensors"
            ),
        )
        _check_packed_count(packed_x, "packed_x", c)
        for k, t in enumerate(packed_x):
            _check_packed(t, "packed_x", input, "input", c.layer_input(k // c.D), c.H, c.G,
                          "[ceil(H / 16), G, in_l, 16] (pack_recurrent_weight of Wᵀ)")  # fmt: skip
    return out[:3]


def _check_packed_count(packed, name, c):
    torch._check_value(
        len(packed) == c.L * c.D,
        lambda: (
            f"{name}: expected none or one tensor per layer and direction "
            f"({c.L * c.D}), got {len(packed)}"
        ),
    )


# The sequence ops differentiate through their Function's formula (written once, in autograd.py);
# the cells' autograd is C++ (csrc/autograd.cpp).
for _name, _fn in DIFFERENTIABLE_OPS.items():
    torch.library.register_autograd(_name, _fn.backward, setup_context=_fn.setup_context)


def _no_double_backward(forward_name: str):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"torch_lstm_grad: the gradient of {forward_name}'s gradient (double backward) is not "
            "implemented; TensorFlow has no second-order gradient for it either."
        )

    return backward


def _no_gradient(name: str):
    def backward(ctx, *grads):
        raise RuntimeError(
            f"torch_lstm_grad: {name} keeps no activations and has no gradient; call the "
            "differentiable op (block_lstm_ex, cudnn_rnn) where a gradient is needed (the "
            "modules do when one is recorded)."
        )

    return backward


def _no_context(ctx, inputs, output):
    pass


for _name in ("block_lstm_inference", "cudnn_rnn_inference", "keras_gru_inference"):
    torch.library.register_autograd(_LIB + _name, _no_gradient(_name), setup_context=_no_context)


for _grad_op, _fwd in (
    ("block_lstm_grad", "BlockLSTM"),
    ("block_lstm_grad_v2", "BlockLSTMV2"),
    ("block_lstm_ex_grad", "block_lstm_ex"),
    ("keras_gru_grad", "keras_gru"),
    ("lstm_block_cell_grad", "LSTMBlockCell"),
    ("gru_block_cell_grad", "GRUBlockCell"),
    ("_gru_block_cell_backward", "GRUBlockCell"),
    ("_lstm_block_cell_backward", "LSTMBlockCell"),
    ("cudnn_rnn_backprop", "CudnnRNN"),
):
    torch.library.register_autograd(_LIB + _grad_op, _no_double_backward(_fwd))
