"""block_lstm_ex: the LSTM activation / clip-gradient variants and TF1 LSTMCell's
projection, against the float64 reference, TF/Keras themselves, gradcheck, opcheck and
torch.compile; and the modules' variant attributes.

Shapes are small (the suite must stay fast). T = 5 runs the CPU's fused brgemm steps (from 4
steps), T = 2 the library-product path, so both kinds of loop are covered.
"""

import itertools

import pytest
import torch

import torch_lstm_grad
from tests.helpers import EX_B as B
from tests.helpers import EX_H as H
from tests.helpers import EX_I as I
from tests.helpers import EX_NAMES as NAMES
from tests.helpers import EX_P as P
from tests.helpers import block_lstm_ex_inputs as _inputs
from tests.helpers import scaled_error_f64, tf_module
from torch_lstm_grad import modules, ops, reference
from torch_lstm_grad.autograd import BlockLSTMExFunction

GATES = ("sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3")
ACTS = ("tanh", "relu", "linear")
CLIPS = ("straight_through", "zero")


def _run_ex(inp, seq_len_max, peep, variant, cell_clip=0.8, proj_clip=0.5, order="icfo"):
    leaves = {k: (v.clone().requires_grad_() if v is not None else None) for k, v in inp.items()}
    out = ops.block_lstm_ex(
        leaves["x"],
        leaves["cs_prev"],
        leaves["h_prev"],
        leaves["w"],
        leaves["b"],
        seq_len_max=seq_len_max,
        wci=leaves["wci"],
        wcf=leaves["wcf"],
        wco=leaves["wco"],
        w_proj=leaves["w_proj"],
        forget_bias=1.0,
        cell_clip=cell_clip,
        proj_clip=proj_clip if inp["w_proj"] is not None else 0.0,
        use_peephole=peep,
        gate_order=order,
        **variant,
    )
    return out, leaves


def _reference(
    inp, seq_len_max, peep, variant, cs_grad, h_grad, cell_clip=0.8, proj_clip=0.5, order="icfo"
):
    d = {k: (v.double() if v is not None else None) for k, v in inp.items()}
    extra = {
        **variant,
        "w_proj": d["w_proj"],
        "proj_clip": proj_clip if d["w_proj"] is not None else 0.0,
    }
    args = [d[k] for k in NAMES[:8]]
    out = reference.block_lstm(seq_len_max, *args, 1.0, cell_clip, peep, order, **extra)
    grads = reference.block_lstm_grad(
        seq_len_max, *args, cs_grad.double(), h_grad.double(), 1.0, cell_clip, peep, order, **extra
    )
    return out, grads


@pytest.mark.parametrize("T", [5, 2])
@pytest.mark.parametrize("proj", [False, True], ids=["noproj", "proj"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 5e-6)])
def test_every_variant_matches_reference(T, proj, dtype, tol):
    """All 18 activation/clip combinations, peepholes on and off, seq_len_max below T: the seven
    outputs and the nine gradients against autograd through the float64 reference."""
    inp = _inputs(T, dtype, proj)
    for (ga, ac, cg), peep in itertools.product(itertools.product(GATES, ACTS, CLIPS), (0, 1)):
        variant = {"gate_activation": ga, "activation": ac, "clip_gradient": cg}
        out, leaves = _run_ex(inp, T - 1, bool(peep), variant)
        cs_grad = torch.randn(out.cs.shape, dtype=dtype)
        h_grad = torch.randn(out.h.shape, dtype=dtype)
        wanted = [k for k in NAMES if leaves[k] is not None]
        got = torch.autograd.grad([out.cs, out.h], [leaves[k] for k in wanted], [cs_grad, h_grad])
        ref_out, ref_grads = _reference(inp, T - 1, bool(peep), variant, cs_grad, h_grad)
        for name, a, r in zip("i cs f o ci co h".split(), out, ref_out, strict=True):
            assert scaled_error_f64(a, r) <= tol, (variant, peep, name)
        for name, a, r in zip(wanted, got, ref_grads, strict=True):
            if not peep and name in ("wci", "wcf", "wco"):
                continue
            assert scaled_error_f64(a, r) <= tol, (variant, peep, name)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-2), (torch.bfloat16, 6e-2)])
def test_half_precision_variants(dtype, tol):
    inp = _inputs(5, dtype, True)
    variant = {
        "gate_activation": "hard_sigmoid_keras2",
        "activation": "relu",
        "clip_gradient": "zero",
    }
    out, leaves = _run_ex(inp, 5, True, variant)
    cs_grad, h_grad = torch.randn(out.cs.shape), torch.randn(out.h.shape)
    got = torch.autograd.grad(
        [out.cs, out.h], [leaves[k] for k in NAMES], [cs_grad.to(dtype), h_grad.to(dtype)]
    )
    ref_out, ref_grads = _reference(inp, 5, True, variant, cs_grad, h_grad)
    assert all(o.dtype == dtype for o in out)
    for a, r in zip(list(out) + list(got), list(ref_out) + list(ref_grads), strict=True):
        assert scaled_error_f64(a, r) <= tol


def test_defaults_equal_block_lstm_bit_for_bit():
    """block_lstm_ex with TF's attributes computes exactly what BlockLSTM(Grad) does."""
    inp = _inputs(5, torch.float32, False)
    args = [inp[k] for k in NAMES[:8]]
    slm = torch.tensor(4)
    a = torch.ops.torch_lstm_grad.block_lstm(slm, *args, 1.0, 0.5, True)
    e = torch.ops.torch_lstm_grad.block_lstm_ex(
        slm, *args, None, 1.0, 0.5, 0.0, True, "icfo", "sigmoid", "tanh", "straight_through"
    )
    for p, q in zip(a, e, strict=True):
        assert torch.equal(p, q)
    cg, hg = torch.randn(5, B, H), torch.randn(5, B, H)
    ga = torch.ops.torch_lstm_grad.block_lstm_grad(slm, *args, *a, cg, hg, True)
    ge = torch.ops.torch_lstm_grad.block_lstm_ex_grad(
        slm, *args, None, *e, cg, hg, 0.5, 0.0, True, "icfo", "sigmoid", "tanh", "straight_through"
    )
    for p, q in zip(ga, ge[:8], strict=True):
        assert torch.equal(p, q)
    assert ge[8].shape == (0,)


def test_clip_gradient_zero_masks_clipped_states():
    """With every state clipped, the zero rule passes no gradient from cs to the gates, the
    straight-through one does (and both have the same forward)."""
    inp = _inputs(3, torch.float64, False)
    inp["cs_prev"] = inp["cs_prev"].sign() * 5  # far outside the clip
    outs = {}
    for cg in CLIPS:
        out, leaves = _run_ex(inp, 1, False, {"clip_gradient": cg}, cell_clip=0.01)
        assert out.cs[0].abs().max() == 0.01
        outs[cg] = torch.autograd.grad(out.cs[0].sum(), leaves["x"])[0]
    assert outs["zero"].abs().max() == 0
    assert outs["straight_through"].abs().max() > 0


def _gradcheck_fn(path, variant, peep, proj, T):
    def f(x, cs_prev, h_prev, w, wci, wcf, wco, b, *w_proj):
        wp = w_proj[0] if proj else None
        # The straight-through clip is not the clip's derivative: gradcheck it unclipped.
        clip = 0.8 if variant["clip_gradient"] == "zero" else 0.0
        attrs = (
            1.0,
            clip,
            0.4 if proj else 0.0,
            peep,
            "ifco",
            variant["gate_activation"],
            variant["activation"],
            variant["clip_gradient"],
        )
        slm = torch.tensor(T - 1)
        if path == "ops":
            out = torch.ops.torch_lstm_grad.block_lstm_ex(
                slm, x, cs_prev, h_prev, w, wci, wcf, wco, b, wp, *attrs
            )
        elif path == "apply":
            out = BlockLSTMExFunction.apply(
                slm, x, cs_prev, h_prev, w, wci, wcf, wco, b, wp, *attrs
            )
        else:
            out = ops.block_lstm_ex(
                x,
                cs_prev,
                h_prev,
                w,
                b,
                seq_len_max=T - 1,
                wci=wci,
                wcf=wcf,
                wco=wco,
                w_proj=wp,
                forget_bias=1.0,
                cell_clip=clip,
                proj_clip=attrs[2],
                use_peephole=peep,
                gate_order="ifco",
                **variant,
            )
        return out[1], out[6]

    return f


@pytest.mark.parametrize(
    "path,variant,peep,proj",
    [
        (
            "raw",
            {
                "gate_activation": "hard_sigmoid_keras2",
                "activation": "relu",
                "clip_gradient": "zero",
            },
            True,
            True,
        ),
        (
            "apply",
            {
                "gate_activation": "hard_sigmoid_keras3",
                "activation": "linear",
                "clip_gradient": "zero",
            },
            False,
            True,
        ),
        (
            "ops",
            {
                "gate_activation": "sigmoid",
                "activation": "relu",
                "clip_gradient": "straight_through",
            },
            True,
            False,
        ),
        (
            "ops",
            {
                "gate_activation": "hard_sigmoid_keras3",
                "activation": "tanh",
                "clip_gradient": "zero",
            },
            True,
            True,
        ),
    ],
)
def test_gradcheck(path, variant, peep, proj):
    """float64 gradcheck w.r.t. every input. Random inputs put no pre-activation within
    gradcheck's eps (1e-6) of a kink (hard sigmoid, relu, the clips), where the derivative is
    not defined; the clips are hit (cell_clip 0.8, proj_clip 0.4), so the zero rule is checked."""
    T = 4
    inp = _inputs(T, torch.float64, proj, seed=3)
    leaves = [inp[k].clone().requires_grad_() for k in NAMES if inp[k] is not None]
    f = _gradcheck_fn(path, variant, peep, proj, T)
    assert torch.autograd.gradcheck(f, leaves)


def test_double_backward_raises():
    inp = _inputs(3, torch.float64, False)
    out, leaves = _run_ex(inp, 3, False, {"activation": "relu"})
    (g,) = torch.autograd.grad(out.h.sum(), leaves["x"], create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


@pytest.mark.parametrize(
    "attr,value",
    [
        ("gate_activation", "hard_sigmoid"),
        ("activation", "elu"),
        ("clip_gradient", "none"),
        ("gate_order", "iofc"),
    ],
)
def test_bad_attribute_raises_value_error(attr, value):
    inp = _inputs(2, torch.float32, False)
    args = [inp[k] for k in NAMES]
    attrs = {
        "gate_order": "icfo",
        "gate_activation": "sigmoid",
        "activation": "tanh",
        "clip_gradient": "straight_through",
        attr: value,
    }
    pattern = rf"^{attr}: expected one of '.*', got '{value}'$"
    with pytest.raises(ValueError, match=pattern):  # the C++ kernel
        torch.ops.torch_lstm_grad.block_lstm_ex(
            torch.tensor(2), *args, 1.0, 0.0, 0.0, False, *attrs.values()
        )
    with pytest.raises(ValueError, match=pattern):  # the module's own check
        modules.LSTMBlockFusedCell(H, I, **{attr: value})
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode, pytest.raises(ValueError, match=pattern):  # the fake kernel
        fake = [mode.from_tensor(a) if a is not None else None for a in args]
        torch.ops.torch_lstm_grad.block_lstm_ex(
            mode.from_tensor(torch.tensor(2)), *fake, 1.0, 0.0, 0.0, False, *attrs.values()
        )


def test_projection_shape_errors_name_the_argument():
    inp = _inputs(2, torch.float32, True)
    args = [inp[k] for k in NAMES]
    args[8] = torch.randn(H + 1, P)
    with pytest.raises(ValueError, match=r"^w_proj: expected shape \[H, P\] with H = 6"):
        torch.ops.torch_lstm_grad.block_lstm_ex(
            torch.tensor(2),
            *args,
            1.0,
            0.0,
            0.0,
            False,
            "icfo",
            "sigmoid",
            "tanh",
            "straight_through",
        )
    args[8], args[2] = inp["w_proj"], torch.randn(B, H)
    with pytest.raises(ValueError, match=r"^h_prev: expected shape \[B, P\] = \[3, 3\]"):
        torch.ops.torch_lstm_grad.block_lstm_ex(
            torch.tensor(2),
            *args,
            1.0,
            0.0,
            0.0,
            False,
            "icfo",
            "sigmoid",
            "tanh",
            "straight_through",
        )


# ---------------------------------------------------------------------------------------------
# Modules


def test_modules_with_default_attributes_call_the_raw_ops(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("block_lstm_ex called with every attribute at its default")

    monkeypatch.setattr(ops, "block_lstm_ex", refuse)
    fused = modules.LSTMBlockFusedCell(H, I, cell_clip=1.0, use_peephole=True)
    fused(torch.randn(3, B, I))
    cell = modules.LSTMBlockCell(H, I)
    cell(torch.randn(B, I))


@pytest.mark.parametrize("order", ["icfo", "ifco"])
def test_fused_cell_variants_match_reference(order):
    m = modules.LSTMBlockFusedCell(
        H,
        I,
        forget_bias=0.5,
        cell_clip=0.7,
        use_peephole=True,
        gate_activation="hard_sigmoid_keras2",
        activation="relu",
        clip_gradient="zero",
        num_proj=P,
        proj_clip=0.3,
        gate_order=order,
        dtype=torch.float64,
    )
    assert m.kernel.shape == (I + P, 4 * H) and m.projection_kernel.shape == (H, P)
    x = torch.randn(4, B, I, dtype=torch.float64)
    c0, h0 = torch.randn(B, H, dtype=torch.float64), torch.randn(B, P, dtype=torch.float64)
    lengths = torch.tensor([4, 2, 0])
    out, (cs, h) = m(x, (c0, h0), sequence_length=lengths)
    assert out.shape == (4, B, P) and cs.shape == (B, H) and h.shape == (B, P)
    ref = reference.block_lstm(
        4,
        x,
        c0,
        h0,
        m.kernel,
        m.w_i_diag,
        m.w_f_diag,
        m.w_o_diag,
        m.bias,
        0.5,
        0.7,
        True,
        order,
        gate_activation="hard_sigmoid_keras2",
        activation="relu",
        clip_gradient="zero",
        w_proj=m.projection_kernel,
        proj_clip=0.3,
    )
    mask = (torch.arange(4)[:, None] < lengths[None, :]).unsqueeze(-1)
    torch.testing.assert_close(out, ref[6] * mask)
    torch.testing.assert_close(h[0], ref[6][3, 0])
    torch.testing.assert_close(h[1], ref[6][1, 1])
    torch.testing.assert_close(h[2], h0[2])
    torch.testing.assert_close(cs[1], ref[1][1, 1])
    # The single-step cell with the same parameters is one step of the fused one.
    cell = modules.LSTMBlockCell(
        H,
        I,
        forget_bias=0.5,
        cell_clip=0.7,
        use_peephole=True,
        gate_activation="hard_sigmoid_keras2",
        activation="relu",
        clip_gradient="zero",
        num_proj=P,
        proj_clip=0.3,
        gate_order=order,
        dtype=torch.float64,
    )
    cell.load_state_dict(m.state_dict())
    y, (c1, h1) = cell(x[0], (c0, h0))
    torch.testing.assert_close(y, ref[6][0])
    torch.testing.assert_close(c1, ref[1][0])
    torch.testing.assert_close(h1, y)
    assert "num_proj=3" in repr(cell) and "hard_sigmoid_keras2" in repr(cell)


def test_module_rejects_proj_clip_without_num_proj():
    with pytest.raises(ValueError, match="^proj_clip: needs num_proj"):
        modules.LSTMBlockFusedCell(H, I, proj_clip=1.0)


# ---------------------------------------------------------------------------------------------
# Against TensorFlow / Keras themselves (float32, randomised weights and biases).

TF_TOL = 1e-5


def _tf():
    pytest.importorskip("tensorflow")

    return tf_module()


def _keras_lstm_case(recurrent_activation, activation, ours_gate, ours_act):
    """Keras 3 LSTM (return_sequences + return_state, initial state) against block_lstm_ex with
    w = [kernel; recurrent_kernel], IFCO, forget_bias 0, no clip: forward and the gradients of
    the input, both initial states, kernel, recurrent_kernel and bias."""
    tf = _tf()
    import keras

    T, Bk, Ik, U = 5, 3, 4, 6
    g = torch.Generator().manual_seed(7)
    x = torch.randn(Bk, T, Ik, generator=g)
    h0, c0 = torch.randn(Bk, U, generator=g), torch.randn(Bk, U, generator=g)
    kernel = torch.randn(Ik, 4 * U, generator=g) * 0.7
    rec = torch.randn(U, 4 * U, generator=g) * 0.7
    bias = torch.randn(4 * U, generator=g)
    g_out, g_h, g_c = (
        torch.randn(Bk, T, U, generator=g),
        torch.randn(Bk, U, generator=g),
        torch.randn(Bk, U, generator=g),
    )

    layer = keras.layers.LSTM(
        U,
        activation=activation,
        recurrent_activation=recurrent_activation,
        return_sequences=True,
        return_state=True,
    )
    layer.build((Bk, T, Ik))
    layer.set_weights([kernel.numpy(), rec.numpy(), bias.numpy()])
    tx, th0, tc0 = (tf.constant(t.numpy()) for t in (x, h0, c0))
    with tf.GradientTape() as tape:
        tape.watch([tx, th0, tc0])
        seq, h_T, c_T = layer(tx, initial_state=[th0, tc0])
        loss = (
            tf.reduce_sum(seq * g_out.numpy())
            + tf.reduce_sum(h_T * g_h.numpy())
            + tf.reduce_sum(c_T * g_c.numpy())
        )
    want = tape.gradient(loss, [tx, th0, tc0, *layer.trainable_weights])
    want = [torch.from_numpy(w.numpy()) for w in want]

    leaves = [t.clone().requires_grad_() for t in (x, h0, c0, kernel, rec, bias)]
    xl, hl, cl, kl, rl, bl = leaves
    out = ops.block_lstm_ex(
        xl.transpose(0, 1),
        cl,
        hl,
        torch.cat([kl, rl]),
        bl,
        forget_bias=0.0,
        gate_order="ifco",
        gate_activation=ours_gate,
        activation=ours_act,
    )
    ours_seq = out.h.transpose(0, 1)
    loss = (ours_seq * g_out).sum() + (out.h[-1] * g_h).sum() + (out.cs[-1] * g_c).sum()
    got = torch.autograd.grad(loss, leaves)
    tf_seq = torch.from_numpy(seq.numpy())
    assert scaled_error_f64(ours_seq, tf_seq.double()) <= TF_TOL
    assert scaled_error_f64(out.cs[-1], torch.from_numpy(c_T.numpy()).double()) <= TF_TOL
    for name, a, w in zip(
        ("x", "h0", "c0", "kernel", "recurrent_kernel", "bias"), got, want, strict=True
    ):
        assert scaled_error_f64(a, w.double()) <= TF_TOL, name


@pytest.mark.parametrize("activation", ACTS)
def test_keras3_lstm_hard_sigmoid_matches_tf(activation):
    _keras_lstm_case("hard_sigmoid", activation, "hard_sigmoid_keras3", activation)


def test_keras2_hard_sigmoid_matches_tf():
    """Keras 2.x's hard_sigmoid, clip(0.2·x + 0.5, 0, 1), as a custom recurrent activation of a
    Keras 3 LSTM (Keras 3 has no built-in for it)."""

    def keras2_hard_sigmoid(x):
        import keras

        return keras.ops.clip(0.2 * x + 0.5, 0.0, 1.0)

    _keras_lstm_case(keras2_hard_sigmoid, "tanh", "hard_sigmoid_keras2", "tanh")


@pytest.mark.parametrize(
    "num_proj,proj_clip,activation,lengths",
    [
        (None, None, "tanh", None),
        (3, 0.15, "tanh", None),
        (3, None, "relu", None),
        (3, 0.15, "tanh", [5, 3, 0]),
    ],
)
def test_tf1_lstmcell_matches_tf(num_proj, proj_clip, activation, lengths):
    """TF1 LSTMCell(use_peepholes, cell_clip, num_proj, proj_clip) stepped under a GradientTape
    (what dynamic_rnn unrolls to; with `lengths`, tf.compat.v1.nn.dynamic_rnn itself with
    sequence_length), against LSTMBlockFusedCell (block_lstm_ex, clip_gradient="zero"):
    outputs, final state and the gradients of the inputs, both initial states and every
    variable."""
    tf = _tf()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl

    T, Bk, Ik, U = 5, 3, 4, 6
    Pk = num_proj or U
    g = torch.Generator().manual_seed(11)
    x = torch.randn(T, Bk, Ik, generator=g)
    c0, h0 = torch.randn(Bk, U, generator=g), torch.randn(Bk, Pk, generator=g) * 0.3
    weights = {
        "kernel": torch.randn(Ik + Pk, 4 * U, generator=g) * 0.7,
        "bias": torch.randn(4 * U, generator=g),
        "w_f_diag": torch.randn(U, generator=g),
        "w_i_diag": torch.randn(U, generator=g),
        "w_o_diag": torch.randn(U, generator=g),
    }
    if num_proj:
        weights["projection/kernel"] = torch.randn(U, Pk, generator=g) * 0.7
    g_out, g_c, g_h = (
        torch.randn(T, Bk, Pk, generator=g),
        torch.randn(Bk, U, generator=g),
        torch.randn(Bk, Pk, generator=g),
    )
    act = {"tanh": tf.tanh, "relu": tf.nn.relu}[activation]
    cell = rnn_cell_impl.LSTMCell(
        U,
        use_peepholes=True,
        cell_clip=0.6,
        num_proj=num_proj,
        proj_clip=proj_clip,
        forget_bias=1.0,
        activation=act,
    )
    # Variables are created (with their checkpoint names) on the first call.
    cell(tf.zeros([Bk, Ik]), rnn_cell_impl.LSTMStateTuple(tf.zeros([Bk, U]), tf.zeros([Bk, Pk])))
    for v in cell.variables:
        v.assign(weights[v.name.split("/", 1)[1].split(":")[0]].numpy())
    tx, tc0, th0 = (tf.constant(t.numpy()) for t in (x, c0, h0))

    def run_tf(tx, tc0, th0):
        with tf.GradientTape() as tape:
            tape.watch([tx, tc0, th0])
            state = rnn_cell_impl.LSTMStateTuple(tc0, th0)
            if lengths is None:
                outs = []
                for t in range(T):
                    y, state = cell(tx[t], state)
                    outs.append(y)
                seq = tf.stack(outs)
            else:
                seq, state = tf.compat.v1.nn.dynamic_rnn(
                    cell, tx, sequence_length=lengths, initial_state=state, time_major=True
                )
            loss = (
                tf.reduce_sum(seq * g_out.numpy())
                + tf.reduce_sum(state.c * g_c.numpy())
                + tf.reduce_sum(state.h * g_h.numpy())
            )
        return seq, state.c, tape.gradient(loss, [tx, tc0, th0, *cell.variables])

    seq, c_T, want = (run_tf if lengths is None else tf.function(run_tf))(tx, tc0, th0)
    names = [v.name.split("/", 1)[1].split(":")[0] for v in cell.variables]
    want = dict(
        zip(["x", "c0", "h0", *names], (torch.from_numpy(w.numpy()) for w in want), strict=True)
    )
    # Half the final states clipped, most steps: the zero rule matters.
    assert (c_T.numpy() == 0.6).any() or (c_T.numpy() == -0.6).any()

    m = modules.LSTMBlockFusedCell(
        U,
        Ik,
        forget_bias=1.0,
        cell_clip=0.6,
        use_peephole=True,
        activation=activation,
        clip_gradient="zero",
        num_proj=num_proj,
        proj_clip=proj_clip,
    )
    params = {
        "kernel": "kernel",
        "bias": "bias",
        "w_f_diag": "w_f_diag",
        "w_i_diag": "w_i_diag",
        "w_o_diag": "w_o_diag",
        "projection/kernel": "projection_kernel",
    }
    with torch.no_grad():
        for tf_name, value in weights.items():
            getattr(m, params[tf_name]).copy_(value)
    xl, cl, hl = (t.clone().requires_grad_() for t in (x, c0, h0))
    out, (cs_T, h_T) = m(xl, (cl, hl), sequence_length=lengths)
    loss = (out * g_out).sum() + (cs_T * g_c).sum() + (h_T * g_h).sum()
    got = dict(
        zip(
            ["x", "c0", "h0"],
            torch.autograd.grad(loss, [xl, cl, hl], retain_graph=True),
            strict=True,
        )
    )
    for tf_name in weights:
        got[tf_name] = torch.autograd.grad(loss, getattr(m, params[tf_name]), retain_graph=True)[0]
    assert scaled_error_f64(out, torch.from_numpy(seq.numpy()).double()) <= TF_TOL
    assert scaled_error_f64(cs_T, torch.from_numpy(c_T.numpy()).double()) <= TF_TOL
    for name, w in want.items():
        assert scaled_error_f64(got[name], w.double()) <= TF_TOL, name


def test_public_names():
    assert torch_lstm_grad.BlockLSTMExFunction is BlockLSTMExFunction
    assert "BlockLSTMExFunction" in torch_lstm_grad.__all__
