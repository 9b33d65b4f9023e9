"""Ports of Keras 2 files: fixtures written by tf_keras 2.21 (Keras 2's last line; written and
run by tests/data/keras2/make_fixtures.py, which stored tf_keras' outputs and gradients in
expected.npz), and a published Keras 2.2.0 model nobody here wrote (chars2vec's eng_50 weights,
tests/data/chars2vec_eng_50, Apache-2.0), checked against Keras 2's LSTM math as TensorFlow
computes it. Keras 2.2's LSTM defaults to hard_sigmoid gates: Keras 2's own function, which the
port must keep."""

import json
import os

import numpy as np
import pytest
import torch

from tests.helpers import (
    DATA,
    KERAS2,
    assert_close,
    cli_convert,
    compare_with_stored_keras2,
    convert_without_tf,
    descriptions_as_logged,
    loss_weights,
    needs_tf,
    same_modules,
    tf_module,
)
from torch_lstm_grad import porting
from torch_lstm_grad.tools import cli

K2 = KERAS2
CHARS2VEC = os.path.join(DATA, "chars2vec_eng_50", "weights.h5")
ORDER = ["lstm", "gru_before", "gru_after", "rnn", "bi"]  # the fixture model's layers


def test_keras2_model_h5(tmp_path, capsys):
    """tf_keras' legacy whole-model HDF5: the config gives every attribute; with a mask that
    skips steps anywhere, against tf_keras' own numbers."""
    mods, log = cli_convert(os.path.join(K2, "model.h5"), tmp_path, capsys)
    assert "written by: Keras 2.21.0 (keras_version attribute, backend tensorflow)" in log
    assert "go_backwards         = True  <- the file's model_config" in log
    # the Bidirectional's description holds its two layers', each under its role
    bi = log[log.index("  bi: keras.Bidirectional (config of layer 'bi')") :].splitlines()
    assert bi[1:4] == [
        "    merge_mode = 'concat'  <- the file's model_config",
        "    backward:",
        "      bi/backward_lstm: keras.LSTM (config of layer 'lstm')",
    ]
    assert "    forward:\n      bi/forward_lstm: keras.LSTM (config of layer 'lstm')" in log
    compare_with_stored_keras2(mods, "model", ORDER, mask=True)


def test_keras2_weights_only_with_and_without_config(tmp_path, capsys):
    """save_weights("x.h5") stores no config: Keras 2.21's defaults are taken and printed as not
    stored (so the go_backwards GRU would be read forwards); with --config it is exact."""
    src = os.path.join(K2, "weights.h5")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "go_backwards         = False  <- default of Keras 2.21.0  [not stored" in log
    assert "gate_activation      = 'sigmoid'  <- default of Keras 2.21.0  [not stored" in log
    # load() gives each module the description the log printed (a Bidirectional's children,
    # values not stored in the file among them)
    assert sorted(mods) == sorted(ORDER)
    descriptions_as_logged(mods.values(), log)
    mods, log = cli_convert(src, tmp_path, capsys, "--config", os.path.join(K2, "model.json"))
    compare_with_stored_keras2(mods, "model", ORDER, mask=True)


def test_keras2_tf_checkpoint(tmp_path, capsys):
    """tf.keras' TF-format save_weights: the object graph names the layers, not the Keras that
    wrote them (TF 1.x's tf.keras defaulted to hard_sigmoid, TF 2's to sigmoid): refused
    without a statement; --config makes it exact; the version is needed for masked calls."""
    src = os.path.join(K2, "ckpt")
    err = cli_convert(src, tmp_path, capsys, code=2)
    assert "lstm: recurrent_activation = '(not stored in the file)'" in err
    assert "--keras-version or --config" in err
    config = json.load(open(os.path.join(K2, "model.json")))
    assert config.pop("keras_version") == "2.21.0"  # model.to_json() records it ...
    (tmp_path / "bare.json").write_text(json.dumps(config))  # ... a hand-made config may not
    mods, log = cli_convert(src, tmp_path, capsys, "--config", str(tmp_path / "bare.json"))
    assert "stored as layer_with_weights-0/cell/kernel/.ATTRIBUTES/VARIABLE_VALUE" in log
    assert (
        "written by: Keras 2 (tf.keras' object names in the checkpoint; its version is not "
        "stored)" in log
    )
    with pytest.raises(NotImplementedError, match="convert with --keras-version"):
        mods["lstm"](torch.zeros(3, 6, 4), mask=torch.ones(3, 6, dtype=torch.bool))
    mods, _ = cli_convert(src, tmp_path, capsys, "--config", str(tmp_path / "bare.json"),
                       "--keras-version", "2.21.0")  # fmt: skip
    compare_with_stored_keras2(mods, "model", ORDER, mask=True)
    mods, _ = cli_convert(src, tmp_path, capsys, "--config", os.path.join(K2, "model.json"))
    compare_with_stored_keras2(mods, "model", ORDER, mask=True)


def test_config_names_the_keras_that_wrote_a_checkpoint():
    """The checkpoint above stores no Keras version; --config's `keras_version` becomes the
    writer's, its major version (2, which --verify's oracle runs in tf_keras) and where it came
    from."""
    from torch_lstm_grad.porting.convert import read_source
    from torch_lstm_grad.porting.source import Writer

    config = os.path.join(K2, "model.json")
    assert read_source(os.path.join(K2, "ckpt")).writer.keras_version is None
    writer = read_source(os.path.join(K2, "ckpt"), config=config).writer
    assert writer == Writer("keras", "2.21.0", 2, f"--config {config}")


def test_keras2_saved_model(tmp_path, capsys):
    """tf_keras' `model.save(dir, save_format="tf")` of the fixture model LSTM(hard_sigmoid,
    return_sequences) -> GRU(reset_after=False): the config and the Keras version from
    keras_metadata.pb, the variables by their SavedVariable names; exact against tf_keras' own
    numbers, converted with TensorFlow (where installed) and in a process that cannot import it."""
    src = os.path.join(K2, "saved_model")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "TF2 SavedModel (tags serve; TF 2.21.0; signature serving_default) with the " in log
    assert "written by: Keras 2.21.0 (keras_metadata.pb)" in log
    assert "gate_activation      = 'hard_sigmoid_keras2'  <- keras_metadata.pb" in log
    assert "reset_after          = False  <- the bias shape" in log
    compare_with_stored_keras2(mods, "savedmodel", ["lstm", "gru"], mask=False, last_only=True)
    convert_without_tf(src, tmp_path / "no_tf.pt")
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))


def test_keras2_subclassed_saved_model(tmp_path, capsys):
    """A subclassed model's SavedModel: its own config lists no layers (the base Model's
    get_config()), so each layer's config is its own entry in keras_metadata.pb, a nested
    Sequential's in that model's config, and neither a Bidirectional's halves nor the cells
    are layers of their own; exact against tf_keras' own numbers (the backwards GRU and the
    sequences returned would differ if the attributes were taken as defaults)."""
    src = os.path.join(K2, "saved_model_subclassed")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "go_backwards         = True  <- keras_metadata.pb" in log
    assert log.count("return_sequences     = True  <- keras_metadata.pb") == 3
    assert sorted(mods) == ["bi", "gru"]
    compare_with_stored_keras2(mods, "subclassed", ["bi", "gru"], mask=False, last_only=True)


def test_keras2_saved_model_without_its_metadata(tmp_path, capsys):
    """The tf_keras SavedModel with keras_metadata.pb removed: no config, so each layer is read
    from the loop that computes it; the object graph's `_tf_keras` layer objects say Keras 2
    wrote it. Exact against tf_keras' own numbers."""
    import shutil

    src = tmp_path / "saved_model"
    shutil.copytree(os.path.join(K2, "saved_model"), src)
    os.remove(src / "keras_metadata.pb")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "layers read from its saved functions (no Keras config stored)" in log
    assert "written by: Keras 2 (tf.keras' layer objects in the object graph)" in log
    compare_with_stored_keras2(mods, "savedmodel", ["lstm", "gru"], mask=False, last_only=True)


def test_keras2_saved_model_loops_agree_with_its_config():
    """The tf_keras fixture's saved loops, read as a Keras 3 export's are
    (porting/graphs/keras_loops.py), give what its keras_metadata.pb config says: tf.keras' loop
    bodies (Keras 2's hard sigmoid as 0.2·x + 0.5 clipped, the GRU's SplitV) read the same way."""
    from torch_lstm_grad.porting.formats.saved_model import read_saved_model
    from torch_lstm_grad.porting.graphs.keras_loops import keras_layers_from_graph

    source = read_saved_model(os.path.join(K2, "saved_model"), reader="tensorbundle")
    from_graph, not_run = keras_layers_from_graph(source.graph, source.variables)
    assert not not_run and sorted(from_graph) == ["gru", "lstm"]
    for name, read in from_graph.items():
        assert read.problem is None, read.problem
        config = source.layers[name].config
        for key, value in read.config.items():
            want = config.get(key, False)  # zero_output_for_mask: not in tf.keras' config
            if key == "recurrent_activation" and want == "hard_sigmoid":
                want = "hard_sigmoid_keras2"
            assert value == want, (name, key, value, want)


def _metadata_in_object_graph(fixture, dst, edit=lambda metadata: metadata):
    """A copy of the SavedModel `fixture` as tf.keras before TF 2.5 wrote it: each object's
    metadata JSON (after `edit(dict)`) in the object graph's `user_object.metadata`, no
    keras_metadata.pb (rewritten by TF's own protobuf classes)."""
    import shutil

    from tensorflow.core.protobuf import saved_model_pb2

    from torch_lstm_grad.porting.decoding import proto

    shutil.copytree(os.path.join(K2, fixture), dst)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((dst / "saved_model.pb").read_bytes())
    nodes = sm.meta_graphs[0].object_graph_def.nodes
    for entry in proto.fields((dst / "keras_metadata.pb").read_bytes())[1]:
        f = proto.fields(entry)  # SavedObject {node_id = 2, metadata = 5}
        metadata = json.dumps(edit(json.loads(proto.message(f, 5))))
        nodes[proto.integer(f, 2)].user_object.metadata = metadata
    (dst / "saved_model.pb").write_bytes(sm.SerializeToString())
    (dst / "keras_metadata.pb").unlink()
    return dst


@pytest.mark.parametrize("fixture", ["saved_model", "saved_model_subclassed"])
def test_keras2_saved_model_metadata_in_object_graph(tmp_path, capsys, fixture):
    """tf.keras before TF 2.5 kept each object's metadata JSON in the object graph
    (`user_object.metadata`) and wrote no keras_metadata.pb: the fixture rewritten so ports the
    same modules (the subclassed model's layers found by their paths in the object graph, as
    keras_metadata.pb's node paths find them)."""
    pytest.importorskip("tensorflow")
    src = _metadata_in_object_graph(fixture, tmp_path / "old")
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "with the Keras model config (the object graph's user_object.metadata)" in log
    want_mods, want_log = cli_convert(os.path.join(K2, fixture), tmp_path, capsys)
    same_modules(mods, want_mods)
    # every attribute from the same entries (not the loops' reading, nor defaults), named so
    where = "the object graph's user_object.metadata"
    want_log = want_log.replace("keras_metadata.pb", where).replace(
        os.path.join(K2, fixture), str(src)
    )
    assert log == want_log


def test_keras2_saved_model_metadata_without_a_keras_version(tmp_path, capsys):
    """Metadata that names no keras_version (tf.keras wrote one from TF 2.0 on, but the field is
    optional): taken as tf.keras 2's, said so, and ported as the versioned file is."""
    pytest.importorskip("tensorflow")

    def unversioned(metadata):
        metadata.pop("keras_version", None)
        return metadata

    src = _metadata_in_object_graph("saved_model", tmp_path / "old", unversioned)
    mods, log = cli_convert(src, tmp_path, capsys)
    assert (
        "written by: Keras 2 (the object graph's user_object.metadata (no keras_version: "
        "tf.keras 2))" in log
    )
    same_modules(mods, cli_convert(os.path.join(K2, "saved_model"), tmp_path, capsys)[0])


@pytest.mark.parametrize("fixture", ["saved_model", "saved_model_subclassed"])
def test_keras2_model_held_by_another_object(fixture):
    """tf.saved_model.save of a tf.Module that holds a tf.keras model (before TF 2.5 the Keras
    objects' metadata went into the object graph, under the holder's paths): no entry is the
    root, and the layers are the first model's, Sequential or subclassed, as when the model is
    the root. The fixture's own entries, moved under `root.model`."""
    from torch_lstm_grad.porting.formats.saved_model import (
        SavedObjects,
        _apply_keras_metadata,
        _keras_metadata,
    )

    entries, _ = _keras_metadata(os.path.join(K2, fixture), SavedObjects())
    held = {"root.model" + path.removeprefix("root"): e for path, e in entries.items()}
    as_root = porting.read_source(os.path.join(K2, fixture), reader="tensorbundle")
    as_held = porting.read_source(os.path.join(K2, fixture), reader="tensorbundle")
    where = "the object graph's user_object.metadata"
    _apply_keras_metadata(as_root, entries, where)
    _apply_keras_metadata(as_held, held, where)
    want = ["gru", "input_1", "lstm"] if fixture == "saved_model" else ["bi", "bi/layer", "gru"]
    assert sorted(as_root.layers)[:3] == want
    assert as_held.layers == as_root.layers and as_held.mask_layers == as_root.mask_layers


def test_keras2_hard_sigmoid_is_keras2s(tmp_path, capsys):
    """A Keras 2 config's "hard_sigmoid" is Keras 2's clip(0.2x + 0.5, 0, 1), not Keras 3's
    relu6(x + 3) / 6: described so, and exact against tf_keras' own run."""
    mods, log = cli_convert(os.path.join(K2, "hard.h5"), tmp_path, capsys)
    assert "gate_activation      = 'hard_sigmoid_keras2'  <- the file's model_config" in log
    compare_with_stored_keras2(mods, "hard", ["hard"], mask=False)


# -- a published Keras 2.2.0 model ----------------------------------------------------------------

CHARS = "!\"#$%&'()*+,-./0123456789:;<=>?@_abcdefghijklmnopqrstuvwxyz"  # chars2vec's model.pkl


def _chars2vec_inputs(words):
    """chars2vec's encoding: one-hot characters, padded at the front to the longest word."""
    T = max(map(len, words))
    x = np.zeros((len(words), T, len(CHARS)), np.float32)
    for b, w in enumerate(words):
        for t, ch in enumerate(w.lower()):
            x[b, T - len(w) + t, CHARS.index(ch)] = 1.0
    return x


def test_chars2vec_description(tmp_path, capsys):
    """The weights-only file says keras_version 2.2.0: both LSTMs get Keras 2.2's
    hard_sigmoid gates (printed as the version's default), never the logistic sigmoid."""
    src = porting.read_source(CHARS2VEC)
    assert src.writer.keras_version == "2.2.0" and not src.layers
    descriptions, _ = porting.describe(src)
    assert [d.name for d in descriptions] == ["lstm_1", "lstm_2"]
    for d in descriptions:
        gate = d.attrs["gate_activation"]
        assert gate.value == "hard_sigmoid_keras2" and not gate.stored
        assert gate.origin == "default of Keras 2.2.0 (hard_sigmoid)"
        assert d.value("units") == 50


@needs_tf
def test_chars2vec_ports_exactly(tmp_path, capsys):
    """The published model, converted, against Keras 2's LSTM math run by TensorFlow (Keras 3's
    LSTM with Keras 2's hard_sigmoid as the recurrent activation, which TF computes as
    clip_by_value(0.2x + 0.5, 0, 1)): the embedding and every gradient."""

    tf = tf_module()
    import keras

    out = tmp_path / "out.pt"
    # A weights-only file: chars2vec/model.py's return_sequences=True on the first LSTM is
    # not stored and is stated here, as a user porting it would.
    code = cli.main(["convert", CHARS2VEC, "-o", str(out), "--set",
                     "lstm_1:return_sequences=true"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    log = capsys.readouterr().out
    assert "return_sequences     = True  <- --set  [not stored in the file]" in log
    mods = porting.load(out)

    def hard_sigmoid_keras2(x):
        return tf.clip_by_value(x * 0.2 + 0.5, 0.0, 1.0)

    inp = keras.Input((None, len(CHARS)))
    l1 = keras.layers.LSTM(50, return_sequences=True, recurrent_activation=hard_sigmoid_keras2)
    l2 = keras.layers.LSTM(50, recurrent_activation=hard_sigmoid_keras2)
    model = keras.Model(inp, l2(l1(inp)))
    variables = porting.read_variables(CHARS2VEC)
    for layer, name in ((l1, "lstm_1"), (l2, "lstm_2")):
        layer.set_weights([variables[f"{name}/{w}"] for w in ("kernel", "recurrent_kernel",
                                                              "bias")])  # fmt: skip
    x = _chars2vec_inputs(["hello", "world", "porting", "keras"])
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        want = model(xt)
        (r,) = loss_weights([want], 1)
        loss = tf.reduce_sum(want * r)
    g = tape.gradient(loss, [xt, *model.trainable_weights])
    x_t = torch.from_numpy(x).requires_grad_()
    got = mods["lstm_2"](mods["lstm_1"](x_t))
    params = [getattr(mods[n], w) for n in ("lstm_1", "lstm_2")
              for w in ("kernel", "recurrent_kernel", "bias")]  # fmt: skip
    grads = torch.autograd.grad((got * torch.from_numpy(r)).sum(), [x_t, *params])
    assert_close({"embedding": (got, want.numpy()), "d x": (grads[0], g[0].numpy()),
                  **{f"d {k}": (a, b.numpy()) for k, (a, b) in
                     enumerate(zip(grads[1:], g[1:], strict=True))}})  # fmt: skip


def test_keras2_cudnn_layers(tmp_path, capsys):
    """Keras 2's legacy CuDNNLSTM / CuDNNGRU (cuDNN's weight layout, bias [8U] / [6U]) port to
    the LSTM and GRU(reset_after=True) Keras' own loader converts them to, against those run by
    tf_keras; from the whole-model file, and from weights alone with the call semantics stated
    by --set."""
    mods, log = cli_convert(os.path.join(K2, "cudnn.h5"), tmp_path, capsys)
    assert "clstm: keras.CuDNNLSTM" in log and "cgru: keras.CuDNNGRU" in log
    compare_with_stored_keras2(mods, "cudnn", ["clstm", "cgru"], mask=False)
    with pytest.raises(NotImplementedError, match="CuDNN layers take no mask"):
        mods["clstm"](torch.zeros(3, 6, 4), mask=torch.ones(3, 6, dtype=torch.bool))
    src = os.path.join(K2, "cudnn_weights.h5")
    mods, log = cli_convert(src, tmp_path, capsys, "--set", "return_sequences=true",
                         "--set", "cgru:go_backwards=true")  # fmt: skip
    assert "go_backwards         = True  <- --set  [not stored in the file]" in log
    compare_with_stored_keras2(mods, "cudnn", ["clstm", "cgru"], mask=False)
