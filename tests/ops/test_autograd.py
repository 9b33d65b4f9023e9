"""torch.autograd.gradcheck (float64, small sizes) on every differentiable forward op.

Each op is checked through its three differentiable paths: the raw op
(`torch_lstm_grad.raw_ops.X`, eager fast path: autograd.call), the public
`torch.autograd.Function` (`X.apply`) and the dispatcher op with its registered autograd
(`torch.ops.torch_lstm_grad.x`, what torch.compile traces), w.r.t. every float input, with
peepholes on and off, `seq_len_max` equal to and below T, and with `requires_grad` on subsets
of the inputs. The differentiable outputs are `cs` and `h` (GRU: `h`); the gate outputs are
non-differentiable (docs/differences.md). gradcheck keeps its default
`check_undefined_grad=True`.

The cell clip is straight-through by design (docs/differences.md: TF's gradient kernels ignore it),
so the gradchecks run with `cell_clip=0`; `test_*_clip_is_straight_through` pin the decision down:
with the clip active our gradient is the reference's straight-through gradient, not the true one.

Also: each public Function applied with its defaults computes what the op computes with TF's
defaults (the float64 reference), KerasGRUFunction's gate outputs are not differentiable,
CudnnRNNFunction's defaults are CudnnRNNV3's, the op name of TF's is_training error belongs to
its call only, and the raw ops under torch.func.vmap (no gradient) run per sample.
"""

import re

import pytest
import torch
from torch.autograd import gradcheck

import torch_lstm_grad
from torch_lstm_grad import raw_ops, reference
from torch_lstm_grad.modules import CudnnLSTM, LSTMBlockFusedCell

T, B, I, H = 4, 2, 3, 4  # noqa: E741
F64 = torch.float64

LSTM_NAMES = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
GRU_NAMES = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")

# (raw op, Function, takes forget_bias, reference gate order, reference forget_bias)
BLOCK_OPS = {
    "BlockLSTM": (raw_ops.BlockLSTM, torch_lstm_grad.BlockLSTMFunction, True, "icfo", 1.0),
    "BlockLSTMV2": (raw_ops.BlockLSTMV2, torch_lstm_grad.BlockLSTMV2Function, False, "ifco", 0.0),
}

_ops = torch.ops.torch_lstm_grad
OPS = {
    "BlockLSTM": _ops.block_lstm.default,
    "BlockLSTMV2": _ops.block_lstm_v2.default,
    "LSTMBlockCell": _ops.lstm_block_cell.default,
    "GRUBlockCell": _ops.gru_block_cell.default,
}
PATHS = ["raw", "apply", "ops"]

# Subsets of inputs that require grad (the others are plain constants).
LSTM_SUBSETS = {
    "all": LSTM_NAMES,
    "x_w": ("x", "w"),
    "state": ("cs_prev", "h_prev"),
    "peepholes": ("wci", "wcf", "wco"),
    "b_only": ("b",),
}
GRU_SUBSETS = {
    "all": GRU_NAMES,
    "x_h_prev": ("x", "h_prev"),
    "weights": ("w_ru", "w_c"),
    "biases": ("b_ru", "b_c"),
}


def lstm_inputs(time_major=True, requires=LSTM_NAMES, dtype=F64, scale=1.0):
    shapes = {
        "x": (T, B, I) if time_major else (B, I),
        "cs_prev": (B, H),
        "h_prev": (B, H),
        "w": (I + H, 4 * H),
        "wci": (H,),
        "wcf": (H,),
        "wco": (H,),
        "b": (4 * H,),
    }
    out = {}
    for name, shape in shapes.items():
        t = torch.randn(shape, dtype=dtype) * (0.5 if name == "w" else scale)
        out[name] = t.requires_grad_(name in requires)
    return out


def gru_inputs(requires=GRU_NAMES):
    shapes = {
        "x": (B, I),
        "h_prev": (B, H),
        "w_ru": (I + H, 2 * H),
        "w_c": (I + H, H),
        "b_ru": (2 * H,),
        "b_c": (H,),
    }
    return {
        n: (0.5 * torch.randn(s, dtype=F64)).requires_grad_(n in requires)
        for n, s in shapes.items()
    }


def block_fn(op_name, path, seq_len_max, use_peephole, cell_clip=0.0, outputs=("cs", "h")):
    """A function of the 8 LSTM float inputs returning the chosen differentiable outputs."""
    raw, fn, has_fb, _, _ = BLOCK_OPS[op_name]
    slm = torch.tensor(seq_len_max)
    idx = {"cs": 1, "h": 6}

    def f(x, cs_prev, h_prev, w, wci, wcf, wco, b):
        args = (x, cs_prev, h_prev, w, wci, wcf, wco, b)
        attrs = (1.0, cell_clip, use_peephole) if has_fb else (cell_clip, use_peephole)
        if path == "raw":
            kw = {"forget_bias": 1.0} if has_fb else {}
            out = raw(slm, *args, cell_clip=cell_clip, use_peephole=use_peephole, **kw)
        elif path == "ops":
            op = OPS[op_name]
            out = op(slm, *args, *attrs)
        else:
            out = fn.apply(slm, *args, *attrs)
        return tuple(out[idx[k]] for k in outputs)

    return f


def cell_fn(path, use_peephole, cell_clip=0.0):
    def f(x, cs_prev, h_prev, w, wci, wcf, wco, b):
        args = (x, cs_prev, h_prev, w, wci, wcf, wco, b)
        if path == "raw":
            out = raw_ops.LSTMBlockCell(*args, forget_bias=1.0, cell_clip=cell_clip,
                                        use_peephole=use_peephole)  # fmt: skip
        elif path == "ops":
            out = OPS["LSTMBlockCell"](*args, 1.0, cell_clip, use_peephole)
        else:
            out = torch_lstm_grad.LSTMBlockCellFunction.apply(*args, 1.0, cell_clip, use_peephole)
        return out[1], out[6]

    return f


def gru_fn(path):
    def f(x, h_prev, w_ru, w_c, b_ru, b_c):
        if path == "raw":
            return raw_ops.GRUBlockCell(x, h_prev, w_ru, w_c, b_ru, b_c).h
        if path == "ops":
            return OPS["GRUBlockCell"](x, h_prev, w_ru, w_c, b_ru, b_c)[3]
        return torch_lstm_grad.GRUBlockCellFunction.apply(x, h_prev, w_ru, w_c, b_ru, b_c)[3]

    return f


# ---------------------------------------------------------------------------------------------
# BlockLSTM / BlockLSTMV2


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seq_len_max", [T, 2, 0], ids=["L=T", "L<T", "L=0"])
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_gradcheck_all_inputs(op_name, use_peephole, seq_len_max, path):
    inputs = lstm_inputs()
    f = block_fn(op_name, path, seq_len_max, use_peephole)
    assert gradcheck(f, tuple(inputs.values()))


@pytest.mark.parametrize("subset", list(LSTM_SUBSETS))
@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_gradcheck_subset(op_name, subset):
    inputs = lstm_inputs(requires=LSTM_SUBSETS[subset])
    f = block_fn(op_name, "raw", 3, use_peephole=True)
    assert gradcheck(f, tuple(inputs.values()))


@pytest.mark.parametrize("outputs", [("h",), ("cs",)], ids=["h_only", "cs_only"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_gradcheck_one_output(op_name, path, outputs):
    """Only one of cs/h reaches the loss: the other's grad arrives as None in backward."""
    inputs = lstm_inputs()
    f = block_fn(op_name, path, T, use_peephole=True, outputs=outputs)
    assert gradcheck(f, tuple(inputs.values()))


@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_gradcheck_unused_empty_peepholes(op_name):
    """use_peephole=False: the peephole vectors may have any shape (here empty), grads match it."""
    inputs = lstm_inputs()
    for n in ("wci", "wcf", "wco"):
        inputs[n] = torch.empty(0, dtype=F64, requires_grad=True)
    f = block_fn(op_name, "raw", T, use_peephole=False)
    assert gradcheck(f, tuple(inputs.values()))
    cs, h = f(*inputs.values())
    grads = torch.autograd.grad((cs.sum() + h.sum()), [inputs[n] for n in ("wci", "wcf", "wco")])
    assert all(g.shape == (0,) for g in grads)


# ---------------------------------------------------------------------------------------------
# LSTMBlockCell


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
def test_lstm_block_cell_gradcheck_all_inputs(use_peephole, path):
    inputs = lstm_inputs(time_major=False)
    assert gradcheck(cell_fn(path, use_peephole), tuple(inputs.values()))


@pytest.mark.parametrize("subset", list(LSTM_SUBSETS))
def test_lstm_block_cell_gradcheck_subset(subset):
    inputs = lstm_inputs(time_major=False, requires=LSTM_SUBSETS[subset])
    assert gradcheck(cell_fn("apply", True), tuple(inputs.values()))


@pytest.mark.parametrize("rows", [1, 5, 8, 32])
@pytest.mark.parametrize("subset", ["all", "x_w", "state"])
def test_lstm_block_cell_float32_grads_at_model_sizes(subset, rows):
    """At I = 128, H = 256 the backward's dicfo·wᵀ takes dot products of rows up to 8 rows
    (csrc/cpu/dot_rows.cpp) and (w·dicfoᵀ)ᵀ at 32 (csrc/cell_products.h), and only the products
    whose inputs need a gradient: every gradient within float32 rounding of the float64
    reference."""
    size, width = 256, 128
    g = torch.Generator().manual_seed(0)
    shapes = {"x": (rows, width), "cs_prev": (rows, size), "h_prev": (rows, size),
              "w": (width + size, 4 * size), "wci": (size,), "wcf": (size,), "wco": (size,),
              "b": (4 * size,)}  # fmt: skip
    scale = {"w": 0.05, "wci": 0.1, "wcf": 0.1, "wco": 0.1}
    inputs = {n: torch.randn(s, generator=g) * scale.get(n, 1.0) for n, s in shapes.items()}
    leaves = {n: t.requires_grad_(n in LSTM_SUBSETS[subset]) for n, t in inputs.items()}
    out = raw_ops.LSTMBlockCell(**leaves, forget_bias=1.0, cell_clip=-1.0, use_peephole=True)
    cs_grad, h_grad = torch.randn(rows, size, generator=g), torch.randn(rows, size, generator=g)
    wanted = [n for n in LSTM_NAMES if leaves[n].requires_grad]
    grads = torch.autograd.grad((out.cs, out.h), [leaves[n] for n in wanted], (cs_grad, h_grad))
    plain = [inputs[n].detach().double() for n in LSTM_NAMES]
    expected = reference.block_lstm_grad(
        1, plain[0][None], *plain[1:], cs_grad.double()[None], h_grad.double()[None],
        forget_bias=1.0, cell_clip=-1.0, use_peephole=True, gate_order="icfo",
    )  # fmt: skip
    expected = dict(zip(LSTM_NAMES, (expected[0][0], *expected[1:]), strict=True))
    for name, got in zip(wanted, grads, strict=True):
        want = expected[name]
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max(),
                                   msg=lambda m, n=name: f"{n}: {m}")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# GRUBlockCell


@pytest.mark.parametrize("path", PATHS)
def test_gru_block_cell_gradcheck_all_inputs(path):
    inputs = gru_inputs()
    assert gradcheck(gru_fn(path), tuple(inputs.values()))


@pytest.mark.parametrize("subset", list(GRU_SUBSETS))
def test_gru_block_cell_gradcheck_subset(subset):
    inputs = gru_inputs(requires=GRU_SUBSETS[subset])
    assert gradcheck(gru_fn("raw"), tuple(inputs.values()))


# ---------------------------------------------------------------------------------------------
# Gate outputs are non-differentiable (docs/differences.md: an explicit error rather than TF's
# silent zero)


def test_gate_outputs_are_not_differentiable():
    lstm = lstm_inputs()
    out = raw_ops.BlockLSTM(torch.tensor(T), *lstm.values(), cell_clip=0.0, use_peephole=True)
    assert [t.requires_grad for t in out] == [False, True, False, False, False, False, True]
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.i.sum().backward()
    cell = raw_ops.LSTMBlockCell(*lstm_inputs(time_major=False).values(), use_peephole=True)
    assert [t.requires_grad for t in cell] == [False, True, False, False, False, False, True]
    gru = raw_ops.GRUBlockCell(*gru_inputs().values())
    assert [t.requires_grad for t in gru] == [False, False, False, True]


# ---------------------------------------------------------------------------------------------
# cell_clip: straight-through gradient (the TF decision), checked against the reference


def _clipping_inputs(time_major):
    # Large states and biases so that |cs| exceeds the clip at (almost) every element.
    return lstm_inputs(time_major=time_major, scale=3.0)


def _numerical_jacobian_vjp(f, inputs, grads_out, eps=1e-6):
    """sum(out * grads_out) differentiated by central differences w.r.t. every input."""
    result = []
    with torch.no_grad():
        for t in inputs:
            g = torch.zeros_like(t)
            flat, gflat = t.view(-1), g.view(-1)
            for j in range(flat.numel()):
                orig = flat[j].item()
                flat[j] = orig + eps
                plus = sum((o * go).sum() for o, go in zip(f(*inputs), grads_out, strict=True))
                flat[j] = orig - eps
                minus = sum((o * go).sum() for o, go in zip(f(*inputs), grads_out, strict=True))
                flat[j] = orig
                gflat[j] = (plus - minus) / (2 * eps)
            result.append(g)
    return result


@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_clip_is_straight_through(op_name):
    clip = 0.3
    _, _, _, order, fb = BLOCK_OPS[op_name]
    inputs = _clipping_inputs(time_major=True)
    leaves = tuple(inputs.values())
    f = block_fn(op_name, "raw", T - 1, use_peephole=True, cell_clip=clip)
    cs, h = f(*leaves)
    assert (cs[: T - 1].abs() == clip).float().mean() > 0.25, "the clip is not active"
    cs_grad, h_grad = torch.randn_like(cs), torch.randn_like(h)
    ours = torch.autograd.grad((cs, h), leaves, (cs_grad, h_grad))

    plain = [t.detach().clone() for t in leaves]
    expected = reference.block_lstm_grad(
        T - 1, *plain, cs_grad, h_grad, forget_bias=fb, cell_clip=clip, use_peephole=True,
        gate_order=order,
    )  # fmt: skip
    for name, got, want in zip(LSTM_NAMES, ours, expected, strict=True):
        torch.testing.assert_close(got, want, msg=lambda m, n=name: f"{n}: {m}")

    # The true derivative of the clipped function differs: the clip is not differentiated.
    numerical = _numerical_jacobian_vjp(f, plain, (cs_grad, h_grad))
    differs = [
        n for n, a, b in zip(LSTM_NAMES, ours, numerical, strict=True)
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-5)
    ]  # fmt: skip
    assert {"x", "cs_prev", "w", "b"} <= set(differs)


def test_lstm_block_cell_clip_is_straight_through():
    clip = 0.3
    inputs = _clipping_inputs(time_major=False)
    leaves = tuple(inputs.values())
    f = cell_fn("raw", use_peephole=True, cell_clip=clip)
    cs, h = f(*leaves)
    assert (cs.abs() == clip).float().mean() > 0.25, "the clip is not active"
    cs_grad, h_grad = torch.randn_like(cs), torch.randn_like(h)
    ours = torch.autograd.grad((cs, h), leaves, (cs_grad, h_grad))

    # The single step is BlockLSTM with T = 1.
    plain = [t.detach().clone() for t in leaves]
    expected = reference.block_lstm_grad(
        1, plain[0][None], *plain[1:], cs_grad[None], h_grad[None], forget_bias=1.0,
        cell_clip=clip, use_peephole=True, gate_order="icfo",
    )  # fmt: skip
    expected = (expected[0][0], *expected[1:])
    for name, got, want in zip(LSTM_NAMES, ours, expected, strict=True):
        torch.testing.assert_close(got, want, msg=lambda m, n=name: f"{n}: {m}")

    numerical = _numerical_jacobian_vjp(f, plain, (cs_grad, h_grad))
    differs = [
        n for n, a, b in zip(LSTM_NAMES, ours, numerical, strict=True)
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-5)
    ]  # fmt: skip
    assert {"x", "cs_prev", "w", "b"} <= set(differs)


# ---------------------------------------------------------------------------------------------
# Double backward raises the registered message


def _double_backward_msg(forward_name):
    return re.escape(
        f"torch_lstm_grad: the gradient of {forward_name}'s gradient (double backward) is not "
        "implemented"
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_block_lstm_double_backward_raises(op_name, path):
    inputs = lstm_inputs()
    leaves = tuple(inputs.values())
    cs, h = block_fn(op_name, path, T, use_peephole=True)(*leaves)
    grads = torch.autograd.grad((cs.sum() + h.pow(2).sum()), leaves, create_graph=True)
    assert all(g.requires_grad for g in grads)
    for k in (0, 3):  # x_grad (from the Grad op) and w_grad
        with pytest.raises(RuntimeError, match=_double_backward_msg(op_name)):
            grads[k].sum().backward(retain_graph=True)


@pytest.mark.parametrize("path", PATHS)
def test_lstm_block_cell_double_backward_raises(path):
    leaves = tuple(lstm_inputs(time_major=False).values())
    cs, h = cell_fn(path, use_peephole=True)(*leaves)
    grads = torch.autograd.grad((cs.sum() + h.pow(2).sum()), leaves, create_graph=True)
    for k in (0, 1, 3):  # x_grad (dicfo @ wᵀ), cs_prev_grad (the Grad op), w_grad
        with pytest.raises(RuntimeError, match=_double_backward_msg("LSTMBlockCell")):
            grads[k].sum().backward(retain_graph=True)


@pytest.mark.parametrize("path", PATHS)
def test_gru_block_cell_double_backward_raises(path):
    leaves = tuple(gru_inputs().values())
    h = gru_fn(path)(*leaves)
    grads = torch.autograd.grad(h.pow(2).sum(), leaves, create_graph=True)
    for k in (0, 1, 2):  # d_x, d_h_prev, d_w_ru
        with pytest.raises(RuntimeError, match=_double_backward_msg("GRUBlockCell")):
            grads[k].sum().backward(retain_graph=True)


# ---------------------------------------------------------------------------------------------
# The raw ops' eager fast path (autograd.call) against the dispatcher path


def _forward_and_grads(fn_of_leaves, leaves):
    outs = fn_of_leaves(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((k + 1.5) * o.pow(2).sum() for k, o in enumerate(outs))
    return outs, torch.autograd.grad(loss, leaves), outs[0].grad_fn


@pytest.mark.parametrize("op_name", list(BLOCK_OPS))
def test_raw_ops_eager_path_matches_the_dispatcher_bitwise(op_name):
    """raw ops skip PyTorch's Python autograd wrapper in eager mode (the per-call cost): the
    outputs and every gradient must be bit for bit those of the registered-autograd path, and
    the fast path must really be the one taken (its autograd node is the eager Function's)."""
    leaves = tuple(lstm_inputs().values())
    fns = {p: block_fn(op_name, p, 3, use_peephole=True, cell_clip=0.5) for p in PATHS}
    fn_name = BLOCK_OPS[op_name][1].__name__
    raw_out, raw_grads, raw_node = _forward_and_grads(fns["raw"], leaves)
    ops_out, ops_grads, ops_node = _forward_and_grads(fns["ops"], leaves)
    assert type(raw_node).__name__ == f"_Eager{fn_name}Backward"
    assert type(ops_node).__name__ != type(raw_node).__name__
    for a, b in zip(raw_out + raw_grads, ops_out + ops_grads, strict=True):
        assert torch.equal(a, b)
    with torch.no_grad():  # below the Autograd key: no node, same values
        again = fns["raw"](*leaves)
    assert all(t.grad_fn is None and torch.equal(t, r) for t, r in zip(again, raw_out, strict=True))


@pytest.mark.parametrize("op_name", ["LSTMBlockCell", "GRUBlockCell"])
def test_cells_cpp_autograd_matches_their_function_bitwise(op_name):
    """The cells' autograd is C++ (csrc/autograd.cpp): the raw op and the op call record its
    node, and the outputs and every gradient are bit for bit those of the public Python
    Function, whose backward is the same whole-backward op."""
    if op_name == "LSTMBlockCell":
        leaves = tuple(lstm_inputs(time_major=False).values())
        fns = {p: cell_fn(p, use_peephole=True, cell_clip=0.5) for p in PATHS}
    else:
        leaves = tuple(gru_inputs().values())
        fns = {p: gru_fn(p) for p in PATHS}
    results = {p: _forward_and_grads(fns[p], leaves) for p in PATHS}
    for p in ("raw", "ops"):
        assert results[p][2].name().endswith(f"{op_name}Node>"), results[p][2].name()
    assert type(results["apply"][2]).__name__ == f"{op_name}FunctionBackward"
    fn_out, fn_grads, _ = results["apply"]
    for p in ("raw", "ops"):
        out, grads, _ = results[p]
        for a, b in zip(out + grads, fn_out + fn_grads, strict=True):
            assert torch.equal(a, b)
    with torch.no_grad():  # below the Autograd key: no node, same values
        again = fns["raw"](*leaves)
    again = again if isinstance(again, tuple) else (again,)
    assert all(t.grad_fn is None and torch.equal(t, r)
               for t, r in zip(again, results["raw"][0], strict=True))  # fmt: skip


def test_cudnn_rnn_eager_path_matches_the_dispatcher_bitwise():
    """CudnnRNNV3 (2 layers, varied lengths incl. 0): raw op (eager Function) against the
    dispatcher op with its registered autograd, outputs and gradients bit for bit."""
    L, Tn, Bn, In, Hn = 2, 5, 3, 3, 4
    n = int(raw_ops.CudnnRNNParamsSize(L, Hn, In, T=F64, S=torch.int32)[0])
    leaves = (
        torch.randn(Tn, Bn, In, dtype=F64).requires_grad_(),
        torch.randn(L, Bn, Hn, dtype=F64).requires_grad_(),
        torch.randn(L, Bn, Hn, dtype=F64).requires_grad_(),
        (0.3 * torch.randn(n, dtype=F64)).requires_grad_(),
    )
    lengths = torch.tensor([5, 0, 2], dtype=torch.int32)
    attrs = ("lstm", "linear_input", "unidirectional", 0.0, 0, 0, 0, True, True)

    def raw(x, h, c, p):
        out = raw_ops.CudnnRNNV3(x, h, c, p, lengths)
        return out.output, out.output_h, out.output_c

    def ops(x, h, c, p):
        return _ops.cudnn_rnn.default(x, h, c, p, lengths, *attrs)[:3]

    raw_out, raw_grads, raw_node = _forward_and_grads(raw, leaves)
    ops_out, ops_grads, ops_node = _forward_and_grads(ops, leaves)
    assert type(raw_node).__name__ == "_EagerCudnnRNNFunctionBackward"
    assert type(ops_node).__name__ != type(raw_node).__name__
    for a, b in zip(raw_out + raw_grads, ops_out + ops_grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "make, fn_name",
    [
        (lambda: LSTMBlockFusedCell(4, 3), "BlockLSTMFunction"),
        (lambda: CudnnLSTM(1, 4, 3), "CudnnRNNFunction"),
    ],
)
def test_modules_take_the_eager_path_with_their_parameters(make, fn_name):
    """The modules pass their weights as nn.Parameters, which the eager fast path takes like
    plain tensors (else every training call paid PyTorch's Python autograd wrapper, ~30 µs):
    the node is the eager Function's, and the gradients are those of plain tensors."""
    torch.manual_seed(0)
    module = make().double()
    x = torch.randn(5, 2, 3, dtype=F64)
    out = module(x)[0]
    assert type(out.grad_fn).__name__ == f"_Eager{fn_name}Backward"
    got = torch.autograd.grad(out.pow(2).sum(), list(module.parameters()))
    plain = {k: v.detach().clone().requires_grad_() for k, v in module.named_parameters()}
    with torch.nn.utils.stateless._reparametrize_module(module, plain):
        ref = module(x)[0]
    assert type(ref.grad_fn).__name__ == f"_Eager{fn_name}Backward"
    want = torch.autograd.grad(ref.pow(2).sum(), list(plain.values()))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def _lstm_inputs_beyond_the_clips(T=3, B=2, I=3, H=4, P=None):  # noqa: E741
    """float64 LSTM inputs whose cells pass ±4 and whose peepholes are not zero, so a default
    clip or peephole changes the outputs; h_prev [B, P] and w [I + P, 4H] with a projection."""
    g = torch.Generator().manual_seed(61)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    n = P or H
    return (torch.tensor(T), r(T, B, I), 6 * r(B, H).sign(), r(B, n), r(I + n, 4 * H), r(H),
            r(H), r(H), r(4 * H))  # fmt: skip


def test_autograd_functions_defaults_are_the_ops():
    """Each public Function applied with its defaults computes what the op computes with TF's
    defaults (the float64 reference): LSTMBlockCell and BlockLSTM forget_bias 1, cell_clip 3, no
    peepholes; BlockLSTMV2 no clip, no peepholes; block_lstm_ex forget_bias 1, no cell or
    projection clip, no peepholes (its projection's outputs pass ±1)."""
    from torch_lstm_grad import autograd as ag

    seq, x, cs, h, w, wci, wcf, wco, b = _lstm_inputs_beyond_the_clips()
    cases = [
        (ag.BlockLSTMFunction.apply(seq, x, cs, h, w, wci, wcf, wco, b),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b)),
        (ag.BlockLSTMV2Function.apply(seq, x, cs, h, w, wci, wcf, wco, b),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, forget_bias=0.0,
                              cell_clip=0.0, gate_order="ifco")),
        (ag.LSTMBlockCellFunction.apply(x[0], cs, h, w, wci, wcf, wco, b),
         reference.lstm_block_cell(x[0], cs, h, w, wci, wcf, wco, b)),
    ]  # fmt: skip
    seq, x, cs, h, w, wci, wcf, wco, b = _lstm_inputs_beyond_the_clips(P=2)
    w_proj = 4 * torch.ones(4, 2, dtype=torch.float64)
    cases.append(
        (ag.BlockLSTMExFunction.apply(seq, x, cs, h, w, wci, wcf, wco, b, w_proj),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, cell_clip=0.0, w_proj=w_proj))
    )  # fmt: skip
    for got, want in cases:
        for g, w_ in zip(got, want, strict=True):
            torch.testing.assert_close(g, w_, rtol=1e-12, atol=1e-12)
    # The unclipped cells pass ±4 (and the projected outputs ±1): every clip would show.
    unclipped = reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, cell_clip=0.0,
                                     w_proj=w_proj)  # fmt: skip
    assert unclipped[1].abs().max() > 4 and unclipped[6].abs().max() > 1
    assert cases[0][1][1].abs().max() == 3  # BlockLSTM's default clip reached


def _keras_gru_inputs(T=3, B=2, I=3, H=4):  # noqa: E741
    g = torch.Generator().manual_seed(62)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    return torch.tensor(T), r(T, B, I), r(B, H), r(I, 3 * H), r(H, 3 * H), r(2, 3 * H)


def test_keras_gru_function_defaults_and_gates():
    """KerasGRUFunction with its defaults is Keras' GRU default (reset_after, sigmoid, tanh; the
    float64 reference); its gate outputs z, r, hh, hr are not differentiable (a loss on one is
    an error, as for the LSTM gates), h is, to every input."""
    from torch_lstm_grad import autograd as ag

    inputs = [t.requires_grad_() if t.is_floating_point() else t for t in _keras_gru_inputs()]
    got = ag.KerasGRUFunction.apply(*inputs)
    want = reference.keras_gru(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    for k, name in enumerate(("z", "r", "hh", "hr")):
        assert not got[k].requires_grad, name
        with pytest.raises(RuntimeError):
            got[k].sum().backward(retain_graph=True)
    grads = torch.autograd.grad(got[4].sum(), inputs[1:])
    assert all(g.abs().sum() > 0 for g in grads)


def test_cudnn_rnn_function_defaults_are_cudnn_rnn_v3s():
    """CudnnRNNFunction with its defaults is CudnnRNNV3 with TF's (lstm, linear_input,
    unidirectional, no dropout, no projection, training, time-major): the same outputs and
    reserve; given only a dropout, its masks come from torch's generator (seeds 0), as the
    raw op's after the same manual_seed."""
    from torch_lstm_grad import autograd as ag
    from torch_lstm_grad import raw_ops

    g = torch.Generator().manual_seed(63)
    T, B, I, H, L = 3, 2, 4, 4, 2  # noqa: E741
    size = int(raw_ops.CudnnRNNParamsSize(L, H, I, T=torch.float64, S=torch.int64)[0])
    x, h0, c0, params = (torch.rand(*s, generator=g, dtype=torch.float64) - 0.5
                         for s in ((T, B, I), (L, B, H), (L, B, H), (size,)))  # fmt: skip
    got = ag.CudnnRNNFunction.apply(x, h0, c0, params)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, None)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    torch.manual_seed(64)
    got = ag.CudnnRNNFunction.apply(x, h0, c0, params, None, "lstm", "linear_input",
                                    "unidirectional", 0.5)  # fmt: skip
    torch.manual_seed(64)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, None, dropout=0.5)
    assert torch.equal(got[0], want.output)
    assert not torch.equal(want.output, raw_ops.CudnnRNNV3(x, h0, c0, params, None).output)


def test_cudnn_inference_name_does_not_outlive_its_call():
    """The op name TF's is_training error gives is the raw op's only within that call: the op
    called directly afterwards names CudnnRNNV3."""
    from torch_lstm_grad import raw_ops

    T, B, I, H = 2, 2, 3, 3  # noqa: E741
    size = int(raw_ops.CudnnRNNParamsSize(1, H, I, T=torch.float64, S=torch.int64)[0])
    x = torch.rand(T, B, I, dtype=torch.float64, requires_grad=True)
    h0, c0 = torch.zeros(1, B, H, dtype=torch.float64), torch.zeros(1, B, H, dtype=torch.float64)
    params = torch.rand(size, dtype=torch.float64)
    for name, run in (
        ("CudnnRNN", lambda: raw_ops.CudnnRNN(x, h0, c0, params, is_training=False).output),
        ("CudnnRNNV3", lambda: torch.ops.torch_lstm_grad.cudnn_rnn(
            x, h0, c0, params, None, "lstm", "linear_input", "unidirectional", 0.0, 0, 0, 0,
            False, True)[0]),
    ):  # fmt: skip
        with pytest.raises(ValueError) as info:
            run().sum().backward()
        assert str(info.value) == f"To use {name} in gradients, is_training must be set to True."


def test_raw_ops_under_vmap_without_grad_run_the_op_per_sample():
    """torch.func.vmap over a raw op, no gradient recorded: PyTorch's batching fallback runs the
    op per sample (the numbers of the loop). Under functorch the raw ops take the dispatcher's
    path, not the eager fast path."""
    import warnings

    from torch_lstm_grad import raw_ops

    g = torch.Generator().manual_seed(65)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) - 0.5  # noqa: E731
    x, rest = r(5, 2, 3), (r(2, 4), r(2, 4), r(7, 16), r(4), r(4), r(4), r(16))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's performance warning
        got = torch.func.vmap(lambda x: raw_ops.LSTMBlockCell(x, *rest).h)(x)
    want = torch.stack([raw_ops.LSTMBlockCell(x[k], *rest).h for k in range(5)])
    assert torch.equal(got, want)


def test_cells_under_func_grad_are_refused():
    """torch.func.grad over a cell: PyTorch refuses a C++ torch::autograd::Function under
    functorch's transforms with a RuntimeError (docs/api.md), never a silent wrong gradient."""
    B, I, H = 2, 3, 4  # noqa: E741
    g = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    x, c, h, b, z = r(B, I), r(B, H), r(B, H), r(4 * H), torch.zeros(H, dtype=F64)
    with pytest.raises(RuntimeError, match="functorch"):
        torch.func.grad(lambda w: raw_ops.LSTMBlockCell(x, c, h, w, z, z, z, b).h.sum())(
            r(I + H, 4 * H)
        )
    w_c, b_ru, b_c = r(I + H, H), r(2 * H), r(H)
    with pytest.raises(RuntimeError, match="functorch"):
        torch.func.grad(lambda w_ru: raw_ops.GRUBlockCell(x, h, w_ru, w_c, b_ru, b_c).h.sum())(
            r(I + H, 2 * H)
        )
