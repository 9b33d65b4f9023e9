"""TensorFlow's own tests of the LSTM block ops, ported: the fused side runs on torch_lstm_grad,
TF's composite side (its `rnn_cell_impl` cells, run eagerly) and TF's own kernels on TF 2.21's
CPU. TF's inputs, shapes, attributes and tolerances are kept (assertAllClose's default is
rtol = atol = 1e-6).

Sources (tensorflow/tensorflow, read for this port; literal expected values are copied with a
note of their source):
- tensorflow/contrib/rnn/python/kernel_tests/lstm_ops_test.py (TF 1.15): testLSTMBlockCell,
  testCompatibleNames, testLSTMBasicToBlockCell(Peeping), testLSTMBasicToBlock /
  ...Peeping / ...CellClip (Fp32, Fp16), testLSTMFusedSequenceLengths;
- tensorflow/python/ops/rnn_grad_test.py: testBlockLSTMV1V2Consistency, testLSTMBlockCell,
  testLSTMBlockCellInvalidRank, testLSTMBlockCellGradInvalidRank;
- tensorflow/python/kernel_tests/nn_ops/rnn_cell_test.py: the block-op error cases
  (testLSTMBlockCellErrorHandling, ...EmptyInputRaisesError, ...GradErrorHandling,
  testLSTMBlockInvalidArgument).
Not ported: testNoneDimsWithDynamicRNN (TF graph shape inference with unknown dims; eager torch
has none) and the benchmarks.
"""

import numpy as np
import pytest
import torch

from tests.helpers import assert_np_close, needs_tf, rnn_cell_impl, tf_module, tf_raw
from torch_lstm_grad import modules, raw_ops

TF_DEFAULT = dict(rtol=1e-6, atol=1e-6)  # tf.test.TestCase.assertAllClose


def _t(a, dtype=torch.float32, grad=False):
    return torch.tensor(np.asarray(a), dtype=dtype, requires_grad=grad)


# ---------------------------------------------------------------------------------------------
# lstm_ops_test.py: testLSTMBlockCell. Two stacked LSTMBlockCell(2), every weight 0.5, biases 0
# (contrib's LSTMBlockCell initialises its bias to zeros), x = [[1, 1]], every state 0.1.


def test_lstm_block_cell_two_layers_literal():
    w = torch.full((4, 8), 0.5)
    b = torch.zeros(8)
    zero = torch.zeros(2)
    x = torch.ones(1, 2)
    states = [torch.full((1, 2), 0.1) for _ in range(4)]  # m0 (c), m1 (h), m2, m3
    outs = []
    inp = x
    for layer in range(2):
        c_prev, h_prev = states[2 * layer], states[2 * layer + 1]
        # contrib passes cell_clip=-1 (no clip) for its default cell_clip=None.
        o = raw_ops.LSTMBlockCell(inp, c_prev, h_prev, w, zero, zero, zero, b, forget_bias=1.0,
                                  cell_clip=-1.0)  # fmt: skip
        outs += [o.cs, o.h]
        inp = o.h
    res = [inp, *outs]
    # Expected values copied from lstm_ops_test.py testLSTMBlockCell ("from testBasicLSTMCell").
    expected = [0.24024698, 0.68967271, 0.44848421, 0.39897051, 0.24024698]
    for got, want in zip(res, expected, strict=True):
        assert_np_close(got, [[want, want]])


# ---------------------------------------------------------------------------------------------
# testCompatibleNames: the block cells' variables carry LSTMCell's names and shapes.


@needs_tf
@pytest.mark.parametrize("peephole", [False, True])
def test_compatible_names(peephole):
    rci = rnn_cell_impl()
    tf = tf_module()
    cell = rci.LSTMCell(10, use_peepholes=peephole)
    cell(tf.zeros([4, 5]), cell.zero_state(4, tf.float32))
    tf_names = {v.name.split("/")[-1].split(":")[0]: tuple(v.shape) for v in cell.variables}
    for module in (modules.LSTMBlockCell(10, 5, use_peephole=peephole),
                   modules.LSTMBlockFusedCell(10, 5, use_peephole=peephole)):  # fmt: skip
        ours = {n: tuple(p.shape) for n, p in module.named_parameters()}
        assert ours == tf_names


# ---------------------------------------------------------------------------------------------
# testLSTMBasicToBlockCell / ...Peeping: one step of two stacked cells, TF's BasicLSTMCell /
# LSTMCell(use_peepholes) against the block cell, weights uniform(-0.01, 0.01), biases 0.


def _uniform(rng, shape, bound, dtype=np.float32):
    return rng.uniform(-bound, bound, shape).astype(dtype)


@needs_tf
@pytest.mark.parametrize("peephole", [False, True], ids=["basic", "peeping"])
def test_lstm_basic_to_block_cell(peephole):
    rci = rnn_cell_impl()
    tf = tf_module()
    rng = np.random.default_rng(19890212)
    x = rng.standard_normal((1, 2)).astype(np.float32)
    state_vals = [0.1, -0.1, -0.2, 0.2]  # m0..m3
    layers = []
    for _ in range(2):
        p = {"kernel": _uniform(rng, (4, 8), 0.01), "bias": np.zeros(8, np.float32)}
        if peephole:
            p.update({n: _uniform(rng, (2,), 0.01) for n in ("w_i_diag", "w_f_diag", "w_o_diag")})
        layers.append(p)
    # TF: the composite cells, weights assigned.
    inp = tf.constant(x)
    tf_res = []
    for layer, p in enumerate(layers):
        cell = rci.LSTMCell(2, use_peepholes=True) if peephole else rci.BasicLSTMCell(2)
        st = rci.LSTMStateTuple(tf.fill([1, 2], state_vals[2 * layer]),
                                tf.fill([1, 2], state_vals[2 * layer + 1]))  # fmt: skip
        cell(inp, st)  # builds the variables
        for v in cell.variables:
            v.assign(p[v.name.split("/")[-1].split(":")[0]])
        inp, new = cell(inp, st)
        tf_res += [new.c.numpy(), new.h.numpy()]
    tf_res = [inp.numpy(), *tf_res]
    # Ours: the block cell op.
    res, h = [], _t(x)
    zero = torch.zeros(2)
    for layer, p in enumerate(layers):
        peep = [_t(p[n]) for n in ("w_i_diag", "w_f_diag", "w_o_diag")] if peephole else [zero] * 3
        o = raw_ops.LSTMBlockCell(h, torch.full((1, 2), state_vals[2 * layer]),
                                  torch.full((1, 2), state_vals[2 * layer + 1]), _t(p["kernel"]),
                                  *peep, _t(p["bias"]), forget_bias=1.0, cell_clip=-1.0,
                                  use_peephole=peephole)  # fmt: skip
        res += [o.cs, o.h]
        h = o.h
    for got, want in zip([h, *res], tf_res, strict=True):
        assert_np_close(got, want)


# ---------------------------------------------------------------------------------------------
# testLSTMBasicToBlock / ...Peeping / ...CellClip (blocks_match): B = 2, I = 3, H = 4, T = 4,
# inputs randn, weights uniform(-0.01, 0.01) (fp16: (-0.1, 0.1) with 4 mantissa bits), biases
# 0; TF's LSTMCell run step by step against BlockLSTM and the fused cell: outputs, the final c,
# d sum(outputs)/d inputs, and the weight gradients, at TF's rtol/atol per dtype.

BLOCKS_MATCH = {"fp32": (torch.float32, 1e-6, 1e-6), "fp16": (torch.float16, 8e-3, 8e-4)}
VARIANTS = {"plain": (False, None), "peeping": (True, None), "cellclip": (True, 0.5)}


def _masked_uniform_fp16(rng, shape, bound):
    """TF's _MaskedRandomUniformInitializer: uniform, then the last 6 of float16's 10 mantissa
    bits zeroed (4 valid bits), so half precision computes the products nearly exactly."""
    v = rng.uniform(-bound, bound, shape).astype(np.float16).view(np.uint16)
    return (v & np.uint16(0xFFC0)).view(np.float16)


def _tf_lstm_cell_loop(tf, rci, inputs, params, peephole, cell_clip, dtype):
    cell = rci.LSTMCell(4, use_peepholes=peephole, cell_clip=cell_clip, dtype=dtype)
    xs = [tf.constant(x) for x in inputs]
    st = cell.zero_state(2, dtype)
    cell(xs[0], st)
    for v in cell.variables:
        v.assign(params[v.name.split("/")[-1].split(":")[0]])
    with tf.GradientTape() as tape:
        tape.watch(xs)
        outs = []
        for x in xs:
            out, st = cell(x, st)
            outs.append(out)
        loss = tf.add_n([tf.reduce_sum(o) for o in outs])
    names = ["kernel", "bias"] + (["w_i_diag", "w_f_diag", "w_o_diag"] if peephole else [])
    by_name = {v.name.split("/")[-1].split(":")[0]: v for v in cell.variables}
    grads = tape.gradient(loss, xs + [by_name[n] for n in names])
    return ([o.numpy() for o in outs], st.c.numpy(), [g.numpy() for g in grads[:4]],
            [g.numpy() for g in grads[4:]])  # fmt: skip


@needs_tf
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype_name", list(BLOCKS_MATCH))
def test_lstm_basic_to_block(dtype_name, variant):
    rci, tf = rnn_cell_impl(), tf_module()
    dtype, rtol, atol = BLOCKS_MATCH[dtype_name]
    np_dtype = np.float16 if dtype == torch.float16 else np.float32
    peephole, cell_clip = VARIANTS[variant]
    B, I, H, T = 2, 3, 4, 4  # noqa: E741
    rng = np.random.default_rng(19890212)
    inputs = [rng.standard_normal((B, I)).astype(np_dtype) for _ in range(T)]
    draw = ((lambda s: _masked_uniform_fp16(rng, s, 0.1)) if dtype == torch.float16
            else (lambda s: _uniform(rng, s, 0.01)))  # fmt: skip
    params = {"kernel": draw((I + H, 4 * H)), "bias": np.zeros(4 * H, np_dtype)}
    if peephole:
        params.update({n: draw((H,)) for n in ("w_i_diag", "w_f_diag", "w_o_diag")})
    tf_out, tf_c, tf_dx, tf_dw = _tf_lstm_cell_loop(tf, rci, inputs, params, peephole,
                                                    cell_clip, tf.as_dtype(np_dtype))  # fmt: skip
    # Ours, both ways TF ran its fused side: the BlockLSTM op and the fused cell module.
    x = _t(np.stack(inputs), dtype, grad=True)
    w, b = _t(params["kernel"], dtype, True), _t(params["bias"], dtype, True)
    peep = ([_t(params[n], dtype, True) for n in ("w_i_diag", "w_f_diag", "w_o_diag")]
            if peephole else [torch.zeros(H, dtype=dtype)] * 3)  # fmt: skip
    zeros = torch.zeros(B, H, dtype=dtype)
    block = raw_ops.BlockLSTM(T, x, zeros, zeros, w, *peep, b, forget_bias=1.0,
                              cell_clip=-1.0 if cell_clip is None else cell_clip,
                              use_peephole=peephole)  # fmt: skip
    wrt = [x, w, b] + (peep if peephole else [])
    grads = torch.autograd.grad(block.h.sum(), wrt)
    fused = modules.LSTMBlockFusedCell(H, I, cell_clip=cell_clip, use_peephole=peephole,
                                       dtype=dtype)  # fmt: skip
    with torch.no_grad():
        for n, p in fused.named_parameters():
            p.copy_(_t(params[n], dtype))
    fx = x.detach().clone().requires_grad_()
    f_out, (f_c, _) = fused(fx)
    f_grads = torch.autograd.grad(f_out.sum(), [fx, *(p for _, p in fused.named_parameters())])
    names = ["kernel", "bias"] + (["w_i_diag", "w_f_diag", "w_o_diag"] if peephole else [])
    tol = dict(rtol=rtol, atol=atol)
    for t in range(T):
        assert_np_close(block.h[t], tf_out[t], **tol, msg=f"block output {t}")
        assert_np_close(f_out[t], tf_out[t], **tol, msg=f"fused output {t}")
        assert_np_close(grads[0][t], tf_dx[t], **tol, msg=f"block d input {t}")
        assert_np_close(f_grads[0][t], tf_dx[t], **tol, msg=f"fused d input {t}")
    assert_np_close(f_c, tf_c, **tol, msg="fused final c")
    for k, name in enumerate(names):
        assert_np_close(grads[1 + k], tf_dw[k], **tol, msg=f"block d {name}")
        assert_np_close(dict(zip(("x", *[n for n, _ in fused.named_parameters()]), f_grads,
                        strict=True))[name], tf_dw[k], **tol, msg=f"fused d {name}")  # fmt: skip


# ---------------------------------------------------------------------------------------------
# testLSTMFusedSequenceLengths: B = 3, I = 4, H = 5, T = 6, lengths [3, 4, 5], cell_clip = 0,
# no peephole. TF checks its fused cell against the same cell run one step at a time (the
# unfused chain); ported: ours both ways, and TF's LSTMCell under dynamic_rnn's
# sequence_length semantics (outputs zero and the state kept past a row's length).


def _tf_dynamic_lstm(tf, rci, x, lengths, kernel, bias):
    cell = rci.LSTMCell(5)
    xs = tf.constant(x)
    st = cell.zero_state(x.shape[1], tf.float32)
    cell(xs[0], st)
    by_name = {v.name.split("/")[-1].split(":")[0]: v for v in cell.variables}
    by_name["kernel"].assign(kernel)
    by_name["bias"].assign(bias)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        outs = []
        for t in range(x.shape[0]):
            out, new = cell(xs[t], st)
            live = tf.constant((t < lengths)[:, None])
            st = rci.LSTMStateTuple(tf.where(live, new.c, st.c), tf.where(live, new.h, st.h))
            outs.append(tf.where(live, out, tf.zeros_like(out)))
        outs = tf.stack(outs)
        loss = tf.reduce_sum(outs)
    grads = tape.gradient(loss, [xs, by_name["kernel"], by_name["bias"]])
    return outs.numpy(), st.c.numpy(), [g.numpy() for g in grads]


@needs_tf
def test_lstm_fused_sequence_lengths():
    rci, tf = rnn_cell_impl(), tf_module()
    B, I, H, T = 3, 4, 5, 6  # noqa: E741
    lengths = np.array([3, 4, 5])
    rng = np.random.default_rng(19890213)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    kernel = _uniform(rng, (I + H, 4 * H), 0.01)
    bias = np.zeros(4 * H, np.float32)
    cell = modules.LSTMBlockFusedCell(H, I, cell_clip=0.0)
    with torch.no_grad():
        cell.kernel.copy_(_t(kernel))
        cell.bias.copy_(_t(bias))
    xf = _t(x, grad=True)
    out, (c, _) = cell(xf, sequence_length=torch.tensor(lengths))
    fused_grads = torch.autograd.grad(out.sum(), [xf, cell.kernel, cell.bias])
    # The unfused chain: one-step subsequences, lengths [t < l] per step, state carried.
    xu = _t(x, grad=True)
    state, steps = None, []
    for t in range(T):
        o, state = cell(xu[t : t + 1], initial_state=state,
                        sequence_length=torch.tensor((t < lengths).astype(np.int64)))  # fmt: skip
        steps.append(o[0])
    unfused = torch.stack(steps)
    unfused_grads = torch.autograd.grad(unfused.sum(), [xu, cell.kernel, cell.bias])
    assert_np_close(out, unfused.detach())
    assert_np_close(c, state[0].detach())
    for g, u in zip(fused_grads, unfused_grads, strict=True):
        assert_np_close(g, u.detach())
    tf_out, tf_c, tf_grads = _tf_dynamic_lstm(tf, rci, x, lengths, kernel, bias)
    assert_np_close(out, tf_out)
    assert_np_close(c, tf_c)
    for g, w in zip(fused_grads, tf_grads, strict=True):
        assert_np_close(g, w)


# ---------------------------------------------------------------------------------------------
# rnn_grad_test.py


def test_block_lstm_v1_v2_consistency():
    """testBlockLSTMV1V2Consistency: T = B = I = 1, H = 8, inputs uniform [0, 1), V1 with
    forget_bias = cell_clip = 0 against V2 on the IFCO weights. TF asserts V2's tape gradient
    equals V1's ICFO one, which holds only because TF differentiates V2 with the V1 kernel
    (docs/tf-semantics.md §4.3; docs/differences.md, "Gradients"). Ours: equal forwards, and V2's
    gradients are V1's with the gate blocks moved to IFCO."""
    g = np.random.default_rng(0)
    H = 8
    w = _t(g.random((1 + H, 4 * H)), grad=True)
    b = _t(g.random(4 * H), grad=True)
    x = _t(g.random((1, 1, 1)))
    cs_prev = h_prev = _t(g.random((1, H)))
    zero = torch.zeros(H)

    def icfo_to_ifco(t):
        i, c, f, o = t.chunk(4, dim=-1)
        return torch.cat([i, f, c, o], dim=-1)

    v1 = raw_ops.BlockLSTM(1, x, cs_prev, h_prev, w, zero, zero, zero, b, forget_bias=0.0,
                           cell_clip=0.0)  # fmt: skip
    w2 = icfo_to_ifco(w.detach()).requires_grad_()
    b2 = icfo_to_ifco(b.detach()).requires_grad_()
    v2 = raw_ops.BlockLSTMV2(1, x, cs_prev, h_prev, w2, zero, zero, zero, b2)
    assert torch.equal(v1.cs, v2.cs) and torch.equal(v1.h, v2.h)
    gw, gb = torch.autograd.grad(v1.cs.sum() + v1.h.sum(), [w, b])
    gw2, gb2 = torch.autograd.grad(v2.cs.sum() + v2.h.sum(), [w2, b2])
    assert torch.equal(icfo_to_ifco(gw), gw2) and torch.equal(icfo_to_ifco(gb), gb2)


@needs_tf
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lstm_block_cell_and_grad_vs_tf_kernels(seed):
    """testLSTMBlockCell: sizes drawn in [1, 32), inputs uniform [0, 1), cs_prev = h_prev,
    zero peepholes, forget_bias 1, cell_clip 0; TF compares its CPU and GPU kernels, ported:
    ours against TF's CPU kernels, forward and LSTMBlockCellGrad."""
    g = np.random.default_rng(seed)
    B, I, H = (int(v) for v in g.integers(1, 32, 3))  # noqa: E741
    w = _t(g.random((I + H, 4 * H)))
    b = _t(g.random(4 * H))
    x = _t(g.random((B, I)))
    cs_prev = h_prev = _t(g.random((B, H)))
    wp = torch.zeros(H)
    cs_grad, h_grad = _t(g.random((B, H))), _t(g.random((B, H)))
    args = dict(x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wp, wcf=wp, wco=wp, b=b)
    ours = raw_ops.LSTMBlockCell(**args, forget_bias=1.0, cell_clip=0.0, use_peephole=False)
    theirs = tf_raw("LSTMBlockCell", **args, forget_bias=1.0, cell_clip=0.0, use_peephole=False)
    for a, t in zip(ours, theirs, strict=True):
        assert_np_close(a, t)
    acts = dict(zip(("i", "cs", "f", "o", "ci", "co"), theirs[:6], strict=True))
    grad_args = dict(**args, **acts, cs_grad=cs_grad, h_grad=h_grad, use_peephole=False)
    theirs_g = tf_raw("LSTMBlockCellGrad", **grad_args)
    for a, t in zip(raw_ops.LSTMBlockCellGrad(**grad_args), theirs_g, strict=True):
        assert_np_close(a, t)


@pytest.mark.parametrize("op", ["LSTMBlockCell", "LSTMBlockCellGrad"])
def test_lstm_block_cell_invalid_rank(op):
    """testLSTMBlockCellInvalidRank / testLSTMBlockCellGradInvalidRank (TF's #113069, #113071:
    a rank-1 x aborted the process): a rank-1 x raises, naming x."""
    g = np.random.default_rng(0)
    B, I, H = 2, 2, 2  # noqa: E741
    args = dict(x=_t(g.random(I)), cs_prev=_t(g.random((B, H))), h_prev=_t(g.random((B, H))),
                w=_t(g.random((I + H, 4 * H))), wci=torch.zeros(H), wcf=torch.zeros(H),
                wco=torch.zeros(H), b=_t(g.random(4 * H)))  # fmt: skip
    if op == "LSTMBlockCellGrad":
        gate = _t(g.random((B, H)))
        args.update(i=gate, cs=gate, f=gate, o=gate, ci=gate, co=gate, cs_grad=gate, h_grad=gate)
    with pytest.raises(ValueError, match=r"^x: expected a 2-D tensor \[B, I\], got shape \[2\]"):
        getattr(raw_ops, op)(**args, use_peephole=False)


# ---------------------------------------------------------------------------------------------
# rnn_cell_test.py: the block ops' error cases.


def _const(value, shape, dtype=torch.float32):
    return torch.full(shape, value, dtype=dtype)


def test_lstm_block_cell_error_handling_unused_peepholes():
    """testLSTMBlockCellErrorHandling: peepholes of the wrong ranks (wci [], wco [28, 17]) with
    use_peephole=False. TF raises InvalidArgument; ours ignores unused peepholes
    (docs/differences.md, "Bad input raises") and computes what zero peepholes give."""
    args = dict(x=_const(0.837607, (28, 29)), cs_prev=_const(0.0, (28, 17)),
                h_prev=_const(0.592631638, (28, 17)), w=_const(0.887386262, (46, 68)),
                b=_const(0.75259006, (68,)))  # fmt: skip
    bad = raw_ops.LSTMBlockCell(**args, wci=_const(0.0, ()), wcf=_const(0.0, (17,)),
                                wco=_const(0.592631638, (28, 17)), forget_bias=1, cell_clip=0,
                                use_peephole=False)  # fmt: skip
    z = torch.zeros(17)
    good = raw_ops.LSTMBlockCell(**args, wci=z, wcf=z, wco=z, forget_bias=1, cell_clip=0,
                                 use_peephole=False)  # fmt: skip
    for a, b in zip(bad, good, strict=True):
        assert torch.equal(a, b)


def test_lstm_block_cell_empty_input_raises():
    """testLSTMBlockCellEmptyInputRaisesError: half, cs_prev [2, 0] ("is empty" in TF)."""
    h = torch.float16
    with pytest.raises(ValueError, match=r"^cs_prev: .*H >= 1, got \[2, 0\]"):
        raw_ops.LSTMBlockCell(x=_const(0, (2, 16), h), cs_prev=_const(0, (2, 0), h),
                              h_prev=_const(0, (2, 0), h), w=_const(0, (16, 0), h),
                              wci=_const(0, (5,), h), wcf=_const(0, (16,), h),
                              wco=_const(0, (13,), h), b=_const(0, (0,), h),
                              forget_bias=112.66590343649887, cell_clip=67.12389445926587,
                              use_peephole=False)  # fmt: skip


def test_block_lstm_grad_v2_error_handling():
    """testLSTMBlockCellGradErrorHandling: BlockLSTMGradV2 with a rank-3 cs_prev [1, 1, 1]
    ("must be rank" in TF)."""
    v = 0.504355371
    t3 = _const(v, (1, 1, 1))
    with pytest.raises(ValueError, match=r"^cs_prev: expected shape \[B, H\]"):
        raw_ops.BlockLSTMGradV2(seq_len_max=1, x=t3, cs_prev=t3, h_prev=_const(v, (1, 1)),
                                w=_const(v, (1, 1)), wci=_const(v, (1,)), wcf=_const(v, (1,)),
                                wco=_const(v, (1,)), b=_const(v, (1,)), i=t3, cs=t3, f=t3, o=t3,
                                ci=t3, co=t3, h=t3, cs_grad=t3, h_grad=t3,
                                use_peephole=False)  # fmt: skip


def test_block_lstm_invalid_argument():
    """testLSTMBlockInvalidArgument (TF's #58175): seq_len_max [13, 11, 0], cs_prev [3, 0]."""
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"^cs_prev: .*H >= 1, got \[3, 0\]"):
        raw_ops.BlockLSTM(seq_len_max=torch.zeros(13, 11, 0, dtype=torch.int64),
                          x=torch.rand(1, 3, 15, generator=g), cs_prev=torch.rand(3, 0),
                          h_prev=torch.rand(3, 0), w=torch.rand(15, 0), wci=torch.rand(0),
                          wcf=torch.rand(0), wco=torch.rand(0), b=torch.rand(0),
                          forget_bias=-121.22699269620765, cell_clip=-106.82307555235684,
                          use_peephole=False)  # fmt: skip
