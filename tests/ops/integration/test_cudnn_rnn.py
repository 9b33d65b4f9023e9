"""torch.library.opcheck and torch.compile on the CudnnRNN ops: opcheck's schema, autograd
registration, fake-tensor and AOT-dispatch tests on forward and Backprop samples (every mode,
both layouts, lengths, dropout, skip_input, inference), and torch.compile (backend="aot_eager",
fullgraph=True, static and dynamic shapes) against eager."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import CudnnCfg as Cfg
from tests.helpers import cudnn_fwd_inputs as _fwd_inputs
from tests.helpers import cudnn_rand_params as rand_params
from torch_lstm_grad import raw_ops

ops = torch.ops.torch_lstm_grad
F32, F64 = torch.float32, torch.float64
I32 = torch.int32


# ---------------------------------------------------------------------------------------------
# opcheck and torch.compile


def _op_sample(dtype, c: Cfg, lengths, time_major, train, requires, dropout=0.0,
               input_mode="linear_input", device="cpu"):  # fmt: skip
    """Positional args of ops.cudnn_rnn (sequence_lengths stays in host memory, as in TF)."""
    x, h0, c0, params = (t.to(device) for t in _fwd_inputs(c, dtype))
    params = rand_params(c, input_mode, dtype).to(device)
    if not time_major:
        x = x.transpose(0, 1).contiguous()
        h0 = h0.transpose(0, 1).contiguous()
        c0 = c0.transpose(0, 1).contiguous() if c.lstm else c0
    named = dict(x=x, h0=h0, c0=c0, params=params)
    for k in requires:
        named[k].requires_grad_()
    seq = None if lengths is None else torch.tensor(lengths, dtype=I32)
    return (named["x"], named["h0"], named["c0"], named["params"], seq, c.mode, input_mode,
            c.direction, dropout, 0, 0, c.P, train, time_major)  # fmt: skip


ALL4 = ("x", "h0", "c0", "params")
OPCHECK_FWD = [
    # (dtype, cfg, lengths, time_major, is_training, requires_grad, dropout, input_mode)
    (F32, Cfg("lstm", 1, 1, I=3, H=4, T=3, B=2), [3, 1], True, True, ALL4, 0.0, "linear_input"),
    (
        F64,
        Cfg("gru", 2, 2, I=3, H=2, T=3, B=2),
        None,
        True,
        True,
        ("x", "params"),
        0.0,
        "linear_input",
    ),  # fmt: skip
    (
        F64,
        Cfg("lstm", 1, 2, I=3, H=4, P=2, T=3, B=3),
        [2, 0, 3],
        False,
        True,
        ALL4,
        0.0,
        "linear_input",
    ),  # fmt: skip
    (
        F64,
        Cfg("rnn_relu", 2, 1, I=3, H=3, T=3, B=2),
        None,
        True,
        True,
        ("h0",),
        0.3,
        "linear_input",
    ),  # dropout with seed = seed2 = 0  # fmt: skip
    (
        F32,
        Cfg("rnn_tanh", 1, 1, I=2, H=2, T=2, B=2),
        [1, 2],
        True,
        True,
        ALL4,
        0.0,
        "skip_input",
    ),  # fmt: skip
    (F32, Cfg("lstm", 2, 1, I=3, H=2, T=3, B=2), None, True, False, (), 0.0, "linear_input"),
    (F64, Cfg("gru", 1, 2, I=3, H=2, T=3, B=2), [3, 2], False, False, (), 0.0, "linear_input"),
]


def test_opcheck_cudnn_rnn(device):
    op = ops.cudnn_rnn.default
    utils = ["test_schema", "test_autograd_registration", "test_faketensor",
             "test_aot_dispatch_dynamic"]  # fmt: skip
    if device == "cuda":
        # The GPU's reserve (output 3) is cuDNN's own working memory: two identical calls leave
        # part of it different (an H200, cuDNN 9.19: 64 of a small LSTM's 208 values, up to
        # 1.37 apart, with the buffer zeroed first; docs/cudnn.md §7), so
        # the AOT test, which compares every output, cannot hold there. The values with a
        # meaning, outputs and gradients, are compared under AOT by the test below.
        utils.remove("test_aot_dispatch_dynamic")
    for dtype, c, lengths, tm, train, requires, dropout, input_mode in OPCHECK_FWD:
        args = _op_sample(dtype, c, lengths, tm, train, requires, dropout, input_mode, device)
        result = torch.library.opcheck(op, args, test_utils=utils)
        assert set(result.values()) == {"SUCCESS"}, (c, result)


def test_aot_cudnn_rnn_outputs_and_gradients_equal_eager(device):
    """Under AOTAutograd (dynamic shapes) the op's outputs and every input's gradient are
    eager's: opcheck's AOT test without the reserve, whose bytes cuDNN does not fix."""
    from torch.testing._internal.optests import aot_autograd_check

    op = ops.cudnn_rnn.default
    for dtype, c, lengths, tm, train, requires, dropout, input_mode in OPCHECK_FWD:
        args = _op_sample(dtype, c, lengths, tm, train, requires, dropout, input_mode, device)

        def outputs(*a):
            return op(*a)[:3]

        # (is_training=False has no backward: TF's error, tested elsewhere)
        aot_autograd_check(outputs, args, {}, dynamic=True,
                           check_gradients=bool(train and requires))  # fmt: skip


def test_opcheck_cudnn_rnn_inference_with_requires_grad():
    """is_training=False with inputs requiring grad: everything but the backward (which must
    raise TF's is_training error) passes opcheck."""
    op = ops.cudnn_rnn.default
    args = _op_sample(F64, Cfg("lstm", 1, 2, I=3, H=2, T=3, B=2), [3, 1], True, False, ALL4)
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    result = torch.library.opcheck(op, args, test_utils=utils)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("consuming", [False, True])
def test_opcheck_cudnn_rnn_backprop(device, consuming):
    op = (ops._cudnn_rnn_backprop_consuming if consuming else ops.cudnn_rnn_backprop).default
    for dtype, c, lengths, tm, train, _, dropout, input_mode in OPCHECK_FWD:
        if not train:
            continue
        fwd_args = _op_sample(dtype, c, lengths, tm, True, (), dropout, input_mode, device)
        out, oh, oc, reserve, host = ops.cudnn_rnn(*fwd_args)
        grads = (torch.randn_like(out), torch.randn_like(oh),
                 torch.randn_like(oc) if c.lstm else out.new_zeros(()))  # fmt: skip
        args = (*fwd_args[:5], out, oh, oc, *grads, reserve, host, *fwd_args[5:12], tm)
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (c, result)


def _compiled_case(mode, time_major):
    c = Cfg(mode, 2, 2, I=3, H=3, T=4, B=3)
    x, h0, c0, params = _fwd_inputs(c, F32)
    if not time_major:
        x = x.transpose(0, 1).contiguous()
        h0 = h0.transpose(0, 1).contiguous()
        c0 = c0.transpose(0, 1).contiguous() if c.lstm else c0
    leaves = [t.requires_grad_() for t in (x, h0, params)] + (
        [c0.requires_grad_()] if c.lstm else []
    )
    seq = torch.tensor([4, 1, 3], dtype=I32)

    def f(x, h0, c0, params, seq):
        res = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, rnn_mode=mode, direction="bidirectional",
                                 time_major=time_major)  # fmt: skip
        return res.output * 2, res.output_h + h0, res.output_c if c.lstm else res.output_h

    return f, (x, h0, c0, params, seq), leaves


@pytest.mark.parametrize(("mode", "time_major"), [("lstm", True), ("gru", False)])
def test_compile_aot_eager_fullgraph(mode, time_major):
    torch._dynamo.reset()
    f, args, leaves = _compiled_case(mode, time_major)

    def fwd_bwd(fn):
        outs = fn(*args)
        gen = torch.Generator().manual_seed(3)
        loss = sum((o * torch.randn(o.shape, generator=gen)).sum() for o in outs)
        return [o.detach() for o in outs], torch.autograd.grad(loss, leaves)

    eager_out, eager_grads = fwd_bwd(f)
    out, grads = fwd_bwd(torch.compile(f, backend="aot_eager", fullgraph=True))
    for a, b in zip(out + list(grads), eager_out + list(eager_grads), strict=True):
        torch.testing.assert_close(a, b)
    assert all(g.abs().sum() > 0 for g in eager_grads)


def test_compile_dynamic_shapes():
    """dynamic=True: other batch sizes and sequence lengths reuse one graph and match eager."""
    torch._dynamo.reset()
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend("aot_eager")
    n_graphs = 0

    def counting_backend(gm, example_inputs):
        nonlocal n_graphs
        n_graphs += 1
        return aot_eager(gm, example_inputs)

    def f(x, h0, c0, params, seq):
        res = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, direction="bidirectional")
        return res.output, res.output_h * 2, res.output_c

    compiled = torch.compile(f, backend=counting_backend, fullgraph=True, dynamic=True)
    for T, B in ((5, 6), (2, 7), (8, 2)):  # no size equal to another one (duck sizing)
        c = Cfg("lstm", 2, 2, I=3, H=3, T=T, B=B)
        inputs = [t.requires_grad_() for t in _fwd_inputs(c, F32)]
        seq = torch.randint(0, T + 1, (B,), dtype=I32)
        results = []
        for fn in (f, compiled):
            outs = fn(*inputs, seq)
            loss = sum((o * (k + 1)).sum() for k, o in enumerate(outs))
            results.append([*(o.detach() for o in outs), *torch.autograd.grad(loss, inputs)])
        for a, b in zip(*results, strict=True):
            torch.testing.assert_close(a, b)
        assert results[1][0].shape == (T, B, 6)
    assert n_graphs == 1


def test_compile_inference():
    torch._dynamo.reset()
    c = Cfg("lstm", 2, 1, I=3, H=3, T=4, B=3)
    x, h0, c0, params = _fwd_inputs(c, F32)

    def f(x, h0, c0, params):
        res = raw_ops.CudnnRNNV3(x, h0, c0, params, None, is_training=False)
        return res.output, res.output_h, res.reserve_space

    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, h0, c0, params)
    want = f(x, h0, c0, params)
    for a, b in zip(out, want, strict=True):
        torch.testing.assert_close(a, b)
