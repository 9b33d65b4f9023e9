"""The Keras describer (porting/describe/keras_rnn.py) on real files Keras 3 wrote and then altered
as an older Keras, a damaged file or a hostile one would have them: weights named without the
cell scope (Keras <= 2.3's legacy HDF5), a file that does not say its Keras version or says an
old one, a config that disagrees with the weights, a weight missing or of the wrong shape, two
forward halves. Each case checks the description the converter prints (value, origin, and
whether the file stored it) or the refusal, word for word: layer, attribute, the value the file
holds, and why.

The files start as Keras' own (`model.save("m.h5")`, `model.save("m.keras")`); the edits are
h5py/zip rewrites of the attributes Keras itself reads (`keras_version`, `model_config`,
`weight_names`)."""

import json
import re
import shutil

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, keras_module, keras_run, needs_tf, randomize, torch_loss
from torch_lstm_grad import porting
from torch_lstm_grad.porting import Statements

pytestmark = needs_tf
T, I = 5, 3  # noqa: E741


def _save(model, directory, stem):
    randomize(model.trainable_weights, 34)
    model.save(directory / f"{stem}.h5")
    model.save(directory / f"{stem}.keras")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """`base`: a model with every plain layer kind (and layers named like a Bidirectional's
    halves); `bi`: a Bidirectional whose backward layer has its own config; `mask`: an LSTM
    after a Masking layer; `stacked`: one RNN layer over two cells."""
    keras = keras_module()
    d = tmp_path_factory.mktemp("keras_describer")
    L = keras.layers
    x = keras.Input((T, I), name="x")
    y = L.LSTM(4, return_sequences=True, name="lstm")(x)
    y = L.GRU(3, return_sequences=True, name="gru")(y)
    y = L.GRU(2, return_sequences=True, reset_after=False, name="gru_b")(y)
    y = L.GRU(2, return_sequences=True, use_bias=False, name="gru_nb")(y)
    y = L.SimpleRNN(2, return_sequences=True, name="rnn")(y)
    y = L.LSTM(1, return_sequences=True, name="tiny")(y)
    y = L.LSTM(2, return_sequences=True, name="forward_lstm")(y)
    y = L.GRU(2, return_sequences=True, name="backward_gru")(y)
    # (every layer named: Keras' automatic names depend on what the process made before)
    y = L.Bidirectional(L.LSTM(2, return_sequences=True, name="half"), name="bi")(y)
    _save(keras.Model(x, y), d, "base")

    x = keras.Input((T, I), name="x")
    fw = L.LSTM(2, return_sequences=True, name="fw")
    bw = L.LSTM(2, return_sequences=True, go_backwards=True, activation="relu", name="bw")
    y = L.Bidirectional(fw, backward_layer=bw, name="bi")(x)
    _save(keras.Model(x, y), d, "bi")

    x = keras.Input((T, I), name="x")
    y = L.LSTM(2, return_sequences=True, name="after_mask")(L.Masking(name="masking")(x))
    _save(keras.Model(x, y), d, "mask")

    x = keras.Input((T, I), name="x")
    y = L.RNN([L.LSTMCell(2), L.GRUCell(3)], return_sequences=True, name="stacked")(x)
    _save(keras.Model(x, y), d, "stacked")
    return d


# -- editing Keras' files ---------------------------------------------------------------------


def _h5(files, stem, tmp_path, edit):
    """A copy of `<stem>.h5` with `edit(h5py.File)` applied."""
    import h5py

    out = tmp_path / f"{stem}-edited.h5"
    shutil.copy(files / f"{stem}.h5", out)
    with h5py.File(out, "r+") as h5:
        edit(h5)
    return out


def _layer_weights(h5, layer) -> dict:
    g = h5["model_weights"][layer]
    return {n.decode() if isinstance(n, bytes) else n: g[n][()] for n in g.attrs["weight_names"]}


def _put_layer_weights(h5, layer, weights: dict) -> None:
    """Replaces a layer's weights (names as Keras lists them in `weight_names`)."""
    g = h5["model_weights"][layer]
    for key in list(g):
        del g[key]
    for name, value in weights.items():
        g.create_dataset(name, data=value)
    g.attrs["weight_names"] = np.array([n.encode() for n in weights], dtype="S")


def _edit_weights(layer, fn):
    def edit(h5):
        _put_layer_weights(h5, layer, fn(_layer_weights(h5, layer)))

    return edit


def _no_cell_scope(h5) -> None:
    """Names as Keras <= 2.3 wrote them: `lstm/kernel:0`, no `lstm_cell/` between."""
    for layer in h5["model_weights"]:
        if "weight_names" not in h5["model_weights"][layer].attrs:
            continue
        w = _layer_weights(h5, layer)
        _put_layer_weights(
            h5,
            layer,
            {
                n.replace("lstm_cell/", "").replace("gru_cell/", "").replace("simple_rnn_cell/", "")
                + ":0": v
                for n, v in w.items()
            },
        )


def _version(version):
    """Sets (or with None removes) the `keras_version` Keras stores at the root and on
    `model_weights`."""

    def edit(h5):
        for obj in (h5, h5["model_weights"]):
            if "keras_version" in obj.attrs:
                del obj.attrs["keras_version"]
            if version is not None:
                obj.attrs["keras_version"] = version

    return edit


def _no_config(h5) -> None:
    del h5.attrs["model_config"]


def _config(fn):
    def edit(h5):
        cfg = json.loads(h5.attrs["model_config"])
        fn({layer["config"]["name"]: layer for layer in cfg["config"]["layers"]})
        h5.attrs["model_config"] = json.dumps(cfg)

    return edit


def _edits(*edits):
    def edit(h5):
        for e in edits:
            e(h5)

    return edit


def _describe(path, *sets, keras_version=None):
    """`({name: description}, [refusal lines])` as `convert` prints them."""
    st = Statements.from_args(sets, keras_version=keras_version)
    descriptions, refusals = porting.describe(porting.read_source(path), st)
    return {d.name: d for d in descriptions}, [str(r) for r in refusals]


def _attr(d, key):
    a = d.attrs[key]
    return a.value, a.origin, a.stored


def _lines(ds, name):
    return "\n".join(ds[name].lines())


# -- names ------------------------------------------------------------------------------------


def test_layers_named_like_a_bidirectionals_halves(files):
    """An LSTM named "forward_lstm" and a GRU named "backward_gru" are layers of their own (the
    halves are recognised only below a layer); the real Bidirectional has both halves."""
    ds, refusals = _describe(files / "base.h5")
    assert refusals == []
    assert ds["forward_lstm"].kind == "keras.LSTM" and ds["backward_gru"].kind == "keras.GRU"
    assert not ds["forward_lstm"].children and _attr(ds["forward_lstm"], "units")[0] == 2
    assert sorted(ds["bi"].children) == ["backward", "forward"]
    assert ds["bi"].where == "config of layer 'bi'"
    assert _attr(ds["bi"], "merge_mode") == ("concat", "the file's model_config", True)
    assert ds["lstm"].where == "config of layer 'lstm'"


def test_keras2_names_without_the_cell_scope(files, tmp_path):
    """Keras <= 2.3 named weights `lstm_1/kernel:0`: with no cell name, the class comes from the
    shapes (a 1-unit LSTM, a GRU without bias, a SimpleRNN), and the description says where."""
    path = _h5(files, "base", tmp_path, _edits(_no_config, _no_cell_scope, _version("2.3.1")))
    ds, refusals = _describe(path, "gru_nb:reset_after=false")
    assert refusals == []
    kinds = {n: d.kind for n, d in ds.items()}
    assert kinds == {
        "backward_gru": "keras.GRU", "bi": "keras.Bidirectional", "forward_lstm": "keras.LSTM",
        "gru": "keras.GRU", "gru_b": "keras.GRU", "gru_nb": "keras.GRU", "lstm": "keras.LSTM",
        "rnn": "keras.SimpleRNN", "tiny": "keras.LSTM",
    }  # fmt: skip
    assert _attr(ds["tiny"], "units") == (1, "recurrent_kernel's shape", True)
    assert ds["lstm"].where == "variables lstm/* (no config in the file)"
    assert _attr(ds["gru_nb"], "reset_after") == (False, "--set", False)
    assert _attr(ds["gru_b"], "reset_after") == (False, "the bias shape", True)
    # time_major: Keras 2 had it; its default is the writer's
    assert _attr(ds["lstm"], "time_major") == (False, "default of Keras 2.3.1", False)
    # go_backwards of a Bidirectional's halves, with no config: by which half they are
    fw, bw = ds["bi"].children["forward"], ds["bi"].children["backward"]
    assert _attr(fw, "go_backwards") == (False, "the Bidirectional's forward layer", True)
    assert _attr(bw, "go_backwards") == (True, "the Bidirectional's backward layer", True)
    assert bw.where == "variables bi/backward_half/* (no config in the file)"
    assert ds["bi"].where == "variables bi/*"
    assert _attr(ds["bi"], "merge_mode") == ("concat", "default of Keras 2.3.1", False)


def test_cell_names_decide_the_class(files, tmp_path):
    """A numbered cell scope (`lstm_cell_3`, as tf.keras numbered cells) is read by shapes; of
    two cell names the innermost owns the weights; a layer named like a cell (no cell scope)
    is not taken for that cell."""

    def rename(h5):
        for layer, new in (("lstm", "lstm/lstm_cell_3/"), ("gru", "gru/lstm_cell/gru_cell/")):
            w = _layer_weights(h5, layer)
            _put_layer_weights(h5, layer, {new + n.rpartition("/")[2]: v for n, v in w.items()})
        w = _layer_weights(h5, "rnn")  # a SimpleRNN whose layer is named "lstm_cell"
        _put_layer_weights(
            h5, "rnn", {"lstm_cell/" + n.rpartition("/")[2]: v for n, v in w.items()}
        )

    ds, refusals = _describe(_h5(files, "base", tmp_path, _edits(_no_config, rename)))
    assert ds["lstm"].kind == "keras.LSTM" and ds["gru"].kind == "keras.GRU"
    assert ds["lstm_cell"].kind == "keras.SimpleRNN"
    assert refusals == [
        "gru_nb: reset_after = '(not stored)': a GRU without bias does not show its reset "
        "position: give --set reset_after=true/false"
    ]


@pytest.mark.parametrize(
    "shape, why",
    [
        ((16,), "class = '(unknown)'"),  # rank 1
        ((4, 10), "class = '(unknown)'"),  # not a multiple of the units
        ((4, 17), "class = '(unknown)'"),  # 17 // 4 = 4 gates, but not 4 x 4
        ((0, 4), "class = '(unknown)'"),  # no units
    ],
    ids=["rank1", "not_a_multiple", "remainder", "no_units"],
)
def test_recurrent_kernel_of_no_known_class(files, tmp_path, shape, why):
    """With no cell name and no config, a recurrent kernel no layer has is refused by name."""

    def edit(w):
        return {n: (np.zeros(shape, np.float32) if "recurrent" in n else v) for n, v in w.items()}

    path = _h5(
        files, "base", tmp_path, _edits(_no_config, _no_cell_scope, _edit_weights("lstm", edit))
    )
    _, refusals = _describe(path, "gru_nb:reset_after=false")
    assert refusals == [
        f"lstm: {why}: not a Keras recurrent layer this converter ports (LSTM, GRU, SimpleRNN, "
        "Bidirectional)"
    ]


# -- the writer's version and its defaults ------------------------------------------------------


@pytest.mark.parametrize(
    "version, gate, origin",
    [
        ("3.0.0", "sigmoid", "default of Keras 3.0.0"),
        ("2.3.0", "sigmoid", "default of Keras 2.3.0"),
        ("2.10.0", "sigmoid", "default of Keras 2.10.0"),
        ("2.2.4", "hard_sigmoid_keras2", "default of Keras 2.2.4 (hard_sigmoid)"),
        ("2.1.6", "hard_sigmoid_keras2", "default of Keras 2.1.6 (hard_sigmoid)"),
        ("2.2.4-tf", None, "tf.keras 2.2.4-tf was TF 1.13-1.15's (default hard_sigmoid) and TF "
         "2.0-2.1's (default sigmoid)"),
        ("1.2.2", None, "Keras 1.2.2: Keras 1 files are not read"),
        ("0.3.3", None, "Keras 0.3.3: Keras 1 files are not read"),
        (None, None, "the file does not say which Keras wrote it"),
    ],
)  # fmt: skip
def test_gate_activation_default_by_version(files, tmp_path, version, gate, origin):
    """A weights-only file's LSTM gates: the default of the Keras that wrote it (sigmoid from
    Keras 2.3.0 and in Keras 3, hard_sigmoid before), refused where the version does not tell."""
    path = _h5(files, "base", tmp_path, _edits(_no_config, _version(version)))
    ds, refusals = _describe(path, "gru_nb:reset_after=true")
    if gate is not None:
        assert refusals == []
        assert _attr(ds["lstm"], "gate_activation") == (gate, origin, False)
    else:
        assert (
            f"lstm: recurrent_activation = '(not stored in the file)': {origin}: give --set "
            "recurrent_activation=sigmoid|hard_sigmoid, --keras-version or --config"
        ) in refusals


@pytest.mark.parametrize(
    "version, legacy",
    [("2.2.0", True), ("2.3.0", False), ("3.0.0", False), ("3.15.1", False)],
)
def test_masked_outputs_by_version(files, tmp_path, version, legacy):
    """Masked steps' outputs by the Keras that wrote the layer: Keras >= 2.3 (and 3) the
    previous output; Keras <= 2.2's backends the previous state (`states[0]`), for a
    Bidirectional's halves too, which Keras 2.2's Bidirectional does not zero."""
    path = _h5(files, "base", tmp_path, _edits(_no_config, _version(version)))
    ds, _ = _describe(path, "gru_nb:reset_after=true")
    layers = [ds["lstm"], ds["bi"].children["forward"], ds["bi"].children["backward"]]
    if not legacy:
        assert [d.value("zero_output_for_mask") for d in layers] == [False, False, False]
        assert [d.value("masked_outputs") for d in layers] == [None] * 3
        return
    none = (False, f"Keras {version}: Keras <= 2.2 has none", False)
    assert [_attr(d, "zero_output_for_mask") for d in layers] == [none] * 3
    assert [d.value("masked_outputs") for d in layers] == ["previous_state"] * 3


def test_masked_outputs_of_an_unknown_version_raise(files, tmp_path):
    """A file that does not say which Keras wrote it: Keras <= 2.2 and later differ on masked
    steps, so the layer is marked and a call with a mask raises."""
    path = _h5(files, "base", tmp_path, _edits(_no_config, _version(None)))
    ds, _ = _describe(path, "gru_nb:reset_after=true", "recurrent_activation=sigmoid")
    assert ds["lstm"].value("zero_output_for_mask") is None


def test_keras_version_statement(files, tmp_path):
    """--keras-version: refused where the file names another version; for a file that names
    none it decides what a config's "hard_sigmoid" is, and the origins say where it came from."""
    with pytest.raises(ValueError, match="--keras-version 2.2.4: the file says it was written "
                       "by Keras 3.15.1"):  # fmt: skip
        _describe(files / "base.h5", keras_version="2.2.4")
    ds, refusals = _describe(files / "base.h5", keras_version="3.15.1")  # the same: accepted
    assert refusals == []

    def hard(layers):
        layers["lstm"]["config"]["recurrent_activation"] = "hard_sigmoid"

    path = _h5(files, "base", tmp_path, _edits(_config(hard), _version(None)))
    _, refusals = _describe(path)
    assert refusals == [
        "lstm: recurrent_activation = 'hard_sigmoid': hard_sigmoid differs between Keras 2 "
        "(0.2x + 0.5) and Keras 3 (relu6(x + 3) / 6) and the file does not say which Keras "
        "wrote it: give --keras-version"
    ]
    for version, gate in (("2.2.0", "hard_sigmoid_keras2"), ("2.3.1", "hard_sigmoid_keras2"),
                          ("3.0.0", "hard_sigmoid_keras3")):  # fmt: skip
        ds, refusals = _describe(path, keras_version=version)
        assert refusals == []
        assert _attr(ds["lstm"], "gate_activation") == (
            gate,
            f"the file's model_config ('hard_sigmoid' of Keras {version[0]})",
            True,
        )
    ds, _ = _describe(_h5(files, "base", tmp_path, _edits(_no_config, _version(None))),
                      "gru_nb:reset_after=true", keras_version="2.3.1")  # fmt: skip
    assert _attr(ds["lstm"], "activation") == (
        "tanh",
        "default of Keras 2.3.1 (--keras-version)",
        False,
    )


# -- a config and weights that disagree, damaged weights ----------------------------------------


def _set_key(layer, key, value):
    def fn(layers):
        if value is _DROP:
            del layers[layer]["config"][key]
        else:
            layers[layer]["config"][key] = value

    return _config(fn)


_DROP = object()


def _drop_weight(layer, leaf):
    return _edit_weights(layer, lambda w: {n: v for n, v in w.items() if not n.endswith(leaf)})


def _reshape_weight(layer, leaf, shape):
    def fn(w):
        return {n: (np.zeros(shape, np.float32) if n.endswith("/" + leaf) else v)
                for n, v in w.items()}  # fmt: skip

    return _edit_weights(layer, fn)


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (_drop_weight("lstm", "/kernel"),
         "lstm: weights = \"['bias', 'recurrent_kernel'] under lstm/lstm_cell\": no kernel: a "
         "Keras LSTM has a kernel and a recurrent_kernel"),
        (_reshape_weight("lstm", "kernel", (3, 15)),
         "lstm: weights = 'kernel [3, 15], recurrent_kernel [4, 16]': not the shapes of a Keras "
         "LSTM ([I, 4U], [U, 4U])"),
        (_reshape_weight("lstm", "kernel", (3, 16, 1)),
         "lstm: weights = 'kernel [3, 16, 1], recurrent_kernel [4, 16]': not the shapes of a "
         "Keras LSTM ([I, 4U], [U, 4U])"),
        (_reshape_weight("lstm", "bias", (15,)), "lstm: bias = [15]: expected [16]"),
        (_drop_weight("lstm", "/bias"),
         "lstm: use_bias = True: the file's model_config says so, but the file has no bias "
         "variable"),
        (_set_key("lstm", "use_bias", False),
         "lstm: use_bias = False: the file's model_config says so, but the file has bias "
         "variable"),
        (_set_key("gru_nb", "use_bias", True),
         "gru_nb: use_bias = True: the file's model_config says so, but the file has no bias "
         "variable"),
        (_reshape_weight("gru_b", "bias", (7,)),
         "gru_b: bias = [7]: neither [6] (reset_after=False) nor [2, 6] (reset_after=True)"),
        (_set_key("gru", "reset_after", False),
         "gru: reset_after = False: the file's model_config says so, but the bias has shape "
         "[2, 9]"),
        (_set_key("lstm", "dtype", "mixed_float16"),
         "lstm: dtype = 'mixed_float16': the layer computes in a reduced precision; the module "
         "computes in the weights' dtype (--approximate: compute in float32)"),
    ],
    ids=["no_kernel", "kernel_columns", "kernel_rank3", "bias_shape", "no_bias", "bias_unsaid",
         "bias_missing",
         "gru_bias", "reset_after", "dtype"],
)  # fmt: skip
def test_damaged_weights_refused_by_name(files, tmp_path, edit, refusal):
    _, refusals = _describe(_h5(files, "base", tmp_path, edit))
    assert refusals == [refusal]


def _class(layer, cls):
    def fn(layers):
        layers[layer]["class_name"] = cls

    return _config(fn)


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (_class("lstm", "PeepholeLSTM"),
         "lstm: class = 'PeepholeLSTM': not a Keras recurrent layer this converter ports (LSTM, "
         "GRU, SimpleRNN, Bidirectional)"),
        (_class("lstm", "GRU"),
         "lstm: class = 'GRU': the config says GRU, the weights' shapes are a LSTM's"),
        (_config(lambda layers: layers["lstm"]["config"].update(name="lstm_renamed")),
         "lstm: config = '(missing)': the file's config has no layer named 'lstm', but the "
         "weights lstm/lstm_cell/* exist"),
    ],
    ids=["unknown_class", "other_class", "missing_config"],
)  # fmt: skip
def test_config_that_does_not_fit_the_weights(files, tmp_path, edit, refusal):
    _, refusals = _describe(_h5(files, "base", tmp_path, edit))
    assert refusals == [refusal]


def test_tf_keras_v1_class_names(files, tmp_path):
    """tf.keras' TF1-era classes (LSTMV1, GRUV1) are the same math as LSTM and GRU."""
    path = _h5(files, "base", tmp_path, _edits(_class("lstm", "LSTMV1"), _class("gru", "GRUV1")))
    ds, refusals = _describe(path)
    assert refusals == []
    assert ds["lstm"].kind == "keras.LSTM" and ds["gru"].kind == "keras.GRU"


def test_gru_without_bias_takes_its_reset_position_from_the_config(files, tmp_path):
    ds, _ = _describe(files / "base.h5")
    assert _attr(ds["gru_nb"], "reset_after") == (True, "the file's model_config", True)
    ds, _ = _describe(_h5(files, "base", tmp_path, _set_key("gru_nb", "reset_after", False)))
    assert _attr(ds["gru_nb"], "reset_after") == (False, "the file's model_config", True)


def test_stored_and_default_origins(files, tmp_path):
    """What the config stores is marked stored, with its origin; a key it lacks is the writer's
    default, not stored; the dtype with no config is the weights'."""
    ds, _ = _describe(_h5(files, "base", tmp_path, _set_key("lstm", "return_state", _DROP)))
    assert _attr(ds["lstm"], "return_sequences") == (True, "the file's model_config", True)
    assert _attr(ds["lstm"], "return_state") == (False, "default of Keras 3.15.1", False)
    assert _attr(ds["lstm"], "dtype") == ("float32", "the file's model_config", True)
    assert _attr(ds["lstm"], "activation") == ("tanh", "the file's model_config", True)
    # Keras 3 configs have no time_major: its layers are batch-major
    assert _attr(ds["lstm"], "time_major") == (
        False,
        "Keras 3's recurrent layers are batch-major",
        True,
    )
    ds, _ = _describe(_h5(files, "base", tmp_path, _edits(_no_config)), "gru_nb:reset_after=1")
    assert _attr(ds["lstm"], "dtype") == ("float32", "the weights' dtype", True)
    assert _attr(ds["lstm"], "activation") == ("tanh", "default of Keras 3.15.1", False)
    assert _attr(ds["gru_nb"], "reset_after") == (True, "--set", False)
    ds, _ = _describe(_h5(files, "base", tmp_path, _set_key("lstm", "dtype", "mixed_float16")))
    assert _attr(ds["lstm"], "dtype") == ("mixed_float16", "the file's model_config", True)


# -- Bidirectional ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [".h5", ".keras"])
def test_bidirectional_with_its_own_backward_layer(files, tmp_path, fmt):
    """A Bidirectional given a backward_layer: Keras names the forward half `forward_fw` but
    keeps the backward layer's own name (`bi/bw/lstm_cell/...`), and that layer's config (relu,
    go_backwards stored) is the backward half's. Before, its weights were taken for a layer
    `bw` the config lacks, and the file refused. The port computes what Keras computes."""
    keras = keras_module()
    path = files / f"bi{fmt}"
    ds, refusals = _describe(path)
    assert refusals == []
    fw, bw = ds["bi"].children["forward"], ds["bi"].children["backward"]
    where = "the file's model_config" if fmt == ".h5" else "config.json"
    assert _attr(bw, "activation") == ("relu", where, True)
    assert _attr(fw, "activation") == ("tanh", where, True)
    assert _attr(bw, "go_backwards") == (True, where, True)
    assert _attr(fw, "go_backwards") == (False, where, True)
    out = tmp_path / "bi.pt"
    porting.convert(path, out, log=lambda *a: None)
    model = keras.saving.load_model(path)
    x = np.random.default_rng(3).standard_normal((2, T, I)).astype(np.float32)
    want, rs, (dx,), dw = keras_run(model, [x], 5)
    mod = porting.load(out)["bi"]
    xt = torch.from_numpy(x).requires_grad_()
    got = mod(xt)
    params = dict(mod.named_parameters())
    assert len(params) == len(dw) == 6
    grads = torch.autograd.grad(torch_loss([got], rs), [xt, *params.values()])
    pairs = {"output": (got, want[0]), "d x": (grads[0], dx)}
    # Keras' paths: bi/forward_fw/lstm_cell/kernel; ours: forward_layer.kernel
    for name, g, (path_, w) in zip(params, grads[1:], _keras_order(dw), strict=True):
        pairs[f"d {name} ({path_})"] = (g, w)
    assert_close(pairs)

    def keras2_config(layers):  # tf.keras stored backward_layer only when one was given
        del layers["bi"]["config"]["backward_layer"]

    def no_go_backwards(layers):
        keras2_config(layers)
        del layers["bi"]["config"]["layer"]["config"]["go_backwards"]

    for edit in (keras2_config, no_go_backwards):
        ds, refusals = _describe(_h5(files, "base", tmp_path, _config(edit)))
        assert refusals == []
        fw, bw = ds["bi"].children["forward"], ds["bi"].children["backward"]
        assert (fw.value("go_backwards"), bw.value("go_backwards")) == (False, True)


def _keras_order(dw):
    """Keras' weight gradients in the order of the module's parameters (forward half first;
    kernel, recurrent_kernel, bias)."""
    key = {"kernel": 0, "recurrent_kernel": 1, "bias": 2}
    return sorted(
        dw.items(), key=lambda kv: ("forward_" not in kv[0], key[kv[0].rpartition("/")[2]])
    )


def _bi_weights(fn):
    return _edit_weights("bi", lambda w: {fn(n): v for n, v in w.items() if fn(n)})


@pytest.mark.parametrize(
    "edit, refusal",
    [
        (_bi_weights(lambda n: n if "forward_" in n else None),
         "bi: weights = ['forward']: a Bidirectional needs a forward and a backward layer"),
        (_bi_weights(lambda n: n.replace("backward_half", "forward_half_1")),
         "bi: weights = 'bi/forward_half_1/lstm_cell': two forward layers"),
        (_bi_weights(lambda n: n.replace("forward_half/lstm_cell/", "") if "forward_" in n
                     else None),
         "bi: weights = 'bi': not under a forward_*/backward_* layer of the Bidirectional"),
    ],
    ids=["one_half", "two_forward", "no_half_scope"],
)  # fmt: skip
def test_bidirectional_halves_damaged(files, tmp_path, edit, refusal):
    """A Bidirectional's weights that do not make one forward and one backward half are
    refused naming what is there (a weight directly under the layer too, not an IndexError)."""
    _, refusals = _describe(_h5(files, "base", tmp_path, edit))
    assert refusals == [refusal]
    ds, refusals = _describe(_h5(files, "base", tmp_path, _edits(edit, _no_config)),
                             "gru_nb:reset_after=1")  # fmt: skip
    if "not under" in refusal:  # with no config, `bi/kernel` is a layer `bi` of its own
        assert refusals == [] and ds["bi"].kind == "keras.LSTM"
    else:  # with no config, a half alone or two forward halves are still refused
        assert len(refusals) == 1 and refusals[0].startswith("bi: weights = ")


def test_several_cells_under_one_layer(files, tmp_path):
    """An RNN over two cells (StackedRNNCells) is refused naming both cells' scopes, with its
    config and without."""
    variables = porting.read_source(files / "stacked.h5").variables
    scopes = sorted({n.rpartition("/")[0] for n in variables})
    assert len(scopes) == 2 and all(s.startswith("stacked/stacked_rnn_cells") for s in scopes)
    want = (
        f"stacked: weights = {scopes}: several recurrent cells under one layer (e.g. a stacked "
        "RNN cell): not supported"
    )
    for edit in (lambda h5: None, _no_config):
        _, refusals = _describe(_h5(files, "stacked", tmp_path, edit))
        assert refusals == [want]


# -- activations, notes, masks -----------------------------------------------------------------


def test_activation_serialized_as_keras3_object(files, tmp_path):
    """Keras 3 may store an activation as a serialized function object; it is read by name,
    and Keras itself loads the edited file and computes that function."""
    keras = keras_module()
    relu = keras.saving.serialize_keras_object(keras.activations.relu)
    assert isinstance(relu, dict) and relu["config"] == "relu"

    def edit(layers):
        layers["rnn"]["config"]["activation"] = relu

    path = _h5(files, "base", tmp_path, _config(edit))
    ds, refusals = _describe(path)
    assert refusals == []
    assert ds["rnn"].value("activation") == "relu"
    assert keras.saving.load_model(path).get_layer("rnn").cell.activation is keras.activations.relu


def test_training_only_keys_noted(files, tmp_path):
    """Dropout, a regularizer and trainable=False are named as not ported; their neutral values
    (0.0, None, True) are not."""

    def edit(layers):
        layers["lstm"]["config"].update(dropout=0.25, kernel_regularizer={"class_name": "L2"})
        layers["gru"]["config"]["trainable"] = False

    ds, refusals = _describe(_h5(files, "base", tmp_path, _config(edit)))
    assert refusals == []
    assert sorted(ds["lstm"].notes) == [
        "not ported: dropout=0.25 (dropout masks are training-time noise; the module computes "
        "training=False)",
        "not ported: kernel_regularizer={'class_name': 'L2'} (a loss term, not part of the "
        "layer's output)",
    ]
    assert ds["gru"].notes == [
        "not ported: trainable=False (freezing is the training loop's business (requires_grad))"
    ]
    assert ds["rnn"].notes == []


def test_mask_notes(files, tmp_path):
    """A layer Keras 3 calls with a mask says so; where the config does not record the call
    (Keras 2's inbound nodes), the model's mask-producing layers are named; with no mask, no
    note."""
    ds, _ = _describe(files / "mask.h5")
    (note,) = ds["after_mask"].notes  # the op Keras computed the mask with: `any`, `any_3`
    assert re.fullmatch(r"called with a mask \(from 'any(_\d+)?'\): pass the same mask= to the "
                        r"module", note), note  # fmt: skip

    def keras2_nodes(layers):
        for layer in layers.values():
            layer["inbound_nodes"] = []

    ds, _ = _describe(_h5(files, "mask", tmp_path, _config(keras2_nodes)))
    assert ds["after_mask"].notes == [
        "the model has mask-producing layers (masking): if their mask reaches this layer, pass "
        "it as mask= to the module"
    ]
    ds, _ = _describe(files / "base.h5")
    assert all(d.notes == [] for d in ds.values())


def test_saved_model_bidirectional_halves_keep_their_loops_origins(tmp_path):
    """A Keras 3 SavedModel has no config: each half of a Bidirectional is read from its own
    loop, and each half's attributes name that loop (the merge, the graph op that merges)."""
    keras = keras_module()
    x = keras.Input((T, I), name="x")
    y = keras.layers.Bidirectional(
        keras.layers.LSTM(2, return_sequences=True, name="half"), name="bi"
    )(x)
    model = keras.Model(x, y)
    randomize(model.trainable_weights, 34)
    model.export(tmp_path / "sm", verbose=False)
    ds, refusals = _describe(tmp_path / "sm")
    assert refusals == []
    assert ds["bi"].attrs["merge_mode"].origin.startswith("the SavedModel's graph: ")
    for role in ("forward", "backward"):
        child = ds["bi"].children[role]
        for key in ("return_sequences", "go_backwards", "gate_activation", "time_major"):
            value, origin, stored = _attr(child, key)
            assert origin.startswith("the SavedModel's loop ") and f"_{role}_half_" in origin, (
                role, key, origin,
            )  # fmt: skip
            assert stored is True
        assert child.value("go_backwards") is (role == "backward")


def test_cudnn_layers_by_their_bias(files, tmp_path):
    """With no config and no cell names, a bias of 8U (LSTM) or 6U (GRU) is cuDNN's bW, bR: the
    layer is a CuDNNLSTM / CuDNNGRU (reset after the product), said so with the bias layout."""

    def cudnn_bias(layer, size):
        return _reshape_weight(layer, "bias:0", (size,))

    path = _h5(files, "base", tmp_path, _edits(
        _no_config, _no_cell_scope, _version("2.3.1"), cudnn_bias("lstm", 32), cudnn_bias("gru", 18)
    ))  # fmt: skip
    ds, refusals = _describe(path, "gru_nb:reset_after=false")
    assert refusals == []
    assert ds["lstm"].kind == "keras.CuDNNLSTM" and ds["gru"].kind == "keras.CuDNNGRU"
    layout = (
        "cuDNN's: gate blocks as cuDNN reads them, bias [bW, bR]; converted as Keras' HDF5 "
        "loader converts them into LSTM / GRU(reset_after=True)"
    )
    for name in ("lstm", "gru"):
        assert _attr(ds[name], "bias_layout") == (layout, "the class and the bias shape", True)
    assert _attr(ds["gru"], "reset_after") == (
        True,
        "cuDNN's GRU applies the reset after the product",
        True,
    )


def test_a_weight_outside_the_cells_is_left_out(files, tmp_path):
    """A variable in a cell's scope that no Keras cell has is not taken for one of its weights
    (convert lists it as left out)."""
    extra = _edit_weights("lstm", lambda w: {**w, "lstm/lstm_cell/extra": np.ones(3, np.float32)})
    ds, refusals = _describe(_h5(files, "base", tmp_path, extra))
    assert refusals == []
    assert sorted(ds["lstm"].weights) == ["bias", "kernel", "recurrent_kernel"]


def test_saved_model_layer_that_cannot_be_read(tmp_path):
    """A SavedModel layer whose loop cannot be read (an unrolled LSTM has none) is refused naming
    the layer, its class by the weights' shapes, and why."""
    keras = keras_module()
    x = keras.Input((T, I), name="x")
    model = keras.Model(x, keras.layers.LSTM(3, unroll=True, name="unrolled")(x))
    randomize(model.trainable_weights, 34)
    model.export(tmp_path / "sm", verbose=False)
    _, refusals = _describe(tmp_path / "sm")
    assert len(refusals) == 1
    assert refusals[0].startswith(
        "unrolled: graph = 'LSTM': its saved loop is not a Keras LSTM this converter reads: "
    )
    assert refusals[0].endswith("an unrolled layer (unroll=True) or not a Keras RNN")
