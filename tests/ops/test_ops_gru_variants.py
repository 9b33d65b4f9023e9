"""keras_gru: Keras' GRU over a sequence, fused, with the gate / candidate activation
variants and both reset modes, against the float64 reference, Keras itself, gradcheck, opcheck
and torch.compile; GRUBlockCell's variant attributes and the GRUBlockFusedCell module.

Small shapes; T = 5 runs the fused (brgemm column-block) products, T = 2 the library ones.
"""

import itertools

import pytest
import torch

from tests.helpers import GRU_B as B
from tests.helpers import GRU_H as H
from tests.helpers import GRU_I as I
from tests.helpers import keras_gru_inputs as _inputs
from tests.helpers import scaled_error_f64, tf_module
from torch_lstm_grad import modules, ops, reference
from torch_lstm_grad.autograd import KerasGRUFunction

GATES = ("sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3")
ACTS = ("tanh", "relu", "linear")


def _check_against_reference(T, dtype, tol, reset_after, use_bias, ga, ac, seq_len_max):
    inp = _inputs(T, dtype, reset_after, use_bias)
    leaves = [t.clone().requires_grad_() if t is not None else None for t in inp]
    out = ops.keras_gru(
        *leaves, seq_len_max=seq_len_max, reset_after=reset_after, gate_activation=ga, activation=ac
    )
    h_grad = torch.randn(T, B, H, dtype=torch.float64)
    got = torch.autograd.grad(out.h, [t for t in leaves if t is not None], h_grad.to(dtype))
    d = [t.double() if t is not None else None for t in inp]
    ref = reference.keras_gru(seq_len_max, *d, reset_after, ga, ac)
    want = reference.keras_gru_grad(seq_len_max, *d, h_grad, reset_after, ga, ac)
    for name, a, r in zip(("z", "r", "hh", "hr", "h"), out, ref, strict=True):
        assert a.dtype == dtype
        assert scaled_error_f64(a, r) <= tol, (reset_after, use_bias, ga, ac, name)
    names = ("x", "h_prev", "kernel", "recurrent_kernel", "bias")
    for name, a, w in zip(names, got, [w for w in want if w is not None], strict=False):
        assert scaled_error_f64(a, w) <= tol, (reset_after, use_bias, ga, ac, name)


@pytest.mark.parametrize("T", [5, 2])
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 5e-6)])
def test_every_variant_matches_reference(T, reset_after, dtype, tol):
    for ga, ac, use_bias in itertools.product(GATES, ACTS, (True, False)):
        _check_against_reference(T, dtype, tol, reset_after, use_bias, ga, ac, T - 1)


# The CPU's whole-loop forms (csrc/cpu/gru_seq.cpp, forward_loop and backward_loop), float32,
# T = 6. reset_after: rows per thread (B = 32: the panels fit half an L2), units per thread
# with a barrier on the panels (H = 500: over half an L2) and on brgemm's blocks (B = 80, over
# the panels' 64 rows), one block on the calling thread (B = 1). reset_after=False: the rows,
# the calling thread (B = 1, and every case on one thread), the steps elsewhere. Each case on
# two threads and one; H not a multiple of 8 or 16 (the cells' padded last vector, the panels'
# last block). Which form a case takes follows the machine's L2 and ISA (gemm.h); on a CPU
# without the panels or brgemm every case runs the steps, against the same reference.
@pytest.mark.parametrize("threads", [2, 1])
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize(
    "b,i,h,ga,ac",
    [
        (32, 9, 70, "sigmoid", "tanh"),
        (32, 9, 70, "hard_sigmoid_keras3", "relu"),
        (16, 8, 500, "sigmoid", "tanh"),
        (80, 7, 72, "sigmoid", "tanh"),
        (1, 6, 40, "sigmoid", "tanh"),
    ],
)
def test_whole_loops_match_reference(threads, reset_after, b, i, h, ga, ac):
    g = torch.Generator().manual_seed(b * 1000 + h)

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64).mul(scale)

    T = 6
    inp = [r(T, b, i), r(b, h, scale=0.5), r(i, 3 * h, scale=i**-0.5), r(h, 3 * h, scale=h**-0.5),
           r(2, 3 * h, scale=0.3) if reset_after else r(3 * h, scale=0.3)]  # fmt: skip
    h_grad = r(T, b, h)
    ref = reference.keras_gru(T, *inp, reset_after, ga, ac)
    want = reference.keras_gru_grad(T, *inp, h_grad, reset_after, ga, ac)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        leaves = [t.float().requires_grad_() for t in inp]
        kw = dict(reset_after=reset_after, gate_activation=ga, activation=ac)
        out = ops.keras_gru(*leaves, **kw)
        got = torch.autograd.grad(out.h, leaves, h_grad.float())
        inference = ops.keras_gru_inference(*[t.float() for t in inp], **kw)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(inference, out.h)
    for name, a, w in zip(("z", "r", "hh", "hr", "h"), out, ref, strict=True):
        assert scaled_error_f64(a, w) <= 3e-6, name
    names = ("x", "h_prev", "kernel", "recurrent_kernel", "bias")
    for name, a, w in zip(names, got, want, strict=True):
        assert scaled_error_f64(a, w) <= 3e-6, name


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-2), (torch.bfloat16, 6e-2)])
@pytest.mark.parametrize("reset_after", [True, False])
def test_half_precision(dtype, tol, reset_after):
    _check_against_reference(5, dtype, tol, reset_after, True, "hard_sigmoid_keras3", "relu", 5)


def test_zero_steps_and_no_steps_beyond():
    inp = _inputs(3, torch.float32, True)
    out = ops.keras_gru(*inp, seq_len_max=0)
    assert all(t.abs().max() == 0 for t in out)
    leaves = [t.clone().requires_grad_() for t in inp]
    out = ops.keras_gru(*leaves, seq_len_max=0)
    g = torch.autograd.grad(out.h.sum(), leaves, allow_unused=True)
    assert all(t is None or t.abs().max() == 0 for t in g)


@pytest.mark.parametrize(
    "path,reset_after,use_bias,ga,ac",
    [
        ("raw", True, True, "hard_sigmoid_keras2", "relu"),
        ("apply", False, True, "hard_sigmoid_keras3", "linear"),
        ("ops", True, False, "sigmoid", "tanh"),
        ("ops", False, False, "sigmoid", "relu"),
    ],
)
def test_gradcheck(path, reset_after, use_bias, ga, ac):
    """float64 gradcheck w.r.t. every input (random points: none within eps of a kink)."""
    T = 4
    leaves = [
        t.requires_grad_()
        for t in _inputs(T, torch.float64, reset_after, use_bias, 3)
        if t is not None
    ]

    def f(x, h_prev, kernel, rkernel, *bias):
        b = bias[0] if use_bias else None
        slm = torch.tensor(T - 1)
        if path == "raw":
            return ops.keras_gru(
                x,
                h_prev,
                kernel,
                rkernel,
                b,
                seq_len_max=T - 1,
                reset_after=reset_after,
                gate_activation=ga,
                activation=ac,
            ).h
        if path == "apply":
            return KerasGRUFunction.apply(slm, x, h_prev, kernel, rkernel, b, reset_after, ga, ac)[
                4
            ]
        return torch.ops.torch_lstm_grad.keras_gru(
            slm, x, h_prev, kernel, rkernel, b, reset_after, ga, ac
        )[4]

    assert torch.autograd.gradcheck(f, leaves)


def test_double_backward_raises():
    leaves = [t.requires_grad_() for t in _inputs(3, torch.float64, True)]
    (g,) = torch.autograd.grad(ops.keras_gru(*leaves).h.sum(), leaves[0], create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


def test_bad_inputs_raise_value_errors_naming_the_argument():
    inp = _inputs(2, torch.float32, True)
    op = torch.ops.torch_lstm_grad.keras_gru
    with pytest.raises(ValueError, match=r"^activation: expected one of 'tanh', 'relu', 'linear'"):
        op(torch.tensor(2), *inp, True, "sigmoid", "elu")
    with pytest.raises(ValueError, match=r"^bias: expected shape \[2, 3 \* H\] \(reset_after="):
        op(torch.tensor(2), *inp[:4], inp[4][0], True, "sigmoid", "tanh")
    with pytest.raises(ValueError, match=r"^bias: expected shape \[3 \* H\] \(reset_after=False"):
        op(torch.tensor(2), *inp, False, "sigmoid", "tanh")
    with pytest.raises(ValueError, match=r"^recurrent_kernel: expected shape \[H, 3 \* H\]"):
        op(torch.tensor(2), *inp[:3], inp[3][:, :-1], inp[4], True, "sigmoid", "tanh")
    with pytest.raises(ValueError, match="^gate_activation: expected one of"):
        modules.GRUBlockFusedCell(H, I, gate_activation="hard_sigmoid")


# ---------------------------------------------------------------------------------------------
# Modules


def test_gru_block_cell_default_calls_the_raw_op(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("keras_gru called with the default activations")

    monkeypatch.setattr(ops, "keras_gru", refuse)
    modules.GRUBlockCell(H, I)(torch.randn(B, I))


def _block_cell_as_keras(cell):
    """GRUBlockCell's parameters in keras_gru's layout (what the module's variant path does)."""
    H_ = cell.num_units
    gk, ck = cell.gates_kernel, cell.candidate_kernel
    w = torch.cat([gk[:, H_:], gk[:, :H_], ck], dim=1)
    bias = torch.cat([cell.gates_bias[H_:], cell.gates_bias[:H_], cell.candidate_bias])
    return w[: cell.input_size], w[cell.input_size :], bias


def test_keras_gru_reset_before_is_gru_block_cell():
    """keras_gru(reset_after=False) on GRUBlockCell's parameters, reordered, is the GRUBlockCell
    raw op (TF's math; only the form of the last line, u(h - c) + c, differs: rounding)."""
    cell = modules.GRUBlockCell(H, I)
    with torch.no_grad():
        cell.gates_bias.normal_()
        cell.candidate_bias.normal_()
    x, h0 = torch.randn(B, I), torch.randn(B, H)
    k, rk, bias = _block_cell_as_keras(cell)
    got = ops.keras_gru(x[None], h0, k, rk, bias, reset_after=False).h[0]
    torch.testing.assert_close(got, cell(x, h0)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("ga,ac", [("sigmoid", "relu"), ("hard_sigmoid_keras2", "tanh")])
def test_gru_block_cell_variants(ga, ac):
    """The variant path is one keras_gru step (reset_after=False) on the module's own
    parameters, and its gradients reach them."""
    cell = modules.GRUBlockCell(H, I, gate_activation=ga, activation=ac, dtype=torch.float64)
    x, h0 = torch.randn(B, I, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    y, state = cell(x, h0)
    k, rk, bias = _block_cell_as_keras(cell)
    ref = reference.keras_gru(1, x[None], h0, k, rk, bias, False, ga, ac)[4][0]
    torch.testing.assert_close(y, ref)
    assert state is y
    y.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in cell.parameters())
    assert (ga if ga != "sigmoid" else ac) in repr(cell)


@pytest.mark.parametrize("reset_after", [True, False])
def test_fused_cell_sequence_length(reset_after):
    m = modules.GRUBlockFusedCell(
        H,
        I,
        reset_after=reset_after,
        gate_activation="hard_sigmoid_keras3",
        activation="linear",
        dtype=torch.float64,
    )
    with torch.no_grad():
        m.bias.normal_()
    x, h0 = torch.randn(4, B, I, dtype=torch.float64), torch.randn(B, H, dtype=torch.float64)
    lengths = torch.tensor([4, 2, 0])
    out, h = m(x, h0, sequence_length=lengths)
    ref = reference.keras_gru(
        4, x, h0, m.kernel, m.recurrent_kernel, m.bias, reset_after, "hard_sigmoid_keras3", "linear"
    )[4]
    mask = (torch.arange(4)[:, None] < lengths[None, :]).unsqueeze(-1)
    torch.testing.assert_close(out, ref * mask)
    torch.testing.assert_close(h, torch.stack([ref[3, 0], ref[1, 1], h0[2]]))
    out2, h2 = m(x)
    assert out2.shape == (4, B, H) and torch.equal(h2, out2[-1])
    assert modules.GRUBlockFusedCell(H, I, use_bias=False).bias is None


# ---------------------------------------------------------------------------------------------
# Against Keras itself (TF 2.21, float32, randomised weights and biases).

TF_TOL = 1e-5


def _keras_gru_case(
    reset_after, recurrent_activation, activation, ours_gate, ours_act, use_bias=True
):
    tf = pytest.importorskip("tensorflow")
    import keras

    tf = tf_module()
    T, Bk, Ik, U = 5, 3, 4, 6
    g = torch.Generator().manual_seed(5)
    x = torch.randn(Bk, T, Ik, generator=g)
    h0 = torch.randn(Bk, U, generator=g)
    kernel = torch.randn(Ik, 3 * U, generator=g) * 0.7
    rec = torch.randn(U, 3 * U, generator=g) * 0.7
    bias = torch.randn(*((2, 3 * U) if reset_after else (3 * U,)), generator=g)
    g_out, g_h = torch.randn(Bk, T, U, generator=g), torch.randn(Bk, U, generator=g)
    layer = keras.layers.GRU(
        U,
        activation=activation,
        recurrent_activation=recurrent_activation,
        reset_after=reset_after,
        use_bias=use_bias,
        return_sequences=True,
        return_state=True,
    )
    layer.build((Bk, T, Ik))
    layer.set_weights([kernel.numpy(), rec.numpy()] + ([bias.numpy()] if use_bias else []))
    tx, th0 = tf.constant(x.numpy()), tf.constant(h0.numpy())
    with tf.GradientTape() as tape:
        tape.watch([tx, th0])
        seq, h_T = layer(tx, initial_state=th0)
        loss = tf.reduce_sum(seq * g_out.numpy()) + tf.reduce_sum(h_T * g_h.numpy())
    want = [
        torch.from_numpy(w.numpy())
        for w in tape.gradient(loss, [tx, th0, *layer.trainable_weights])
    ]

    leaves = [t.clone().requires_grad_() for t in (x, h0, kernel, rec)]
    if use_bias:
        leaves.append(bias.clone().requires_grad_())
    out = ops.keras_gru(
        leaves[0].transpose(0, 1),
        *leaves[1:4],
        leaves[4] if use_bias else None,
        reset_after=reset_after,
        gate_activation=ours_gate,
        activation=ours_act,
    )
    ours = out.h.transpose(0, 1)
    loss = (ours * g_out).sum() + (out.h[-1] * g_h).sum()
    got = torch.autograd.grad(loss, leaves)
    assert scaled_error_f64(ours, torch.from_numpy(seq.numpy()).double()) <= TF_TOL
    for name, a, w in zip(
        ("x", "h0", "kernel", "recurrent_kernel", "bias"), got, want, strict=False
    ):
        assert scaled_error_f64(a, w.double()) <= TF_TOL, name


@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("activation", ACTS)
def test_keras3_gru_hard_sigmoid_matches_tf(reset_after, activation):
    _keras_gru_case(reset_after, "hard_sigmoid", activation, "hard_sigmoid_keras3", activation)


@pytest.mark.parametrize("reset_after", [True, False])
def test_keras2_hard_sigmoid_gru_matches_tf(reset_after):
    def keras2_hard_sigmoid(x):
        import keras

        return keras.ops.clip(0.2 * x + 0.5, 0.0, 1.0)

    _keras_gru_case(reset_after, keras2_hard_sigmoid, "tanh", "hard_sigmoid_keras2", "tanh")


def test_keras_gru_sigmoid_no_bias_matches_tf():
    _keras_gru_case(True, "sigmoid", "tanh", "sigmoid", "tanh", use_bias=False)


def test_keras_gru_mask_matches_gru_block_fused_cell_lengths():
    """Keras GRU with a right-padded mask against GRUBlockFusedCell(sequence_length=...): the
    final state, the outputs at valid steps and every gradient of a loss on those (Keras'
    default repeats the last output at masked steps; ours are zero there, as cuDNN's)."""
    pytest.importorskip("tensorflow")
    import keras

    tf = tf_module()
    T, Bk, Ik, U = 5, 3, 4, 6
    lengths = [5, 2, 3]
    g = torch.Generator().manual_seed(9)
    x, h0 = torch.randn(Bk, T, Ik, generator=g), torch.randn(Bk, U, generator=g)
    kernel, rec = torch.randn(Ik, 3 * U, generator=g), torch.randn(U, 3 * U, generator=g)
    bias = torch.randn(2, 3 * U, generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # [B, T]
    g_out = torch.randn(Bk, T, U, generator=g) * mask[..., None]
    g_h = torch.randn(Bk, U, generator=g)
    layer = keras.layers.GRU(
        U,
        recurrent_activation="hard_sigmoid",
        return_sequences=True,
        return_state=True,
        use_cudnn=False,
    )
    layer.build((Bk, T, Ik))
    layer.set_weights([kernel.numpy(), rec.numpy(), bias.numpy()])
    tx, th0 = tf.constant(x.numpy()), tf.constant(h0.numpy())
    with tf.GradientTape() as tape:
        tape.watch([tx, th0])
        seq, h_T = layer(tx, initial_state=th0, mask=tf.constant(mask.numpy()))
        loss = tf.reduce_sum(seq * g_out.numpy()) + tf.reduce_sum(h_T * g_h.numpy())
    want = tape.gradient(loss, [tx, th0, *layer.trainable_weights])

    m = modules.GRUBlockFusedCell(U, Ik, gate_activation="hard_sigmoid_keras3")
    with torch.no_grad():
        for p, v in zip((m.kernel, m.recurrent_kernel, m.bias), (kernel, rec, bias), strict=True):
            p.copy_(v)
    xl, hl = x.clone().requires_grad_(), h0.clone().requires_grad_()
    out, h = m(xl.transpose(0, 1), hl, sequence_length=lengths)
    loss = (out.transpose(0, 1) * g_out).sum() + (h * g_h).sum()
    got = torch.autograd.grad(loss, [xl, hl, m.kernel, m.recurrent_kernel, m.bias])
    valid = torch.from_numpy(seq.numpy()) * mask[..., None]
    assert scaled_error_f64(out.transpose(0, 1), valid.double()) <= TF_TOL
    assert scaled_error_f64(h, torch.from_numpy(h_T.numpy()).double()) <= TF_TOL
    for name, a, w in zip(
        ("x", "h0", "kernel", "recurrent_kernel", "bias"), got, want, strict=True
    ):
        assert scaled_error_f64(a, torch.from_numpy(w.numpy()).double()) <= TF_TOL, name


def _bad_cases():
    inp = _inputs(2, torch.float32, True)
    x, h0, k, rk, b = inp
    attrs = (True, "sigmoid", "tanh")
    yield "gru activation", "keras_gru", (x, h0, k, rk, b, True, "sigmoid", "gelu")
    yield "gru bias", "keras_gru", (x, h0, k, rk, b[0], *attrs)
    yield "gru kernel", "keras_gru", (x, h0, k[:, 1:], rk, b, *attrs)
    yield "gru dtype", "keras_gru", (x, h0.double(), k, rk, b, *attrs)
    lx = torch.randn(2, 3, 4)
    c0, hp, wp = torch.randn(3, 6), torch.randn(3, 2), torch.randn(6, 2)
    w, pe, bb = torch.randn(4 + 2, 24), torch.randn(6), torch.randn(24)
    ex_attrs = (1.0, 0.0, 0.0, True, "icfo", "sigmoid", "tanh", "straight_through")
    yield "lstm w_proj", "block_lstm_ex", (lx, c0, hp, w, pe, pe, pe, bb, wp[1:], *ex_attrs)
    yield "lstm w", "block_lstm_ex", (lx, c0, hp, w[1:], pe, pe, pe, bb, wp, *ex_attrs)
    yield "lstm peephole", "block_lstm_ex", (lx, c0, hp, w, pe[1:], pe, pe, bb, wp, *ex_attrs)
    bad_order = (*ex_attrs[:4], "cifo", *ex_attrs[5:])
    yield "lstm order", "block_lstm_ex", (lx, c0, hp, w, pe, pe, pe, bb, wp, *bad_order)


@pytest.mark.parametrize("case", [c[0] for c in _bad_cases()])
def test_fake_kernels_raise_what_the_kernels_raise(case):
    """Each bad input raises the same exception type and message eagerly (C++) and under
    FakeTensor tracing (the fake kernels' mirror in _checks.py)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    _, op_name, args = next(c for c in _bad_cases() if c[0] == case)
    op = getattr(torch.ops.torch_lstm_grad, op_name)
    slm = torch.tensor(2)
    with pytest.raises((ValueError, TypeError)) as eager:
        op(slm, *args)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises((ValueError, TypeError)) as traced:
            op(mode.from_tensor(slm), *fake)
    assert type(traced.value) is type(eager.value)
    assert str(traced.value) == str(eager.value)
