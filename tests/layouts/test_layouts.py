"""layouts.py: gate orders on labelled weights, exact round trips (torch.equal), the refused GRU
conversions, and Keras LSTM/GRU layers (TF backend, CPU, float32) against our modules after
conversion: outputs, final states, and gradients w.r.t. the inputs and every Keras weight. And
the converters' contracts: forget_bias defaults that are the cells' (each conversion computes
its source's step: TF's LSTMBlockCell, a float64 Keras step, torch.nn.LSTMCell), new tensors
never views, shape refusals naming the argument, a kernel of no input rows, Keras 2's CuDNNLSTM
and CuDNNGRU weights as tf_keras' loader converts them, opaque params round trips with a
projection, torch.nn RNNs without bias, and cudnn_to_torch_rnn's input modes."""

import os

import pytest
import torch

from tests.helpers import DATA, needs_tf, tf_module, tf_raw
from torch_lstm_grad import layouts, modules

# Ours float32 vs Keras float32: activations a few ulp apart, GEMMs summed in other orders, over
# T = 6 steps. Measured <= 2.5e-7 (scaled by max(1, max|keras|)).
TOL_KERAS = 1e-5
MAX_ERR = {}


def _close(key, got, want, tol=TOL_KERAS):
    got, want = torch.as_tensor(got).detach().double(), torch.as_tensor(want).detach().double()
    assert got.shape == want.shape, f"{key}: {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, want.abs().max().item())
    MAX_ERR[key] = max(MAX_ERR.get(key, 0.0), ((got - want).abs().max() / scale).item())
    torch.testing.assert_close(got, want, atol=tol * scale, rtol=tol, msg=lambda m: f"{key}: {m}")


def _labelled(rows, H, order):
    """A [rows, len(order)·H] matrix whose column block k holds the value order[k]."""
    return torch.cat([torch.full((rows, H), float(v)) for v in order], 1)


# ---------------------------------------------------------------------------------------------
# Gate orders on labelled weights (no TF needed)


def test_lstm_gate_orders():
    I, H = 2, 3  # noqa: E741
    # block ICFO blocks labelled i=1, c=2, f=3, o=4
    kernel, bias = (
        _labelled(I + H, H, [1, 2, 3, 4]),
        torch.tensor([1.0, 2, 3, 4]).repeat_interleave(H),
    )
    k, rk, b = layouts.block_lstm_to_keras(kernel, bias, forget_bias=0.5)
    assert torch.equal(k, _labelled(I, H, [1, 3, 2, 4])) and torch.equal(
        rk, _labelled(H, H, [1, 3, 2, 4])
    )
    assert torch.equal(b, torch.tensor([1.0, 3.5, 2, 4]).repeat_interleave(H))  # forget_bias folded
    t = layouts.block_lstm_to_torch(kernel, bias, forget_bias=0.5)
    assert torch.equal(t["weight_ih"], _labelled(I, H, [1, 3, 2, 4]).t())
    assert torch.equal(t["bias_ih"], b) and torch.equal(t["bias_hh"], torch.zeros(4 * H))
    w, bs = layouts.block_lstm_to_canonical(kernel, bias, forget_bias=0.5, split="half")
    assert [int(x[0, 0]) for x in w] == [1, 3, 2, 4] * 2 and [x.shape for x in w[:4]] == [
        (H, I)
    ] * 4
    assert [float(x[0]) for x in bs] == [0.5, 1.75, 1.0, 2.0] * 2
    assert [int(x[0]) for x in layouts.block_lstm_to_canonical(kernel, bias, 0.0)[1]] == [
        1,
        3,
        2,
        4,
        0,
        0,
        0,
        0,
    ]


def test_gru_gate_orders():
    I, H = 2, 3  # noqa: E741
    k, rk = _labelled(I, H, [1, 2, 3]), _labelled(H, H, [1, 2, 3])  # Keras z=1, r=2, h=3
    t = layouts.keras_gru_to_torch(
        k, rk, torch.tensor([[1.0, 2, 3], [4, 5, 6]]).repeat_interleave(H, 1)
    )
    assert torch.equal(t["weight_ih"], _labelled(I, H, [2, 1, 3]).t())  # torch r, z, n
    assert torch.equal(t["bias_hh"], torch.tensor([5.0, 4, 6]).repeat_interleave(H))
    gk, gb, ck, cb = layouts.keras_gru_to_block(
        k, rk, torch.tensor([1.0, 2, 3]).repeat_interleave(H)
    )
    assert torch.equal(gk, _labelled(I + H, H, [2, 1])) and torch.equal(
        ck, torch.full((I + H, H), 3.0)
    )
    assert torch.equal(gb, torch.tensor([2.0, 1]).repeat_interleave(H)) and torch.equal(
        cb, torch.full((H,), 3.0)
    )


def test_gru_reset_mismatch_raises():
    k, rk = torch.zeros(2, 9), torch.zeros(3, 9)
    with pytest.raises(ValueError, match="reset_after=False.*no exact conversion"):
        layouts.keras_gru_to_torch(k, rk, torch.zeros(9))
    with pytest.raises(ValueError, match="reset_after=True.*no exact conversion"):
        layouts.keras_gru_to_block(k, rk, torch.zeros(2, 9))
    for fn in (
        layouts.block_gru_to_torch,
        layouts.torch_gru_to_block,
        layouts.block_gru_to_canonical,
    ):
        with pytest.raises(ValueError, match="reset gate before"):
            fn(k, rk)


# ---------------------------------------------------------------------------------------------
# Exact round trips


def test_lstm_round_trips_exact():
    ref = torch.nn.LSTM(3, 4)
    with torch.no_grad():
        ref.bias_hh_l0.zero_()  # a single TF bias maps to bias_ih; bias_hh comes back zero
    sd = {n[:-3]: p.detach() for n, p in ref.named_parameters()}
    kernel, bias = layouts.torch_lstm_to_block(**sd, forget_bias=0.0)
    keras = layouts.block_lstm_to_keras(kernel, bias, forget_bias=0.0)
    kernel2, bias2 = layouts.keras_lstm_to_block(*keras, forget_bias=0.0)
    assert torch.equal(kernel2, kernel) and torch.equal(bias2, bias)
    back = layouts.keras_lstm_to_torch(*keras)
    assert all(torch.equal(back[n], sd[n]) for n in sd)
    w, b = layouts.keras_lstm_to_canonical(*keras)
    params = layouts.canonical_to_params(w, b, "lstm", 1, 4, 3)
    w2, b2 = layouts.params_to_canonical(params, "lstm", 1, 4, 3)
    assert all(torch.equal(x, y) for x, y in zip(w + b, w2 + b2, strict=True))
    assert all(
        torch.equal(x, y)
        for x, y in zip(layouts.canonical_to_keras_lstm(w2, b2), keras, strict=True)
    )
    k3, b3 = layouts.canonical_to_block_lstm(w2, b2)
    assert torch.equal(k3, kernel) and torch.equal(b3, bias)
    # ours (block, any bias) -> torch -> ours is exact; with forget_bias folding, within 1 ulp
    bias_r = torch.randn(16)
    assert torch.equal(
        layouts.torch_lstm_to_block(
            **layouts.block_lstm_to_torch(kernel, bias_r, 0.0), forget_bias=0.0
        )[1],
        bias_r,
    )
    b_fb = layouts.torch_lstm_to_block(
        **layouts.block_lstm_to_torch(kernel, bias_r, 1.0), forget_bias=1.0
    )[1]
    torch.testing.assert_close(b_fb, bias_r, atol=2.4e-7, rtol=0)


def test_gru_round_trips_exact():
    ref = torch.nn.GRU(3, 4)
    sd = {n[:-3]: p.detach() for n, p in ref.named_parameters()}
    keras = layouts.torch_gru_to_keras(**sd)
    assert keras[2].shape == (2, 12)
    back = layouts.keras_gru_to_torch(*keras)
    assert all(torch.equal(back[n], sd[n]) for n in sd)
    w, b = layouts.keras_gru_to_canonical(*keras)
    params = layouts.canonical_to_params(w, b, "gru", 1, 4, 3)
    again = layouts.canonical_to_keras_gru(*layouts.params_to_canonical(params, "gru", 1, 4, 3))
    assert all(torch.equal(x, y) for x, y in zip(again, keras, strict=True))
    cell = modules.GRUBlockCell(4, 3)
    blk = tuple(
        p.detach()
        for p in (cell.gates_kernel, cell.gates_bias, cell.candidate_kernel, cell.candidate_bias)
    )
    k_ra_false = layouts.block_gru_to_keras(*blk)
    assert k_ra_false[2].shape == (12,)
    assert all(
        torch.equal(x, y) for x, y in zip(layouts.keras_gru_to_block(*k_ra_false), blk, strict=True)
    )


# ---------------------------------------------------------------------------------------------
# Keras layers (TF backend) vs ours after conversion


def _keras():
    tf_module()  # single-threaded TF first
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras is not on the TensorFlow backend")
    return keras


def _run_keras(layer, x_btI, weights):
    """Keras layer (return_sequences, return_state) on x [B, T, I]; weights set from torch
    tensors. Returns (outputs..., grads w.r.t. x and every weight) of sum(outputs · upstream)."""
    keras, tf = _keras(), tf_module()
    layer.build((x_btI.shape[0], x_btI.shape[1], x_btI.shape[2]))
    layer.set_weights([w.numpy() for w in weights])
    x = tf.constant(x_btI.numpy())
    ups = None
    with tf.GradientTape() as tape:
        tape.watch(x)
        outs = layer(x)
        torch.manual_seed(1)
        ups = [torch.randn(*o.shape) for o in outs]
        loss = sum(tf.reduce_sum(o * u.numpy()) for o, u in zip(outs, ups, strict=True))
    grads = tape.gradient(loss, [x, *layer.trainable_weights])
    del keras
    to_t = lambda v: torch.from_numpy(tf.convert_to_tensor(v).numpy().copy())  # noqa: E731
    return [to_t(o) for o in outs], ups, [to_t(g) for g in grads]


def _loss(outs, ups):
    return sum((o * u).sum() for o, u in zip(outs, ups, strict=True))


T, B, I, H = 6, 3, 4, 5  # noqa: E741


def _keras_lstm_weights():
    return [torch.rand(I, 4 * H) - 0.5, torch.rand(H, 4 * H) - 0.5, torch.rand(4 * H) - 0.5]


@needs_tf
@pytest.mark.parametrize("forget_bias", [0.0, 1.0])
def test_keras_lstm_vs_fused_cell(forget_bias):
    keras = _keras()
    weights = _keras_lstm_weights()
    x = torch.randn(B, T, I)
    want, ups, want_g = _run_keras(
        keras.layers.LSTM(H, return_sequences=True, return_state=True), x, weights
    )
    cell = modules.LSTMBlockFusedCell(H, I, forget_bias=forget_bias)
    with torch.no_grad():
        kernel, bias = layouts.keras_lstm_to_block(*weights, forget_bias=forget_bias)
        cell.kernel.copy_(kernel)
        cell.bias.copy_(bias)
    xt = x.transpose(0, 1).clone().requires_grad_()
    out, (c, h) = cell(xt)
    got = [out.transpose(0, 1), h, c]  # Keras returns (outputs, h, c)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(("keras_lstm_vs_fused", f"out{k}"), g, w)
    _loss(got, ups).backward()
    # The block parameters are a permutation of Keras' (plus a constant): map grads back with
    # forget_bias=0 (gradients carry no offset).
    gk, grk, gb = layouts.block_lstm_to_keras(cell.kernel.grad, cell.bias.grad, forget_bias=0.0)
    for name, g, w in zip(
        ("x", "kernel", "recurrent_kernel", "bias"),
        (xt.grad.transpose(0, 1), gk, grk, gb),
        want_g,
        strict=True,
    ):
        _close(("keras_lstm_vs_fused", "d" + name), g, w)


@needs_tf
def test_keras_lstm_vs_cudnn_lstm():
    keras = _keras()
    weights = _keras_lstm_weights()
    x = torch.randn(B, T, I)
    want, ups, want_g = _run_keras(
        keras.layers.LSTM(H, return_sequences=True, return_state=True), x, weights
    )
    m = modules.CudnnLSTM(1, H, I)
    m.set_canonical_weights(*layouts.keras_lstm_to_canonical(*weights))
    xb = x.clone().requires_grad_()
    out, (h, c) = m(xb, time_major=False)
    got = [out, h[:, 0], c[:, 0]]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(("keras_lstm_vs_cudnn", f"out{k}"), g, w)
    _loss(got, ups).backward()
    gw, gbias = layouts.params_to_canonical(m.opaque_kernel.grad, "lstm", 1, H, I)
    t = layouts.canonical_to_torch(gw, gbias, "lstm")
    # Keras' bias went into bW (bR is a constant 0): its gradient is bias_ih's.
    for name, g, w in zip(
        ("x", "kernel", "recurrent_kernel", "bias"),
        (xb.grad, t["weight_ih"].t(), t["weight_hh"].t(), t["bias_ih"]),
        want_g,
        strict=True,
    ):
        _close(("keras_lstm_vs_cudnn", "d" + name), g, w)


@needs_tf
def test_keras_gru_reset_after_vs_cudnn_gru_and_torch():
    keras = _keras()
    weights = [torch.rand(I, 3 * H) - 0.5, torch.rand(H, 3 * H) - 0.5, torch.rand(2, 3 * H) - 0.5]
    x = torch.randn(B, T, I)
    want, ups, want_g = _run_keras(
        keras.layers.GRU(H, return_sequences=True, return_state=True, reset_after=True), x, weights
    )
    m = modules.CudnnGRU(1, H, I)
    m.set_canonical_weights(*layouts.keras_gru_to_canonical(*weights))
    xb = x.clone().requires_grad_()
    out, (h,) = m(xb, time_major=False)
    got = [out, h[:, 0]]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(("keras_gru_vs_cudnn", f"out{k}"), g, w)
    _loss(got, ups).backward()
    # canonical ⇄ Keras GRU(reset_after=True) is a bijective permutation: grads map with it.
    grads = layouts.canonical_to_keras_gru(
        *layouts.params_to_canonical(m.opaque_kernel.grad, "gru", 1, H, I)
    )
    for name, g, w in zip(
        ("x", "kernel", "recurrent_kernel", "bias"), (xb.grad, *grads), want_g, strict=True
    ):
        _close(("keras_gru_vs_cudnn", "d" + name), g, w)
    ref = torch.nn.GRU(I, H, batch_first=True)
    with torch.no_grad():
        for n, t in layouts.keras_gru_to_torch(*weights).items():
            getattr(ref, n + "_l0").copy_(t)
    out_t, h_t = ref(x)
    _close(("keras_gru_vs_nn", "out0"), out_t, want[0])
    _close(("keras_gru_vs_nn", "out1"), h_t[0], want[1])


@needs_tf
def test_keras_gru_reset_before_vs_gru_block_cell():
    keras = _keras()
    weights = [torch.rand(I, 3 * H) - 0.5, torch.rand(H, 3 * H) - 0.5, torch.rand(3 * H) - 0.5]
    x = torch.randn(B, T, I)
    want, ups, want_g = _run_keras(
        keras.layers.GRU(H, return_sequences=True, return_state=True, reset_after=False), x, weights
    )
    cell = modules.GRUBlockCell(H, I)
    with torch.no_grad():
        for p, t in zip(
            (cell.gates_kernel, cell.gates_bias, cell.candidate_kernel, cell.candidate_bias),
            layouts.keras_gru_to_block(*weights),
            strict=True,
        ):
            p.copy_(t)
    xb = x.clone().requires_grad_()
    h, outs = None, []
    for t in range(T):
        o, h = cell(xb[:, t], h)
        outs.append(o)
    got = [torch.stack(outs, 1), h]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(("keras_gru_vs_block", f"out{k}"), g, w)
    _loss(got, ups).backward()
    grads = layouts.block_gru_to_keras(
        cell.gates_kernel.grad,
        cell.gates_bias.grad,
        cell.candidate_kernel.grad,
        cell.candidate_bias.grad,
    )
    for name, g, w in zip(
        ("x", "kernel", "recurrent_kernel", "bias"), (xb.grad, *grads), want_g, strict=True
    ):
        _close(("keras_gru_vs_block", "d" + name), g, w)


# ---------------------------------------------------------------------------------------------
# The converters' defaults, contracts and refusals


def _keras_lstm_step(x, h, c, kernel, recurrent_kernel, bias):
    """One Keras LSTM step in float64 (IFCO blocks, bias holds the forget bias): (h, c)."""
    x, h, c, kernel, recurrent_kernel, bias = (
        t.double() for t in (x, h, c, kernel, recurrent_kernel, bias)
    )
    i, f, g, o = (x @ kernel + h @ recurrent_kernel + bias).chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _torch_lstm_step(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh):
    """torch.nn.LSTMCell (float64) with these weights: (h, c)."""
    cell = torch.nn.LSTMCell(weight_ih.shape[1], weight_hh.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for p, t in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh),
                        (weight_ih, weight_hh, bias_ih, bias_hh), strict=True):  # fmt: skip
            p.copy_(t)
        return cell(x.double(), (h.double(), c.double()))


def _tf_block_lstm_step(x, h, c, kernel, bias, **forget_bias):
    """TF's LSTMBlockCell (float32; ICFO; its own forget_bias default, 1, unless given): (h, c)."""

    z = torch.zeros(kernel.shape[1] // 4)
    out = tf_raw("LSTMBlockCell", x=x, cs_prev=c, h_prev=h, w=kernel, wci=z, wcf=z, wco=z,
                 b=bias, cell_clip=-1.0, **forget_bias)  # fmt: skip
    return out[6], out[1]


def _close_steps(got, want):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w.double(), atol=2e-6, rtol=2e-6)


def _lstm_case(I=3, H=4):  # noqa: E741
    g = torch.Generator().manual_seed(34)
    r = lambda *s: torch.rand(*s, generator=g) - 0.5  # noqa: E731
    return r(2, I), r(2, H), r(2, H), I, H, r


@needs_tf
def test_layouts_lstm_forget_bias_defaults_are_tfs():
    """The converters' forget_bias defaults are the cells': 1.0 for the block layout (TF's
    LSTMBlockCell adds its default 1 at run time), 0.0 for canonical_to_block_lstm (a
    CudnnCompatibleLSTMCell adds none). Each conversion with its default computes the same step
    as its source: TF's LSTMBlockCell with TF's default, a float64 Keras step, torch.nn.LSTMCell.
    The torch weights carry a nonzero bias_hh (the sum bias_ih + bias_hh is Keras' bias)."""
    x, h, c, I, H, r = _lstm_case()  # noqa: E741
    # block -> Keras, torch, canonical: the block cell run by TF with TF's default forget_bias
    kernel, bias = r(I + H, 4 * H), r(4 * H)
    want = _tf_block_lstm_step(x, h, c, kernel, bias)
    _close_steps(_keras_lstm_step(x, h, c, *layouts.block_lstm_to_keras(kernel, bias)), want)
    _close_steps(_torch_lstm_step(x, h, c, **layouts.block_lstm_to_torch(kernel, bias)), want)
    w, b = layouts.block_lstm_to_canonical(kernel, bias)
    cat = lambda ts: torch.cat(list(ts))  # noqa: E731 - canonical = torch.nn's row blocks
    _close_steps(_torch_lstm_step(x, h, c, cat(w[:4]), cat(w[4:]), cat(b[:4]), cat(b[4:])), want)
    # Keras -> block: TF's cell with its default forget_bias on the result = the Keras step
    keras = r(I, 4 * H), r(H, 4 * H), r(4 * H)
    want = _keras_lstm_step(x, h, c, *keras)
    _close_steps(_tf_block_lstm_step(x, h, c, *layouts.keras_lstm_to_block(*keras)), want)
    # torch (bias_hh nonzero) -> Keras and -> block
    sd = {"weight_ih": r(4 * H, I), "weight_hh": r(4 * H, H), "bias_ih": r(4 * H),
          "bias_hh": r(4 * H)}  # fmt: skip
    want = _torch_lstm_step(x, h, c, **sd)
    _close_steps(_keras_lstm_step(x, h, c, *layouts.torch_lstm_to_keras(**sd)), want)
    _close_steps(_tf_block_lstm_step(x, h, c, *layouts.torch_lstm_to_block(**sd)), want)
    # canonical (torch's row blocks, split here) -> block: a cell adding no forget bias
    w = [*sd["weight_ih"].chunk(4), *sd["weight_hh"].chunk(4)]
    b = [*sd["bias_ih"].chunk(4), *sd["bias_hh"].chunk(4)]
    kernel, bias = layouts.canonical_to_block_lstm(w, b)
    _close_steps(_tf_block_lstm_step(x, h, c, kernel, bias, forget_bias=0.0), want)


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in _tensors(o)]


def test_layouts_return_new_tensors():
    """layouts.py's contract: "All functions return new tensors (never views of the inputs)":
    no output shares storage with an input, so writing one never changes the other."""
    I, H, P = 3, 4, 2  # noqa: E741
    r = torch.randn
    lstm_k, lstm_rk, lstm_b = r(I, 4 * H), r(H, 4 * H), r(4 * H)
    sd = {"weight_ih": r(4 * H, I), "weight_hh": r(4 * H, H), "bias_ih": r(4 * H),
          "bias_hh": r(4 * H)}  # fmt: skip
    gru_sd = {"weight_ih": r(3 * H, I), "weight_hh": r(3 * H, H), "bias_ih": r(3 * H),
              "bias_hh": r(3 * H)}  # fmt: skip
    canon = [r(H, I) for _ in range(4)] + [r(H, H) for _ in range(4)]
    canon_b = [r(H) for _ in range(8)]
    gru_canon = [r(H, I) for _ in range(3)] + [r(H, H) for _ in range(3)]
    gru_canon_b = [r(H) for _ in range(6)]
    block_gru = r(I + H, 2 * H), r(2 * H), r(I + H, H), r(H)
    calls = [
        (layouts.block_lstm_to_keras, (r(I + H, 4 * H), r(4 * H))),
        (layouts.block_lstm_to_keras, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.keras_lstm_to_block, (lstm_k, lstm_rk, lstm_b)),
        (layouts.keras_lstm_to_block, (lstm_k, lstm_rk, lstm_b, 0.0)),
        (layouts.keras_lstm_to_torch, (lstm_k, lstm_rk, lstm_b)),
        (layouts.torch_lstm_to_keras, tuple(sd.values())),
        (layouts.block_lstm_to_torch, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.torch_lstm_to_block, (*sd.values(), 0.0)),
        (layouts.torch_to_canonical, (*sd.values(), "lstm")),
        (
            layouts.torch_to_canonical,
            (r(4 * H, I), r(4 * H, P), r(4 * H), r(4 * H), "lstm", r(P, H)),
        ),  # fmt: skip
        (layouts.torch_to_canonical, (*gru_sd.values(), "gru")),
        (layouts.canonical_to_torch, (canon, canon_b, "lstm")),
        (layouts.canonical_to_torch, (canon + [r(P, H)], canon_b, "lstm")),
        (layouts.keras_lstm_to_canonical, (lstm_k, lstm_rk, lstm_b)),
        (layouts.canonical_to_keras_lstm, (canon, canon_b)),
        (layouts.block_lstm_to_canonical, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.canonical_to_block_lstm, (canon, canon_b)),
        (layouts.keras_gru_to_torch, (r(I, 3 * H), r(H, 3 * H), r(2, 3 * H))),
        (layouts.torch_gru_to_keras, tuple(gru_sd.values())),
        (layouts.keras_gru_to_canonical, (r(I, 3 * H), r(H, 3 * H), r(2, 3 * H))),
        (layouts.canonical_to_keras_gru, (gru_canon, gru_canon_b)),
        (layouts.keras_gru_to_block, (r(I, 3 * H), r(H, 3 * H), r(3 * H))),
        (layouts.block_gru_to_keras, block_gru),
        (layouts.keras_cudnn_to_keras, (r(I, 4 * H), r(H, 4 * H), r(8 * H))),
        (layouts.keras_cudnn_to_keras, (r(I, 3 * H), r(H, 3 * H), r(6 * H))),
    ]
    for fn, args in calls:
        given = [a for a in args if not isinstance(a, (str, float))]
        ins = {t.untyped_storage().data_ptr() for t in _tensors(given)}
        for k, t in enumerate(_tensors(fn(*args))):
            assert t.untyped_storage().data_ptr() not in ins, f"{fn.__name__}: output {k}"


def test_layouts_refusals():
    """layouts.py's shape refusals: a ValueError naming the argument, not an IndexError or
    torch.cat's RuntimeError from deeper down, nor a silently wrong result."""
    r = torch.randn
    H = 3
    with pytest.raises(ValueError, match="kernel: expected a matrix"):
        layouts.block_lstm_to_keras(r(4 * H), r(4 * H))  # a vector for the kernel
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(5, 4 * H), r(4 * H + 1))  # the bias one too long
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(5, 4 * H + 1), r(4 * H))  # 13 columns: not 4 blocks
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(H - 1, 4 * H), r(4 * H))  # fewer rows than H
    with pytest.raises(ValueError, match=r"kernel: expected a matrix \[rows, 12\]"):
        layouts.keras_lstm_to_block(r(2, 3 * H), r(H, 4 * H), r(4 * H))
    with pytest.raises(ValueError, match=r"recurrent_kernel: expected a matrix \[rows, 12\]"):
        layouts.keras_lstm_to_block(r(2, 4 * H), r(H, 4 * H + 4), r(4 * H))
    with pytest.raises(ValueError, match="expected 8 .* weights and 8 biases"):
        layouts.canonical_to_torch([r(H, 2)] * 8, [r(H)] * 7, "lstm")  # a bias missing
    with pytest.raises(ValueError, match="expected 6 .* weights and 6 biases"):
        layouts.canonical_to_torch([r(H, 2)] * 6, [r(H)] * 7, "gru")
    with pytest.raises(ValueError, match=r"gates_kernel/gates_bias: expected \[5, 6\] and \[6\]"):
        layouts.block_gru_to_keras(r(2 + H, 2 * H), r(2 * H + 1), r(2 + H, H), r(H))
    # Keras 2's CuDNNLSTM ([I, 4U], [U, 4U], [8U]) / CuDNNGRU ([I, 3U], [U, 3U], [6U]) weights
    for shapes in [
        ((2, 2 * H), (H, 2 * H), (4 * H,)),  # two gate blocks: neither layer
        ((2, 4 * H), (H, 4 * H + 1), (8 * H,)),  # recurrent_kernel not [U, 4U]
        ((4 * H,), (H, 4 * H), (8 * H,)),  # a vector for the kernel
        ((2, 3 * H), (H, 4 * H), (8 * H,)),  # a GRU's kernel with an LSTM's recurrent kernel
        ((2, 4 * H), (H, 4 * H), (4 * H,)),  # one bias (Keras' LSTM's), not bW and bR
        ((2, 3 * H), (H, 3 * H), (3 * H,)),
        ((2, 0), (0, 0), (0,)),  # no units
    ]:
        with pytest.raises(ValueError, match="are not a CuDNNLSTM's"):
            layouts.keras_cudnn_to_keras(*(r(*s) for s in shapes))


@needs_tf
def test_layouts_block_lstm_without_inputs_vs_tf():
    """A block kernel of exactly H rows (I = 0: TF's LSTMBlockCell runs x [B, 0]) converts;
    its Keras weights compute TF's step."""
    _, h, c, _, H, r = _lstm_case()
    x = torch.zeros(2, 0)
    kernel, bias = r(H, 4 * H), r(4 * H)
    want = _tf_block_lstm_step(x, h, c, kernel, bias, forget_bias=0.5)
    k, rk, b = layouts.block_lstm_to_keras(kernel, bias, forget_bias=0.5)
    assert k.shape == (0, 4 * H)
    _close_steps(_keras_lstm_step(x, h, c, k, rk, b), want)


def _keras_gru_step(x, h, kernel, recurrent_kernel, bias):
    """One Keras GRU(reset_after=True) step in float64 (z, r, h blocks; bias [2, 3U])."""
    x, h, kernel, recurrent_kernel, bias = (t.double() for t in (x, h, kernel, recurrent_kernel,
                                                                 bias))  # fmt: skip
    xz, xr, xh = (x @ kernel + bias[0]).chunk(3, 1)
    hz, hr, hh = (h @ recurrent_kernel + bias[1]).chunk(3, 1)
    z, r = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
    return z * h + (1 - z) * torch.tanh(xh + r * hh)


def test_layouts_keras2_cudnn_weights_vs_tf_keras():
    """Keras 2's CuDNNLSTM / CuDNNGRU weights as tf_keras saved them (tests/data/keras2/
    cudnn_weights.h5) through keras_cudnn_to_keras, run as Keras' LSTM and GRU(reset_after=True)
    steps in float64, give the outputs tf_keras computed for the twin model it loaded those
    weights into (its HDF5 loader's own conversion; expected.npz, written by
    make_fixtures.py): the LSTM's sequence, then the go_backwards GRU's on it."""
    import os

    import numpy as np

    h5py = pytest.importorskip("h5py", reason="h5py (TensorFlow's dependency) is not installed")

    here = os.path.join(DATA, "keras2")
    e = np.load(os.path.join(here, "expected.npz"))
    with h5py.File(os.path.join(here, "cudnn_weights.h5"), "r") as f:
        w = {n: [torch.from_numpy(f[f"{n}/{n}/{v}:0"][()]) for v in
                 ("kernel", "recurrent_kernel", "bias")] for n in ("clstm", "cgru")}  # fmt: skip
    x = torch.from_numpy(e["cudnn/x"])  # [B, T, I]
    k, rk, b = layouts.keras_cudnn_to_keras(*w["clstm"])
    h = c = torch.zeros(x.shape[0], rk.shape[0], dtype=torch.float64)
    seq = []
    for t in range(x.shape[1]):
        h, c = _keras_lstm_step(x[:, t], h, c, k, rk, b)
        seq.append(h)
    lstm_out = torch.stack(seq, 1)
    torch.testing.assert_close(lstm_out, torch.from_numpy(e["cudnn/out0"]).double(), atol=1e-5,
                               rtol=1e-5)  # fmt: skip
    k, rk, b = layouts.keras_cudnn_to_keras(*w["cgru"])
    assert b.shape == (2, rk.shape[1])
    h, seq = torch.zeros(x.shape[0], rk.shape[0], dtype=torch.float64), []
    for t in reversed(range(x.shape[1])):  # go_backwards: the outputs in the order run
        h = _keras_gru_step(lstm_out[:, t], h, k, rk, b)
        seq.append(h)
    torch.testing.assert_close(torch.stack(seq, 1), torch.from_numpy(e["cudnn/out1"]).double(),
                               atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_layouts_opaque_params_round_trip_with_projection(direction):
    """Canonical lists of a 2-layer LSTM with a projection (per pseudo-layer 8 weights + W_proj,
    8 biases) -> canonical_to_params -> params_to_canonical: the same tensors back, every
    layer and direction's W_proj included."""
    L, H, I, P = 2, 4, 3, 2  # noqa: E741
    D = 2 if direction == "bidirectional" else 1
    weights, biases = [], []
    for layer in range(L):
        for _ in range(D):
            n_in = I if layer == 0 else P * D
            weights += [torch.randn(H, n_in) for _ in range(4)]
            weights += [torch.randn(H, P) for _ in range(4)] + [torch.randn(P, H)]
            biases += [torch.randn(H) for _ in range(8)]
    kw = {"direction": direction, "num_proj": P}
    params = layouts.canonical_to_params(weights, biases, "lstm", L, H, I, **kw)
    w2, b2 = layouts.params_to_canonical(params, "lstm", L, H, I, **kw)
    assert len(w2) == len(weights) and len(b2) == len(biases)
    assert all(torch.equal(a, b) for a, b in zip(w2 + b2, weights + biases, strict=True))


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_layouts_torch_rnn_without_bias_to_cudnn_vs_torch_nn(mode):
    """A torch.nn LSTM/GRU with bias=False (I != H) becomes a Cudnn* module with zero biases
    computing what torch.nn computes (float64: outputs and final states)."""
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    ref = cls(3, 5, num_layers=2, bias=False, dtype=torch.float64)
    ours = layouts.torch_rnn_to_cudnn(ref)
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    with torch.no_grad():
        want, got = ref(x), ours(x)
    torch.testing.assert_close(got[0], want[0])
    want_states = want[1] if mode == "lstm" else (want[1],)
    for g, w in zip(got[1], want_states, strict=True):
        torch.testing.assert_close(g, w)


def test_layouts_cudnn_to_torch_rnn_input_modes():
    """cudnn_to_torch_rnn refuses a model whose layer 0 has no input matrix (skip_input, or
    auto_select with input_size == num_units, as the op decides), and converts every other:
    linear_input with input_size == num_units, auto_select with input_size != num_units. The
    converted weights are those of the torch.nn.LSTM they were set from."""
    for kw in ({"input_mode": "skip_input"}, {"input_mode": "auto_select"}):
        m = modules.CudnnLSTM(1, 4, 4, **kw)
        with pytest.raises(ValueError, match="skip_input feeds x to the gates"):
            layouts.cudnn_to_torch_rnn(m)
    for size, mode in ((4, "linear_input"), (3, "auto_select")):
        ref = torch.nn.LSTM(size, 4)
        m = modules.CudnnLSTM(1, 4, size, input_mode=mode)
        sd = {n[:-3]: p.detach() for n, p in ref.named_parameters()}
        with torch.no_grad():
            m.set_canonical_weights(*layouts.torch_to_canonical(**sd, rnn_mode="lstm"))
        back = layouts.cudnn_to_torch_rnn(m).state_dict()
        assert back.keys() == ref.state_dict().keys()
        assert all(torch.equal(back[k], v) for k, v in ref.state_dict().items())


def _keras2_loader_conversion(kernel, recurrent_kernel, bias, n_gates, lstm):
    """What Keras 2's HDF5 loader does to CuDNNLSTM / CuDNNGRU weights to load them into LSTM /
    GRU(reset_after=True) (tf_keras `_convert_rnn_weights`, from_cudnn=True), in numpy:
    kernel blocks `k.T.reshape(k.shape, order="F")`, recurrent blocks transposed, the bias
    reshaped (2, -1) and, for the LSTM, summed."""
    import numpy as np

    k = np.hstack([b.T.reshape(b.shape, order="F") for b in np.hsplit(kernel, n_gates)])
    r = np.hstack([b.T for b in np.hsplit(recurrent_kernel, n_gates)])
    b = bias.reshape(2, -1)
    return k, r, b.sum(axis=0) if lstm else b


@pytest.mark.parametrize("n_gates", [4, 3])
def test_layouts_keras2_cudnn_weights_vs_the_loaders_conversion(n_gates):
    """keras_cudnn_to_keras with I != U != number of gates (the fixture's CuDNNLSTM has I = 4
    gates, its CuDNNGRU I = 3): Keras 2's loader conversion, bit for bit."""
    I, U = 2, 5  # noqa: E741
    w = [torch.randn(I, n_gates * U, dtype=torch.float64),
         torch.randn(U, n_gates * U, dtype=torch.float64),
         torch.randn(2 * n_gates * U, dtype=torch.float64)]  # fmt: skip
    want = _keras2_loader_conversion(*(t.numpy() for t in w), n_gates, n_gates == 4)
    got = layouts.keras_cudnn_to_keras(*w)
    for g, e in zip(got, want, strict=True):
        assert torch.equal(g, torch.from_numpy(e))
