"""The nn.Modules of torch_lstm_grad.modules (SPEC §1.2) against the raw ops, TF1's fused-cell
semantics (built from tf.raw_ops.BlockLSTM + masking, as contrib's LSTMBlockFusedCell did) and
torch.nn.LSTM/GRU/RNN through the converters of layouts.py (float64)."""

import pytest
import torch
from tf_oracle import available as _tf_available
from tf_oracle import tf_module

from torch_lstm_grad import layouts, modules, raw_ops

needs_tf = pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")

# Ours float32 vs TF float32 (activations a few ulp apart, GEMM order): measured <= 3.3e-7.
TOL_TF32 = 1e-5
# float64 ours vs torch.nn float64: measured <= 6.7e-16.
TOL_F64 = 1e-12
# Largest error seen per comparison (see the parity figures in the report).
MAX_ERR = {}


def _close(key, got, want, tol):
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, f"{key}: {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    if got.numel():
        MAX_ERR[key] = max(MAX_ERR.get(key, 0.0), ((got - want).abs().max() / scale).item())
    torch.testing.assert_close(got, want, atol=tol * scale, rtol=tol, msg=lambda m: f"{key}: {m}")


# ---------------------------------------------------------------------------------------------
# Parameter names, shapes, defaults, initialisation


def test_parameter_names_and_shapes():
    c = modules.LSTMBlockCell(5, 3)
    assert {n: tuple(p.shape) for n, p in c.named_parameters()} == {
        "kernel": (8, 20),
        "bias": (20,),
    }
    f = modules.LSTMBlockFusedCell(5, 3, use_peephole=True)
    assert {n: tuple(p.shape) for n, p in f.named_parameters()} == {
        "kernel": (8, 20),
        "bias": (20,),
        "w_i_diag": (5,),
        "w_f_diag": (5,),
        "w_o_diag": (5,),
    }
    g = modules.GRUBlockCell(5, 3)
    assert {n: tuple(p.shape) for n, p in g.named_parameters()} == {
        "gates_kernel": (8, 10),
        "gates_bias": (10,),
        "candidate_kernel": (8, 5),
        "candidate_bias": (5,),
    }
    m = modules.CudnnLSTM(2, 5, 3, direction="bidirectional")
    size = raw_ops.CudnnRNNParamsSize(
        2, 5, 3, torch.float32, torch.int32, direction="bidirectional"
    )
    assert [(n, p.numel()) for n, p in m.named_parameters()] == [("opaque_kernel", int(size[0]))]


def test_defaults_and_init():
    c = modules.LSTMBlockCell(4, 3)
    assert (c.forget_bias, c.cell_clip, c.use_peephole) == (1.0, None, False)
    assert torch.equal(c.bias, torch.zeros(16))
    assert c.kernel.abs().max() <= (6 / (7 + 16)) ** 0.5 and c.kernel.std() > 0
    g = modules.GRUBlockCell(4, 3)
    assert torch.equal(g.gates_bias, torch.ones(8)) and torch.equal(
        g.candidate_bias, torch.zeros(4)
    )
    m = modules.CudnnLSTM(2, 6, 3, num_proj=4)
    weights, biases = m.canonical_weights()
    assert all(torch.equal(b, torch.zeros_like(b)) for b in biases)
    for w in weights:  # glorot-uniform per canonical [out, in] matrix
        assert w.abs().max() <= (6 / sum(w.shape)) ** 0.5 and w.std() > 0
    assert [tuple(w.shape) for w in weights[:9]] == [(6, 3)] * 4 + [(6, 4)] * 4 + [(4, 6)]


# ---------------------------------------------------------------------------------------------
# LSTMBlockCell / GRUBlockCell vs the raw ops


@pytest.mark.parametrize("peephole", [False, True])
def test_wiring_lstm_block_cell_module_vs_raw_op(peephole):
    """Wiring, not parity: the module passes its parameters and attributes to the raw op (ours
    against ours; the raw op is checked against TF in test_lstm_block_ops.py)."""
    cell = modules.LSTMBlockCell(4, 3, forget_bias=0.5, use_peephole=peephole).double()
    with torch.no_grad():
        cell.bias[8:12] = 10.0  # f ≈ 1: |cs| ≈ |cs_prev| > 3, where the raw op's default clips
    x, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    cs = torch.randn(2, 4, dtype=torch.float64) * 10
    out, (cs1, h1) = cell(x, (cs, h))
    z = torch.zeros(4, dtype=torch.float64)
    peep = (cell.w_i_diag, cell.w_f_diag, cell.w_o_diag) if peephole else (z, z, z)
    want = raw_ops.LSTMBlockCell(
        x,
        cs,
        h,
        cell.kernel,
        *peep,
        cell.bias,
        forget_bias=0.5,
        cell_clip=-1,
        use_peephole=peephole,
    )
    assert torch.equal(out, want.h) and torch.equal(h1, want.h) and torch.equal(cs1, want.cs)
    clipped = raw_ops.LSTMBlockCell(
        x, cs, h, cell.kernel, *peep, cell.bias, forget_bias=0.5, use_peephole=peephole
    )
    assert not torch.equal(cs1, clipped.cs)  # cell_clip=None is not the raw op's 3.0
    # zero initial state by default
    assert torch.equal(cell(x)[0], cell(x, (torch.zeros_like(cs), torch.zeros_like(h)))[0])


def test_wiring_gru_block_cell_module_vs_raw_op():
    """Wiring, not parity: the module against the raw op it calls (ours against ours)."""
    cell = modules.GRUBlockCell(4, 3).double()
    x, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    out, state = cell(x, h)
    want = raw_ops.GRUBlockCell(
        x, h, cell.gates_kernel, cell.candidate_kernel, cell.gates_bias, cell.candidate_bias
    )
    assert torch.equal(out, want.h) and state is out
    out.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in cell.parameters())


# ---------------------------------------------------------------------------------------------
# LSTMBlockFusedCell with sequence_length: TF1's fused-cell semantics


def _tf_fused(x, cs0, h0, kernel, bias, peep, lengths, forget_bias, use_peephole, upstream):
    """contrib's LSTMBlockFusedCell in TF: BlockLSTM to max(lengths), h masked, final state
    gathered at length - 1 (the initial state for 0). Returns outputs, final cs/h and the
    gradients of sum(upstream · (outputs, cs, h)) w.r.t. x, cs0, h0, kernel, bias, peepholes."""
    tf = tf_module()
    t = {
        k: tf.constant(v.detach().numpy())
        for k, v in dict(
            x=x, cs0=cs0, h0=h0, kernel=kernel, bias=bias, wci=peep[0], wcf=peep[1], wco=peep[2]
        ).items()
    }
    T = x.shape[0]
    lens = tf.constant(lengths, dtype=tf.int64)
    with tf.GradientTape() as tape:
        tape.watch(list(t.values()))
        out = tf.raw_ops.BlockLSTM(
            seq_len_max=tf.reduce_max(lens),
            x=t["x"],
            cs_prev=t["cs0"],
            h_prev=t["h0"],
            w=t["kernel"],
            wci=t["wci"],
            wcf=t["wcf"],
            wco=t["wco"],
            b=t["bias"],
            forget_bias=forget_bias,
            cell_clip=-1.0,
            use_peephole=use_peephole,
        )
        mask = tf.transpose(tf.sequence_mask(lens, T, dtype=tf.float32))[:, :, None]
        h = out.h * mask
        mod_cs = tf.concat([t["cs0"][None], out.cs], 0)
        mod_h = tf.concat([t["h0"][None], h], 0)
        idx = tf.stack([lens, tf.range(x.shape[1], dtype=tf.int64)], 1)  # (length - 1) + 1
        final_cs, final_h = tf.gather_nd(mod_cs, idx), tf.gather_nd(mod_h, idx)
        loss = sum(
            tf.reduce_sum(a * tf.constant(u.numpy()))
            for a, u in zip((h, final_cs, final_h), upstream, strict=True)
        )
    names = ["x", "cs0", "h0", "kernel", "bias"] + (["wci", "wcf", "wco"] if use_peephole else [])
    grads = tape.gradient(loss, [t[n] for n in names])
    as_t = lambda v: torch.from_numpy(v.numpy().copy())  # noqa: E731
    return [as_t(h), as_t(final_cs), as_t(final_h)], [as_t(g) for g in grads]


@needs_tf
@pytest.mark.parametrize("peephole", [False, True])
@pytest.mark.parametrize("lengths", [[5, 2, 0, 3], [5, 5, 5, 5], [0, 0, 0, 0], [1, 3, 2, 2]])
def test_fused_cell_sequence_length_vs_tf(lengths, peephole):
    T, B, I, H = 5, 4, 3, 6  # noqa: E741
    cell = modules.LSTMBlockFusedCell(H, I, forget_bias=0.7, use_peephole=peephole)
    with torch.no_grad():
        cell.bias.uniform_(-0.5, 0.5)
        if peephole:
            for p in (cell.w_i_diag, cell.w_f_diag, cell.w_o_diag):
                p.uniform_(-0.5, 0.5)
    x = torch.randn(T, B, I, requires_grad=True)
    cs0 = torch.randn(B, H, requires_grad=True)
    h0 = torch.randn(B, H, requires_grad=True)
    outputs, (cs, h) = cell(x, (cs0, h0), sequence_length=torch.tensor(lengths))
    upstream = [torch.randn_like(t) for t in (outputs, cs, h)]
    loss = sum((a * u).sum() for a, u in zip((outputs, cs, h), upstream, strict=True))
    params = [cell.kernel, cell.bias] + (
        [cell.w_i_diag, cell.w_f_diag, cell.w_o_diag] if peephole else []
    )
    grads = torch.autograd.grad(loss, [x, cs0, h0, *params])
    z = torch.zeros(H)
    peep = (cell.w_i_diag, cell.w_f_diag, cell.w_o_diag) if peephole else (z, z, z)
    want, want_grads = _tf_fused(
        x, cs0, h0, cell.kernel, cell.bias, peep, lengths, 0.7, peephole, upstream
    )
    for name, g, w in zip(("outputs", "cs", "h"), (outputs, cs, h), want, strict=True):
        _close(("fused_vs_tf", name), g, w, TOL_TF32)
    names = ["x", "cs0", "h0", "kernel", "bias", "wci", "wcf", "wco"]
    for name, g, w in zip(names[: len(grads)], grads, want_grads, strict=True):
        _close(("fused_vs_tf", "d" + name), g, w, TOL_TF32)
    # Row semantics that do not depend on TF: zero-length rows keep the initial state and have
    # zero outputs; padded outputs are zero.
    for b, n in enumerate(lengths):
        assert torch.equal(outputs[n:, b], torch.zeros_like(outputs[n:, b]))
        if n == 0:
            assert torch.equal(cs[b], cs0[b]) and torch.equal(h[b], h0[b])
        else:
            assert torch.equal(h[b], outputs[n - 1, b])


def test_wiring_fused_cell_equals_loop_of_cells():
    """Wiring, ours against ours. No sequence_length: outputs and final state are the
    LSTMBlockCell loop's (float64; ours projects the inputs of all steps in one GEMM, so the
    sums are ordered differently)."""
    fused = modules.LSTMBlockFusedCell(5, 3, use_peephole=True).double()
    cell = modules.LSTMBlockCell(5, 3, use_peephole=True).double()
    cell.load_state_dict(fused.state_dict())
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    outputs, (cs, h) = fused(x)
    state, hs = None, []
    for t in range(4):
        o, state = cell(x[t], state)
        hs.append(o)
    _close(("fused_vs_loop", "outputs"), outputs, torch.stack(hs), TOL_F64)
    _close(("fused_vs_loop", "cs"), cs, state[0], TOL_F64)
    assert torch.equal(h, outputs[-1])


# ---------------------------------------------------------------------------------------------
# Cudnn* modules vs torch.nn (float64) through layouts.torch_rnn_to_cudnn / cudnn_to_torch_rnn

CASES = {
    "lstm": lambda: torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True),
    "lstm_proj": lambda: torch.nn.LSTM(3, 5, num_layers=2, proj_size=2),
    "gru": lambda: torch.nn.GRU(3, 5, num_layers=2, bidirectional=True),
    "rnn_tanh": lambda: torch.nn.RNN(3, 4, num_layers=2, nonlinearity="tanh"),
    "rnn_relu": lambda: torch.nn.RNN(3, 4, bidirectional=True, nonlinearity="relu"),
}


def _canonical_grads(torch_module, mode):
    """torch.nn grads laid out as the canonical lists (the opaque grad's canonical split)."""
    weights, biases = [], []
    for layer in range(torch_module.num_layers):
        for suffix in ("", "_reverse")[: 2 if torch_module.bidirectional else 1]:
            g = {
                n: getattr(torch_module, f"{n}_l{layer}{suffix}").grad
                for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            }
            hr = getattr(torch_module, f"weight_hr_l{layer}{suffix}", None)
            w, b = layouts.torch_to_canonical(
                **g, rnn_mode=mode, weight_hr=None if hr is None else hr.grad
            )
            weights += w
            biases += b
    return weights, biases


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("lengths", [None, [4, 1, 3]], ids=["full", "varlen"])
def test_cudnn_modules_vs_torch_nn(case, lengths):
    ref = CASES[case]().double()
    ours = layouts.torch_rnn_to_cudnn(ref)
    assert (
        type(ours).__name__
        == {
            "lstm": "CudnnLSTM",
            "lstm_proj": "CudnnLSTM",
            "gru": "CudnnGRU",
            "rnn_tanh": "CudnnRNNTanh",
            "rnn_relu": "CudnnRNNRelu",
        }[case]
    )
    mode = ours._rnn_mode
    T, B = 4, 3
    x = torch.randn(T, B, 3, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    LD = ref.num_layers * (2 if ref.bidirectional else 1)
    h0 = torch.randn(
        LD,
        B,
        ref.proj_size or ref.hidden_size if mode == "lstm" else ref.hidden_size,
        dtype=torch.float64,
    )
    c0 = torch.randn(LD, B, ref.hidden_size, dtype=torch.float64)
    state = (h0, c0) if mode == "lstm" else (h0,)
    out, new_state = ours(x, state, sequence_lengths=lengths)
    if lengths is None:
        want, want_state = ref(x_ref, state if mode == "lstm" else h0)
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x_ref, lengths, enforce_sorted=False)
        want, want_state = ref(packed, state if mode == "lstm" else h0)
        want, _ = torch.nn.utils.rnn.pad_packed_sequence(want, total_length=T)
    want_state = want_state if mode == "lstm" else (want_state,)
    _close(("cudnn_vs_nn", case, "output"), out, want, TOL_F64)
    for k, (g, w) in enumerate(zip(new_state, want_state, strict=True)):
        _close(("cudnn_vs_nn", case, f"state{k}"), g, w, TOL_F64)
    ups = [torch.randn_like(t) for t in (out, *new_state)]
    loss = lambda o, s: sum((a * u).sum() for a, u in zip((o, *s), ups, strict=True))  # noqa: E731
    loss(out, new_state).backward()
    loss(want, want_state).backward()
    _close(("cudnn_vs_nn", case, "dx"), x.grad, x_ref.grad, TOL_F64)
    got_w, got_b = layouts.params_to_canonical(
        ours.opaque_kernel.grad,
        mode,
        ours.num_layers,
        ours.num_units,
        3,
        ours.direction,
        num_proj=ours.num_proj,
    )
    want_w, want_b = _canonical_grads(ref, mode)
    for k, (g, w) in enumerate(zip(got_w + got_b, want_w + want_b, strict=True)):
        _close(("cudnn_vs_nn", case, f"dparam{k}"), g, w, TOL_F64)


@pytest.mark.parametrize("case", list(CASES))
def test_cudnn_torch_round_trip_exact(case):
    ref = CASES[case]()
    back = layouts.cudnn_to_torch_rnn(layouts.torch_rnn_to_cudnn(ref))
    assert type(back) is type(ref)
    sd, sd_back = ref.state_dict(), back.state_dict()
    assert sd.keys() == sd_back.keys()
    assert all(torch.equal(sd[k], sd_back[k]) for k in sd)


def test_cudnn_batch_major_and_eval():
    m = modules.CudnnGRU(1, 4, 3).double()
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out_b, (h_b,) = m(x, time_major=False)
    out_t, (h_t,) = m(x.transpose(0, 1))
    assert torch.equal(out_b, out_t.transpose(0, 1)) and torch.equal(h_b[:, 0], h_t[0])
    m.eval()
    with torch.no_grad():
        out_e, _ = m(x.transpose(0, 1))
    assert torch.equal(out_e, out_t)
