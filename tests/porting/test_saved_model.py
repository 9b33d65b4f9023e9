"""Ports of Keras 3's SavedModel directories, checked against Keras itself: `export()` and
`tf.saved_model.save` store no Keras config, so each layer is read back from the loop that
computes it; converted with TensorFlow and without (the same modules); what the saved functions
compute that the converter does not read is refused by name. (tf_keras' SavedModels:
tests/porting/test_keras2.py; TF1's: tests/porting/test_tf1.py.)"""

import os
import re
import shutil

import numpy as np
import pytest
import torch

from tests.helpers import (
    KERAS2,
    assert_close,
    chain_model,
    cli_convert,
    compare_chain,
    convert_without_tf,
    graph_readable_kinds,
    keras_module,
    needs_tf,
    randomize,
    same_modules,
    save_model,
    tf_module,
)
from tests.helpers import KERAS_I as I
from tests.helpers import KERAS_T as T
from torch_lstm_grad import porting

pytestmark = needs_tf


def _hard_sigmoid_sequential(keras):
    """A Sequential LSTM(hard_sigmoid, return_sequences) -> GRU: tf_keras' fixture
    (tests/data/keras2/saved_model) in Keras 3."""
    model = keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.LSTM(5, recurrent_activation="hard_sigmoid", return_sequences=True),
            keras.layers.GRU(3),
        ]
    )
    randomize(model.trainable_weights, 11)
    return model


@pytest.mark.parametrize("how", ["export", "tf.saved_model.save"])
def test_keras3_saved_model(tmp_path, capsys, how):
    """Keras 3's SavedModels store no config: the loops give Keras 3's hard sigmoid, the
    sequence and last-step outputs; exact against Keras' tape, with TF and without."""
    keras = keras_module()
    model = _hard_sigmoid_sequential(keras)
    src = save_model(model, tmp_path / "sm", how)
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "TF2 SavedModel (tags serve; TF 2.21" in log and "signature serving_default" in log
    assert "layers read from its saved functions" in log
    assert "gate_activation      = 'hard_sigmoid_keras3'  <- the SavedModel's loop" in log
    assert "return_sequences     = True  <- the SavedModel's loop" in log
    names = [layer.name for layer in model.layers]
    compare_chain(model, names, mods, seed=12, mask=False, last_only=True)
    log = convert_without_tf(src, tmp_path / "no_tf.pt")
    assert "layers read from its saved functions" in log
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "mask"])
def test_keras3_export_every_readable_kind(tmp_path, capsys, mask):
    """LSTM (go_backwards; no bias, return_state), GRU (relu; reset_after=False), SimpleRNN
    (relu, zeros for masked steps), Bidirectional (ave, mul, concat with states) in a functional
    model whose outputs are every layer's, states included, read from the exported loops and
    the ops that merge them; with a mask input that skips steps anywhere, and without."""
    model, names = chain_model(graph_readable_kinds, mask=mask, seed=13)
    src = save_model(model, tmp_path / "sm", "export")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "go_backwards         = True  <- the SavedModel's loop" in log
    assert "return_state         = True  <- the SavedModel's loop" in log
    assert re.search(r"the loop's final states \(outputs \[\d+(, \d+)*\]\) are read after it", log)
    for mode in ("ave", "mul", "concat"):
        assert f"merge_mode = '{mode}'  <- the SavedModel's graph" in log
    if mask:
        assert "zero_output_for_mask = True  <- the SavedModel's loop" in log
        assert "a masked step repeats the previous output" in log
        assert "called with a mask (from \"the signature's input" in log
    compare_chain(model, names, mods, seed=14, mask=mask)


def _edge_kinds(keras):
    return [
        keras.layers.GRU(3, return_sequences=True, use_bias=False, name="gru_no_bias"),
        keras.layers.GRU(
            2, return_sequences=True, reset_after=False, use_bias=False, name="gru_before_no_bias"
        ),
        keras.layers.GRU(1, return_sequences=True, name="gru_one_unit"),
        keras.layers.LSTM(3, activation="linear", return_sequences=True, name="lstm_linear"),
        keras.layers.LSTM(1, return_sequences=True, name="lstm_one_unit"),
        keras.layers.SimpleRNN(2, use_bias=False, name="rnn_no_bias"),
    ]


def test_keras3_export_edge_configs(tmp_path, capsys):
    """Configurations whose loops lack an op the usual ones have: GRUs without biases (both
    reset positions: no bias add after x·K nor h·R) and a SimpleRNN without one, a one-unit GRU
    (its gate blocks one column wide) and LSTM, linear activations (no op between the sum and
    its readers); read from the export and exact against Keras, outputs and every gradient."""
    model, names = chain_model(_edge_kinds, mask=False, seed=16)
    src = save_model(model, tmp_path / "sm", "export")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "activation           = 'linear'  <- the SavedModel's loop" in log
    assert "reset_after          = False  <- the SavedModel's loop" in log
    compare_chain(model, names, mods, seed=17, mask=False)


def _refused(keras, case):
    x_in = keras.Input((T, I))
    if case == "unroll":
        y = keras.layers.LSTM(3, unroll=True)(x_in)
    elif case == "tanh_gates":  # read, but no kernel computes tanh gates: the builder refuses
        y = keras.layers.LSTM(3, recurrent_activation="tanh")(x_in)
    elif case == "stateful":  # the initial states are variables
        x_in = keras.Input(batch_shape=(2, T, I))
        y = keras.layers.LSTM(3, stateful=True)(x_in)
    elif case == "mixed_precision":  # bfloat16 products: the kernels read through a Cast
        y = keras.layers.LSTM(3, dtype="mixed_bfloat16")(x_in)
    elif case == "rnn_linear":  # read as linear (no op after the sum), which no kernel computes
        y = keras.layers.SimpleRNN(3, activation=None, return_sequences=True)(x_in)
    else:  # an activation the loop matcher does not know: gelu's ops
        y = keras.layers.SimpleRNN(3, activation="gelu")(x_in)
    model = keras.Model(x_in, y)
    randomize(model.trainable_weights, 15)
    return model


@pytest.mark.parametrize(
    "case", ["unroll", "gelu", "tanh_gates", "rnn_linear", "mixed_precision", "stateful"]
)
def test_keras3_export_unread_patterns_are_refused(tmp_path, capsys, case):
    """What the loop matcher does not read is refused by name, nothing written: an unrolled
    layer, an activation made of several ops (gelu, naming them); a function it reads but no
    kernel computes (tanh gates, a linear SimpleRNN) is refused by the builder, as from a
    config; a mixed-precision layer (bfloat16 products) is refused naming the Cast."""
    model = _refused(keras_module(), case)
    src = save_model(model, tmp_path / "sm", "export")
    err = cli_convert(src, tmp_path, capsys, code=2)
    assert "cannot reproduce exactly (nothing was written)" in err
    assert not (tmp_path / "out.pt").exists()
    want = {
        "unroll": "no While loop of the signature's functions reads",
        "gelu": "Gelu/Erfc (Erfc)",
        "tanh_gates": "recurrent_activation = 'tanh'",
        "rnn_linear": "activation='linear' is not computed by this version's kernels",
        "mixed_precision": "(Cast) reads the recurrent kernel in the loop: the layer multiplies "
        "in a reduced precision",
        "stateful": "the initial state comes from a variable",
    }
    assert want[case] in err
    if case == "unroll":  # the first four of the T = 6 unrolled steps' products h·R
        assert len(re.findall(r"MatMul_\d+ \(MatMul\)", err)) == 4, err


def test_keras3_export_signatures(tmp_path, capsys):
    """Several signatures: serving_default by default; --signature NAME reads the functions of
    that one (a layer it does not run is left out, said so); an unknown name is exit 2 listing
    the signatures."""
    keras = keras_module()
    tf = tf_module()
    model = _hard_sigmoid_sequential(keras)
    archive = keras.export.ExportArchive()
    archive.track(model)
    spec = [tf.TensorSpec([None, T, I], tf.float32)]
    archive.add_endpoint("serve", model.call, input_signature=spec)
    archive.add_endpoint("encode", model.layers[0].call, input_signature=spec)
    archive.write_out(str(tmp_path / "sm"), verbose=False)
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys)
    assert sorted(mods) == sorted(layer.name for layer in model.layers)
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys, "--signature", "encode")
    lstm, gru = (layer.name for layer in model.layers)
    assert list(mods) == [lstm] and "is not run by signature encode" in log
    x = np.random.default_rng(16).standard_normal((2, T, I)).astype(np.float32)
    with torch.no_grad():
        got = mods[lstm](torch.from_numpy(x))
    assert_close({"encode": (got, model.layers[0](x).numpy())})
    err = cli_convert(tmp_path / "sm", tmp_path, capsys, "--signature", "nope", code=2)
    assert "--signature nope: " in err and "(it has: encode, serve, serving_default)" in err
    assert err.count("\n") == 1
    # no serving_default (removed by TF's protobuf classes: ExportArchive always writes one):
    # the one signature there is, else refused naming them
    from tensorflow.core.protobuf import saved_model_pb2

    for names in (["whole"], ["whole", "encode"]):
        archive = keras.export.ExportArchive()
        archive.track(model)
        for name in names:
            archive.add_endpoint(name, model.call if name == "whole" else model.layers[0].call,
                                 input_signature=spec)  # fmt: skip
        path = tmp_path / names[-1]
        archive.write_out(str(path), verbose=False)
        sm = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
        del sm.meta_graphs[0].signature_def["serving_default"]
        (path / "saved_model.pb").write_bytes(sm.SerializeToString())
        if len(names) == 1:
            mods, log = cli_convert(path, tmp_path, capsys)
            assert "signature whole)" in log and sorted(mods) == sorted([lstm, gru])
        else:
            err = cli_convert(path, tmp_path, capsys, code=2)
            assert "several signatures and no 'serving_default' (encode, whole): choose" in err


def test_keras3_export_traced_with_cudnn_is_read(tmp_path, capsys, monkeypatch):
    """Saved where a GPU was visible, Keras 3's LSTM runs cuDNN's CudnnRNNV3 op instead of a
    loop (here: Keras told a GPU is there while it traces; nothing runs the op): read from the
    op (tests/porting/graphs/test_keras_cudnn.py holds the numbers to Keras')."""
    import importlib

    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")

    keras = keras_module()
    model = keras.Sequential([keras.Input((T, I)), keras.layers.LSTM(3)])
    randomize(model.trainable_weights, 17)
    monkeypatch.setattr(rnn, "_is_gpu_available", lambda: True)
    src = save_model(model, tmp_path / "sm", "export")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "(CudnnRNNV3): its sequence output is not used" in log
    (module,) = mods.values()  # (Keras names the layer by how many it built before)
    assert module.cudnn_mask


def _keras2_config_edited(dst, edit):
    """A copy of tf_keras' SavedModel fixture whose keras_metadata.pb holds the model config
    with its layer list changed by `edit(layers)` (TF's SavedMetadata protobuf class)."""
    import json

    from tensorflow.python.keras.protobuf import saved_metadata_pb2

    shutil.copytree(os.path.join(KERAS2, "saved_model"), dst)
    meta = saved_metadata_pb2.SavedMetadata()
    meta.ParseFromString((dst / "keras_metadata.pb").read_bytes())
    root = next(n for n in meta.nodes if n.node_path == "root")
    entry = json.loads(root.metadata)
    edit(entry["model_config"]["config"]["layers"])
    root.metadata = json.dumps(entry)
    (dst / "keras_metadata.pb").write_bytes(meta.SerializeToString())
    return dst


def test_unreadable_directories_and_files(tmp_path, capsys):
    """A directory or file convert cannot read is exit 2 with one line naming it and why."""
    keras = keras_module()
    good = save_model(_hard_sigmoid_sequential(keras), tmp_path / "good", "export")
    (tmp_path / "empty").mkdir()
    cut = tmp_path / "cut"
    cut.mkdir()
    data = open(f"{good}/saved_model.pb", "rb").read()
    (cut / "saved_model.pb").write_bytes(data[: len(data) // 3])
    novars = tmp_path / "novars"
    novars.mkdir()
    (novars / "saved_model.pb").write_bytes(data)
    (tmp_path / "g.pbtxt").write_text("node { name: 'a' op: 'Const' attr { key: 'v' value {")
    badmeta = tmp_path / "badmeta"  # tf_keras' SavedModel with its keras_metadata.pb cut short
    shutil.copytree(os.path.join(KERAS2, "saved_model"), badmeta)
    (badmeta / "keras_metadata.pb").write_bytes((badmeta / "keras_metadata.pb").read_bytes()[:9])
    badconfig = _keras2_config_edited(tmp_path / "badconfig", lambda layers: layers.append(5))

    def unnamed(layers):  # read as no config, the layers took Keras' defaults (sigmoid gates)
        for layer in layers:
            layer.pop("name", None), layer["config"].pop("name")

    nameless = _keras2_config_edited(tmp_path / "nameless", unnamed)
    emptied = _keras2_config_edited(tmp_path / "emptied", lambda layers: layers.clear())
    cases = {
        badmeta: f"{badmeta}/keras_metadata.pb: keras_metadata.pb (SavedMetadata): ",
        badconfig: f"{badconfig}/keras_metadata.pb: the Keras model config in keras_metadata.pb: "
        "model config: a layer entry is a int, not an object",
        nameless: f"{nameless}/keras_metadata.pb: the Keras model config in keras_metadata.pb: "
        "model config: a 'InputLayer' layer without a name",
        emptied: f"{emptied}/keras_metadata.pb: the Keras model config in keras_metadata.pb: "
        "model config: a model whose config lists no layers",
        tmp_path / "empty": "not a SavedModel directory, a frozen GraphDef",
        cut: "saved_model.pb: not a readable SavedModel (truncated",
        novars: "no variables/variables.index",
        tmp_path / "g.pbtxt": "g.pbtxt: not a GraphDef in text form (text format: missing '}')",
    }
    for src, why in cases.items():
        err = cli_convert(src, tmp_path, capsys, code=2)
        assert why in err and err.count("\n") == 1, err


_ODD_CELLS = {}


def _odd_cell(keras):
    """A user's own RNN cell whose weights are named as Keras' (kernel, recurrent_kernel) but
    whose recurrent kernel is [units, columns] with any number of columns: `h' = tanh((x·K +
    h·R)[:, :units])`. Registered once per process (Keras refuses a second registration)."""
    if "cls" not in _ODD_CELLS:

        @keras.saving.register_keras_serializable(package="torch_lstm_grad_tests")
        class OddCell(keras.layers.Layer):
            def __init__(self, units, columns, **kwargs):
                super().__init__(**kwargs)
                self.units, self.columns, self.state_size = units, columns, units

            def get_config(self):
                return {**super().get_config(), "units": self.units, "columns": self.columns}

            def build(self, input_shape):
                self.kernel = self.add_weight(shape=(input_shape[-1], self.columns), name="kernel")
                self.recurrent_kernel = self.add_weight(
                    shape=(self.units, self.columns), name="recurrent_kernel"
                )

            def call(self, x, states):
                y = keras.ops.matmul(x, self.kernel)
                y = y + keras.ops.matmul(states[0], self.recurrent_kernel)
                h = keras.ops.tanh(y[:, : self.units])
                return h, [h]

        _ODD_CELLS["cls"] = OddCell
    return _ODD_CELLS["cls"]


def test_keras3_export_custom_cells_are_refused(tmp_path):
    """Custom cells whose recurrent kernel is not [U, g·U] for a Keras cell's g gates (4, 3, 1):
    [3, 5], [0, 4] (no units) and [3, 6] (two blocks), alone and in a Bidirectional; each
    refused naming the shape (never read as a GRU or a SimpleRNN by its column count)."""
    keras = keras_module()
    cell = _odd_cell(keras)
    x = keras.Input((T, I), name="x")

    def rnn(units, columns, name):
        return keras.layers.RNN(cell(units, columns), return_sequences=True, name=name)

    outs = [
        rnn(3, 5, "odd")(x),
        rnn(0, 4, "no_units")(x),
        keras.layers.Bidirectional(rnn(3, 5, "in_odd"), name="bi_odd")(x),
        keras.layers.Bidirectional(rnn(0, 4, "in_none"), name="bi_no_units")(x),
        keras.layers.Bidirectional(rnn(3, 6, "in_two"), name="bi_two_blocks")(x),
    ]
    model = keras.Model(x, outs)
    randomize(model.trainable_weights, 19)
    path = save_model(model, tmp_path, "export")
    descriptions, refusals = porting.describe(porting.read_source(path))
    assert descriptions == []
    bi = "graph = 'Bidirectional': its saved loops are not a Keras Bidirectional this converter "
    assert sorted(map(str, refusals)) == [
        f"bi_no_units: {bi}reads: backward_in_none: a recurrent kernel of shape [0, 4]",
        f"bi_odd: {bi}reads: backward_in_odd: a recurrent kernel of shape [3, 5]",
        f"bi_two_blocks: {bi}reads: backward_in_two: a recurrent kernel of shape [3, 6]",
        "no_units: graph = '(unread)': a recurrent kernel of shape [0, 4]",
        "odd: graph = '(unread)': a recurrent kernel of shape [3, 5]",
    ]


def test_keras3_export_shared_layer(tmp_path, capsys):
    """One layer called twice (two loops reading its kernel): read once when both loops run it
    alike, exact on both calls; refused, naming both loops, when they differ (here one call
    masked, where it outputs zeros at masked steps, one not)."""
    keras = keras_module()
    x = keras.Input((T, I), name="x")
    shared = keras.layers.GRU(3, return_sequences=True, name="shared")
    flipped = keras.layers.Lambda(lambda v: keras.ops.flip(v, axis=1), name="flip")(x)
    model = keras.Model(x, [shared(x), shared(flipped)])
    randomize(model.trainable_weights, 20)
    mods, _ = cli_convert(save_model(model, tmp_path / "alike", "export"), tmp_path, capsys)
    assert list(mods) == ["shared"]
    xs = np.random.default_rng(20).standard_normal((2, T, I)).astype(np.float32)
    with torch.no_grad():
        got = [mods["shared"](torch.from_numpy(v.copy())) for v in (xs, xs[:, ::-1])]
    assert_close({"call 1": (got[0], shared(xs).numpy()),
                  "call 2": (got[1], shared(xs[:, ::-1].copy()).numpy())})  # fmt: skip

    rnn = keras.layers.SimpleRNN(3, return_sequences=True, zero_output_for_mask=True, name="rnn")
    masked = keras.layers.Masking(0.0, name="masking")(x)
    model = keras.Model(x, [rnn(masked), rnn(x)])
    randomize(model.trainable_weights, 21)
    path = save_model(model, tmp_path / "apart", "export")
    _, refusals = porting.describe(porting.read_source(path))
    assert len(refusals) == 1 and str(refusals[0]).startswith("rnn: graph = 'SimpleRNN': ")
    assert re.search(r"the loops \S+ and \S+ run the layer differently", str(refusals[0]))


def test_saved_model_without_signatures(tmp_path):
    """`tf.saved_model.save(..., signatures={})`: no signature says which functions run, so
    every saved function's loop is read (the layer is ported, not reported as never run)."""
    keras, tf = keras_module(), tf_module()
    x = keras.Input((T, I), name="x")
    model = keras.Model(x, keras.layers.LSTM(4, name="lstm")(x))
    randomize(model.trainable_weights, 22)
    holder = tf.Module()
    holder.model = model
    holder.call = tf.function(
        lambda v: model(v), input_signature=[tf.TensorSpec([None, T, I], tf.float32)]
    )
    tf.saved_model.save(holder, str(tmp_path / "sm"), signatures={})
    descriptions, refusals = porting.describe(porting.read_source(tmp_path / "sm"))
    assert refusals == [] and [d.name for d in descriptions] == ["lstm"]


def test_keras3_export_states_read_by_a_later_layer(tmp_path, capsys):
    """LSTM(return_state=True) whose final h feeds a Dense (not returned by the model): the
    loop's final states are read after it, so the port returns them, exact against Keras."""
    keras = keras_module()
    x = keras.Input((T, I), name="x")
    lstm = keras.layers.LSTM(4, return_sequences=True, return_state=True, name="lstm")
    y, h, _ = lstm(x)
    model = keras.Model(x, [y, keras.layers.Dense(2, name="dense")(h)])
    randomize(model.trainable_weights, 23)
    mods, log = cli_convert(save_model(model, tmp_path / "sm", "export"), tmp_path, capsys)
    assert "return_state         = True  <- the SavedModel's loop" in log
    xs = np.random.default_rng(23).standard_normal((2, T, I)).astype(np.float32)
    with torch.no_grad():
        got = mods["lstm"](torch.from_numpy(xs))
    want = lstm(xs)
    pairs = zip(got, want, strict=True)
    assert_close({f"out {k}": (g, w.numpy()) for k, (g, w) in enumerate(pairs)})


def test_keras3_export_lists_what_it_leaves_out(tmp_path, capsys):
    """A Keras 3 export saves each weight twice (the layer's variable, which the functions
    capture, and a copy under `_all_variables`) and a dropout's seed-generator state (an
    integer): the weights are taken from the variables the functions capture, and every entry
    left out is listed with why."""
    keras = keras_module()
    x = keras.Input((T, I))
    lstm = keras.layers.LSTM(4, dropout=0.25, return_sequences=True, name="lstm")
    model = keras.Model(x, lstm(x))
    randomize(model.trainable_weights, 35)
    model.export(str(tmp_path / "sm"), verbose=False)
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys)
    key = "{}/{}/.ATTRIBUTES/VARIABLE_VALUE".format
    for k, w in enumerate(["kernel", "recurrent_kernel", "bias"]):
        assert f"  lstm/lstm_cell/{w} (stored as {key('variables', k)}) " in log
    ignored = dict(
        line[len("ignored: ") :].split(" ", 1) for line in log.splitlines()
        if line.startswith("ignored: ")
    )  # fmt: skip
    assert sorted(ignored) == [key("_all_variables", k) for k in range(4)] + [key("variables", 3)]
    copies = sorted(ignored[key("_all_variables", k)] for k in range(3))
    assert copies == [f"(another copy of lstm/lstm_cell/{w} (the same values))"
                      for w in ("bias", "kernel", "recurrent_kernel")]  # fmt: skip
    for k in (key("_all_variables", 3), key("variables", 3)):
        assert ignored[k] == "(not a floating-point tensor)"
    compare_chain(model, ["lstm"], mods, seed=36, mask=False)


def test_tf2_saved_model_of_a_raw_block_lstm(tmp_path, capsys):
    """TF2 code that calls the fused op itself: a tf.Module whose tf.function runs
    `tf.raw_ops.BlockLSTM` (forget_bias 0.5, cell_clip 1.5) on its own variables named as TF1's
    cell, saved with tf.saved_model.save. The cell is read from the signature's function, each
    attribute named with where it came from (the signature), and the port computes what TF's
    function computes: outputs, final states and every gradient; `--verify` checks them all."""
    tf = tf_module()
    rng = np.random.default_rng(40)

    class Holder(tf.Module):
        def __init__(self):
            self.kernel = tf.Variable(
                rng.standard_normal((7, 16)).astype(np.float32), name="rnn/lstm_cell/kernel"
            )
            self.bias = tf.Variable(
                rng.standard_normal(16).astype(np.float32), name="rnn/lstm_cell/bias"
            )

        @tf.function(input_signature=[tf.TensorSpec([5, 2, 3])])
        def __call__(self, x):
            z, p = tf.zeros([2, 4]), tf.zeros([4])
            _, cs, *_, h = tf.raw_ops.BlockLSTM(
                seq_len_max=tf.constant(5, tf.int64), x=x, cs_prev=z, h_prev=z, w=self.kernel,
                wci=p, wcf=p, wco=p, b=self.bias, forget_bias=0.5, cell_clip=1.5,
            )  # fmt: skip
            return {"h": h, "cs": cs}

    holder = Holder()
    tf.saved_model.save(holder, str(tmp_path / "sm"), signatures=holder.__call__)
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys, "--verify")
    # --verify runs the function's own BlockLSTM, which TF differentiates
    for tensor in ("output 2", "d input", "d initial_state 1", "d kernel", "d bias"):
        assert re.search(rf"{tensor} +\d\.\d\de-\d\d  ok", log), tensor
    assert "verified: every tensor of rnn.lstm_cell within the tolerance\n" in log
    where = "SavedModel's graph (signature serving_default), op __inference___call___"
    assert f"forget_bias     = 0.5  <- {where}" in log
    assert f"cell_clip       = 1.5  <- {where}" in log
    assert "BlockLSTM (BlockLSTM) runs at most seq_len_max = 5 steps, a constant: past it" in log
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    r_h, r_c = rng.standard_normal((2, 5, 2, 4)).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = holder(xt)
        loss = tf.reduce_sum(out["h"] * r_h) + tf.reduce_sum(out["cs"][-1] * r_c[-1])
    theirs = tape.gradient(loss, [xt, holder.kernel, holder.bias])
    mod = mods["rnn.lstm_cell"]
    xp = torch.from_numpy(x).requires_grad_()
    outputs, (cs, _) = mod(xp)
    (outputs * torch.from_numpy(r_h)).sum().add((cs * torch.from_numpy(r_c[-1])).sum()).backward()
    assert_close({
        "h": (outputs, out["h"].numpy()), "final cs": (cs, out["cs"][-1].numpy()),
        "d x": (xp.grad, theirs[0].numpy()), "d kernel": (mod.kernel.grad, theirs[1].numpy()),
        "d bias": (mod.bias.grad, theirs[2].numpy()),
    })  # fmt: skip


@pytest.mark.parametrize("peepholes", ["variables", "none", "variables unused", "swapped"])
def test_tf2_saved_model_of_a_fused_cell_in_a_loop(tmp_path, capsys, peepholes):
    """TF2 code stepping the fused op itself: `tf.raw_ops.LSTMBlockCell` (forget_bias 0.7,
    cell_clip 1.5) in a `tf.while_loop` body, from initial states the signature takes. The cell
    is read from the loop body's op; stepped by hand, the port computes what the SavedModel
    computes. TF 2 registers no gradient for LSTMBlockCell, so the gradients' oracle is TF's
    own BlockLSTM over the same sequence and weights (whose outputs must be the SavedModel's):
    every gradient, the initial states' included. Peephole variables the op is told not to use
    (use_peephole=False) are refused, not ported as peepholes; so are peepholes fed to other
    inputs than their names say (all three are [H]: only the op tells them apart). `--verify`
    runs the body's step with TF1 contrib's gradient (TF's LSTMBlockCellGrad kernel)."""
    tf = tf_module()
    rng = np.random.default_rng(41)
    use_peephole = peepholes in ("variables", "swapped")

    class Holder(tf.Module):
        def __init__(self):
            def var(shape, leaf):
                value = rng.standard_normal(shape).astype(np.float32)
                return tf.Variable(value, name=f"rnn/lstm_cell/{leaf}")

            self.kernel, self.bias = var((7, 16), "kernel"), var(16, "bias")
            if peepholes == "none":
                self.diag = [tf.zeros([4])] * 3
            else:
                self.diag = [var(4, leaf) for leaf in ("w_i_diag", "w_f_diag", "w_o_diag")]
            if peepholes == "swapped":  # w_f_diag fed as wci, w_i_diag as wcf
                self.diag = [self.diag[1], self.diag[0], self.diag[2]]

        def weights(self):
            diag = dict(zip(("wci", "wcf", "wco"), self.diag, strict=True))
            return {"w": self.kernel, "b": self.bias, **diag}

        @tf.function(input_signature=[tf.TensorSpec([5, 2, 3]), *[tf.TensorSpec([2, 4])] * 2])
        def __call__(self, x, c0, h0):
            def step(t, c, h, hs):
                _, c, *_, h = tf.raw_ops.LSTMBlockCell(
                    x=x[t], cs_prev=c, h_prev=h, **self.weights(), forget_bias=0.7,
                    cell_clip=1.5, use_peephole=use_peephole,
                )  # fmt: skip
                return t + 1, c, h, hs.write(t, h)

            start = (tf.constant(0), c0, h0, tf.TensorArray(tf.float32, 5))
            _, c, _, hs = tf.while_loop(lambda t, *_: t < 5, step, start)
            return {"h": hs.stack(), "c": c}

    holder = Holder()
    tf.saved_model.save(holder, str(tmp_path / "sm"), signatures=holder.__call__)
    if peepholes == "variables unused":
        err = cli_convert(tmp_path / "sm", tmp_path, capsys, code=2)
        assert "use_peepholes = False: the graph's LSTMBlockCell and the variables disagree" in err
        return
    if peepholes == "swapped":
        err = cli_convert(tmp_path / "sm", tmp_path, capsys, code=2)
        op = r"while_body_\d+::while/LSTMBlockCell \(LSTMBlockCell\)"
        assert re.search(
            rf"{op} reads rnn/lstm_cell/w_f_diag as its wci, not rnn/lstm_cell/w_i_diag", err
        ), err
        return
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys, "--verify")
    where = "SavedModel's graph (signature serving_default), op while_body_"
    assert f"forget_bias     = 0.699999988079071  <- {where}" in log
    assert f"cell_clip       = 1.5  <- {where}" in log
    assert f"use_peepholes   = {use_peephole}" in log
    # --verify runs the body's own step, differentiated as TF1's contrib did
    tensors = ["output 0", "output 1", "d input", "d initial_state 1", "d kernel", "d bias"]
    for tensor in tensors + (["d w_f_diag"] if use_peephole else []):
        assert re.search(rf"{tensor} +\d\.\d\de-\d\d  ok", log), tensor
    assert "verified: every tensor of rnn.lstm_cell within the tolerance\n" in log

    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    c0, h0, r_c = rng.standard_normal((3, 2, 4)).astype(np.float32)
    r_h = rng.standard_normal((5, 2, 4)).astype(np.float32)
    saved = holder(x, c0, h0)
    xs = [tf.constant(v) for v in (x, c0, h0)]
    weights = holder.weights()
    with tf.GradientTape() as tape:
        tape.watch(xs + list(weights.values()))
        _, c, *_, h = tf.raw_ops.BlockLSTM(
            seq_len_max=tf.constant(5, tf.int64), x=xs[0], cs_prev=xs[1], h_prev=xs[2],
            **weights, forget_bias=0.7, cell_clip=1.5, use_peephole=use_peephole,
        )  # fmt: skip
        loss = tf.reduce_sum(h * r_h) + tf.reduce_sum(c[-1] * r_c)
    theirs = tape.gradient(loss, xs + list(weights.values()))
    assert_close(
        {
            "BlockLSTM h": (h.numpy(), saved["h"].numpy()),
            "BlockLSTM c": (c[-1].numpy(), saved["c"].numpy()),
        }
    )

    mod = mods["rnn.lstm_cell"]
    ours = [torch.from_numpy(v).requires_grad_() for v in (x, c0, h0)]
    state, hs = (ours[1], ours[2]), []
    for t in range(5):
        out, state = mod(ours[0][t], state)
        hs.append(out)
    hs = torch.stack(hs)
    (hs * torch.from_numpy(r_h)).sum().add((state[0] * torch.from_numpy(r_c)).sum()).backward()
    params = ["kernel", "bias"] + (["w_i_diag", "w_f_diag", "w_o_diag"] if use_peephole else [])
    grads = [t.grad for t in ours] + [getattr(mod, p).grad for p in params]
    names = ["x", "c0", "h0", *params]  # TF's gradients of unused peepholes left out
    named = zip(names, grads, theirs[: len(names)], strict=True)
    assert_close({
        "h": (hs, saved["h"].numpy()), "final c": (state[0], saved["c"].numpy()),
        **{f"d {n}": (g, t.numpy()) for n, g, t in named},
    })  # fmt: skip


@pytest.mark.filterwarnings("ignore:`tf.nn.rnn_cell.GRUCell` is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:`layer.add_variable` is deprecated:UserWarning")
def test_tf2_saved_model_of_a_fused_gru_cell_in_a_loop(tmp_path, capsys):
    """`tf.raw_ops.GRUBlockCell` stepped in a `tf.while_loop` body, on variables named as TF1's
    GRUCell: read from the body's op, the port computes what the SavedModel computes. TF 2
    registers no gradient for GRUBlockCell; the gradients' oracle is TF1's GRUCell (the same
    math, which TF differentiates) on the same variables, its outputs the SavedModel's.
    `--verify` runs the body's step with TF1 contrib's gradient (TF's GRUBlockCellGrad)."""
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    tf = tf_module()
    rng = np.random.default_rng(42)

    class Holder(tf.Module):
        def __init__(self):
            def var(shape, leaf):
                value = rng.standard_normal(shape).astype(np.float32)
                return tf.Variable(value, name=f"rnn/gru_cell/{leaf}")

            self.weights = [var((7, 8), "gates/kernel"), var(8, "gates/bias"),
                            var((7, 4), "candidate/kernel"), var(4, "candidate/bias")]  # fmt: skip

        @tf.function(input_signature=[tf.TensorSpec([5, 2, 3]), tf.TensorSpec([2, 4])])
        def __call__(self, x, h0):
            w_ru, b_ru, w_c, b_c = self.weights

            def step(t, h, hs):
                *_, h = tf.raw_ops.GRUBlockCell(
                    x=x[t], h_prev=h, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c
                )
                return t + 1, h, hs.write(t, h)

            start = (tf.constant(0), h0, tf.TensorArray(tf.float32, 5))
            return {"h": tf.while_loop(lambda t, *_: t < 5, step, start)[2].stack()}

    holder = Holder()
    tf.saved_model.save(holder, str(tmp_path / "sm"), signatures=holder.__call__)
    mods, log = cli_convert(tmp_path / "sm", tmp_path, capsys, "--verify")
    assert "rnn.gru_cell: tf1.GRUBlockCell (variables rnn/gru_cell/* and the SavedModel's" in log
    for tensor in (
        "output 0",
        "d input",
        "d initial_state 0",
        "d gates_kernel",
        "d candidate_bias",
    ):
        assert re.search(rf"{tensor} +\d\.\d\de-\d\d  ok", log), tensor
    assert "verified: every tensor of rnn.gru_cell within the tolerance\n" in log

    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    h0 = rng.standard_normal((2, 4)).astype(np.float32)
    r_h = rng.standard_normal((5, 2, 4)).astype(np.float32)
    saved = holder(x, h0)["h"].numpy()
    cell = rci.GRUCell(4)
    cell.build(tf.TensorShape([None, 3]))
    for v, w in zip(cell.weights, holder.weights, strict=True):  # gates/kernel, ... in order
        assert v.name.split("/", 1)[1] == w.name.split("/", 2)[2]
        v.assign(w)
    xs = [tf.constant(x), tf.constant(h0)]
    with tf.GradientTape() as tape:
        tape.watch(xs)
        h, hs = xs[1], []
        for t in range(5):
            out, h = cell(xs[0][t], h)
            hs.append(out)
        hs = tf.stack(hs)
        loss = tf.reduce_sum(hs * r_h)
    theirs = tape.gradient(loss, [*xs, *cell.weights])
    assert_close({"GRUCell h": (hs.numpy(), saved)})

    mod = mods["rnn.gru_cell"]
    ours = [torch.from_numpy(v).requires_grad_() for v in (x, h0)]
    h, outs = ours[1], []
    for t in range(5):
        out, h = mod(ours[0][t], h)
        outs.append(out)
    outs = torch.stack(outs)
    (outs * torch.from_numpy(r_h)).sum().backward()
    params = ["gates_kernel", "gates_bias", "candidate_kernel", "candidate_bias"]
    grads = [t.grad for t in ours] + [getattr(mod, p).grad for p in params]
    named = zip(["x", "h0", *params], grads, theirs, strict=True)
    assert_close({"h": (outs, saved), **{f"d {n}": (g, t.numpy()) for n, g, t in named}})
