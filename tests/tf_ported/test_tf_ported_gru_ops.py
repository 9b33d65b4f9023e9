"""TensorFlow's own tests of GRUBlockCell, ported: the block cell runs on torch_lstm_grad, TF's
composite GRUCell (rnn_cell_impl, run eagerly) on TF 2.21's CPU, with TF's inputs, shapes and
tolerances (assertAllClose: rtol = atol = 1e-6; the gradient check: error < 1e-4).

Source: tensorflow/contrib/rnn/python/kernel_tests/gru_ops_test.py (TF 1.15):
testBlockGRUToGRUCellSingleStep, testBlockGRUToGRUCellMultiStep,
testDerivativeOfBlockGRUToGRUCellSingleStep, testDerivativeOfBlockGRUToGRUCellMultiSteps,
testGradient. Not ported: testNoneDimsWithDynamicRNN (graph shape inference) and the benchmarks.

TF's GRUCell and GRUBlockCell initialise their gate bias to 1.0 and the candidate bias to 0,
their kernels from the scope's uniform(-0.01, 0.01) initializer (seed 1994); both sides get
the same values here.
"""

import numpy as np
import torch

from tests.helpers import assert_np_close, needs_tf, tf_module
from torch_lstm_grad import raw_ops

pytestmark = needs_tf


def _weights(rng, I, H):  # noqa: E741
    return {"gates/kernel": rng.uniform(-0.01, 0.01, (I + H, 2 * H)).astype(np.float32),
            "gates/bias": np.ones(2 * H, np.float32),
            "candidate/kernel": rng.uniform(-0.01, 0.01, (I + H, H)).astype(np.float32),
            "candidate/bias": np.zeros(H, np.float32)}  # fmt: skip


def _case(B, H, I, T=1):  # noqa: E741
    """TF's test data: seed 1994, _weights, then x [T, B, I] and h [B, H] uniform in [0, 1)."""
    rng = np.random.default_rng(1994)
    w = _weights(rng, I, H)
    x, h = rng.random((T, B, I)).astype(np.float32), rng.random((B, H)).astype(np.float32)
    return w, x, h


def _tf_gru(H, weights):
    tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl

    tf = tf_module()
    cell = rnn_cell_impl.GRUCell(H)
    I = weights["gates/kernel"].shape[0] - H  # noqa: E741
    cell(tf.zeros([1, I]), tf.zeros([1, H]))
    for v in cell.variables:
        v.assign(weights["/".join(v.name.split(":")[0].split("/")[-2:])])
    return tf, cell


def _tf_run(H, weights, xs, h0, d_out=None):
    """TF's GRUCell over the steps xs [T, B, I] from h0: (outputs, d outputs[0] or sum of all /
    d x, d h0, d each variable)."""
    tf, cell = _tf_gru(H, weights)
    x, h = tf.constant(xs), tf.constant(h0)
    with tf.GradientTape() as tape:
        tape.watch([x, h])
        outs, state = [], h
        for t in range(xs.shape[0]):
            out, state = cell(x[t], state)
            outs.append(out)
        loss = tf.reduce_sum(outs[0]) if d_out == "first" else tf.add_n(
            [tf.reduce_sum(o) for o in outs])  # fmt: skip
    names = ["gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"]
    by_name = {"/".join(v.name.split(":")[0].split("/")[-2:]): v for v in cell.variables}
    grads = tape.gradient(loss, [x, h, *(by_name[n] for n in names)])
    return [o.numpy() for o in outs], state.numpy(), [g.numpy() for g in grads]


def _ours_run(weights, xs, h0, d_out=None):
    t = lambda a: torch.tensor(a, requires_grad=True)  # noqa: E731
    x, h = t(xs), t(h0)
    w_ru, b_ru = t(weights["gates/kernel"]), t(weights["gates/bias"])
    w_c, b_c = t(weights["candidate/kernel"]), t(weights["candidate/bias"])
    outs, state = [], h
    for step in range(xs.shape[0]):
        state = raw_ops.GRUBlockCell(x[step], state, w_ru, w_c, b_ru, b_c).h
        outs.append(state)
    loss = outs[0].sum() if d_out == "first" else sum(o.sum() for o in outs)
    grads = torch.autograd.grad(loss, [x, h, w_ru, b_ru, w_c, b_c])
    return outs, state, grads


def test_block_gru_to_gru_cell_single_step():
    B, H, I = 4, 5, 6  # noqa: E741
    w, x, h = _case(B, H, I)
    tf_outs, _, _ = _tf_run(H, w, x, h)
    outs, _, _ = _ours_run(w, x, h)
    assert_np_close(outs[0], tf_outs[0])


def test_block_gru_to_gru_cell_multi_step():
    B, H, I, T = 2, 3, 3, 4  # noqa: E741
    w, x, h = _case(B, H, I, T)
    tf_outs, tf_state, _ = _tf_run(H, w, x, h)
    outs, state, _ = _ours_run(w, x, h)
    for t in range(T):
        assert_np_close(outs[t], tf_outs[t], msg=f"output {t}")
    # TF's test compared block_res[1] with itself; the intent is this
    assert_np_close(state, tf_state)


def test_derivative_of_block_gru_to_gru_cell_single_step():
    B, H, I = 2, 3, 4  # noqa: E741
    w, x, h = _case(B, H, I)
    _, _, tf_grads = _tf_run(H, w, x, h)
    _, _, grads = _ours_run(w, x, h)
    names = ["x", "h", "w_ru", "b_ru", "w_c", "b_c"]
    for name, g, want in zip(names, grads, tf_grads, strict=True):
        assert_np_close(g, want, msg=name)


def test_derivative_of_block_gru_to_gru_cell_multi_steps():
    """d outputs[0] / d x and / d h, over T = 2 steps (the second step gets no gradient)."""
    B, H, I, T = 2, 3, 4, 2  # noqa: E741
    w, x, h = _case(B, H, I, T)
    _, _, tf_grads = _tf_run(H, w, x, h, d_out="first")
    _, _, grads = _ours_run(w, x, h, d_out="first")
    assert_np_close(grads[0], tf_grads[0], msg="x")
    assert_np_close(grads[1], tf_grads[1], msg="h")


def test_gradient_check():
    """testGradient: B = 1, H = 3, I = 2, x = h = 0, the cell's own initial weights (TF:
    glorot uniform kernels, gate bias 1, candidate bias 0); the numeric Jacobian of output 0 by
    central differences (gradient_checker's delta 1e-3, in float32 as TF's) against ours,
    max |difference| < 1e-4 for each of x, h, w_ru, w_c, b_ru, b_c."""
    B, H, I = 1, 3, 2  # noqa: E741
    g = torch.Generator().manual_seed(0)

    def glorot(rows, cols):
        bound = (6.0 / (rows + cols)) ** 0.5
        return (torch.rand(rows, cols, generator=g) * 2 - 1) * bound

    args = [torch.zeros(B, I), torch.zeros(B, H), glorot(I + H, 2 * H), glorot(I + H, H),
            torch.ones(2 * H), torch.zeros(H)]  # fmt: skip
    delta = 1e-3
    for k in range(len(args)):
        leaf = args[k].clone().requires_grad_()

        def call(a, k=k):
            return raw_ops.GRUBlockCell(*args[:k], a, *args[k + 1 :]).h

        out = call(leaf)
        rows = [torch.autograd.grad(out.view(-1)[j], leaf, retain_graph=True)[0].reshape(-1)
                for j in range(out.numel())]  # fmt: skip
        theoretical = torch.stack(rows, 1)
        numeric = torch.empty_like(theoretical)
        flat = args[k].reshape(-1)
        for i in range(flat.numel()):
            plus, minus = flat.clone(), flat.clone()
            plus[i] += delta
            minus[i] -= delta
            with torch.no_grad():
                numeric[i] = (call(plus.view_as(args[k])) - call(minus.view_as(args[k]))
                              ).reshape(-1) / (2 * delta)  # fmt: skip
        err = (numeric - theoretical).abs().max().item()
        assert err < 1e-4, (k, err)
