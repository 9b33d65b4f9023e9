"""`torch-lstm-grad convert --verify` / `torch_lstm_grad.verify`: the port against TF running the
user's own file. It passes on correct ports of every Keras format and of SavedModels, fails
(exit 3, naming the layer and the tensor) on ports with a planted defect, says why where it
cannot verify, and needs TensorFlow (exit 2 without)."""

import dataclasses
import importlib
import importlib.util
import os
import pathlib

import numpy as np
import pytest
import torch

import torch_lstm_grad
from tests.helpers import (
    DATA,
    TF1Run,
    chain_model,
    graph_readable_kinds,
    keras_module,
    needs_tf,
    randomize,
    rnn_cell_impl,
    save_model,
    tf1_block_lstm_graph,
    tf1_cudnn_graph,
    tf1_stacked_grus,
    tf_module,
)
from tests.helpers import KERAS_I as I
from tests.helpers import KERAS_T as T
from torch_lstm_grad.porting.build import keras_rnn as build_keras_rnn
from torch_lstm_grad.porting.build import tf1_cells as build_tf1
from torch_lstm_grad.porting.convert import convert
from torch_lstm_grad.tools import cli

pytestmark = needs_tf


# The module (the package's `porting.verify` attribute is the function of that name)
VERIFY = importlib.import_module("torch_lstm_grad.porting.verify")


def _no_saved_functions(monkeypatch):
    """verify's saved-function oracle made to fail: a tf_keras SavedModel that still verifies
    ran as the model tf_keras loads."""

    def refused(*args):
        raise AssertionError("the saved functions ran, not tf_keras' model")

    monkeypatch.setattr(VERIFY, "_SavedFunctions", refused)


def _verify_cli(src, tmp_path, capsys, *extra, code=0):
    out = tmp_path / "out.pt"
    rc = cli.main(["convert", str(src), "-o", str(out), "--verify", *map(str, extra)])
    captured = capsys.readouterr()
    assert rc == code, captured.out + captured.err
    return captured.out, captured.err


def _kinds(keras):
    return [
        keras.layers.LSTM(4, return_sequences=True, name="lstm"),
        keras.layers.GRU(3, return_sequences=True, reset_after=False, go_backwards=True),
        keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True), name="bi"),
        keras.layers.SimpleRNN(3, activation="relu", return_state=True, name="rnn"),
    ]


@pytest.mark.parametrize("fmt", [".keras", "legacy.h5", "weights.h5+config", "ckpt+config"])
def test_verify_keras3_files(tmp_path, capsys, fmt):
    """Each Keras 3 format, loaded by Keras and each layer run alone: every output, state and
    gradient (input, initial states, weights) within 1e-5, over batch sizes, lengths, a mask
    and initial states."""
    tf = tf_module()
    model, names = chain_model(_kinds, mask=True, seed=31)
    config = tmp_path / "model.json"
    config.write_text(model.to_json())
    extra = []
    if fmt == ".keras":
        src = tmp_path / "m.keras"
        model.save(src)
    elif fmt == "legacy.h5":
        src = tmp_path / "m.h5"
        model.save(src)
    elif fmt == "weights.h5+config":
        src, extra = tmp_path / "m.weights.h5", ["--config", config]
        model.save_weights(src)
    else:
        src = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
        extra = ["--config", config]
    out, _ = _verify_cli(src, tmp_path, capsys, *extra)
    assert "B=3 T=7, mask" in out and "d initial_state 1" in out
    assert f"verified: every tensor of {', '.join(sorted(names))} within the tolerance" in out
    for layer in ("lstm", "bi", "rnn"):
        assert f"  {layer}:\n    output 0" in out
    assert "d backward_layer.recurrent_kernel" in out


@pytest.mark.parametrize("backward", ["LSTM", "GRU"])
def test_verify_keras3_bidirectional_of_two_layers(tmp_path, capsys, backward):
    """A Bidirectional whose backward layer is narrower than its forward one (an LSTM of 4
    forward, an LSTM or GRU of 2 backward, as Keras allows; the backward layer keeps its own
    name), called with a mask: each direction's initial states drawn at its own width, forward
    first, as Keras takes them; a GRU's one state beside the LSTM's two, which Keras cannot
    split, none."""

    def layers(keras):
        cls = getattr(keras.layers, backward)
        back = cls(2, return_sequences=True, return_state=True, go_backwards=True)
        lstm = keras.layers.LSTM(4, return_sequences=True, return_state=True)
        return [keras.layers.Bidirectional(lstm, backward_layer=back, name="mixed")]

    model, _ = chain_model(layers, mask=True, seed=33)
    model.save(tmp_path / "m.keras")
    out, _ = _verify_cli(tmp_path / "m.keras", tmp_path, capsys)
    assert "B=3 T=7, mask" in out  # the Bidirectional alone, called with a mask
    assert "d backward_layer.recurrent_kernel" in out
    assert "verified: every tensor of mixed within the tolerance" in out
    if backward == "LSTM":
        assert "d initial_state 3" in out
    else:
        assert "d initial_state" not in out
        assert "keep 2 states and 1, which Keras' Bidirectional cannot take as initial" in out


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "mask"])
def test_verify_keras3_saved_model(tmp_path, capsys, mask):
    """A Keras 3 export: each layer cut out of the signature's loaded function between its
    input (mask, initial states) and its outputs, its weights the function's captured
    variables; the traced length, two batch sizes."""
    model, names = chain_model(graph_readable_kinds, mask=mask, seed=32)
    src = save_model(model, tmp_path / "sm", "export")
    out, _ = _verify_cli(src, tmp_path, capsys, "--verify-float64")
    assert f"over 2 cases (B=1 T={T}{', mask' if mask else ''}; B=3 T={T}" in out
    assert f"verified: every tensor of {', '.join(sorted(names))} within the tolerance" in out
    assert "vs float64: TF " in out and "d forward_layer.kernel" in out


def test_verify_keras3_saved_model_directions_apart(tmp_path, capsys):
    """A Bidirectional(merge_mode=None) export: its two outputs fetched from the function in
    the module's order (forward, then backward) and verified, states and all."""
    keras = keras_module()
    x = keras.Input((T, I), name="x")
    layer = keras.layers.Bidirectional(
        keras.layers.GRU(2, return_sequences=True), merge_mode=None, name="apart"
    )
    model = keras.Model(x, layer(x))
    randomize(model.trainable_weights, 33)
    out, _ = _verify_cli(save_model(model, tmp_path / "sm", "export"), tmp_path, capsys)
    assert "verified: every tensor of apart within the tolerance" in out
    assert "  apart:\n    output 0" in out and "output 1" in out


def test_verify_saved_model_of_untrainable_variables(tmp_path):
    """A SavedModel whose variables load untrainable (tf_keras writes a frozen layer's so;
    here Keras 3's export with `trainable` cleared in its object graph): TF's tape does not
    watch those by itself, yet their gradients are TF's, taken through the function's
    captured variables, and compared."""
    from tensorflow.core.protobuf import saved_model_pb2

    keras = keras_module()
    x = keras.Input((T, I), name="x")
    model = keras.Model(x, keras.layers.LSTM(3, return_sequences=True, name="frozen")(x))
    randomize(model.weights, 35)
    src = save_model(model, tmp_path / "sm", "export")
    pb = tmp_path / "sm" / "saved_model.pb"
    sm = saved_model_pb2.SavedModel.FromString(pb.read_bytes())
    variables = [n.variable for n in sm.meta_graphs[0].object_graph_def.nodes
                 if n.WhichOneof("kind") == "variable"]  # fmt: skip
    for v in variables:
        v.trainable = False
    pb.write_bytes(sm.SerializeToString())
    assert not any(v.trainable for v in tf_module().saved_model.load(src).variables)
    convert(src, tmp_path / "port.pt", log=lambda *a: None, warn=lambda *a: None)
    report = torch_lstm_grad.verify(src, tmp_path / "port.pt")
    assert report.ok and not report.not_verified, str(report)
    assert {"d kernel", "d recurrent_kernel", "d bias"} <= set(report.errors["frozen"])


def test_verify_nested_dropout_and_stateful_keras_layers(tmp_path, capsys):
    """Keras 3 layers verify finds and runs as Keras does: one inside a nested model, one with
    dropout (Keras' inference function, training=False, which the port computes), a stateful
    one at the batch its states fix (reset before each case, in Keras and in the port)."""
    keras = keras_module()
    inner = keras.Sequential(
        [keras.Input((T, I)), keras.layers.LSTM(3, return_sequences=True, name="deep")],
        name="inner",
    )
    x = keras.Input((T, I))
    dropped = keras.layers.LSTM(2, dropout=0.5, recurrent_dropout=0.5, name="dropped")
    models = {
        "nested": keras.Model(x, dropped(inner(x))),
        "stateful": keras.Sequential([
            keras.Input((T, I), batch_size=3),
            keras.layers.GRU(4, stateful=True, return_sequences=True, name="kept"),
            keras.layers.Bidirectional(keras.layers.LSTM(2, stateful=True), name="both"),
        ]),
    }  # fmt: skip
    for label, model in models.items():
        randomize(model.trainable_weights, 3)
        src = tmp_path / f"{label}.keras"
        model.save(src)
        out, _ = _verify_cli(src, tmp_path, capsys)
        layers = "deep, dropped" if label == "nested" else "both, kept"
        assert f"verified: every tensor of {layers} within the tolerance" in out, out
        if label == "stateful":  # from reset states: none fed
            assert "over 3 cases (B=3 T=1, mask;" in out and "B=1" not in out
            assert "d initial_state" not in out


def test_verify_stateful_port_against_a_file_without_states(tmp_path):
    """A stateful port verified against a file whose layer of that name keeps no states (the
    port of another file): one not stateful, one stateful but never built (Keras makes the
    state variables when it builds the layer). Not verified, saying so: verify cannot find
    the batch."""
    keras = keras_module()

    def save(name, *layers):
        layer = keras.layers.GRU(4, stateful=name != "plain", return_sequences=True, name="kept")
        keras.Sequential([*layers, layer]).save(tmp_path / f"{name}.keras")
        return tmp_path / f"{name}.keras"

    port = tmp_path / "port.pt"
    quiet = lambda *a: None  # noqa: E731
    convert(save("stateful", keras.Input((T, I), batch_size=3)), port, log=quiet, warn=quiet)
    for src in (save("plain", keras.Input((T, I), batch_size=3)), save("unbuilt")):
        report = torch_lstm_grad.verify(src, port)
        assert report.not_verified == {"kept": "the loaded 'kept' is not a built stateful layer"}
        assert not report.errors


def test_verify_keras2_files(tmp_path, capsys, monkeypatch):
    """tf_keras' SavedModel fixture verifies (through tf_keras where it is installed, else its
    saved functions); its legacy .h5 runs as Keras 2 only in tf_keras: without it, said so."""
    out, _ = _verify_cli(os.path.join(DATA, "keras2", "saved_model"), tmp_path, capsys)
    assert "verified: every tensor of gru, lstm within the tolerance" in out
    out, _ = _verify_cli(os.path.join(DATA, "keras2", "model.h5"), tmp_path, capsys)
    try:
        import tf_keras  # noqa: F401
    except ImportError:
        assert "a Keras 2 file runs as Keras 2 in tf_keras, which is not installed" in out
    else:
        assert "verified: every tensor of bi, gru_after, gru_before, lstm, rnn within" in out
        # With tf_keras the SavedModel's layers run as the model tf_keras loads, not as the
        # saved functions (the fallback where it is not installed)
        _no_saved_functions(monkeypatch)
        out, _ = _verify_cli(os.path.join(DATA, "keras2", "saved_model"), tmp_path, capsys)
        assert "verified: every tensor of gru, lstm within the tolerance" in out


@pytest.mark.parametrize("weights", ["weights.h5", "ckpt"])
def test_verify_keras2_weights_with_a_config(tmp_path, capsys, weights):
    """tf_keras' save_weights files (HDF5; TF format: a checkpoint prefix) with --config: tf_keras
    builds the model from the config and loads the weights into it (the file itself is no
    model tf_keras could load); without tf_keras, said so."""
    src = os.path.join(DATA, "keras2", weights)
    out, _ = _verify_cli(
        src, tmp_path, capsys, "--config", os.path.join(DATA, "keras2", "model.json")
    )
    if importlib.util.find_spec("tf_keras") is None:
        assert "a Keras 2 file runs as Keras 2 in tf_keras, which is not installed" in out
    else:
        assert "verified: every tensor of bi, gru_after, gru_before, lstm, rnn within" in out, out


# tf_keras' own formats where it is installed (CI's test extra does not install it)
_LOSS_FORMATS = ["keras3 .keras"] + (
    ["tf_keras .h5", "tf_keras SavedModel"] if importlib.util.find_spec("tf_keras") else []
)


@pytest.mark.parametrize("fmt", _LOSS_FORMATS)
def test_verify_models_compiled_with_a_custom_loss(tmp_path, capsys, monkeypatch, fmt):
    """A model compiled with a loss of the user's own (not registered with Keras, so Keras
    cannot compile the loaded model): verify loads it uncompiled, as the layers need."""
    keras = keras_module() if fmt.startswith("keras3") else importlib.import_module("tf_keras")

    def my_loss(y, p):
        return keras.ops.mean((y - p) ** 2) if fmt.startswith("keras3") else (y - p) ** 2

    inp = keras.Input((T, I))
    model = keras.Model(inp, keras.layers.LSTM(2, name="lstm")(inp))
    model.compile("adam", my_loss)
    if fmt == "keras3 .keras":
        src = tmp_path / "m.keras"
        model.save(src)
    elif fmt == "tf_keras .h5":
        src = tmp_path / "m.h5"
        model.save(src)
    else:
        src = tmp_path / "sm"
        model.save(src, save_format="tf")
        _no_saved_functions(monkeypatch)
    out, _ = _verify_cli(src, tmp_path, capsys)
    assert "verified: every tensor of lstm within the tolerance" in out, out


def test_verify_keras2_saved_model_without_tf_keras(tmp_path, capsys, monkeypatch):
    """Without tf_keras, tf_keras' SavedModel (its layers described by keras_metadata.pb) is
    verified through its saved functions: each layer's tensors there are the ones the loop
    reader found in them."""
    import sys

    monkeypatch.setitem(sys.modules, "tf_keras", None)  # `import tf_keras` raises ImportError
    out, _ = _verify_cli(os.path.join(DATA, "keras2", "saved_model"), tmp_path, capsys)
    assert "verified: every tensor of gru, lstm within the tolerance" in out


def _tf1_case(tmp_path, case):
    """(src, extra args, layers) of a TF1 artifact written by TF 2.21's TF1 API."""
    rci, tf = rnn_cell_impl(), tf_module()
    if case == "lstmp_meta":
        make = lambda: rci.LSTMCell(3, use_peepholes=True, cell_clip=0.3, num_proj=2,  # noqa: E731
                                    proj_clip=0.2, forget_bias=0.8)  # fmt: skip
        run = TF1Run(tmp_path / "m", make, seed=41)
        return run.prefix, ["rnn.lstm_cell"]
    if case == "v1_loops_refvars":
        run = TF1Run(tmp_path / "m", lambda: rci.GRUCell(3, activation=tf.nn.relu), seed=42,
                      v1_loops=True, ref_vars=True)  # fmt: skip
        return run.prefix, ["rnn.gru_cell"]
    if case == "block_lstm":
        run = TF1Run(tmp_path / "m", None, driver=tf1_block_lstm_graph, lengths=False, seed=43)
        return run.prefix, ["lstm_fused_cell"]
    if case == "frozen_stack":
        run = TF1Run(tmp_path / "m", lambda: tf1_stacked_grus(tf, rci), seed=44, frozen="pb")
        return run.frozen, [f"rnn.multi_rnn_cell.cell_{k}.gru_cell" for k in range(3)]
    if case == "deepspeech_frozen":
        driver = tf1_cudnn_graph("lstm", 1, False, False, outer="cudnn_lstm")
        run = TF1Run(tmp_path / "m", None, driver=driver, lengths=False, seed=48, frozen="pb")
        return run.frozen, ["cudnn_lstm"]
    run = TF1Run(tmp_path / "m", lambda: rci.BasicLSTMCell(3), seed=45, saved_model=True)
    return run.saved_model, ["rnn.basic_lstm_cell"]


@pytest.mark.parametrize(
    "case",
    ["lstmp_meta", "v1_loops_refvars", "block_lstm", "frozen_stack", "saved_model",
     "deepspeech_frozen"],
)  # fmt: skip
def test_verify_tf1_cells(tmp_path, capsys, case):
    """TF1 cells: one step of the graph's own ops (BlockLSTM: its whole sequence) copied out of
    the loop into a graph of their own, run and differentiated by TF: a checkpoint with its
    meta graph (LSTMP with clips; TF1 loops and ref variables), a frozen graph, a TF1
    SavedModel."""
    src, layers = _tf1_case(tmp_path, case)
    out, _ = _verify_cli(src, tmp_path, capsys)
    assert f"verified: every tensor of {', '.join(sorted(layers))} within the tolerance" in out
    assert "d initial_state 0" in out
    if case == "lstmp_meta":
        assert "d projection_kernel" in out and "d w_f_diag" in out
    if case == "block_lstm":
        assert "B=3 T=7" in out and "output 2" in out
    if case == "deepspeech_frozen":  # cuDNN's packed params: along random directions
        assert "d weights along direction 2" in out


def test_verify_published_frozen_graph(tmp_path, capsys):
    """cutkum's published graph (tests/data/cutkum): its three GRU cells verified on TF's own
    ops, gradients included (TF cannot differentiate the graph's TF1 loop itself)."""
    out, _ = _verify_cli(os.path.join(DATA, "cutkum", "frozen_model.pb"), tmp_path, capsys)
    assert "verified: every tensor of rnn.multi_rnn_cell.cell_0.gru_cell, " in out
    assert "d candidate_kernel" in out


@pytest.mark.parametrize(
    ("file", "layers"),
    [
        ("sentinews-0.5.0/default_best.h5", "gru_1, gru_2, gru_3"),
        ("ethnicolr-0.2.4/census2000_ln_lstm_old.h5", "lstm_1"),
    ],
)
def test_verify_published_keras_2_0_files(tmp_path, capsys, file, layers):
    """Published Keras 2.0 files (tests/data/published): tf_keras runs their config as Keras
    2.0 meant it (a GRU without `reset_after` is reset-before), each layer is fed masks where
    Keras 2.0's masked-step rule and today's agree, and the whole model runs on padded ids."""
    pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) is not installed")
    out, _ = _verify_cli(os.path.join(DATA, "published", file), tmp_path, capsys)
    assert f"verified: every tensor of {layers} within the tolerance" in out
    assert "note: Keras <= 2.2's masked steps: each row's first and last steps unmasked" in out
    assert "verified: the whole model, every output and gradient" in out


def test_verify_says_what_it_cannot(tmp_path, capsys):
    """A weights-only file without --config, stacked canonical cuDNN layers, a TF1 checkpoint
    without its graph, a step whose c and h are one tensor: exit 0, each layer 'not verified'
    with the reason; cuDNN layers on a machine without a GPU: TF's missing kernel named."""
    out, _ = _verify_cli(os.path.join(DATA, "chars2vec_eng_50", "weights.h5"), tmp_path, capsys,
                         "--set", "lstm_1:return_sequences=true")  # fmt: skip
    assert "not verified: the file stores no model config" in out and "give --config" in out
    assert out.rstrip().endswith("nothing verified (see why above)")
    run = TF1Run(tmp_path / "c", None, driver=tf1_cudnn_graph("lstm", 2, False, False),
                  lengths=False, seed=46)  # fmt: skip
    out, _ = _verify_cli(run.prefix, tmp_path, capsys)
    assert "not verified: stacked or bidirectional canonical cuDNN layers" in out
    run = TF1Run(tmp_path / "n", lambda: rnn_cell_impl().GRUCell(2), seed=47, meta=False)
    out, _ = _verify_cli(run.prefix, tmp_path, capsys, "--assume-defaults")
    assert "not verified: the file stores no graph of the computation" in out

    def one_state(tf, xs):  # static_rnn's first step: c and h one zeros tensor
        rci, z = rnn_cell_impl(), tf.zeros([xs.shape[1], 3], name="z")
        outs, state = tf.compat.v1.nn.static_rnn(
            rci.LSTMCell(3), tf.unstack(xs), initial_state=rci.LSTMStateTuple(z, z)
        )
        return tf.stack(outs), state

    run = TF1Run(tmp_path / "z", None, driver=one_state, lengths=False, seed=49)
    out, _ = _verify_cli(run.prefix, tmp_path, capsys)
    assert "not verified: the step's h and c are one tensor, z: its copy cannot be fed" in out
    out, _ = _verify_cli(os.path.join(DATA, "keras2", "cudnn.h5"), tmp_path, capsys)
    assert any(
        why in out
        for why in (
            "cuDNN layers run on a GPU only",  # tf_keras installed, no GPU
            "runs as Keras 2 in tf_keras, which is not installed",
            "verified: every tensor",  # a GPU
        )
    )


def test_verify_tf1_cells_the_graph_does_not_run(tmp_path, capsys):
    """A TF1 file whose graph does not run the cell its variables name: the variables saved
    but never computed with (ported with --assume-defaults), and canonical CudnnLSTM names
    computed by a LSTMBlockCell op per step, not by the BlockLSTM a step copy of the whole
    sequence needs. Each 'not verified', naming the scope."""
    H = 3

    def unused(tf, xs):  # untrainable: no gradient asked of them
        with tf.compat.v1.variable_scope("rnn/lstm_cell"):
            for name, shape in (("kernel", [I + H, 4 * H]), ("bias", [4 * H])):
                tf.compat.v1.get_variable(name, shape, trainable=False)
        return xs * 2.0, ()

    def block_cell_steps(path):  # saved as is: TF registers no gradient of LSTMBlockCell
        tf, g = tf_module(), tf_module().Graph()
        scope = "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell"
        with g.as_default(), tf.compat.v1.variable_scope(scope):
            k = tf.compat.v1.get_variable("kernel", [I + H, 4 * H])
            b = tf.compat.v1.get_variable("bias", [4 * H])
        with g.as_default():
            xs = tf.compat.v1.placeholder(tf.float32, [T, 2, I])
            h = c = tf.zeros([2, H])
            z = tf.zeros([H])
            for x in tf.unstack(xs):
                step = tf.raw_ops.LSTMBlockCell(
                    x=x, cs_prev=c, h_prev=h, w=k, wci=z, wcf=z, wco=z, b=b, forget_bias=0.0,
                    cell_clip=-1.0,
                )  # fmt: skip
                c, h = step.cs, step.h
            with tf.compat.v1.Session(graph=g) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                return tf.compat.v1.train.Saver().save(sess, str(path))

    run = TF1Run(tmp_path / "u", None, driver=unused, lengths=False, seed=50)
    out, _ = _verify_cli(run.prefix, tmp_path, capsys, "--assume-defaults")
    assert "not verified: the meta graph does not run rnn/lstm_cell" in out, out
    out, _ = _verify_cli(block_cell_steps(tmp_path / "s"), tmp_path, capsys)
    assert "not verified: the meta graph runs no fused BlockLSTM on cudnn_lstm/" in out


def test_verify_tf1_step_reading_a_value_besides_its_inputs(tmp_path, capsys):
    """A step that reads a value of the graph other than its x, h, c and weights, where the
    reader sees the step's x: here each GRU step's gates read x through an Enter (which the
    reader follows) and its candidate reads x itself, the unstacked placeholder. The copy
    cannot feed that value: 'not verified', naming it, not a copy that fails in TF."""
    from tensorflow.core.protobuf import meta_graph_pb2

    run = TF1Run(tmp_path / "g", lambda: rnn_cell_impl().GRUCell(3), driver="static", lengths=False,
                  seed=51)  # fmt: skip
    meta = meta_graph_pb2.MetaGraphDef.FromString(pathlib.Path(run.prefix + ".meta").read_bytes())
    nodes = {n.name: n for n in meta.graph_def.node}
    steps = [n for n in nodes.values() if n.op == "MatMul" and n.name.startswith("rnn/")]
    gates = [n for n in steps if "gates/kernel" in n.input[1]]
    assert len(gates) == run.x.shape[0]  # one a step
    for k, matmul in enumerate(gates):
        concat = nodes[matmul.input[0]]
        enter = meta.graph_def.node.add(name=f"x_enter_{k}", op="Enter", input=[concat.input[0]])
        enter.attr["T"].type = concat.attr["T"].type
        enter.attr["frame_name"].s = b"frame"
        concat.input[0] = enter.name
    pathlib.Path(run.prefix + ".meta").write_bytes(meta.SerializeToString())
    out, _ = _verify_cli(run.prefix, tmp_path, capsys)
    assert "not verified: the step reads Placeholder (Placeholder) besides its inputs" in out


def test_verify_tf1_graph_placed_on_other_devices(tmp_path, capsys):
    """A meta graph whose ops were placed on a cluster's GPU (a TF1 model trained on
    parameter servers keeps those device strings): the step's copy runs here, verified."""
    from tensorflow.core.protobuf import meta_graph_pb2

    src, layers = _tf1_case(tmp_path, "lstmp_meta")
    meta = pathlib.Path(src + ".meta")
    graph = meta_graph_pb2.MetaGraphDef.FromString(meta.read_bytes())
    bodies = [f.node_def for f in graph.graph_def.library.function]  # the while loop's body
    for node in [*graph.graph_def.node, *(n for body in bodies for n in body)]:
        node.device = "/job:worker/replica:0/task:3/device:GPU:1"
    meta.write_bytes(graph.SerializeToString())
    out, _ = _verify_cli(src, tmp_path, capsys)
    assert f"verified: every tensor of {layers[0]} within the tolerance" in out, out


def test_verify_fails_on_a_planted_tf1_defect(tmp_path, capsys, monkeypatch):
    """A TF1 cell built with another forget bias than its graph's: exit 3, named."""
    src, _ = _tf1_case(tmp_path, "lstmp_meta")
    entry = build_tf1._entry

    def planted(m, d, config):
        if "forget_bias" in config:
            config = {**config, "forget_bias": config["forget_bias"] + 0.5}
        return entry(m, d, config)

    monkeypatch.setattr(build_tf1, "_entry", planted)
    out, _ = _verify_cli(src, tmp_path, capsys, code=3)
    assert "FAILED:" in out and "rnn.lstm_cell output 0" in out.split("FAILED:")[1]


def _planted(monkeypatch, defect: str, layer: str):
    """The Keras builder with one defect in `layer`'s module: a flipped activation, the input
    and forget gate blocks of the kernel swapped, or the bias dropped."""
    build = build_keras_rnn.recurrent_module

    def planted(ctx, d):
        made = build(ctx, d)
        if made is None or not d.name.startswith(layer):
            return made
        module, config = made
        with torch.no_grad():
            if defect == "activation":
                config = {**config, "activation": "relu"}
            elif defect == "return_state":
                config = {**config, "return_state": True}
            elif defect == "padded_steps":  # the last output repeated where cuDNN writes zeros
                config = {**config, "zero_output_for_mask": False}
            elif defect == "gate_blocks":
                U = module.units
                k = module.kernel.clone()
                module.kernel[:, :U], module.kernel[:, U : 2 * U] = k[:, U : 2 * U], k[:, :U]
            else:
                module.bias.zero_()
        return module, config

    monkeypatch.setattr(build_keras_rnn, "recurrent_module", planted)


@pytest.mark.parametrize("defect", ["activation", "gate_blocks", "bias", "return_state"])
@pytest.mark.parametrize("fmt", [".keras", "export"])
def test_verify_fails_on_planted_defects(tmp_path, capsys, monkeypatch, fmt, defect):
    """A wrong module (tanh flipped to relu, the i and f blocks of the kernel swapped, the
    bias dropped, its states returned too) is caught: exit 3, the layer and the tensor (or
    the number of outputs) named."""
    keras = keras_module()
    x = keras.Input((T, I))
    y = keras.layers.LSTM(4, return_sequences=True, name="enc")(x)
    y = keras.layers.GRU(3, name="dec")(y)
    model = keras.Model(x, y)
    randomize(model.trainable_weights, 33)
    if fmt == ".keras":
        src = tmp_path / "m.keras"
        model.save(src)
    else:
        src = save_model(model, tmp_path / "sm", "export")
    _planted(monkeypatch, defect, "enc")
    out, _ = _verify_cli(src, tmp_path, capsys, code=3)
    failed = "enc number of outputs" if defect == "return_state" else "enc output 0"
    assert "FAILED:" in out and failed in out.split("FAILED:")[1]
    assert "dec" not in out.split("FAILED:")[1]  # the other layer is fine


@pytest.mark.parametrize("defect", [None, "gate_blocks", "padded_steps"])
def test_verify_keras3_saved_model_traced_on_cudnn(tmp_path, capsys, monkeypatch, defect):
    """A SavedModel traced on cuDNN (TF cannot run it on a CPU) is verified against Keras'
    standard path on the same weights, on right-padded masks, its padded steps as zeros; a
    wrong port (the i and f blocks swapped; the last output repeated at padded steps) fails."""
    from tests.porting.cudnn_saved_models import export_cudnn_traced

    keras = keras_module()
    x, m = keras.Input((T, I), name="x"), keras.Input((T,), dtype="bool", name="m")
    y = keras.layers.LSTM(4, return_sequences=True, name="enc")(x, mask=m)
    y = keras.layers.Bidirectional(keras.layers.GRU(3), name="dec")(y, mask=m)
    model = keras.Model([x, m], y)
    randomize(model.trainable_weights, 34)
    src = export_cudnn_traced(model, str(tmp_path / "sm"), "export")
    if defect is None:
        out, _ = _verify_cli(src, tmp_path, capsys)
        assert "verified: every tensor of dec, enc within the tolerance" in out
        assert "compared with Keras' standard path on the same weights" in out
        return
    _planted(monkeypatch, defect, "enc")
    out, _ = _verify_cli(src, tmp_path, capsys, code=3)
    assert "FAILED:" in out and "enc output 0" in out.split("FAILED:")[1]
    assert "dec" not in out.split("FAILED:")[1]


OPAQUE = {  # name: the model's attributes, sizes (L, H, I), frozen
    "lstm_proj_bi_2": (dict(rnn_mode="lstm", direction="bidirectional", num_proj=3), (2, 5, 4),
                       True),
    "gru_skip": (dict(rnn_mode="gru", input_mode="skip_input"), (1, 5, 5), False),
    "lstm_skip_bi_2": (dict(rnn_mode="lstm", input_mode="skip_input", direction="bidirectional"),
                       (2, 5, 5), False),
    "rnn_relu_bi_2": (dict(rnn_mode="rnn_relu", direction="bidirectional"), (2, 5, 4), True),
}  # fmt: skip


def _opaque_graph(tmp_path, name):
    from tests.porting.cudnn_graphs import write_opaque_graph

    attrs, (L, H, I), frozen = OPAQUE[name]  # noqa: E741
    size = torch_lstm_grad.raw_ops.CudnnRNNParamsSize(
        num_layers=L, num_units=H, input_size=I, T=torch.float32, S=torch.int64, **attrs
    )[0]
    buffer = (0.4 * np.random.default_rng(len(name)).standard_normal(int(size))).astype(np.float32)
    return write_opaque_graph(tmp_path, buffer, num_layers=L, num_units=H, input_size=I,
                              frozen=frozen, **attrs)  # fmt: skip


@pytest.mark.parametrize("name", list(OPAQUE))
def test_verify_cudnn_op_on_an_opaque_buffer(tmp_path, capsys, name):
    """A graph's cuDNN op on an opaque buffer, which TF runs on a GPU only, is verified against
    TF's composite cells on the buffer's canonical weights: every output, the input's and
    initial states' gradients, and the buffer's gradient element by element."""
    out, _ = _verify_cli(_opaque_graph(tmp_path, name), tmp_path, capsys)
    assert "verified: every tensor of rnn within the tolerance" in out
    assert "d opaque_kernel" in out and "d initial_state 0" in out
    assert "compared with TF's composite cells on the buffer's canonical weights" in out


@pytest.mark.parametrize("defect", ["mode", "gate_blocks"])
def test_verify_fails_a_wrong_port_of_an_opaque_buffer(tmp_path, capsys, monkeypatch, defect):
    """The oracle reads the model from the graph's op and the weights from the file, not from
    the port: a port of another rnn_mode (relu's buffer in a tanh module) or with two gate
    blocks of the buffer swapped fails on its outputs."""
    from torch_lstm_grad import modules

    name = "rnn_relu_bi_2" if defect == "mode" else "lstm_proj_bi_2"
    src = _opaque_graph(tmp_path, name)
    if defect == "mode":
        monkeypatch.setitem(build_tf1._BY_MODE, "rnn_relu", modules.CudnnRNNTanh)
    else:
        read = build_tf1.tensor

        def swapped(value):  # layer 0's i and f input matrices (the buffer's first two blocks)
            t = read(value).clone()
            if t.ndim == 1:
                n = 5 * 4
                t[:n], t[n : 2 * n] = t[n : 2 * n].clone(), t[:n].clone()
            return t

        monkeypatch.setattr(build_tf1, "tensor", swapped)
    out, _ = _verify_cli(src, tmp_path, capsys, code=3)
    assert "FAILED:" in out and "rnn output 0" in out.split("FAILED:")[1]


_PLANTED = 2.0**-8


@pytest.fixture(scope="module")
def _lstm_with_states(tmp_path_factory):
    """A Keras 3 LSTM returning its sequence and both states, and its port."""
    keras = keras_module()
    tmp = tmp_path_factory.mktemp("states")
    x = keras.Input((T, I))
    y = keras.layers.LSTM(4, return_sequences=True, return_state=True, name="l")(x)
    model = keras.Model(x, y)
    randomize(model.trainable_weights, 35)
    model.save(tmp / "m.keras")
    torch_lstm_grad.porting.convert(tmp / "m.keras", tmp / "m.pt", log=lambda s: None)
    return tmp / "m.keras", tmp / "m.pt"


@pytest.mark.parametrize(
    "tensor", ["output 0", "output 1", "output 2", "d kernel", "d recurrent_kernel", "d bias"]
)
def test_verify_reports_each_tensor_s_own_error(_lstm_with_states, monkeypatch, tensor):
    """2^-8 added to one output of the port (the sequence, h, c) or to one weight's gradient
    is reported on that tensor alone, at its size, δ / max(1, max |TF|) (an LSTM's outputs lie
    within 1: δ itself); every other tensor stays within the tolerance. So verify compares no
    tensor with another's (return_state's h with c, a kernel's gradient with another's)."""
    from torch_lstm_grad import keras_layers

    forward = keras_layers.KerasLSTM.forward

    def planted(self, *args, **kwargs):
        if tensor.startswith("d ") and not getattr(self, "_planted", False):
            getattr(self, tensor[2:]).register_hook(lambda g: g + _PLANTED)
            self._planted = True
        out = forward(self, *args, **kwargs)
        if tensor.startswith("output"):
            k = int(tensor.split()[1])
            out = (*out[:k], out[k] + _PLANTED, *out[k + 1 :])
        return out

    monkeypatch.setattr(keras_layers.KerasLSTM, "forward", planted)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,))
    errors = report.errors["l"]
    assert set(errors) >= {"output 0", "output 1", "output 2", "d input", "d bias"}
    if tensor.startswith("output"):
        assert abs(errors[tensor] - _PLANTED) < 1e-6
    else:
        assert _PLANTED / 64 < errors[tensor] < _PLANTED + 1e-6
    assert all(e < 1e-5 for name, e in errors.items() if name != tensor), errors
    assert report.failures() and {t for _, t, _ in report.failures()} == {tensor}


@pytest.mark.parametrize("weight", ["kernel", "bias"])
def test_verify_compares_every_parameter_s_gradient(_lstm_with_states, monkeypatch, weight):
    """A parameter TF's side gives no weight for is not passed silently: the layer is said to
    be not verified, naming it (the other tensors still reported); a weight TF's side says the
    loss does not read (gradient None) is compared with zero, so the port's real gradient
    fails there."""
    from torch_lstm_grad.porting.verify import _KerasModel

    run = _KerasModel.run

    def dropped(self, *args, **kwargs):
        theirs, rs = run(self, *args, **kwargs)
        del theirs.d_weights[weight]
        return theirs, rs

    monkeypatch.setattr(_KerasModel, "run", dropped)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,))
    assert f"the gradient of {weight} was not compared" in report.not_verified["l"]
    assert report.ok and f"d {weight}" not in report.errors["l"]
    assert "output 0" in report.errors["l"] and "not verified: l" in str(report)

    def unread(self, *args, **kwargs):
        theirs, rs = run(self, *args, **kwargs)
        theirs.d_weights[weight] = None
        return theirs, rs

    monkeypatch.setattr(_KerasModel, "run", unread)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,))
    assert "l" not in report.not_verified
    assert {t for _, t, _ in report.failures()} == {f"d {weight}"}

    def renamed(self, *args, **kwargs):  # a weight of TF's the port holds no parameter for
        theirs, rs = run(self, *args, **kwargs)
        theirs.d_weights[f"{weight}_of_tf"] = theirs.d_weights.pop(weight)
        return theirs, rs

    monkeypatch.setattr(_KerasModel, "run", renamed)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,))
    assert report.failures() == [("l", f"d {weight}_of_tf (no such parameter)", float("inf"))]
    assert f"the gradient of {weight} was not compared" in report.not_verified["l"]


def test_verify_float64_columns_hold_every_tensor(_lstm_with_states):
    """With float64=True each tensor compared (every output, d input, every d initial_state,
    every weight's gradient) has its float64 columns: TF's and the port's distance from the
    port run in float64, both within float32's rounding of it."""
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,), float64=True)
    per = report.float64["l"]
    assert set(per) == set(report.errors["l"])
    assert {"output 2", "d input", "d initial_state 1", "d recurrent_kernel"} <= set(per)
    assert all(tf64 < 1e-5 and ours64 < 1e-5 for tf64, ours64 in per.values()), per


@pytest.mark.parametrize("planted", ["every dtype", "float32 only"])
def test_verify_float64_columns_are_scaled_by_the_float64_run(
    _lstm_with_states, monkeypatch, planted
):
    """Each float64 column is |TF - ref| and |ours - ref| over max(1, |ref|), ref the port run
    in float64, each the largest over the cases. Planted: 100 added to the port's sequence
    (whose values lie within 1) in every dtype, so that ref holds it (TF's column
    100 / max|ref|, about 1; ours about 0), or in float32 only (ours 100, TF's about 0)."""
    from torch_lstm_grad import keras_layers

    forward = keras_layers.KerasLSTM.forward

    def moved(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        if planted == "every dtype" or out[0].dtype == torch.float32:
            out = (out[0] + 100.0, *out[1:])
        return out

    monkeypatch.setattr(keras_layers.KerasLSTM, "forward", moved)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(1, 2), lengths=(3,), float64=True)
    assert len(report.cases) == 2
    per = report.float64["l"]
    tf64, ours64 = per.pop("output 0")
    if planted == "every dtype":
        assert 0.98 < tf64 < 1.0 + 1e-6 and ours64 < 1e-5, (tf64, ours64)
    else:
        assert tf64 < 1e-5 and abs(ours64 - 100.0) < 1e-3, (tf64, ours64)
    assert all(a < 1e-5 and b < 1e-5 for a, b in per.values()), per


def test_verify_notes_a_cudnn_layer_s_uncompared_weight_gradients(_lstm_with_states, monkeypatch):
    """The port of a Keras 2 CuDNNLSTM holds LSTM weights converted from cuDNN's layout, other
    numbers than the file's: their gradients are not compared, and the report notes so (the
    outputs and the other gradients still verified). No CPU runs cuDNN's kernel: an LSTM's
    port stands in, its description's kind made CuDNNLSTM."""
    load = VERIFY.load

    def as_cudnn(path):
        modules = load(path)
        for m in modules.values():
            m.port_description = dataclasses.replace(m.port_description, kind="keras.CuDNNLSTM")
        return modules

    monkeypatch.setattr(VERIFY, "load", as_cudnn)
    report = torch_lstm_grad.verify(*_lstm_with_states, batches=(2,), lengths=(3,))
    assert report.notes == {
        "l": ["weight gradients not compared: the port converts cuDNN's layout"]
    }
    assert report.ok and not report.not_verified
    assert set(report.errors["l"]) == {
        "output 0", "output 1", "output 2", "d input", "d initial_state 0", "d initial_state 1"
    }  # fmt: skip


def test_verify_scales_a_direction_s_error_by_tf_s_derivative(tmp_path, monkeypatch):
    """cuDNN's packed params are compared along random directions, each error scaled as every
    tensor's is: |ours - TF| / max(1, |TF|), by TF's derivative. Planted: TF's derivatives
    moved by 100, so each error is 100 / max(1, |TF's + 100|); scaled by ours it would be
    100 / max(1, |ours|)."""
    src, _ = _tf1_case(tmp_path, "deepspeech_frozen")
    convert(src, tmp_path / "m.pt", log=lambda s: None)
    run, moved = VERIFY._TF1Cells.run, []

    def planted(self, *args, **kwargs):
        theirs, rs = run(self, *args, **kwargs)
        param, along = theirs.directions
        moved.append([t + 100.0 for _, t in along])
        theirs.directions = (param, [(p, t) for (p, _), t in zip(along, moved[-1], strict=True)])
        return theirs, rs

    monkeypatch.setattr(VERIFY._TF1Cells, "run", planted)
    report = torch_lstm_grad.verify(src, tmp_path / "m.pt", batches=(2,))
    errors = report.errors["cudnn_lstm"]
    assert moved and len(moved[0]) >= 2
    for k in range(len(moved[0])):
        want = max(100.0 / max(1.0, abs(case[k])) for case in moved)
        assert abs(errors[f"d weights along direction {k}"] - want) < 1e-4 * want, (k, moved)


def test_verify_python_api(tmp_path):
    """`torch_lstm_grad.verify(SRC, OUT)`: the report as an object, `.ok`, the table as str;
    the float64 columns with `float64=True` alone."""
    keras = keras_module()
    model = keras.Sequential([keras.Input((T, I)), keras.layers.GRU(3, name="g")])
    randomize(model.trainable_weights, 34)
    model.save(tmp_path / "m.keras")
    torch_lstm_grad.porting.convert(tmp_path / "m.keras", tmp_path / "m.pt", log=lambda s: None)
    report = torch_lstm_grad.verify(tmp_path / "m.keras", tmp_path / "m.pt", tol=1e-5)
    assert report.ok and set(report.errors) == {"(whole model)", "g"}
    assert max(report.errors["g"].values()) < 1e-5 and "d recurrent_kernel" in str(report)
    # the float64 columns (a second run of each port) only when asked, as --verify-float64
    assert not report.float64 and "vs float64" not in str(report)
    both = torch_lstm_grad.verify(tmp_path / "m.keras", tmp_path / "m.pt", float64=True)
    assert set(both.float64) == {"g"} and "vs float64" in str(both)
    strict = torch_lstm_grad.verify(tmp_path / "m.keras", tmp_path / "m.pt", tol=0.0)
    assert not strict.ok or all(e == 0 for e in strict.errors["g"].values())


def test_verify_names_tf_s_own_refusal(tmp_path, monkeypatch):
    """Where TF refuses to run a layer here, the layer is 'not verified' with TF's exception
    type and the first line of its message (cuDNN's missing kernels: in words of their own)."""
    keras = keras_module()
    model = keras.Sequential([keras.Input((T, I)), keras.layers.GRU(3, name="g")])
    model.save(tmp_path / "m.keras")
    torch_lstm_grad.porting.convert(tmp_path / "m.keras", tmp_path / "m.pt", log=lambda s: None)
    for message, why in (
        ("  Matrix size-incompatible: In[0]\n  more detail  ", "Matrix size-incompatible: In[0]"),
        ("", ""),
        # TF's words (op_kernel.cc) where tensorflow-cpu has no kernel for the op at all
        (
            "No OpKernel was registered to support Op 'CudnnRNNV3'\n  <no registered kernels>",
            "no kernel here for one of its ops (cuDNN",
        ),
        ("Could not find device for node: CudnnRNNV3", "no kernel here for one of its ops (cuDNN"),
    ):

        def refused(*args, message=message):
            raise RuntimeError(message)

        monkeypatch.setattr(VERIFY._KerasModel, "run", refused)
        report = torch_lstm_grad.verify(tmp_path / "m.keras", tmp_path / "m.pt")
        assert report.not_verified["g"].startswith(
            f"TensorFlow could not run it here (RuntimeError: {why}"
        ), (message, report.not_verified)


def test_verify_needs_tensorflow(tmp_path):
    """Without TensorFlow: exit 2 and one line saying so (the conversion itself still runs)."""
    import subprocess
    import sys

    keras = keras_module()
    model = keras.Sequential([keras.Input((T, I)), keras.layers.LSTM(2)])
    model.save(tmp_path / "m.keras")
    code = (
        "import sys\n"
        "for n in ('tensorflow', 'tf_keras', 'keras'): sys.modules[n] = None\n"
        "from torch_lstm_grad.tools import cli\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "convert", str(tmp_path / "m.keras"), "-o",
         str(tmp_path / "m.pt"), "--verify"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == "torch-lstm-grad convert --verify: TensorFlow is needed for --verify\n"
    assert (tmp_path / "m.pt").exists()


def test_verify_runs_channels_first_convolutions_on_any_cpu(tmp_path):
    """TF's CPU Conv2D refuses channels_first without its oneDNN kernels, which TF turns on by
    default only on CPUs with AVX-512 VNNI, BF16 or AMX: verify turns them on unless the user
    set TF_ENABLE_ONEDNN_OPTS, so the whole model verifies on an AVX2-only CPU too. In a fresh
    process without the variable (this suite's conftest sets it)."""
    import os
    import subprocess
    import sys

    keras = keras_module()
    model = keras.Sequential([keras.Input((6, 5)), keras.layers.Conv1D(4, 3, data_format=
                              "channels_first"), keras.layers.LSTM(2)])  # fmt: skip
    model.save(tmp_path / "m.keras")
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    done = subprocess.run(
        [sys.executable, "-m", "torch_lstm_grad", "convert", str(tmp_path / "m.keras"), "-o",
         str(tmp_path / "m.pt"), "--verify"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    whole = done.stdout.split("(whole model):\n", 1)[1]
    assert not whole.startswith("    not verified"), done.stdout
    assert "verified: every tensor of" in done.stdout


def test_an_error_at_the_tolerance_passes_and_empty_tensors_agree():
    """The tolerance is inclusive, in `ok` and in `failures` alike; a tensor with no elements
    (a zero-length case) agrees; the scaled error is |ours - TF| / max(1, max |TF|)."""
    from torch_lstm_grad.porting.verify import VerifyReport, _scaled

    report = VerifyReport("m.keras", tol=2.0**-10)
    report.add("l", "output 0", 2.0**-10)
    assert report.ok and report.failures() == []
    report.add("l", "output 1", 2.0**-9)
    assert not report.ok and report.failures() == [("l", "output 1", 2.0**-9)]
    assert _scaled(torch.zeros(0, 3), np.zeros((0, 3))) == 0.0
    assert _scaled(np.array([0.75]), np.array([0.5])) == 0.25  # one element: max(1, 0.5)
    assert _scaled(np.array([6.0]), np.array([4.0])) == 0.5
    assert _scaled(np.zeros(2), np.zeros(3)) == float("inf")
