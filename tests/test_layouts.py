"""layouts.py: gate orders on labelled weights, exact round trips (torch.equal), the refused GRU
conversions, and Keras LSTM/GRU layers (TF backend, CPU, float32) against our modules after
conversion: outputs, final states, and gradients w.r.t. the inputs and every Keras weight."""

import os

import pytest
import torch
from tf_oracle import available as _tf_available
from tf_oracle import tf_module

from torch_lstm_grad import layouts, modules

needs_tf = pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")

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
