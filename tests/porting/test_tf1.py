"""Ports of TF1 checkpoints written here by TF 2.21's TF1 API (Saver, with and without the .meta
graph), checked against TF's own session run: the cells of `rnn_cell_impl` (LSTMCell,
BasicLSTMCell, GRUCell) under `dynamic_rnn` (both control-flow forms, resource and ref
variables) and `static_rnn`, graphs of the fused raw ops, and TF1 CudnnLSTM/CudnnGRU canonical
names (against TF's CudnnCompatible cells' math, run by TF). Outputs, final states and the
gradients of one loss using all of them, with respect to the inputs and every variable."""

import importlib.util
import os

import numpy as np
import pytest
import torch

from tests.helpers import (
    CUTKUM,
    REPO_ROOT,
    TF1Run,
    assert_close,
    cli_convert,
    convert_without_tf,
    descriptions_as_logged,
    loss_weights,
    needs_tf,
    rnn_cell_impl,
    same_modules,
    step_cell,
    step_cells,
    tf1_block_lstm_graph,
    tf1_cudnn_graph,
    tf1_params,
    tf1_stacked_grus,
    tf_module,
)
from tests.helpers import TF1_B as B
from tests.helpers import TF1_I as I
from tests.helpers import TF1_LENGTHS as LENGTHS
from tests.helpers import TF1_PARAMS as _GRU_PARAMS
from tests.helpers import TF1_PARAMS as _LSTM_PARAMS
from tests.helpers import TF1_T as T
from torch_lstm_grad import layouts, modules, porting
from torch_lstm_grad.porting.graphs import graph_def as tf1_graph
from torch_lstm_grad.tools import cli

pytestmark = needs_tf


@pytest.mark.parametrize("variant", ["v2_loops_resource", "v1_loops_refvars_adam"])
def test_lstm_cell_dynamic_rnn(tmp_path, capsys, variant):
    """LSTMCell(forget_bias=0.5, use_peepholes) under dynamic_rnn with sequence_length: the meta
    graph gives the forget bias and the class (TF 2's While function or TF 1's Enter loops);
    trained one Adam step, its slots and update ops are set aside."""
    rci = rnn_cell_impl()
    v1 = variant.startswith("v1")
    run = TF1Run(
        tmp_path / "m",
        lambda: rci.LSTMCell(3, forget_bias=0.5, use_peepholes=True),
        seed=1,
        v1_loops=v1,
        ref_vars=v1,
        adam=v1,
    )
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    assert "forget_bias     = 0.5  <- meta graph" in log
    # the initializers' random ops (rnn/lstm_cell/kernel/Initializer/...) are no dropout
    graph = tf1_graph.read_meta_graph(run.prefix + ".meta")
    assert "DropoutWrapper" not in log and "RandomUniform" in {n.op for n in graph.nodes.values()}
    if v1:
        assert "ignored: rnn/lstm_cell/kernel/Adam_1 (optimizer slot of rnn/lstm_" in log
        assert "ignored: beta1_power (optimizer or training counter)" in log
    cell = mods["rnn.lstm_cell"]
    assert isinstance(cell, modules.LSTMBlockCell) and cell.forget_bias == 0.5
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, (c, h) = step_cell(cell, x_t, run.lengths)
    run.compare(outs, (c, h), x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))


def test_basic_lstm_cell_static_rnn(tmp_path, capsys):
    rci = rnn_cell_impl()
    run = TF1Run(
        tmp_path / "m",
        lambda: rci.BasicLSTMCell(3, forget_bias=0.25),
        driver="static",
        lengths=False,
        seed=2,
    )
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    cell = mods["rnn.basic_lstm_cell"]
    assert "rnn.basic_lstm_cell: tf1.BasicLSTMCell" in log and cell.forget_bias == 0.25
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, None)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/basic_lstm_cell", _LSTM_PARAMS))


def test_gru_cell_dynamic_rnn(tmp_path, capsys):
    rci = rnn_cell_impl()
    run = TF1Run(tmp_path / "m", lambda: rci.GRUCell(3), seed=3)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    cell = mods["rnn.gru_cell"]
    assert "activation      = 'tanh'  <- meta graph" in log
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/gru_cell", _GRU_PARAMS))


def _lstm_variants(tf, rci):
    return {
        "clip": lambda: rci.LSTMCell(3, cell_clip=0.3),
        "lstmp": lambda: rci.LSTMCell(3, use_peepholes=True, cell_clip=0.5, num_proj=2,
                                      proj_clip=0.15, forget_bias=0.8),
        "relu": lambda: rci.LSTMCell(3, activation=tf.nn.relu, forget_bias=0.0),
        "linear": lambda: rci.LSTMCell(3, activation=tf.identity, forget_bias=0.6),
    }  # fmt: skip


@pytest.mark.parametrize("variant", ["clip", "lstmp", "relu", "linear"])
def test_lstm_cell_variants(tmp_path, capsys, variant):
    """TF1 LSTMCell's clip_by_value (zero gradient where it clips), its projection with
    proj_clip (LSTMP), a relu and a linear (tf.identity) activation: read from the meta graph,
    exact on the variant kernels, the gradients included (the clips were active)."""
    rci = rnn_cell_impl()
    tf = tf_module()
    run = TF1Run(tmp_path / "m", _lstm_variants(tf, rci)[variant], seed=4)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    cell = mods["rnn.lstm_cell"]
    if variant == "linear":  # tf.identity: j and c multiplied as they are
        assert "activation      = 'linear'  <- meta graph" in log
        assert cell.activation == "linear" and cell.forget_bias == pytest.approx(0.6)
    if variant not in ("relu", "linear"):
        assert "clip_gradient   = 'zero'  <- LSTMCell's clip_by_value" in log
        assert np.abs(run.values[1]).max() == pytest.approx(cell.cell_clip)  # it clipped
    if variant == "lstmp":
        assert cell.num_proj == 2 and np.abs(run.values[0]).max() == pytest.approx(0.15)
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))


def _gru_cell_activation(tmp_path, capsys, activation, act):
    rci = rnn_cell_impl()
    run = TF1Run(tmp_path / "m", lambda: rci.GRUCell(3, activation=act), seed=8)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    assert f"activation      = '{activation}'  <- meta graph" in log
    cell = mods["rnn.gru_cell"]
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/gru_cell", _GRU_PARAMS))


def test_gru_cell_relu(tmp_path, capsys):
    _gru_cell_activation(tmp_path, capsys, "relu", tf_module().nn.relu)


def test_gru_cell_linear(tmp_path, capsys):
    """activation=tf.identity: the candidate multiplied by (1 - u) as it is (not read as an
    activation "Mul" and refused)."""
    _gru_cell_activation(tmp_path, capsys, "linear", tf_module().identity)


def test_tf1_saved_model(tmp_path, capsys):
    """A TF1 SavedModel (SavedModelBuilder via simple_save): the variables keep their TF1 names
    (no object graph), the cells are read from the meta graph in saved_model.pb; exact, and the
    same modules from a process that cannot import TensorFlow."""
    rci = rnn_cell_impl()
    run = TF1Run(
        tmp_path / "m",
        lambda: rci.LSTMCell(3, forget_bias=0.5, use_peepholes=True),
        seed=25,
        saved_model=True,
    )
    mods, log = cli_convert(run.saved_model, tmp_path, capsys)
    assert "TF1 SavedModel (tags serve; TF 2.21" in log
    assert "forget_bias     = 0.5  <- SavedModel's meta graph" in log
    cell = mods["rnn.lstm_cell"]
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))
    convert_without_tf(run.saved_model, tmp_path / "no_tf.pt")
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))
    # Its one meta graph is ported whatever its tags; with a second meta graph (tagged "train",
    # first in the file; TF's protobuf classes) the one tagged "serve" is; with none tagged
    # "serve" the choice is refused.
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(run.saved_model, "saved_model.pb")
    with open(pb, "rb") as fh:
        graph = saved_model_pb2.SavedModel.FromString(fh.read()).meta_graphs[0]

    def rewrite(*tag_sets):  # saved_model.pb with one copy of the meta graph per tag set
        sm = saved_model_pb2.SavedModel()
        for tags in tag_sets:
            sm.meta_graphs.add().CopyFrom(graph)
            sm.meta_graphs[-1].meta_info_def.tags[:] = tags
        with open(pb, "wb") as fh:
            fh.write(sm.SerializeToString())

    rewrite(["train"])
    _, log = cli_convert(run.saved_model, tmp_path, capsys)
    assert "TF1 SavedModel (tags train; TF 2.21" in log
    rewrite(["train"], ["serve"])
    _, log = cli_convert(run.saved_model, tmp_path, capsys)
    assert "TF1 SavedModel (tags serve; TF 2.21" in log
    rewrite(["train"], ["eval", "gpu"])
    err = cli_convert(run.saved_model, tmp_path, capsys, code=2)
    assert (
        "saved_model.pb: 2 meta graphs (tag sets train, eval+gpu) and not one tagged 'serve': "
        "cannot tell which one to port" in err
    )


@pytest.mark.parametrize("form", ["pb", "pbtxt"])
def test_frozen_lstm_cell_peepholes_clip(tmp_path, capsys, form):
    """LSTMCell(use_peepholes=True, cell_clip=0.7) under dynamic_rnn(sequence_length), frozen by
    TF1's convert_variables_to_constants, binary and text: the Consts are the weights, the ops
    reading them the cell; exact, forward and every gradient (the clip active)."""
    rci = rnn_cell_impl()
    run = TF1Run(
        tmp_path / "m",
        lambda: rci.LSTMCell(3, use_peepholes=True, cell_clip=0.7),
        seed=21,
        frozen=form,
    )
    mods, log = cli_convert(run.frozen, tmp_path, capsys)
    assert f"frozen GraphDef ({'binary' if form == 'pb' else 'text'}," in log
    assert "cell_clip       = 0.699999988079071  <- frozen graph" in log  # TF's float32 0.7
    version = tf_module().version.GRAPH_DEF_VERSION  # the producer TF wrote into the graph
    assert f"written by: a frozen GraphDef (graph version {version})\n" in log
    assert "dynamic_rnn (rnn) takes sequence_length" in log
    assert np.abs(run.values[1]).max() == pytest.approx(0.7)
    convert_without_tf(run.frozen, tmp_path / "no_tf.pt")
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))
    cell = mods["rnn.lstm_cell"]
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))


@pytest.mark.parametrize("v1_loops", [False, True])
def test_frozen_stacked_gru_dropout(tmp_path, capsys, v1_loops):
    """Three GRUCells in DropoutWrappers in a MultiRNNCell, dynamic_rnn(time_major,
    sequence_length), frozen (TF 2's While functions and TF 1's loops): three GRU cells, the
    dropout noted and not ported, exact against TF."""
    rci = rnn_cell_impl()
    tf = tf_module()
    run = TF1Run(
        tmp_path / "m", lambda: tf1_stacked_grus(tf, rci), seed=23, v1_loops=v1_loops, frozen="pb"
    )
    mods, log = cli_convert(run.frozen, tmp_path, capsys)
    assert log.count("note: not ported: a DropoutWrapper around the cell") == 3
    for k in range(3):  # named by the wrapper's noise op (a body's node by its own name)
        wrapper = f"{'rnn/while/' if v1_loops else ''}rnn/multi_rnn_cell/cell_{k}/dropout"
        assert f"around the cell ({wrapper}/random_uniform): dropout is" in log
    scopes = [f"rnn/multi_rnn_cell/cell_{k}/gru_cell" for k in range(3)]
    cells = [mods[s.replace("/", ".")] for s in scopes]
    descriptions_as_logged(cells, log)  # load() keeps each, its notes among them
    for cell in cells:
        assert len(cell.port_description.notes) == 2  # the dropout, the sequence lengths
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cells(cells, x_t, run.lengths)
    params = {}
    for scope, cell in zip(scopes, cells, strict=True):
        params |= tf1_params(run, cell, scope, _GRU_PARAMS, scoped=True)
    run.compare(outs, state, x_t, params)


def _bidirectional_graph(tf, xs):
    """foolnltk's layout (a published frozen graph, data/seg.pb): bidirectional_dynamic_rnn of
    two BasicLSTMCells with sequence_length, TF1 loops."""
    rci = rnn_cell_impl()
    outs, states = tf.compat.v1.nn.bidirectional_dynamic_rnn(
        rci.BasicLSTMCell(3, forget_bias=0.75),
        rci.BasicLSTMCell(3),
        xs,
        sequence_length=LENGTHS,
        time_major=True,
        dtype=tf.float32,
    )
    return tf.concat(outs, -1), states


def _reverse_rows(x, lengths):
    """tf.reverse_sequence on time-major x: each row's first length steps reversed."""
    idx = torch.arange(x.shape[0])[:, None].repeat(1, x.shape[1])
    for b, n in enumerate(lengths):
        idx[:n, b] = torch.arange(n - 1, -1, -1)
    return torch.gather(x, 0, idx[:, :, None].expand_as(x))


def test_frozen_bidirectional_dynamic_rnn(tmp_path, capsys):
    """bidirectional_dynamic_rnn (TF1 loops), frozen: two cells, the backward one noted as run
    on the reversed rows; stepped so, exact against TF, forward and every gradient; converted
    the same in a process that cannot import TensorFlow."""
    tf = tf_module()
    tf.compat.v1.disable_control_flow_v2()
    try:
        run = TF1Run(tmp_path / "m", None, driver=_bidirectional_graph, seed=26, frozen="pb")
    finally:
        tf.compat.v1.enable_control_flow_v2()
    mods, log = cli_convert(run.frozen, tmp_path, capsys)
    assert "reversed by bidirectional_rnn/bw/ReverseSequence" in log
    convert_without_tf(run.frozen, tmp_path / "no_tf.pt")
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))
    fw, bw = (mods[f"bidirectional_rnn.{d}.basic_lstm_cell"] for d in ("fw", "bw"))
    assert fw.forget_bias == 0.75 and bw.forget_bias == 1.0
    x_t = torch.from_numpy(run.x).requires_grad_()
    out_f, state_f = step_cells([fw], x_t, run.lengths)
    out_b, state_b = step_cells([bw], _reverse_rows(x_t, run.lengths), run.lengths)
    outs = torch.cat([out_f, _reverse_rows(out_b, run.lengths)], -1)
    params = {}
    for d, cell in (("fw", fw), ("bw", bw)):
        scope = f"bidirectional_rnn/{d}/basic_lstm_cell"
        params |= tf1_params(run, cell, scope, _LSTM_PARAMS, scoped=True)
    run.compare(outs, (*state_f, *state_b), x_t, params)


def test_frozen_graph_unreadable_pattern_is_refused(tmp_path, capsys):
    """A cell whose candidate is 2·tanh (no TF1 cell computes it) is refused naming the op that
    breaks the pattern; a file that is no GraphDef is exit 2 with one line."""
    rci = rnn_cell_impl()
    tf = tf_module()
    run = TF1Run(
        tmp_path / "m",
        lambda: rci.LSTMCell(3, activation=lambda v: 2.0 * tf.tanh(v)),
        seed=24,
        frozen="pb",
    )
    err = cli_convert(run.frozen, tmp_path, capsys, code=2)
    assert "rnn.lstm_cell: graph = " in err and "the frozen graph's ops around rnn/lstm_cell" in err
    bad = tmp_path / "junk.pb"
    bad.write_bytes(b"\x0a\x05hello not a graph")
    err = cli_convert(bad, tmp_path, capsys, code=2)
    assert err.count("\n") == 1 and "junk.pb: not a GraphDef" in err


def test_published_frozen_graph_cutkum(tmp_path, capsys):
    """A published frozen TF1 graph nobody here wrote (cutkum 2.4's, tests/data/cutkum, MIT):
    three GRUCells in DropoutWrappers in a MultiRNNCell under dynamic_rnn(time_major,
    sequence_length), TF1 loops, an initial state fed in. Converted with no flags, with and
    without TensorFlow (the same modules); stepped as dynamic_rnn steps them, they give what TF
    computes running the graph itself. TF cannot differentiate this imported TF1 loop
    (tf.gradients: 'NoneType' object has no attribute 'outer_context'); the same cells'
    gradients are checked against TF on the graphs written above."""
    mods, log = cli_convert(CUTKUM, tmp_path, capsys)
    assert "frozen GraphDef (binary, 309 nodes" in log
    assert log.count("note: not ported: a DropoutWrapper") == 3
    assert log.count("dynamic_rnn (rnn) takes sequence_length") == 3
    convert_without_tf(CUTKUM, tmp_path / "no_tf.pt")
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))
    cells = [mods[f"rnn.multi_rnn_cell.cell_{k}.gru_cell"] for k in range(3)]
    assert [c.num_units for c in cells] == [512, 256, 128]
    # the inputs, and TF's outputs for the tests without TF (make_expected.py beside the graph)
    stored = np.load(os.path.join(os.path.dirname(CUTKUM), "expected.npz"))
    x, state = stored["x"], stored["state"]
    assert (stored["lengths"] == LENGTHS).all()
    # TF's run of the graph, by the script that wrote the stored outputs
    spec = importlib.util.spec_from_file_location(
        "make_expected", os.path.join(os.path.dirname(CUTKUM), "make_expected.py")
    )
    make_expected = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_expected)
    want = make_expected.run_graph(x, LENGTHS, state)
    h0 = torch.from_numpy(state[0])
    initial = [h0[:, :512], h0[:, 512:768], h0[:, 768:]]
    with torch.no_grad():
        outs, _ = step_cells(cells, torch.from_numpy(x), LENGTHS, initial)
    assert np.abs(want).max() > 0.5 and (want[:, 1][LENGTHS[1] :] == 0).all()
    assert_close({"outputs": (outs, want), "the stored outputs": (stored["outputs"], want)})


def test_cell_activation_not_computed_is_refused(tmp_path, capsys):
    """An activation the kernels do not compute (softsign) is refused by name, nothing written."""
    rci = rnn_cell_impl()
    tf = tf_module()
    run = TF1Run(tmp_path / "m", lambda: rci.LSTMCell(3, activation=tf.nn.softsign), seed=9)
    err = cli_convert(run.prefix, tmp_path, capsys, "--approximate", code=2)
    assert "rnn.lstm_cell: activation = 'Softsign'" in err
    assert not (tmp_path / "out.pt").exists()


def test_checkpoint_without_meta_graph(tmp_path, capsys):
    """Without the .meta the cell's arguments are not stored: refused, naming them, unless the
    user states them (--set) or accepts TF1's class defaults (--assume-defaults)."""
    rci = rnn_cell_impl()
    run = TF1Run(tmp_path / "m", lambda: rci.LSTMCell(3, forget_bias=0.5), seed=10, meta=False)
    err = cli_convert(run.prefix, tmp_path, capsys, code=2)
    assert "rnn.lstm_cell: forget_bias, cell_clip, activation = '(not stored)'" in err
    assert "--assume-defaults" in err
    # describe() with no statements assumes nothing either
    _, refusals = porting.describe(porting.read_source(run.prefix))
    assert [str(r) for r in refusals] == [err.splitlines()[1].strip()]
    err = cli_convert(run.prefix, tmp_path, capsys, "--assume-defaults", "--set", "nope=1", code=2)
    assert "--set nope: not used" in err
    mods, log = cli_convert(
        run.prefix,
        tmp_path,
        capsys,
        "--set",
        "forget_bias=0.5",
        "--set",
        "rnn/lstm_cell:cell_clip=none",
        "--assume-defaults",
    )
    assert "forget_bias     = 0.5  <- --set  [not stored in the file]" in log
    assert "activation      = 'tanh'  <- TF1 class default (--assume-defaults)" in log
    cell = mods["rnn.lstm_cell"]
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))
    # --forget-bias F is --set forget_bias=F; a layer's own --set is taken before one for
    # every layer (which no other layer takes here: refused as not used); two values of one
    # key are refused.
    err = cli_convert(run.prefix, tmp_path, capsys, "--set", "forget_bias=1", "--set",
                   "rnn/lstm_cell:forget_bias=0.5", "--assume-defaults", code=2)  # fmt: skip
    assert "--set forget_bias: not used" in err
    err = cli_convert(run.prefix, tmp_path, capsys, "--set", "forget_bias=0.5", "--forget-bias",
                      "1", "--assume-defaults", code=2)  # fmt: skip
    assert "--set forget_bias=0.5 and --forget-bias 1.0: two values for forget_bias" in err
    err = cli_convert(run.prefix, tmp_path, capsys, "--set", "rnn/lstm_cell:forget_bias=0.5",
                   "--set", "rnn/lstm_cell:forget_bias=1", code=2)  # fmt: skip
    assert (
        "--set rnn/lstm_cell:forget_bias=0.5 and --set rnn/lstm_cell:forget_bias=1: two values "
        "for rnn/lstm_cell:forget_bias" in err
    )
    for extra in (
        ["--forget-bias", "0.5"],
        ["--forget-bias", "0.5", "--set", "forget_bias=0.5"],
        ["--set", "rnn/lstm_cell:forget_bias=0.5", "--set", "rnn/lstm_cell:cell_clip=none"],
    ):
        mods, log = cli_convert(run.prefix, tmp_path, capsys, *extra, "--assume-defaults")
        assert "forget_bias     = 0.5  <- --set  [not stored in the file]" in log
        cell = mods["rnn.lstm_cell"]
        outs, state = step_cell(cell, x_t, run.lengths)
        run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))


def test_fused_block_lstm_graph(tmp_path, capsys):
    """A graph of the BlockLSTM op (cell_clip 0.5, peepholes, forget_bias 0.7): the op's
    attributes, its straight-through clip gradient (TF's BlockLSTMGrad), exactly."""
    run = TF1Run(tmp_path / "m", None, driver=tf1_block_lstm_graph, lengths=False, seed=11)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    cell = mods["lstm_fused_cell"]
    assert isinstance(cell, modules.LSTMBlockFusedCell)
    assert "cell_clip       = 0.5  <- meta graph, op BlockLSTM" in log
    assert np.abs(run.values[1]).max() == pytest.approx(0.5)  # the clip was active
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = cell(x_t)
    run.compare(outs, state, x_t, tf1_params(run, cell, "lstm_fused_cell", _LSTM_PARAMS))


def _gru_block_graph(tf, xs):
    """GRUBlockCell steps; TF 2.21 registers no gradient for the op: TF1 contrib's
    (docs/tf-semantics.md §5.4, TF's GRUBlockCellGrad kernel then the weights' products), as
    `--verify` applies it to its own graph."""
    from torch_lstm_grad.porting.verify import _contrib_gradients

    with tf.compat.v1.variable_scope("gru_cell"):
        w_ru = tf.compat.v1.get_variable("gates/kernel", [I + 3, 6])
        b_ru = tf.compat.v1.get_variable("gates/bias", [6])
        w_c = tf.compat.v1.get_variable("candidate/kernel", [I + 3, 3])
        b_c = tf.compat.v1.get_variable("candidate/bias", [3])
    h, outs = tf.zeros([B, 3]), []
    with tf.compat.v1.get_default_graph().gradient_override_map(_contrib_gradients(tf)):
        for t in range(T):
            cell = tf.raw_ops.GRUBlockCell(
                x=xs[t], h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c
            )
            h = cell.h
            outs.append(h)
    return tf.stack(outs), (h,)


def test_gru_block_cell_graph(tmp_path, capsys):
    run = TF1Run(tmp_path / "m", None, driver=_gru_block_graph, lengths=False, seed=12)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    cell = mods["gru_cell"]
    assert "gru_cell: tf1.GRUBlockCell" in log
    x_t = torch.from_numpy(run.x).requires_grad_()
    h, outs = None, []
    for t in range(T):
        h, _ = cell(x_t[t], h)
        outs.append(h)
    run.compare(torch.stack(outs), (h,), x_t, tf1_params(run, cell, "gru_cell", _GRU_PARAMS))


# -- TF1 contrib CudnnLSTM / CudnnGRU canonical names -------------------------------------------


@pytest.mark.parametrize(
    "kind,L,bidi,separate",
    [
        ("lstm", 2, False, False),
        ("lstm", 1, True, True),
        ("gru", 1, False, True),
        ("gru", 2, True, False),
    ],
)
def test_cudnn_canonical_names(tmp_path, capsys, kind, L, bidi, separate):
    """TF1 CudnnLSTM / CudnnGRU canonical variables (summed biases halved as TF1's restore
    does, or the old separate bias_cudnn_0/1) -> CudnnLSTM / CudnnGRU, against TF computing the
    CudnnCompatible cells' math on the same variables."""
    run = TF1Run(
        tmp_path / "m",
        None,
        driver=tf1_cudnn_graph(kind, L, bidi, separate),
        lengths=False,
        seed=13,
    )
    prefix = run.prefix
    if kind == "gru" and separate:  # TF 1.4's GRU names: "bias_cudnn 0", with a space
        rename = {n: n.replace("bias_cudnn_", "bias_cudnn ") for n in run.dvars}
        prefix = _rewrite_checkpoint(run.prefix, str(tmp_path / "renamed"), rename)
        run.dvars = {rename[n]: g for n, g in run.dvars.items()}
    mods, log = cli_convert(prefix, tmp_path, capsys)
    _check_cudnn(run, mods["cudnn"], kind, L, bidi, separate)
    assert "bias_layout" in log


def _check_cudnn(run, m, kind, L, bidi, separate):
    """A converted CudnnLSTM / CudnnGRU against the run's outputs and gradients."""
    assert isinstance(m, modules.CudnnLSTM if kind == "lstm" else modules.CudnnGRU)
    assert m.num_layers == L and m.num_dirs == (2 if bidi else 1)
    x_t = torch.from_numpy(run.x).requires_grad_()
    out = m(x_t)
    D = 2 if bidi else 1
    finals = [out[1][0][k] for k in range(L * D)]
    loss = sum(
        (o * torch.from_numpy(r)).sum() for o, r in zip([out[0], *finals], run.rs, strict=True)
    )
    g_params, g_x = torch.autograd.grad(loss, [m.opaque_kernel, x_t])
    pairs = {
        "output": (out[0], run.values[0]),
        "d x": (g_x, run.dx),
        **{f"h {k}": (f, run.values[1 + k]) for k, f in enumerate(finals)},
    }
    # The gradient buffer has the params' layout: its canonical views, mapped back to TF's
    # variables the way the converter maps the variables forward, are TF's variable gradients.
    gw, gb = layouts.params_to_canonical(g_params, kind, L, 3, I, m.direction)
    nw = 8 if kind == "lstm" else 6
    for name, tf_grad in run.dvars.items():
        k, leaf = _cudnn_cell_index(name, D)
        w, b = gw[k * nw : (k + 1) * nw], gb[k * nw : (k + 1) * nw]
        pairs[f"d {name}"] = (_canonical_grad(kind, leaf, w, b, separate), tf_grad)
    assert_close(pairs)


def test_frozen_deepspeech_block_lstm(tmp_path, capsys):
    """DeepSpeech's frozen graph: LSTMBlockFusedCell(forget_bias=0) named
    `cudnn_compatible_lstm_cell` under `cudnn_lstm/rnn/multi_rnn_cell/cell_0`, i.e. the BlockLSTM
    op reading Const weights: a canonical cuDNN LSTM, which the graph's op confirms; the same op
    with forget_bias 1 under those names is refused by name."""
    run = TF1Run(
        tmp_path / "m",
        None,
        driver=tf1_cudnn_graph("lstm", 1, False, False, outer="cudnn_lstm"),
        lengths=False,
        seed=22,
        frozen="pb",
    )
    mods, log = cli_convert(run.frozen, tmp_path, capsys)
    assert "the frozen graph runs BlockLSTM" in log
    _check_cudnn(run, mods["cudnn_lstm"], "lstm", 1, False, False)
    bad = TF1Run(
        tmp_path / "b",
        None,
        driver=tf1_cudnn_graph("lstm", 1, False, False, outer="cudnn_lstm", forget_bias=1.0),
        lengths=False,
        seed=22,
        frozen="pb",
    )
    err = cli_convert(bad.frozen, tmp_path, capsys, code=2)
    assert "cudnn_lstm: graph = 'BlockLSTM at op" in err and "'forget_bias': 1.0" in err


def _rewrite_checkpoint(prefix: str, new: str, rename: dict) -> str:
    """The checkpoint's tensors saved again by TF's SaveV2 under other names (no meta graph)."""
    tf = tf_module()
    reader = tf.train.load_checkpoint(prefix)
    names = sorted(reader.get_variable_to_shape_map())
    tf.raw_ops.SaveV2(
        prefix=new,
        tensor_names=[rename.get(n, n) for n in names],
        shape_and_slices=[""] * len(names),
        tensors=[reader.get_tensor(n) for n in names],
    )
    return new


def _cudnn_cell_index(name: str, D: int) -> tuple[int, str]:
    """(pseudo-layer index, leaf) of a canonical variable name."""
    cell = int(name.split("/cell_")[1].split("/")[0])
    d = 1 if "/bw/" in name else 0
    return cell * D + d, name.split("cudnn_compatible_", 1)[1].split("_cell/", 1)[1]


def _canonical_grad(kind, leaf, w, b, separate):
    """TF's gradient for one canonical-name variable from the canonical gradient lists."""
    if kind == "lstm":
        kernel, bias_sum = layouts.canonical_to_block_lstm(w, b)
        if leaf == "kernel":
            return kernel
        if leaf.startswith("bias_cudnn"):  # b = c0 + c1 (+ 0·bias): each gets d b = d bW
            return layouts.canonical_to_block_lstm(
                w, list(b[:4]) + [torch.zeros_like(x) for x in b[4:]]
            )[1]
        return torch.zeros_like(bias_sum) if separate else bias_sum * 0.5  # halves: bW = bR
    H = w[0].shape[0]
    if leaf == "gates/kernel":
        return torch.cat([torch.cat([w[0], w[1]]).t(), torch.cat([w[3], w[4]]).t()])
    if leaf in ("gates/bias", "bias_cudnn 0", "bias_cudnn 1"):
        if leaf == "gates/bias" and separate:
            return torch.zeros(2 * H)
        scale = 0.5 if leaf == "gates/bias" else 1.0
        return (
            torch.cat([b[0] + b[3], b[1] + b[4]]) * scale
            if leaf == "gates/bias"
            else (torch.cat([b[0], b[1]]) if leaf.endswith("0") else torch.cat([b[3], b[4]]))
        )
    return {
        "candidate/input_projection/kernel": w[2].t(),
        "candidate/hidden_projection/kernel": w[5].t(),
        "candidate/input_projection/bias": b[2],
        "candidate/hidden_projection/bias": b[5],
    }[leaf]


def test_incomplete_unknown_and_opaque(tmp_path, capsys):
    tf = tf_module()

    def save(name, values):
        g = tf.Graph()
        with g.as_default():
            for n, v in values.items():
                tf.compat.v1.get_variable(n, initializer=tf.constant(v))
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                return tf.compat.v1.train.Saver().save(sess, str(tmp_path / name))

    z = np.zeros
    p = save(
        "a",
        {
            "rnn/lstm_cell/kernel": z((7, 12), np.float32),
            "rnn/lstm_cell/w_i_diag": z(3, np.float32),
        },
    )
    err = cli_convert(p, tmp_path, capsys, code=2)
    assert "rnn/lstm_cell: variables" in err and "missing ['bias', 'w_f_diag', 'w_o_diag']" in err
    p = save("b", {"cudnn_lstm/opaque_kernel": z(10, np.float32)})
    assert "an opaque cuDNN buffer alone" in cli_convert(p, tmp_path, capsys, code=2)
    p = save("c", {"dense/weights": z((3, 3), np.float32)})
    assert "no recurrent layer" in cli_convert(p, tmp_path, capsys, code=2)
    err = cli_convert(tmp_path / "nothing", tmp_path, capsys, code=2)
    assert "not a SavedModel directory, a frozen GraphDef" in err
    torch.save({"x": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a torch-lstm-grad convert file"):
        porting.load(tmp_path / "other.pt")
    torch.save({"format": "torch_lstm_grad.convert/1", "modules": {}}, tmp_path / "old.pt")
    with pytest.raises(ValueError, match="convert the source again"):
        porting.load(tmp_path / "old.pt")


def test_dense_pair_next_to_a_cell_is_left_out(tmp_path, capsys):
    rci = rnn_cell_impl()

    def graph(tf, xs):
        outs, state = tf.compat.v1.nn.dynamic_rnn(
            rci.BasicLSTMCell(3), xs, time_major=True, dtype=tf.float32
        )
        with tf.compat.v1.variable_scope("dense"):
            k = tf.compat.v1.get_variable("kernel", [3, 2])
            b = tf.compat.v1.get_variable("bias", [2])
        return tf.tensordot(outs, k, 1) + b, state

    run = TF1Run(tmp_path / "m", None, driver=graph, lengths=False, seed=14)
    mods, log = cli_convert(run.prefix, tmp_path, capsys)
    assert list(mods) == ["rnn.basic_lstm_cell"]
    assert "not a recurrent layer's weight (left out): dense/kernel" in log


def test_porting_example_runs(tmp_path):
    """examples/port_tf1_lstm.py: TF-trained model, converted (attributes from the meta graph),
    reproduced (outputs and every gradient)."""
    import os
    import subprocess
    import sys

    script = os.path.join(REPO_ROOT, "examples", "port_tf1_lstm.py")
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK (worst scaled error" in done.stdout


def test_tf2_checkpoint_of_a_plain_module(tmp_path, capsys):
    """A tf.train.Checkpoint of a tf.Module holding GRUBlockCellV2's variable names: no graph
    says what computed them, so the activation is refused until stated; then exact against
    tf.raw_ops.GRUBlockCell (forward and TF1 contrib's gradient: TF's GRUBlockCellGrad kernel,
    in a function whose graph takes it, as `--verify` does)."""
    from torch_lstm_grad.porting.verify import _contrib_gradients

    tf = tf_module()
    r = np.random.default_rng(15)
    mod = tf.Module()
    mod.gates, mod.candidate = tf.Module(), tf.Module()
    u = lambda *shape: tf.Variable(r.uniform(-0.6, 0.6, shape).astype(np.float32))  # noqa: E731
    mod.gates.kernel, mod.gates.bias = u(I + 3, 6), u(6)
    mod.candidate.kernel, mod.candidate.bias = u(I + 3, 3), u(3)
    prefix = tf.train.Checkpoint(gru=mod).write(str(tmp_path / "ckpt"))
    err = cli_convert(prefix, tmp_path, capsys, code=2)
    assert "gru: activation = '(not stored)'" in err
    mods, log = cli_convert(prefix, tmp_path, capsys, "--set", "activation=tanh")
    cell = mods["gru"]
    x = r.standard_normal((B, I)).astype(np.float32)
    h = r.standard_normal((B, 3)).astype(np.float32)
    xt, ht = tf.constant(x), tf.constant(h)
    weights = [mod.gates.kernel, mod.candidate.kernel, mod.gates.bias, mod.candidate.bias]

    @tf.function
    def step(x, h):
        with tf.compat.v1.get_default_graph().gradient_override_map(_contrib_gradients(tf)):
            return tf.raw_ops.GRUBlockCell(x=x, h_prev=h, w_ru=weights[0], w_c=weights[1],
                                           b_ru=weights[2], b_c=weights[3]).h  # fmt: skip

    with tf.GradientTape() as tape:
        tape.watch([xt, ht])
        want = step(xt, ht)
        (rw,) = loss_weights([want], 16)
        loss = tf.reduce_sum(want * rw)
    g = tape.gradient(loss, [xt, ht, *weights])
    x_t, h_t = torch.from_numpy(x).requires_grad_(), torch.from_numpy(h).requires_grad_()
    got, _ = cell(x_t, h_t)
    params = [cell.gates_kernel, cell.candidate_kernel, cell.gates_bias, cell.candidate_bias]
    grads = torch.autograd.grad((got * torch.from_numpy(rw)).sum(), [x_t, h_t, *params])
    pairs = {f"d {k}": (a, b.numpy()) for k, (a, b) in enumerate(zip(grads, g, strict=True))}
    assert_close({"h": (got, want.numpy()), **pairs})


def _legacy_keras_lstm(tf, xs):
    """TF's in-tree Keras LSTM (`tensorflow.python.keras.layers.recurrent`, the v1 layer TF 1.x
    code called as tf.keras.layers.LSTM; its recurrent_activation defaults to hard_sigmoid) in
    a TF1 graph: its variables reach the Saver under Keras names, lstm/lstm_cell/kernel etc."""
    from tensorflow.python.keras.layers import recurrent

    seq, h, c = recurrent.LSTM(3, return_sequences=True, return_state=True)(
        tf.transpose(xs, [1, 0, 2])
    )
    return tf.transpose(seq, [1, 0, 2]), (h, c)


def test_keras_layer_in_a_tf1_saver_checkpoint(tmp_path, capsys):
    """Keras layers in a checkpoint that names no Keras version (a TF1 Saver's): refused until
    the gate function is stated; then read as a Keras LSTM of the stated version, exact
    against TF's session run (outputs, both final states, every gradient)."""
    tf_module()
    run = TF1Run(tmp_path / "m", None, driver=_legacy_keras_lstm, lengths=False, seed=17)
    out = tmp_path / "out.pt"
    assert cli.main(["convert", run.prefix, "-o", str(out)]) == 2
    log, err = capsys.readouterr()
    assert "lstm: recurrent_activation = '(not stored in the file)'" in err
    assert "the file does not say which Keras wrote it" in err
    assert "activation           = 'tanh'  <- default of Keras (version not stored)" in log
    mods, log = cli_convert(
        run.prefix, tmp_path, capsys, "--keras-version", "2.6.0",
        "--set", "lstm:recurrent_activation=hard_sigmoid", "--set", "lstm:return_sequences=true",
        "--set", "lstm:return_state=true",
    )  # fmt: skip
    assert "written by: a TF1 Saver checkpoint" in log
    assert "lstm: keras.LSTM (variables lstm/lstm_cell/* (no config in the file))" in log
    assert "gate_activation      = 'hard_sigmoid_keras2'  <- --set" in log
    assert "activation           = 'tanh'  <- default of Keras 2.6.0 (--keras-version)" in log
    m = mods["lstm"]
    x_t = torch.from_numpy(run.x).requires_grad_()
    seq, h, c = m(x_t.transpose(0, 1))
    params = {f"lstm/lstm_cell/{k}": getattr(m, k) for k in ("kernel", "recurrent_kernel", "bias")}
    run.compare(seq.transpose(0, 1), [h, c], x_t, params)
