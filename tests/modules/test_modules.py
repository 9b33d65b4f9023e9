"""The nn.Modules of torch_lstm_grad.modules (docs/api.md, "modules") against the raw ops, TF1's
fused-cell semantics (built from tf.raw_ops.BlockLSTM + masking, as contrib's
LSTMBlockFusedCell did) and torch.nn.LSTM/GRU/RNN through the converters of layouts.py
(float64); the TF1 modules' initialisers, refusals, edge batches (one row, no rows, zero and one
steps) and given states against TF, Keras and float64; the Cudnn* modules' gradient to an
initial state alone, dropout and its seeds, and lengths given as a list."""

import numpy as np
import pytest
import torch

from tests.helpers import STATES_B as B
from tests.helpers import STATES_I as I
from tests.helpers import (
    assert_close,
    keras_module,
    keras_run,
    needs_tf,
    random_states,
    randomize,
    tf_module,
    tf_raw,
    torch_loss,
)
from torch_lstm_grad import layouts, modules, raw_ops

# Ours float32 vs TF float32 (activations a few ulp apart, GEMM order): measured <= 3.3e-7.
TOL_TF32 = 1e-5
# float64 ours vs torch.nn float64: measured <= 6.7e-16.
TOL_F64 = 1e-12
# Largest error seen per comparison (kept for inspection).
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
    against ours; the raw op is checked against TF in tests/ops/test_raw_ops_lstm_block.py)."""
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


# ---------------------------------------------------------------------------------------------
# The TF1 modules: initialisers, refusals, edge batches, states only, against TF / float64.


def _uniform_within(p: torch.Tensor, fans: int) -> None:
    """glorot-uniform as TF draws it: |w| <= sqrt(6 / fans), and a real draw (not left as
    torch.empty found it)."""
    limit = (6.0 / fans) ** 0.5
    assert p.abs().max() <= limit and p.std() > limit / 4, (tuple(p.shape), limit)


@needs_tf
def test_tf1_initialisers():
    """What the modules' docstring promises (TF1's initialisers): glorot-uniform kernels,
    peepholes and projection, zero LSTM biases, GRU gate biases 1 and candidate bias 0, the
    fused GRU's orthogonal recurrent kernel and zero bias; empty parameters initialise."""
    torch.manual_seed(1)
    lstm = modules.LSTMBlockFusedCell(5, 3, use_peephole=True, num_proj=2)
    _uniform_within(lstm.kernel, 3 + 2 + 20)  # [I + P, 4H]
    for p in (lstm.w_i_diag, lstm.w_f_diag, lstm.w_o_diag):
        _uniform_within(p, 10)  # a vector [n]: fan_in = fan_out = n
    _uniform_within(lstm.projection_kernel, 5 + 2)
    assert not lstm.bias.any()
    gru = modules.GRUBlockCell(4, 3)
    _uniform_within(gru.gates_kernel, 7 + 8)
    _uniform_within(gru.candidate_kernel, 7 + 4)
    assert torch.equal(gru.gates_bias, torch.ones(8))
    assert torch.equal(gru.candidate_bias, torch.zeros(4))
    for reset_after, shape in ((True, (2, 12)), (False, (12,))):
        fused = modules.GRUBlockFusedCell(4, 3, reset_after=reset_after)
        _uniform_within(fused.kernel, 3 + 12)
        r = fused.recurrent_kernel.detach()
        torch.testing.assert_close(r @ r.t(), torch.eye(4), atol=1e-5, rtol=0)
        assert fused.bias.shape == shape and not fused.bias.any()
    empty = modules.LSTMBlockCell(0, 3, use_peephole=True)
    assert empty.w_i_diag.shape == (0,) and empty.kernel.shape == (3, 0)


@needs_tf
def test_tf1_refusals():
    """num_proj >= 1 (1 works), proj_clip only with num_proj, the GRUs' activations checked at
    construction."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_proj"):
            modules.LSTMBlockFusedCell(3, 2, num_proj=bad)
    with pytest.raises(ValueError, match="proj_clip"):
        modules.LSTMBlockCell(3, 2, proj_clip=0.5)
    out, (cs, h) = modules.LSTMBlockFusedCell(3, 2, num_proj=1)(torch.randn(4, 2, 2))
    assert out.shape == (4, 2, 1) and cs.shape == (2, 3) and h.shape == (2, 1)
    for cls in (modules.GRUBlockCell, modules.GRUBlockFusedCell):
        with pytest.raises(ValueError, match="activation"):
            cls(3, 2, activation="softsign")
        with pytest.raises(ValueError, match="gate_activation"):
            cls(3, 2, gate_activation="tanh")


@needs_tf
def test_lstm_fused_cell_one_row_and_no_rows_vs_tf():
    """sequence_length with one row (recorded for autograd): TF1's fused-cell semantics as TF
    computes them, gradients included; with no rows, empty outputs and states."""

    T, H, I_ = 5, 4, 3
    cell = modules.LSTMBlockFusedCell(H, I_, forget_bias=0.7)
    with torch.no_grad():
        cell.bias.uniform_(-0.5, 0.5)
    x = torch.randn(T, 1, I_, requires_grad=True)
    cs0, h0 = (torch.randn(1, H, requires_grad=True) for _ in range(2))
    lengths = [3]
    outputs, (cs, h) = cell(x, (cs0, h0), sequence_length=torch.tensor(lengths))
    upstream = [torch.randn_like(t) for t in (outputs, cs, h)]
    loss = sum((a * u).sum() for a, u in zip((outputs, cs, h), upstream, strict=True))
    grads = torch.autograd.grad(loss, [x, cs0, h0, cell.kernel, cell.bias])
    z = torch.zeros(H)
    want, want_grads = _tf_fused(x, cs0, h0, cell.kernel, cell.bias, (z, z, z), lengths, 0.7,
                                 False, upstream)  # fmt: skip
    pairs = dict(zip(("outputs", "cs", "h"), zip((outputs, cs, h), want, strict=True),
                     strict=True))  # fmt: skip
    names = ("d x", "d cs0", "d h0", "d kernel", "d bias")
    pairs.update(zip(names, zip(grads, want_grads, strict=True), strict=True))
    assert_close({k: (a, b.numpy()) for k, (a, b) in pairs.items()})
    x0 = torch.randn(T, 0, I_, requires_grad=True)
    empty = torch.zeros(0, H, requires_grad=True)
    out0, (cs_0, h_0) = cell(x0, (empty, empty), sequence_length=torch.zeros(0, dtype=torch.int64))
    assert out0.shape == (T, 0, H) and cs_0.shape == (0, H) and h_0.shape == (0, H)


@needs_tf
@pytest.mark.parametrize("peephole", [False, True])
def test_tf1_cells_from_a_given_state_vs_tf(peephole):
    """One step of LSTMBlockCell from a given (cs, h), and of GRUBlockCell from a given h: TF's
    raw ops on the same parameters (TF1's cells call them so); a large cs, where a clip shows."""

    lstm = modules.LSTMBlockCell(4, 3, forget_bias=0.6, cell_clip=2.5, use_peephole=peephole)
    with torch.no_grad():
        for p in lstm.parameters():
            p.uniform_(-0.8, 0.8)
    x, h, cs = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4) * 3
    out, (cs1, h1) = lstm(x, (cs, h))
    z = torch.zeros(4)
    peep = (lstm.w_i_diag, lstm.w_f_diag, lstm.w_o_diag) if peephole else (z, z, z)
    want = tf_raw("LSTMBlockCell", x=x, cs_prev=cs, h_prev=h, w=lstm.kernel.detach(),
                  wci=peep[0].detach(), wcf=peep[1].detach(), wco=peep[2].detach(),
                  b=lstm.bias.detach(), forget_bias=0.6, cell_clip=2.5,
                  use_peephole=peephole)  # fmt: skip
    assert_close({"h": (out, want[6].numpy()), "state cs": (cs1, want[1].numpy()),
                  "state h": (h1, want[6].numpy())})  # fmt: skip
    gru = modules.GRUBlockCell(4, 3)
    with torch.no_grad():
        for p in gru.parameters():
            p.uniform_(-0.8, 0.8)
    out, state = gru(x, h)
    want = tf_raw("GRUBlockCell", x=x, h_prev=h, w_ru=gru.gates_kernel.detach(),
                  w_c=gru.candidate_kernel.detach(), b_ru=gru.gates_bias.detach(),
                  b_c=gru.candidate_bias.detach())  # fmt: skip
    assert_close({"h": (out, want[3].numpy()), "state": (state, want[3].numpy())})


@needs_tf
@pytest.mark.parametrize("cls", ["lstm", "gru"])
def test_fused_cells_zero_and_one_steps(cls):
    """No steps (T = 0), recorded for autograd or not: no outputs, and the final state is the
    initial one, as a loop of zero steps leaves it (and as the inference path gives). One step:
    the final state is that step's (the loop of one LSTMBlockCell / GRU step)."""
    if cls == "lstm":
        cell = modules.LSTMBlockFusedCell(4, 3)
        state = (torch.randn(2, 4, requires_grad=True), torch.randn(2, 4, requires_grad=True))
    else:
        cell = modules.GRUBlockFusedCell(4, 3)
        state = torch.randn(2, 4, requires_grad=True)
    x = torch.randn(0, 2, 3, requires_grad=True)
    out, final = cell(x, state)
    assert out.shape == (0, 2, 4)
    with torch.no_grad():
        out_inf, final_inf = cell(x, state)
    finals = (final, final_inf) if cls == "gru" else (*final, *final_inf)
    states = (state, state) if cls == "gru" else (*state, *state)
    for got, want in zip(finals, states, strict=True):
        assert torch.equal(got, want)
    x1 = torch.randn(1, 2, 3, requires_grad=True)
    out1, final1 = cell(x1, state)
    if cls == "gru":
        assert torch.equal(final1, out1[0])
    else:
        step = modules.LSTMBlockCell(4, 3)
        step.load_state_dict(cell.state_dict())
        _, (cs_want, h_want) = step(x1[0], state)
        torch.testing.assert_close(final1[0], cs_want)
        torch.testing.assert_close(final1[1], h_want)
        assert torch.equal(final1[1], out1[0])


@needs_tf
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("lengths", [None, [5, 2, 0, 3]], ids=["full", "lengths"])
def test_gru_fused_cell_vs_keras(reset_after, lengths):
    """GRUBlockFusedCell is Keras' GRU over the sequence (time-major; T != B): with an initial
    state, and with sequence_length as Keras' right-padded mask with zero_output_for_mask;
    outputs, final state and every gradient."""
    keras = keras_module()
    steps = 5
    layer = keras.layers.GRU(4, reset_after=reset_after, return_sequences=True,
                             return_state=True, zero_output_for_mask=True)  # fmt: skip
    mask = None if lengths is None else np.arange(steps)[None, :] < np.array(lengths)[:, None]
    x_in = keras.Input((steps, I))
    inputs, kwargs = [x_in], {}
    if mask is not None:
        kwargs["mask"] = keras.Input((steps,), dtype="bool")
        inputs.append(kwargs["mask"])
    s_in = keras.Input((4,))
    model = keras.Model([*inputs, s_in], layer(x_in, initial_state=[s_in], **kwargs))
    randomize(model.trainable_weights, 21)
    x = np.random.default_rng(22).standard_normal((B, steps, I)).astype(np.float32)
    (h0,) = random_states(1, 4, 23)
    feed = [x] + ([mask] if mask is not None else []) + [h0]
    want, rs, d_in, d_w = keras_run(model, feed, 24)
    ours = modules.GRUBlockFusedCell(4, I, reset_after=reset_after)
    with torch.no_grad():
        for w in layer.trainable_weights:
            getattr(ours, w.path.rsplit("/", 1)[1]).copy_(torch.from_numpy(w.numpy()))
    x_t, h0_t = torch.from_numpy(x).requires_grad_(), torch.from_numpy(h0).requires_grad_()
    out, h = ours(x_t.transpose(0, 1), h0_t,
                  sequence_length=None if lengths is None else torch.tensor(lengths))  # fmt: skip
    got = [out.transpose(0, 1), h]
    params = [ours.kernel, ours.recurrent_kernel, ours.bias]
    grads = torch.autograd.grad(torch_loss(got, rs), [x_t, h0_t, *params])
    pairs = {"outputs": (got[0], want[0]), "h": (got[1], want[1]), "d x": (grads[0], d_in[0]),
             "d h0": (grads[1], d_in[1])}  # fmt: skip
    for name, g in zip(("kernel", "recurrent_kernel", "bias"), grads[2:], strict=True):
        pairs[f"d {name}"] = (g, next(v for k, v in d_w.items() if k.endswith("/" + name)))
    assert_close(pairs)
    if lengths is not None:  # one row, then none (the largest length of no rows: 0 steps)
        out1, h1 = ours(x_t[:1].transpose(0, 1), h0_t[:1], sequence_length=[3])
        assert_close({"one row": (out1.transpose(0, 1)[0, :3], want[0][0, :3])})
        out0, h_0 = ours(x_t[:0].transpose(0, 1), h0_t[:0], sequence_length=[])
        assert out0.shape == (steps, 0, 4) and h_0.shape == (0, 4)


def _torch_ref(mode, **kw):
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode]
    return cls(3, 4, **kw).double()


@needs_tf
@pytest.mark.parametrize("which", ["h0", "c0"])
def test_cudnn_gradient_to_the_initial_state_alone(which):
    """Frozen weights, inputs without gradient: the gradient reaches the one initial state that
    asks for it (fine-tuning initial states), as torch.nn's in float64."""
    ref = _torch_ref("lstm", num_layers=2)
    ours = layouts.torch_rnn_to_cudnn(ref)
    for p in (*ref.parameters(), *ours.parameters()):
        p.requires_grad_(False)
    x = torch.randn(5, 3, 3, dtype=torch.float64)
    h0, c0 = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    state = {"h0": h0, "c0": c0}
    state[which] = state[which].clone().requires_grad_()
    out, (h, c) = ours(x, (state["h0"], state["c0"]))
    want, (wh, wc) = ref(x, (state["h0"], state["c0"]))
    ups = [torch.randn_like(t) for t in (out, h, c)]
    (g,) = torch.autograd.grad(sum((a * u).sum() for a, u in zip((out, h, c), ups, strict=True)),
                               [state[which]])  # fmt: skip
    (w,) = torch.autograd.grad(
        sum((a * u).sum() for a, u in zip((want, wh, wc), ups, strict=True)), [state[which]]
    )
    torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


@needs_tf
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cudnn_dropout_one_in_training_vs_float64(mode):
    """dropout = 1 between two layers in training (recorded for autograd or not): the upper
    layer reads zeros, which torch.nn computes with layer 1 fed zeros (float64); in eval, or
    with one layer, no dropout (torch.nn's two layers as they are)."""
    ref = _torch_ref(mode, num_layers=2)
    ours = layouts.torch_rnn_to_cudnn(ref)
    ours.dropout = 1.0
    x = torch.randn(5, 3, 3, dtype=torch.float64)
    layer0 = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode](3, 4).double()
    layer1 = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[mode](4, 4).double()
    for suffix in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(layer0, f"{suffix}_l0").data.copy_(getattr(ref, f"{suffix}_l0"))
        getattr(layer1, f"{suffix}_l0").data.copy_(getattr(ref, f"{suffix}_l1"))
    with torch.no_grad():
        want_top, _ = layer1(torch.zeros(5, 3, 4, dtype=torch.float64))
        want_eval, _ = ref(x)
    ours.train()
    with torch.no_grad():
        got_nograd, _ = ours(x)
    got_grad, _ = ours(x.clone().requires_grad_())
    ours.eval()
    with torch.no_grad():
        got_eval, _ = ours(x)
    for got in (got_nograd, got_grad):
        torch.testing.assert_close(got, want_top, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_eval, want_eval, rtol=1e-12, atol=1e-12)
    one = layouts.torch_rnn_to_cudnn(_torch_ref(mode))
    one.dropout = 1.0
    one.train()
    with torch.no_grad():
        assert torch.equal(one(x)[0], one(x, training=False)[0])


@needs_tf
def test_cudnn_inference_lengths_as_a_list_vs_float64():
    """Per-row lengths given as a list, in the no-grad (inference) path: torch.nn's packed
    sequence in float64."""
    ref = _torch_ref("lstm", bidirectional=True)
    ours = layouts.torch_rnn_to_cudnn(ref)
    x = torch.randn(5, 3, 3, dtype=torch.float64)
    lengths = [5, 2, 4]
    with torch.no_grad():
        got, (h, c) = ours(x, sequence_lengths=lengths)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        want, (wh, wc) = ref(packed)
        want, _ = torch.nn.utils.rnn.pad_packed_sequence(want, total_length=5)
    for a, b in ((got, want), (h, wh), (c, wc)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


_SEEDED = """
import sys, torch
from torch_lstm_grad import raw_ops
x, h0, c0, params, seed = torch.load(sys.argv[1])
out = raw_ops.CudnnRNNV3(x, h0, c0, params, None, dropout=0.5, seed=0, seed2=seed,
                         is_training=True)
torch.save(out.output, sys.argv[2])
"""


@needs_tf
def test_cudnn_dropout_seeds(tmp_path):
    """Unseeded dropout draws from torch's generator (torch.manual_seed repeats it); a module's
    `seed` is the op's seed2 with seed 0: its first call draws the masks a fresh process's
    first CudnnRNNV3(seed=0, seed2=seed) draws (the op keeps one generator per seed pair,
    advancing from call to call)."""
    import os
    import subprocess
    import sys

    import torch_lstm_grad

    m = modules.CudnnLSTM(2, 4, 3, dropout=0.5).double()
    x = torch.randn(5, 3, 3, dtype=torch.float64)
    outs = []
    for _ in range(2):
        torch.manual_seed(5)
        with torch.no_grad():
            outs.append(m(x)[0])
    assert torch.equal(outs[0], outs[1])
    with torch.no_grad():
        assert not torch.equal(outs[0], m(x, training=False)[0])  # dropped: not the eval output
    seed = 734_911  # a seed pair no other test draws from in this process
    seeded = modules.CudnnLSTM(2, 4, 3, dropout=0.5, seed=seed).double()
    seeded.opaque_kernel.data.copy_(m.opaque_kernel)
    with torch.no_grad():
        got = seeded(x)[0]
    zeros = torch.zeros(2, 3, 4, dtype=torch.float64)
    torch.save((x, zeros, zeros, m.opaque_kernel.detach(), seed), tmp_path / "in.pt")
    # The package this test imported, in the fresh process too.
    root = os.path.dirname(os.path.dirname(os.path.abspath(torch_lstm_grad.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", _SEEDED, str(tmp_path / "in.pt"),
                    str(tmp_path / "out.pt")], check=True, timeout=300, env=env)  # fmt: skip
    assert torch.equal(got, torch.load(tmp_path / "out.pt"))
