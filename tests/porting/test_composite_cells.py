"""`composite_cells.CompositeCudnn`, verify's stand-in for cuDNN's op on a CPU, against
torch.nn's LSTM / GRU / RNN in float64 (cuDNN's model, an implementation of its own) on the
weights one params buffer packs: outputs, final states, the input's and initial states'
gradients, and the buffer's gradient — TF's variables' gradients packed — against the nn
module's weight gradients packed the same way. `skip_input` against an nn module whose layer-0
input matrices are identity blocks."""

import copy

import numpy as np
import pytest
import torch

from tests.helpers import needs_tf, tf_module
from tests.porting.cudnn_graphs import as_skip_input, skip_input_buffer
from torch_lstm_grad import layouts
from torch_lstm_grad.porting.composite_cells import CompositeCudnn

pytestmark = needs_tf
T, B = 4, 3

CASES = {  # name: (nn class, rnn_mode, input size, kwargs, input_mode)
    "lstm_bi_2": (torch.nn.LSTM, "lstm", 4, dict(num_layers=2, bidirectional=True), "linear_input"),
    "lstm_proj_bi": (torch.nn.LSTM, "lstm", 4, dict(num_layers=2, proj_size=3, bidirectional=True),
                     "linear_input"),
    "gru_2": (torch.nn.GRU, "gru", 4, dict(num_layers=2), "linear_input"),
    "rnn_tanh": (torch.nn.RNN, "rnn_tanh", 4, dict(num_layers=1), "linear_input"),
    "rnn_relu_bi": (torch.nn.RNN, "rnn_relu", 4, dict(nonlinearity="relu", bidirectional=True),
                    "linear_input"),
    "lstm_skip_bi_2": (torch.nn.LSTM, "lstm", 5, dict(num_layers=2, bidirectional=True),
                       "skip_input"),
    "gru_skip": (torch.nn.GRU, "gru", 5, dict(num_layers=1), "skip_input"),
    "rnn_tanh_skip_2": (torch.nn.RNN, "rnn_tanh", 5, dict(num_layers=2), "skip_input"),
}  # fmt: skip
H = 5


@pytest.mark.parametrize("name", list(CASES))
def test_composite_cells_compute_cudnn_s_model(name):
    tf = tf_module()
    cls, mode, I, kwargs, input_mode = CASES[name]  # noqa: E741
    torch.manual_seed(len(name))
    ref = cls(I, H, **kwargs).double()
    skip = input_mode == "skip_input"
    buffer = as_skip_input(ref) if skip else (
        layouts.torch_rnn_to_cudnn(copy.deepcopy(ref).float()).opaque_kernel.detach().numpy()
    )  # fmt: skip
    P = getattr(ref, "proj_size", 0)
    attrs = {"rnn_mode": mode, "input_mode": input_mode, "num_proj": P,
             "direction": "bidirectional" if ref.bidirectional else "unidirectional"}  # fmt: skip
    cells = CompositeCudnn(tf, buffer, attrs, ref.num_layers, H, I)
    LD = ref.num_layers * (2 if ref.bidirectional else 1)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    lstm = mode == "lstm"
    states = [rng.standard_normal((LD, B, P or H)).astype(np.float32)]
    if lstm:
        states.append(rng.standard_normal((LD, B, H)).astype(np.float32))

    xt, st = tf.constant(x), [tf.constant(s) for s in states]
    with tf.GradientTape() as tape:
        tape.watch(xt)
        for s in st:
            tape.watch(s)
        outs = cells(xt, st)
        rs = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
        loss = tf.add_n([tf.reduce_sum(o * r) for o, r in zip(outs, rs, strict=True)])
    grads = tape.gradient(loss, [xt, *st, *cells.variables])
    d_buffer = cells.packed_gradient([g.numpy() for g in grads[1 + len(st) :]])

    xs = torch.from_numpy(x).double().requires_grad_()
    ss = [torch.from_numpy(s).double().requires_grad_() for s in states]
    want, want_states = ref(xs, tuple(ss) if lstm else ss[0])
    want_states = list(want_states) if lstm else [want_states]
    ours = [want, *want_states]
    for got, w in zip(outs, ours, strict=True):
        np.testing.assert_allclose(got.numpy(), w.detach().numpy(), atol=2e-6, rtol=0)
    total = sum((o * torch.from_numpy(r).double()).sum() for o, r in zip(ours, rs, strict=True))
    theirs = torch.autograd.grad(total, [xs, *ss, *ref.parameters()])
    for got, w in zip(grads[: 1 + len(ss)], theirs, strict=False):
        np.testing.assert_allclose(got.numpy(), w.numpy(), atol=1e-5, rtol=0)
    dref = copy.deepcopy(ref)
    with torch.no_grad():
        for p, g in zip(dref.parameters(), theirs[1 + len(ss) :], strict=True):
            p.copy_(g)
    want_buffer = skip_input_buffer(dref) if skip else (
        layouts.torch_rnn_to_cudnn(dref.float()).opaque_kernel.detach().numpy()
    )  # fmt: skip
    assert d_buffer.shape == want_buffer.shape
    np.testing.assert_allclose(d_buffer, want_buffer, atol=2e-5, rtol=0)
