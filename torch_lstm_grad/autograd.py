"""Autograd for the forward ops: the backward of each is TF's matching Grad op.

Each gradient formula is written once. For the sequence ops it is the `setup_context`/`backward`
pair of a public `torch.autograd.Function`; `_library/registrations.py` registers the same pair on
the op with `torch.library.register_autograd`, so `torch.ops.torch_lstm_grad.*` (and the raw ops
over them) are differentiable too, also under torch.compile. The one-step cells, called once a
step from Python loops, have their autograd in C++ (csrc/autograd.cpp: a Python Function cost
~20 µs a step each way); their whole backward is one op (`_lstm_block_cell_backward`,
`_gru_block_cell_backward`), which the C++ nodes and the public cell Functions here both call.

`call` is how the raw ops run a forward op: in eager mode it skips PyTorch's generic Python
autograd wrapper of custom ops, whose fixed cost (~10 µs per call without grad, ~70 µs with)
would dominate a short sequence; the formula is the same Function's.

Decisions (docs/differences.md): the gate outputs `i, f, o, ci, co` (and GRU's `r, u, c`) are marked
non-differentiable, so putting them in a loss is an explicit error instead of TF's silent zero;
BlockLSTMV2 differentiates through BlockLSTMGradV2 (TF registers the V1 kernel: wrong).
CudnnRNN's reserve_space/host_reserved (and output_c outside LSTM) are non-differentiable.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

__all__ = [
    "BlockLSTMExFunction",
    "BlockLSTMFunction",
    "BlockLSTMV2Function",
    "CudnnRNNFunction",
    "GRUBlockCellFunction",
    "KerasGRUFunction",
    "LSTMBlockCellFunction",
]

_ops = torch.ops.torch_lstm_grad


def _grad_or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    # Grads are not materialised (set_materialize_grads(False)): a None means "no gradient".
    return torch.zeros_like(like) if grad is None else grad


def _save_lstm(ctx, saved, output, use_peephole: bool) -> None:
    i, cs, f, o, ci, co, h = output
    ctx.mark_non_differentiable(i, f, o, ci, co)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*saved, i, cs, f, o, ci, co, h)
    ctx.use_peephole = use_peephole


def _step_grad_or_zeros(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    # The sequence ops read a gradient that is the same at every step (stride 0 in time) as one
    # step (lstm_block.h's step_rows), so "no gradient" costs a [1, 1, 1] zero, not T·B·H.
    return like.new_zeros(()).expand_as(like) if grad is None else grad


def _block_backward(grad_op, ctx, grads):
    """Backward of BlockLSTM(V2): the whole Grad op output is the gradient of the inputs."""
    _gi, cs_grad, _gf, _go, _gci, _gco, h_grad = grads
    (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h) = (
        ctx.saved_tensors
    )
    return grad_op(
        seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
        _step_grad_or_zeros(cs_grad, cs), _step_grad_or_zeros(h_grad, h), ctx.use_peephole,
    )  # fmt: skip


class BlockLSTMFunction(torch.autograd.Function):
    """`BlockLSTM` (ICFO) whose backward is `BlockLSTMGrad`.

    apply(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip,
    use_peephole) -> (i, cs, f, o, ci, co, h), each [T, B, H]. Only cs and h are differentiable.
    """

    @staticmethod
    def forward(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                forget_bias=1.0, cell_clip=3.0, use_peephole=False):  # fmt: skip
        return _ops.block_lstm.default(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                                       forget_bias, cell_clip, use_peephole)  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, _fb, _clip, use_peephole = inputs
        _save_lstm(ctx, (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b), output,
                   use_peephole)  # fmt: skip

    @staticmethod
    def backward(ctx, *grads):
        return (None, *_block_backward(_ops.block_lstm_grad.default, ctx, grads), None, None, None)


class BlockLSTMV2Function(torch.autograd.Function):
    """`BlockLSTMV2` (IFCO, no forget_bias) whose backward is `BlockLSTMGradV2`.

    apply(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, cell_clip, use_peephole).
    """

    @staticmethod
    def forward(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                cell_clip=0.0, use_peephole=False):  # fmt: skip
        return _ops.block_lstm_v2.default(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                                          cell_clip, use_peephole)  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, _clip, use_peephole = inputs
        _save_lstm(ctx, (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b), output,
                   use_peephole)  # fmt: skip

    @staticmethod
    def backward(ctx, *grads):
        return (None, *_block_backward(_ops.block_lstm_grad_v2.default, ctx, grads), None, None)


class BlockLSTMExFunction(torch.autograd.Function):
    """`block_lstm_ex` (BlockLSTM with the activation / clip-gradient variants and TF1
    LSTMCell's projection; csrc/torch_lstm_grad.cpp has the schema) whose backward is
    `block_lstm_ex_grad`.

    apply(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, forget_bias, cell_clip,
    proj_clip, use_peephole, gate_order, gate_activation, activation, clip_gradient) ->
    (i, cs, f, o, ci, co, h): [T, B, H] (h [T, B, P] with w_proj [H, P]). Only cs and h are
    differentiable; w_proj may be None.
    """

    @staticmethod
    def forward(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj=None,
                forget_bias=1.0, cell_clip=0.0, proj_clip=0.0, use_peephole=False,
                gate_order="icfo", gate_activation="sigmoid", activation="tanh",
                clip_gradient="straight_through"):  # fmt: skip
        return _ops.block_lstm_ex.default(
            seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, forget_bias, cell_clip,
            proj_clip, use_peephole, gate_order, gate_activation, activation, clip_gradient,
        )  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, _forget_bias, cell_clip,
         proj_clip, use_peephole, gate_order, gate_activation, activation,
         clip_gradient) = inputs  # fmt: skip
        _save_lstm(ctx, (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj), output,
                   use_peephole)  # fmt: skip
        ctx.attrs = (cell_clip, proj_clip, use_peephole, gate_order, gate_activation, activation,
                     clip_gradient)  # fmt: skip
        ctx.has_proj = w_proj is not None

    @staticmethod
    def backward(ctx, *grads):
        _gi, cs_grad, _gf, _go, _gci, _gco, h_grad = grads
        (seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, i, cs, f, o, ci, co,
         h) = ctx.saved_tensors  # fmt: skip
        g = _ops.block_lstm_ex_grad.default(
            seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, i, cs, f, o, ci, co, h,
            _step_grad_or_zeros(cs_grad, cs), _step_grad_or_zeros(h_grad, h), *ctx.attrs,
        )  # fmt: skip
        return (None, *g[:8], g[8] if ctx.has_proj else None, *(None,) * 8)


class LSTMBlockCellFunction(torch.autograd.Function):
    """`LSTMBlockCell` (one step, ICFO) whose backward is `LSTMBlockCellGrad` plus the matrix
    products of TF1's Python gradient: xh_grad = dicfo·wᵀ, w_grad = [x, h_prev]ᵀ·dicfo,
    b_grad = Σ_b dicfo.

    apply(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole).
    """

    @staticmethod
    def forward(x, cs_prev, h_prev, w, wci, wcf, wco, b,
                forget_bias=1.0, cell_clip=3.0, use_peephole=False):  # fmt: skip
        return _ops.lstm_block_cell.default(x, cs_prev, h_prev, w, wci, wcf, wco, b,
                                            forget_bias, cell_clip, use_peephole)  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, cs_prev, h_prev, w, wci, wcf, wco, b, _fb, _clip, use_peephole = inputs
        _save_lstm(ctx, (x, cs_prev, h_prev, w, wci, wcf, wco, b), output, use_peephole)

    @staticmethod
    def backward(ctx, *grads):
        _gi, cs_grad, _gf, _go, _gci, _gco, h_grad = grads
        x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h = ctx.saved_tensors
        # One internal op computes LSTMBlockCellGrad and the products, only the gradients
        # wanted (csrc/torch_lstm_grad.cpp), as the C++ autograd of the op does.
        grads = _ops._lstm_block_cell_backward.default(
            x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co,
            _grad_or_zeros(cs_grad, cs), _grad_or_zeros(h_grad, h), ctx.use_peephole,
            list(ctx.needs_input_grad[:8]),
        )  # fmt: skip
        return (*grads, None, None, None)


class GRUBlockCellFunction(torch.autograd.Function):
    """`GRUBlockCell` whose backward is `GRUBlockCellGrad` plus TF1's weight products:
    d_w_ru = [x, h_prev]ᵀ·d_r_bar_u_bar, d_w_c = [x, r⊙h_prev]ᵀ·d_c_bar, biases summed over B.

    apply(x, h_prev, w_ru, w_c, b_ru, b_c) -> (r, u, c, h); only h is differentiable.
    """

    @staticmethod
    def forward(x, h_prev, w_ru, w_c, b_ru, b_c):
        return _ops.gru_block_cell.default(x, h_prev, w_ru, w_c, b_ru, b_c)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, h_prev, w_ru, w_c, b_ru, b_c = inputs
        r, u, c, _h = output
        ctx.mark_non_differentiable(r, u, c)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c)

    @staticmethod
    def backward(ctx, _gr, _gu, _gc, d_h):
        # One internal op computes GRUBlockCellGrad and the products, only the gradients
        # wanted: without d_x, the gate products skip x's rows of the weights.
        x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c = ctx.saved_tensors
        return _ops._gru_block_cell_backward.default(
            x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, _grad_or_zeros(d_h, h_prev),
            list(ctx.needs_input_grad),
        )


class KerasGRUFunction(torch.autograd.Function):
    """`keras_gru` (Keras' GRU over a time-major sequence, fused; csrc/gru_seq.h) whose backward
    is `keras_gru_grad`.

    apply(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, reset_after, gate_activation,
    activation) -> (z, r, hh, hr, h), each [T, B, H]; only h is differentiable; bias may be None.
    """

    @staticmethod
    def forward(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias=None, reset_after=True,
                gate_activation="sigmoid", activation="tanh"):  # fmt: skip
        return _ops.keras_gru.default(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias,
                                      reset_after, gate_activation, activation)  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        (seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, reset_after, gate_activation,
         activation) = inputs  # fmt: skip
        z, r, hh, hr, h = output
        ctx.mark_non_differentiable(z, r, hh, hr)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(seq_len_max, x, h_prev, kernel, recurrent_kernel, bias, z, r, hh,
                              hr, h)  # fmt: skip
        ctx.attrs = (reset_after, gate_activation, activation)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, _gz, _gr, _ghh, _ghr, h_grad):
        saved = ctx.saved_tensors
        g = _ops.keras_gru_grad.default(*saved, _grad_or_zeros(h_grad, saved[-1]), *ctx.attrs)
        return (None, *g[:4], g[4] if ctx.has_bias else None, None, None, None)


# The op that TF's "To use <op> in gradients, is_training must be set to True." names: TF's
# gradient functions (cudnn_rnn_grad.py) each name their own op. The raw ops set it around an
# inference call (eager only; under torch.compile, and for direct op calls, it stays CudnnRNNV3),
# and setup_context records it.
_cudnn_forward_name = contextvars.ContextVar("torch_lstm_grad_cudnn_forward", default="CudnnRNNV3")


@contextlib.contextmanager
def cudnn_forward_name(name: str):
    token = _cudnn_forward_name.set(name)
    try:
        yield
    finally:
        _cudnn_forward_name.reset(token)


def _reserve_given_up(reserve_space: torch.Tensor) -> bool:
    """Whether this backward is the last reader of a CUDA reserve: the graph is not retained
    (so no later backward reads the saved reserve), no graph of the backward is recorded
    (create_graph), eager (a traced backward keeps the op functional). cuDNN's backward then
    writes into the reserve instead of a copy of it; a later call on the same reserve (the
    forward's output, kept by the user) raises."""
    keep_graph = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return (type(reserve_space) is torch.Tensor and reserve_space.is_cuda  # not fake, not traced
            and keep_graph is not None and not keep_graph() and not torch.is_grad_enabled()
            and not torch.compiler.is_compiling())  # fmt: skip


class CudnnRNNFunction(torch.autograd.Function):
    """`CudnnRNNV3` (CudnnRNN/V2 are it with lengths None, time-major, no projection) whose
    backward is `CudnnRNNBackpropV3`, as TF's registered gradient.

    apply(input, input_h, input_c, params, sequence_lengths, rnn_mode, input_mode, direction,
    dropout, seed, seed2, num_proj, is_training, time_major) -> (output, output_h, output_c,
    reserve_space, host_reserved). Differentiable in input, input_h, params and (lstm) input_c;
    reserve_space, host_reserved and a non-LSTM output_c (a 0-d dummy) are not. With
    is_training=False the backward raises TF's ValueError.
    """

    @staticmethod
    def forward(input, input_h, input_c, params, sequence_lengths=None, rnn_mode="lstm",
                input_mode="linear_input", direction="unidirectional", dropout=0.0, seed=0,
                seed2=0, num_proj=0, is_training=True, time_major=True):  # fmt: skip
        return _ops.cudnn_rnn.default(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                                      input_mode, direction, dropout, seed, seed2, num_proj,
                                      is_training, time_major)  # fmt: skip

    @staticmethod
    def setup_context(ctx, inputs, output):
        (input, input_h, input_c, params, sequence_lengths, rnn_mode, input_mode, direction,
         dropout, seed, seed2, num_proj, is_training, time_major) = inputs  # fmt: skip
        out, output_h, output_c, reserve_space, host_reserved = output
        lstm = rnn_mode == "lstm"
        ctx.mark_non_differentiable(reserve_space, host_reserved, *(() if lstm else (output_c,)))
        ctx.set_materialize_grads(False)
        # cudnn_rnn_backprop's schema does not mutate reserve_space (a kernel whose library
        # writes into it must work on a copy), so a retain_graph=True backward can run twice.
        ctx.save_for_backward(input, input_h, input_c, params, sequence_lengths, out, output_h,
                              output_c, reserve_space, host_reserved)  # fmt: skip
        ctx.attrs = (rnn_mode, input_mode, direction, dropout, seed, seed2, num_proj, time_major)
        ctx.lstm = lstm
        ctx.is_training = is_training
        ctx.op_name = None if is_training else _cudnn_forward_name.get()

    @staticmethod
    def backward(ctx, grad_output, grad_output_h, grad_output_c, _grad_reserve, _grad_host):
        if not ctx.is_training:
            raise ValueError(f"To use {ctx.op_name} in gradients, is_training must be set to True.")
        (input, input_h, input_c, params, sequence_lengths, output, output_h, output_c,
         reserve_space, host_reserved) = ctx.saved_tensors  # fmt: skip
        backprop = (_ops._cudnn_rnn_backprop_consuming if _reserve_given_up(reserve_space)
                    else _ops.cudnn_rnn_backprop)  # fmt: skip
        d_input, d_input_h, d_input_c, d_params = backprop.default(
            input, input_h, input_c, params, sequence_lengths, output, output_h, output_c,
            _grad_or_zeros(grad_output, output), _grad_or_zeros(grad_output_h, output_h),
            _grad_or_zeros(grad_output_c, output_c), reserve_space, host_reserved, *ctx.attrs,
        )  # fmt: skip
        return (d_input, d_input_h, d_input_c if ctx.lstm else None, d_params,
                *(None,) * 10)  # fmt: skip


# op name -> the Function whose setup_context/backward is that op's registered autograd
# (registrations.py).
DIFFERENTIABLE_OPS: dict[str, type[torch.autograd.Function]] = {
    "torch_lstm_grad::block_lstm": BlockLSTMFunction,
    "torch_lstm_grad::block_lstm_v2": BlockLSTMV2Function,
    "torch_lstm_grad::block_lstm_ex": BlockLSTMExFunction,
    "torch_lstm_grad::keras_gru": KerasGRUFunction,
    "torch_lstm_grad::cudnn_rnn": CudnnRNNFunction,
}
# The ops whose autograd is C++ (csrc/autograd.cpp): the op call records its node itself.
CPP_AUTOGRAD_OPS = ("torch_lstm_grad::lstm_block_cell", "torch_lstm_grad::gru_block_cell")


# ---------------------------------------------------------------------------------------------
# The eager fast path.


def _eager_function(fn: type[torch.autograd.Function]) -> type[torch.autograd.Function]:
    """fn's formula as an old-style Function (`forward(ctx, *args)`, all arguments given).
    Function.apply binds default arguments with inspect.signature on every call when a
    setup_context is defined (~20 µs); this form has nothing to bind. Its forward goes below the
    Autograd dispatch key, so the op's registered (Python) autograd kernel does not run again."""

    def forward(ctx, *args):
        with torch._C._AutoDispatchBelowAutograd():
            output = fn.forward(*args)
        fn.setup_context(ctx, args, output)
        return output

    def backward(ctx, *grads):
        return fn.backward(ctx, *grads)

    # Built with type() so that the autograd node is named after it (_Eager<fn>Backward).
    return type(
        f"_Eager{fn.__name__}",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward)},
    )


_EAGER = {name: _eager_function(fn) for name, fn in DIFFERENTIABLE_OPS.items()}
_OVERLOADS = {name: getattr(_ops, name.split("::")[1]).default
              for name in (*DIFFERENTIABLE_OPS, *CPP_AUTOGRAD_OPS)}  # fmt: skip


# nn.Parameter counts as plain: it opts out of __torch_function__ and dispatches as the tensor
# it wraps, and the modules pass their weights as Parameters (through the op call instead,
# PyTorch's Python autograd wrapper cost ~30 µs a call: torch.library's fill_defaults).
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def _plain_eager(args) -> bool:
    # Tensor subclasses (FakeTensor, FunctionalTensor, ...), functorch transforms and tracing
    # need the dispatcher's full path (the registered autograd and fake kernels). Compiling is
    # asked in call(), first.
    if torch._C._functorch.peek_interpreter_stack() is not None:
        return False
    return all(type(a) in _PLAIN_TYPES for a in args if isinstance(a, torch.Tensor))


def call(name: str, *args):
    """The forward op `name` ("torch_lstm_grad::block_lstm", ...) on all of its arguments,
    differentiable through its Grad op. Same result as `torch.ops.<name>(*args)`: in eager mode
    on plain tensors, with grad recording it runs the op's Function directly and without it
    calls the kernel below the Autograd key; otherwise it is that op call. The cells' op call
    is their whole path (CPP_AUTOGRAD_OPS: it records the C++ node itself; ~7 µs a step less
    with grad than these checks and the Function, 1 µs without)."""
    op = _OVERLOADS[name]
    eager = _EAGER.get(name)
    if eager is None:  # autograd in C++ (CPP_AUTOGRAD_OPS): the op call is the shortest path
        return op(*args)
    # Dynamo traces the op call itself (and cannot trace the inference-mode query, hence the
    # order). In inference mode there is no Autograd key to go below: the plain call is the
    # shortest path there.
    if torch.compiler.is_compiling() or torch.is_inference_mode_enabled() or not _plain_eager(args):
        return op(*args)
    if torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    ):
        return eager.apply(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def call_no_grad(op, *args):
    """A non-differentiable op (the inference forwards) by the shortest path: where no
    gradient can be recorded, in eager mode on plain tensors, below the Autograd key (its
    registered autograd, which only raises, would cost PyTorch's Python wrapper, ~10 µs a
    call); otherwise the op call itself."""
    if torch.compiler.is_compiling() or torch.is_inference_mode_enabled() or not _plain_eager(args):
        return op(*args)
    if torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in args
    ):
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)
