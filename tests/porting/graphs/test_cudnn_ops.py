"""TF graphs running a cuDNN RNN op on an opaque params buffer (a TF1 meta graph's variable, a
frozen graph's Const), written by TF here (graph construction only: no CPU kernel runs the op),
converted with no flags and compared with `torch.nn.LSTM` / `GRU` / `RNN` (cuDNN's model) on
the weights the buffer packs: outputs, the input's and initial states' gradients, and the
buffer's gradient against the nn module's weight gradients packed the same way."""

import copy
import re

import numpy as np
import pytest
import torch

from tests.helpers import cli_convert, needs_tf, tf_module
from tests.porting.cudnn_graphs import as_skip_input, skip_input_buffer, write_opaque_graph
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
    cls, mode, kwargs, op, sizes = CASES[name]
    I, H = 4, 6  # noqa: E741
    ref = _reference(cls, kwargs, I, H, seed=len(name))
    buf = _linear_buffer(ref).astype(np.float32)
    path = write_opaque_graph(
        tmp_path, buf, rnn_mode=mode, num_layers=ref.num_layers, num_units=H, input_size=I,
        direction="bidirectional" if ref.bidirectional else "unidirectional",
        num_proj=getattr(ref, "proj_size", 0), op=op, sizes=sizes, frozen=frozen,
    )  # fmt: skip
    return path, ref


@pytest.mark.parametrize("frozen", [False, True], ids=["meta_graph", "frozen"])
@pytest.mark.parametrize("name", list(CASES))
def test_opaque_buffer_ports_as_cudnn_module(tmp_path, capsys, name, frozen):
    src, ref = _write(tmp_path, name, frozen)
    mods, log = _convert(src, tmp_path, capsys)
    assert list(mods) == ["rnn"]
    how = "CudnnRNNParamsSize" if CASES[name][4] == "params_size" else "initial state"
    assert f"num_layers = {ref.num_layers}  <- " in log and how in log
    _assert_computes(mods["rnn"], ref, 4, layouts_of=_linear_buffer)


SKIP_CASES = {"lstm_bi_2": (torch.nn.LSTM, dict(num_layers=2, bidirectional=True)),
              "gru": (torch.nn.GRU, dict(num_layers=1))}  # fmt: skip


@pytest.mark.parametrize("name", list(SKIP_CASES))
def test_skip_input_buffer_ports_as_cudnn_module(tmp_path, capsys, name):
    """input_mode="skip_input": no layer-0 input matrices, the input size that of the units
    (the buffer's length does not hold it), against an nn module whose layer-0 input matrices
    are identity blocks."""
    cls, kwargs = SKIP_CASES[name]
    ref = _reference(cls, kwargs, 6, 6, seed=len(name))
    buf = as_skip_input(ref)
    src = write_opaque_graph(
        tmp_path, buf, rnn_mode=cls.__name__.lower(), num_layers=ref.num_layers, num_units=6,
        input_size=6, direction="bidirectional" if ref.bidirectional else "unidirectional",
        input_mode="skip_input",
    )  # fmt: skip
    mods, log = _convert(src, tmp_path, capsys)
    assert "input_mode = 'skip_input'" in log and "input_size = 6  <- " in log
    assert mods["rnn"].input_mode == "skip_input"
    _assert_computes(mods["rnn"], ref, 6, layouts_of=skip_input_buffer)


def _convert(src, tmp_path, capsys):
    """cli_convert's modules and log, the log's attribute columns closed up (`key = value`)."""
    mods, log = cli_convert(src, tmp_path, capsys)
    return mods, re.sub(r"(?m)^(\s+\S+) +=", r"\1 =", log)


def _linear_buffer(ref) -> np.ndarray:
    """The params buffer of a torch.nn module's weights, in its dtype."""
    return layouts.torch_rnn_to_cudnn(copy.deepcopy(ref)).opaque_kernel.detach().numpy()


def _assert_computes(port, ref, I, layouts_of):  # noqa: E741
    """The port computes what the nn module `ref` does (float64): outputs, the input's and
    initial state's gradients, and the buffer's gradient the nn weights' packed (`layouts_of`:
    the module's buffer, in its dtype)."""
    port = port.double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, I, generator=g, dtype=torch.float64, requires_grad=True)
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
    packed = torch.from_numpy(layouts_of(grads))
    torch.testing.assert_close(ours[2], packed)


@pytest.mark.parametrize("lengths", [None, [5, 3, 2]], ids=["fed", "constant"])
def test_v3_sequence_lengths_are_printed(tmp_path, capsys, lengths):
    """The module takes CudnnRNNV3's sequence_lengths at its call: the log says what the graph
    fed (constant values, or the node feeding them) and that the module does not keep it."""
    ref = _reference(torch.nn.GRU, {}, 4, 6, seed=3)
    src = write_opaque_graph(tmp_path, _linear_buffer(ref).astype(np.float32), rnn_mode="gru",
                             num_layers=1, num_units=6, input_size=4, frozen=True,
                             lengths=lengths)  # fmt: skip
    _, log = _convert(src, tmp_path, capsys)
    if lengths is None:
        assert "sequence_lengths = 'at the call'  <- CudnnRNNV3 (CudnnRNNV3)'s input Fill" in log
        assert "every row runs all T steps" in log and "[not stored in the file]" in log
    else:
        assert "sequence_lengths = [5, 3, 2]  <- " in log and "lengths, a constant" in log
        assert "call it with sequence_lengths= these" in log


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
