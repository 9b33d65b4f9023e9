"""TF graphs running a cuDNN RNN op on an opaque params buffer (a TF1 meta graph's variable, a
frozen graph's Const), written by TF here (graph construction only: no CPU kernel runs the op),
converted with no flags and compared with `torch.nn.LSTM` / `GRU` / `RNN` (cuDNN's model) on
the weights the buffer packs: outputs, the input's and initial states' gradients, and the
buffer's gradient against the nn module's weight gradients packed the same way."""

import copy
import os

import numpy as np
import pytest
import torch

from tests.helpers import cli_convert, needs_tf, tf_module
from torch_lstm_grad import layouts

pytestmark = needs_tf
T, B = 5, 3

CASES = {  # name: (nn class, rnn_mode, kwargs, op, how the sizes are given)
    "lstm_bi_2": (torch.nn.LSTM, "lstm", dict(num_layers=2, bidirectional=True), "CudnnRNN",
                  "states"),
    "gru": (torch.nn.GRU, "gru", dict(num_layers=1), "CudnnRNNV2", "states"),
    "rnn_tanh_3": (torch.nn.RNN, "rnn_tanh", dict(num_layers=3), "CudnnRNNV3", "params_size"),
    "rnn_relu_bi": (torch.nn.RNN, "rnn_relu", dict(nonlinearity="relu", bidirectional=True),
                    "CudnnRNNV3", "states"),
    "lstm_proj": (torch.nn.LSTM, "lstm", dict(num_layers=2, proj_size=3), "CudnnRNNV3",
                  "states"),
}  # fmt: skip


def _reference(cls, kwargs, I, H, seed):  # noqa: E741
    torch.manual_seed(seed)
    return cls(I, H, **kwargs).double()


def _write(tmp_path, name, frozen):
    """The graph (a meta graph + Saver checkpoint, or a frozen GraphDef) of one CASES entry,
    and the nn module whose weights its buffer packs."""
    tf = tf_module()
    tf1 = tf.compat.v1
    cls, mode, kwargs, op, sizes = CASES[name]
    I, H = 4, 6  # noqa: E741
    ref = _reference(cls, kwargs, I, H, seed=len(name))
    buf = layouts.torch_rnn_to_cudnn(copy.deepcopy(ref).float()).opaque_kernel.detach().numpy()
    LD = ref.num_layers * (2 if ref.bidirectional else 1)
    P = getattr(ref, "proj_size", 0) or H
    direction = "bidirectional" if ref.bidirectional else "unidirectional"
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, None, I], name="x")
        if frozen:
            params = tf.constant(buf, name="rnn/opaque_kernel")
        else:
            params = tf1.get_variable("rnn/opaque_kernel", initializer=buf)
        if sizes == "params_size":  # as TF1's contrib layer sizes its variable
            tf.raw_ops.CudnnRNNParamsSize(num_layers=ref.num_layers, num_units=H, input_size=I,
                                          T=tf.float32, S=tf.int32, rnn_mode=mode,
                                          direction=direction)  # fmt: skip
            h0 = tf1.placeholder(tf.float32, [None, None, H], name="h0")
        else:
            h0 = tf.zeros(tf.stack([LD, tf.shape(x)[1], P]))
        c0 = tf.zeros(tf.stack([LD, tf.shape(x)[1], H])) if mode == "lstm" else tf.constant(0.0)
        extra = {}
        if op == "CudnnRNNV3":  # every row the full length
            extra["sequence_lengths"] = tf.fill(tf.shape(x)[1:2], tf.shape(x)[0])
            if P != H:
                extra["num_proj"] = P
        out = getattr(tf.raw_ops, op)(input=x, input_h=h0, input_c=c0, params=params,
                                      rnn_mode=mode, direction=direction, is_training=False,
                                      **extra)  # fmt: skip
        tf.identity(out[0], name="y")
        if frozen:
            path = tmp_path / "frozen.pb"
            path.write_bytes(g.as_graph_def().SerializeToString())
            return str(path), ref
        saver = tf1.train.Saver()
        tf1.train.export_meta_graph(str(tmp_path / "model.meta"), saver_def=saver.as_saver_def())
    # a tf.compat.v1.Session cannot place a graph holding the op on a CPU: the checkpoint is
    # written from a graph of its variable alone
    with tf1.Graph().as_default():
        tf1.get_variable("rnn/opaque_kernel", initializer=buf)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            tf1.train.Saver().save(s, str(tmp_path / "model"), write_meta_graph=False)
    return os.fspath(tmp_path / "model"), ref


@pytest.mark.parametrize("frozen", [False, True], ids=["meta_graph", "frozen"])
@pytest.mark.parametrize("name", list(CASES))
def test_opaque_buffer_ports_as_cudnn_module(tmp_path, capsys, name, frozen):
    src, ref = _write(tmp_path, name, frozen)
    mods, log = cli_convert(src, tmp_path, capsys)
    assert list(mods) == ["rnn"]
    how = "CudnnRNNParamsSize" if CASES[name][4] == "params_size" else "initial state"
    assert f"num_layers = {ref.num_layers}  <- " in log and how in log
    port = mods["rnn"].double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, 4, generator=g, dtype=torch.float64, requires_grad=True)
    LD = ref.num_layers * (2 if ref.bidirectional else 1)
    h0 = torch.randn(LD, B, getattr(ref, "proj_size", 0) or 6, generator=g,
                     dtype=torch.float64, requires_grad=True)  # fmt: skip
    lstm = isinstance(ref, torch.nn.LSTM)
    c0 = torch.zeros(LD, B, 6, dtype=torch.float64)
    want, want_h = ref(x, (h0, c0) if lstm else h0)
    got, got_h = port(x, initial_state=(h0, c0) if lstm else (h0,))
    want_h = want_h[0] if isinstance(want_h, tuple) else want_h
    r = torch.randn(want.shape, generator=g, dtype=torch.float64)
    ours = torch.autograd.grad((got * r).sum() + got_h[0].sum(), [x, h0, port.opaque_kernel])
    theirs = torch.autograd.grad((want * r).sum() + want_h.sum(), [x, h0, *ref.parameters()])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1])
    grads = copy.deepcopy(ref)
    with torch.no_grad():
        for p, d in zip(grads.parameters(), theirs[2:], strict=True):
            p.copy_(d)
    packed = layouts.torch_rnn_to_cudnn(grads).opaque_kernel.detach()
    torch.testing.assert_close(ours[2], packed.to(ours[2].dtype))


def test_sizes_not_in_the_graph_are_refused(tmp_path, capsys):
    """Initial states of no constant shape and no CudnnRNNParamsSize: the layers and units are
    not stored, and the layer is refused by name."""
    tf = tf_module()
    tf1 = tf.compat.v1
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, None, 4], name="x")
        params = tf.constant(np.zeros(300, np.float32), name="enc/opaque_kernel")
        h0 = tf1.placeholder(tf.float32, [None, None, 6], name="h0")
        tf.raw_ops.CudnnRNN(input=x, input_h=h0, input_c=h0, params=params, rnn_mode="lstm")
    path = tmp_path / "frozen.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    err = cli_convert(path, tmp_path, capsys, code=2)
    assert "enc: sizes" in err and "its layers and units are not stored" in err
