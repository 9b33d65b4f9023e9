"""Ports of Keras 3 files, checked against Keras itself (TF 2.21 backend, CPU): `.keras`, legacy
`.h5`, `.weights.h5` (alone and with `--config`), and TF2 checkpoints of Keras models (with and
without the optimizer, read with TF and without). Every weight is randomised before saving; each
port is compared on outputs, final states and the gradients of one loss using all of them, with
respect to the inputs and every weight; what the modules cannot compute is refused by name."""

import json
import zipfile

import numpy as np
import pytest
import torch

from tests.helpers import KERAS_B as B
from tests.helpers import KERAS_I as I
from tests.helpers import KERAS_MASK as MASK
from tests.helpers import KERAS_T as T
from tests.helpers import (
    assert_close,
    chain_model,
    cli_convert,
    compare_chain,
    keras_module,
    needs_tf,
    randomize,
    tf_module,
)
from torch_lstm_grad import keras_layers, porting
from torch_lstm_grad.porting.convert import _digest

pytestmark = needs_tf


def _every_layer_kind(keras):
    return [
        keras.layers.LSTM(5, return_sequences=True, name="lstm_a"),
        keras.layers.GRU(4, return_sequences=True, go_backwards=True, name="gru_after"),
        keras.layers.GRU(3, return_sequences=True, reset_after=False, name="gru_before"),
        keras.layers.SimpleRNN(4, activation="relu", return_sequences=True, name="rnn_relu"),
        keras.layers.SimpleRNN(3, return_sequences=True, zero_output_for_mask=True),
        keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True), merge_mode="sum"),
        keras.layers.Bidirectional(keras.layers.GRU(2, return_state=True), name="bi_gru"),
    ]


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "mask"])
@pytest.mark.parametrize("fmt", [".keras", "legacy.h5", "weights.h5+config", "ckpt+config"])
def test_keras3_every_layer_kind(tmp_path, capsys, fmt, mask):
    """LSTM, GRU (both reset positions, go_backwards), SimpleRNN (relu, tanh with
    zero_output_for_mask), Bidirectional (sum; GRU with return_state): every format, with a mask
    that skips steps anywhere and without."""
    tf = tf_module()
    model, names = chain_model(_every_layer_kind, mask, seed=1)
    config = tmp_path / "model.json"
    config.write_text(model.to_json())
    if fmt == ".keras":
        src, extra = tmp_path / "m.keras", []
        model.save(src)
    elif fmt == "legacy.h5":
        src, extra = tmp_path / "m.h5", []
        model.save(src)
    elif fmt == "weights.h5+config":
        src, extra = tmp_path / "m.weights.h5", ["--config", str(config)]
        model.save_weights(src)
    else:
        src = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
        extra = ["--config", str(config)]
    mods, log = cli_convert(src, tmp_path, capsys, *extra)
    assert set(mods) == set(names)
    assert "gate_activation      = 'sigmoid'  <- " in log
    compare_chain(model, names, mods, seed=2, mask=mask)


def test_keras3_legacy_h5_sequential(tmp_path, capsys):
    """Keras 3's legacy `.h5` of a Sequential model names the weights under the model
    (`sequential_1/lstm_2/lstm_cell/kernel`): each belongs to the layer before its cell."""
    keras = keras_module()
    model = keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.LSTM(5, recurrent_activation="hard_sigmoid", return_sequences=True),
            keras.layers.GRU(3),
        ]
    )
    randomize(model.trainable_weights, 8)
    model.save(tmp_path / "m.h5")
    mods, log = cli_convert(tmp_path / "m.h5", tmp_path, capsys)
    names = [layer.name for layer in model.layers]
    assert f"{model.name}/{names[0]}/lstm_cell/kernel" in log and sorted(mods) == sorted(names)
    assert "gate_activation      = 'hard_sigmoid_keras3'" in log
    compare_chain(model, names, mods, seed=9, mask=False, last_only=True)


def test_keras3_weights_only_uses_keras3_defaults(tmp_path, capsys):
    """A `.weights.h5` stores no config: its layers get Keras 3's defaults, each printed as not
    stored; a default-configured model ports exactly."""
    keras = keras_module()
    model, names = chain_model(lambda k: [k.layers.LSTM(4)], mask=False, seed=3)
    model.save_weights(tmp_path / "m.weights.h5")
    mods, log = cli_convert(tmp_path / "m.weights.h5", tmp_path, capsys)
    assert (
        "gate_activation      = 'sigmoid'  <- default of Keras 3  [not stored in the file]" in log
    )
    assert isinstance(mods[names[0]], keras_layers.KerasLSTM)
    compare_chain(model, names, mods, seed=4, mask=False)
    del keras


def test_keras3_no_bias_stateful_and_zero_outputs(tmp_path, capsys):
    """use_bias=False (no bias variable), zero_output_for_mask, and a stateful layer whose
    second call starts from the first call's final states, as Keras' does."""
    keras = keras_module()
    x_in = keras.Input(batch_shape=(B, T, I))
    m_in = keras.Input(batch_shape=(B, T), dtype="bool")
    a = keras.layers.LSTM(
        4, use_bias=False, return_sequences=True, zero_output_for_mask=True, name="nobias"
    )
    s = keras.layers.GRU(3, stateful=True, return_sequences=True, name="stateful")
    y = s(a(x_in, mask=m_in), mask=m_in)
    model = keras.Model([x_in, m_in], y)
    randomize(model.trainable_weights, 5)
    model.save(tmp_path / "m.keras")
    mods, log = cli_convert(tmp_path / "m.keras", tmp_path, capsys)
    assert "use_bias             = False  <- no bias variable" in log
    r = np.random.default_rng(6)
    xs = [r.standard_normal((B, T, I)).astype(np.float32) for _ in range(2)]
    for call, x in enumerate(xs):  # Keras' stateful layer carries its states across calls
        want = model([x, MASK], training=False).numpy()
        got = mods["stateful"](
            mods["nobias"](torch.from_numpy(x), mask=torch.from_numpy(MASK)),
            mask=torch.from_numpy(MASK),
        )
        assert_close({f"call {call}": (got, want)})
    mods["stateful"].reset_states()
    s.reset_states()
    assert_close(
        {
            "after reset": (
                mods["stateful"](mods["nobias"](torch.from_numpy(xs[0]))),
                model([xs[0], np.ones((B, T), bool)]).numpy(),
            )
        }
    )


def test_keras3_tf2_checkpoint_after_fit_with_optimizer(tmp_path, capsys):
    """After `fit`, a Checkpoint with the optimizer stores the weights under
    optimizer/_trainable_variables/N; the object graph names them (read with TF and without)."""
    tf = tf_module()
    keras = keras_module()
    model, names = chain_model(
        lambda k: [k.layers.LSTM(4, return_sequences=True, name="enc"), k.layers.GRU(3)], False, 7
    )
    model.compile(optimizer="adam", loss="mse")
    r = np.random.default_rng(8)
    model.fit(
        r.standard_normal((B, T, I)).astype(np.float32),
        [
            r.standard_normal((B, T, 4)).astype(np.float32),
            r.standard_normal((B, 3)).astype(np.float32),
        ],
        epochs=2,
        verbose=0,
    )
    prefix = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
        str(tmp_path / "ckpt")
    )
    config = tmp_path / "model.json"
    config.write_text(model.to_json())
    for reader in ("tensorflow", "tensorbundle"):
        src = porting.read_source(prefix, reader=reader)
        assert "enc/lstm_cell/kernel" in src.variables
        assert src.keys["enc/lstm_cell/kernel"].startswith("optimizer/_trainable_variables/")
        assert any("momentum" in why for why in src.ignored.values())
    mods, log = cli_convert(prefix, tmp_path, capsys, "--config", str(config))
    assert "stored as optimizer/_trainable_variables/" in log and "optimizer state" in log
    compare_chain(model, names, mods, seed=9, mask=False)
    model.save(tmp_path / "fitted.keras")  # the archive keeps the optimizer's variables too
    mods, log = cli_convert(tmp_path / "fitted.keras", tmp_path, capsys)
    assert "adam" not in log
    compare_chain(model, names, mods, seed=9, mask=False)
    del keras


def _activation_variants(keras):
    return [
        keras.layers.LSTM(4, recurrent_activation="hard_sigmoid", activation="relu",
                          return_sequences=True, name="hard_relu"),
        keras.layers.LSTM(3, activation="linear", return_sequences=True, name="linear"),
        keras.layers.GRU(3, recurrent_activation="hard_sigmoid", activation="relu",
                         return_sequences=True, name="gru_hard"),
        keras.layers.GRU(3, activation="linear", reset_after=False, return_sequences=True,
                         go_backwards=True, name="gru_before_linear"),
        keras.layers.Bidirectional(keras.layers.LSTM(2, recurrent_activation="hard_sigmoid"),
                                   name="bi_hard"),
    ]  # fmt: skip


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "mask"])
def test_keras3_activation_variants(tmp_path, capsys, mask):
    """Keras 3's hard_sigmoid gates (relu6(x + 3) / 6), relu and linear activations, in LSTM,
    both GRUs and a Bidirectional: exact on the fused variant kernels."""
    model, names = chain_model(_activation_variants, mask, seed=10)
    model.save(tmp_path / "v.keras")
    mods, log = cli_convert(tmp_path / "v.keras", tmp_path, capsys)
    assert "gate_activation      = 'hard_sigmoid_keras3'  <- config.json ('hard_sigmoid' of " in log
    compare_chain(model, names, mods, seed=11, mask=mask)


def test_keras3_activations_refused_by_name(tmp_path, capsys):
    """What the kernels do not compute (softsign, tanh gates, a linear SimpleRNN) is refused
    naming the layer, the attribute and the value, and nothing is written; --approximate does
    not change that (nothing is close)."""
    model, _ = chain_model(
        lambda k: [
            k.layers.LSTM(4, activation="softsign", return_sequences=True, name="soft"),
            k.layers.GRU(3, recurrent_activation="tanh", return_sequences=True, name="tgates"),
            k.layers.SimpleRNN(2, activation="linear", name="lin"),
        ],
        False,
        12,
    )
    model.save(tmp_path / "a.keras")
    err = cli_convert(tmp_path / "a.keras", tmp_path, capsys, "--approximate", code=2)
    assert "soft: activation = 'softsign'" in err
    assert "tgates: recurrent_activation = 'tanh'" in err
    assert "lin: activation = 'linear'" in err
    assert not (tmp_path / "out.pt").exists()


def _edit_config(src, dst, edit):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            data = zin.read(item)
            if item == "config.json":
                cfg = json.loads(data)
                edit(cfg)
                data = json.dumps(cfg).encode()
            zout.writestr(item, data)


def test_keras3_unknown_key_and_dtype_policy(tmp_path, capsys):
    """A config key the converter does not know, or a mixed-precision policy, is refused;
    --approximate converts with a warning on stderr naming the difference."""
    keras = keras_module()
    model, names = chain_model(lambda k: [k.layers.LSTM(4, name="l")], False, 12)
    model.save(tmp_path / "m.keras")

    def add_key(cfg):
        for layer in cfg["config"]["layers"]:
            if layer["config"]["name"] == "l":
                layer["config"]["peephole_magic"] = 2
                layer["config"]["dtype"] = "mixed_float16"

    _edit_config(tmp_path / "m.keras", tmp_path / "e.keras", add_key)
    err = cli_convert(tmp_path / "e.keras", tmp_path, capsys, code=2)
    assert "l: peephole_magic = 2: a config key this converter does not know" in err
    assert "l: dtype = 'mixed_float16'" in err
    mods, _ = cli_convert(tmp_path / "e.keras", tmp_path, capsys, "--approximate")
    # (the warnings went to stderr, read by _convert's capsys call; the port is the float32 one)
    compare_chain(model, names, mods, seed=13, mask=False)
    with pytest.warns(UserWarning, match="converted with --approximate"):
        porting.load(tmp_path / "out.pt")
    # the Python API refuses as the CLI does unless asked, and records the file it read
    with pytest.raises(porting.Refused, match="peephole_magic"):
        porting.convert(tmp_path / "e.keras", tmp_path / "api.pt", log=lambda line: None)
    assert not (tmp_path / "api.pt").exists()
    lines = []
    data = porting.convert(
        tmp_path / "e.keras", tmp_path / "api.pt", approximate=True, log=lines.append, warn=print
    )
    assert data["source"] == str(tmp_path / "e.keras") and data["approximate"] is True
    assert "layers (attribute = value <- where it came from):" in lines
    found = next(i for i, line in enumerate(lines) if line.startswith("found "))
    n = sum(1 for line in lines if line.startswith("  ") and "] float32" in line)
    assert lines[found] == f"found {n} weight variables:" and n >= 3
    del keras


def test_keras3_config_that_contradicts_the_weights(tmp_path, capsys):
    keras = keras_module()
    model, _ = chain_model(lambda k: [k.layers.GRU(3, name="g")], False, 14)
    model.save(tmp_path / "m.keras")

    def flip(cfg):
        for layer in cfg["config"]["layers"]:
            if layer["config"]["name"] == "g":
                layer["config"]["reset_after"] = False
                layer["config"]["units"] = 7

    _edit_config(tmp_path / "m.keras", tmp_path / "e.keras", flip)
    err = cli_convert(tmp_path / "e.keras", tmp_path, capsys, code=2)
    assert "g: reset_after = False" in err and "g: units = 7" in err
    del keras


def test_load_refuses_what_this_version_cannot_compute(tmp_path, capsys):
    """A converted file whose description asks for a variant this version's kernels lack (as a
    file from a newer version might) is refused by load(), naming the layer."""
    keras_module()
    model, _ = chain_model(lambda k: [k.layers.GRU(3, name="g")], False, 15)
    model.save(tmp_path / "m.keras")
    cli_convert(tmp_path / "m.keras", tmp_path, capsys)
    data = torch.load(tmp_path / "out.pt", weights_only=True)
    data["modules"]["g"]["config"]["activation"] = "softsign"
    data["sha256"] = _digest(data)  # as a newer version would write it
    torch.save(data, tmp_path / "newer.pt")
    with pytest.raises(ValueError, match=r"layer 'g' \(keras.GRU\) cannot be built by this "
                       "version: .*softsign"):  # fmt: skip
        porting.load(tmp_path / "newer.pt")
    cut = tmp_path / "cut.pt"  # a damaged archive: torch's own error, named as the file's
    cut.write_bytes((tmp_path / "out.pt").read_bytes()[:-100])
    with pytest.raises(ValueError) as err:
        porting.load(cut)
    assert str(err.value).startswith(f"{cut}: not a readable torch-lstm-grad convert file (")
    # a file whose pickle names a class (any code): load unpickles tensors and plain containers
    # only (weights_only), so the class is refused, never instantiated, though all else is valid
    data = torch.load(tmp_path / "out.pt", weights_only=True)
    torch.save(_PickledClass(data), tmp_path / "code.pt")
    with pytest.raises(ValueError) as err:
        porting.load(tmp_path / "code.pt")
    assert str(err.value).startswith(f"{tmp_path / 'code.pt'}: not a readable torch-lstm-grad")
    assert "(UnpicklingError: Unsupported global: GLOBAL " in str(err.value)
    assert str(err.value).endswith("_PickledClass was not an allowed global by default)")


class _PickledClass(dict):
    """A dict that unpickling must construct by calling this module's class."""
