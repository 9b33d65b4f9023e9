"""Whole Keras models ported as one module (`convert`, `load_model`) against Keras running the
file: models built of the layers RNN models are built from, every weight randomised (moving
statistics too), written by Keras 3 (`.keras`, its legacy `.h5`) and by tf_keras (`.h5`,
weights-only `.h5` with the config given, a SavedModel), read back by the Keras that wrote them.
Each port's outputs, the gradients of every float input and of every trainable weight, and its
`keras_weights()` (names, order, values) are compared; `model.train()` against Keras'
`training=True`; the refusals (Lambda, a class of the user's own, mixed precision, Keras 1)
and a class of the user's own declared (`custom`)."""

import json

import numpy as np
import pytest
import torch

import torch_lstm_grad
from tests.helpers import PORT_TOL, keras_module, needs_tf, rng, scaled_error, tf_module
from torch_lstm_grad import porting

pytestmark = needs_tf


def _tf_keras():
    tf_module()
    return pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) is not installed")


def _randomize(model, seed=0):
    g = rng(seed)
    for w in model.weights:
        v = g.standard_normal(w.shape).astype(np.float32) * 0.4
        w.assign(np.abs(v) + 0.5 if "variance" in w.name else v)


# Each builder takes Keras' `layers` and `Input`/`Model`/`Sequential` and returns a model.
def _tagger(K):
    L = K.layers
    return K.Sequential([K.Input((None,), dtype="int32"), L.Embedding(40, 6, mask_zero=True),
                         L.LSTM(5, return_sequences=True),
                         L.TimeDistributed(L.Dense(4, activation="softmax"))])  # fmt: skip


def _two_inputs(K):
    L = K.layers
    tokens = K.Input((None,), dtype="int32", name="tokens")
    feats = K.Input((None, 3), name="feats")
    x = L.Concatenate()([L.Embedding(30, 6, mask_zero=True)(tokens), feats])
    x = L.Bidirectional(L.GRU(5, return_sequences=True), merge_mode="sum")(x)
    x = L.BatchNormalization()(x)
    h, state = L.GRU(4, return_sequences=True, return_state=True)(x)
    pooled = L.GlobalAveragePooling1D()(h)
    head = L.Dense(3, activation="elu")(L.Dropout(0.3)(pooled))
    return K.Model([tokens, feats], [head, state])


def _conv(K):
    L = K.layers
    inp = K.Input((12, 4))
    x = L.Conv1D(6, 3, padding="causal", activation="relu")(inp)
    x = L.MaxPooling1D(2)(x)
    x = L.LSTM(5, return_sequences=True, recurrent_activation="hard_sigmoid")(x)
    x = L.LayerNormalization()(x)
    x = L.GlobalMaxPooling1D()(x)
    return K.Model(inp, L.Dense(2, activation="sigmoid")(x))


def _nested_shared(K):
    L = K.layers
    inp = K.Input((None, 4))
    shared = L.Dense(4, activation="tanh", name="shared")
    x = shared(shared(L.Masking(0.0)(inp)))
    x = L.SimpleRNN(5, activation="relu", return_sequences=True)(x)
    head = K.Sequential([K.Input((None, 5)), L.Dense(3), L.GaussianNoise(0.1),
                         L.Dense(2, activation="softsign")], name="head")  # fmt: skip
    return K.Model(inp, head(x))


def _merges(K):
    L = K.layers
    a, b = K.Input((None,), dtype="int32"), K.Input((None,), dtype="int32")
    ea, eb = L.Embedding(20, 4, mask_zero=True), L.Embedding(20, 4, mask_zero=True)
    xa, xb = ea(a), eb(b)
    x = L.Concatenate()([L.Add()([xa, xb]), L.Multiply()([xa, xb]), L.Maximum()([xa, xb])])
    x = L.Subtract()([x, L.Average()([x, L.Minimum()([x, x])])])
    return K.Model([a, b], L.RepeatVector(2)(L.LSTM(3)(x)))


def _initial_states(K):
    L = K.layers
    x, h = K.Input((None, 3)), K.Input((4,))
    out, state = L.GRU(4, return_sequences=True, return_state=True)(x, initial_state=[h])
    y = L.LSTM(4, go_backwards=True)(x, initial_state=[state, h])
    return K.Model([x, h], [out, y])


MODELS = {"tagger": _tagger, "two_inputs": _two_inputs, "conv": _conv,
          "nested_shared": _nested_shared, "merges": _merges,
          "initial_states": _initial_states}  # fmt: skip


def _inputs(model, B=3, T=9, seed=1):
    g = rng(seed)
    out = []
    for t in model.inputs:
        shape = [B] + [T if d is None else d for d in t.shape[1:]]
        if "int" in str(getattr(t.dtype, "name", t.dtype)):
            x = g.integers(1, 20, shape).astype(np.int32)
            x[0, shape[1] // 2 :] = 0  # padding: what mask_zero masks
        else:
            x = g.standard_normal(shape).astype(np.float32)
            if len(shape) == 3:
                x[1, -3:] = 0.0  # steps a Masking layer masks
        out.append(x)
    return out


def _compare(keras_model, ours, xs, training=False, names=None):
    """Outputs and every gradient of one loss, Keras against the port."""
    tf = tf_module()
    ins = [tf.constant(x) for x in xs]
    with tf.GradientTape() as tape:
        for t in ins:
            if t.dtype.is_floating:
                tape.watch(t)
        outs = keras_model(ins if len(ins) > 1 else ins[0], training=training)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        rs = [rng(7 + k).standard_normal(o.shape).astype(np.float32) for k, o in enumerate(outs)]
        loss = tf.add_n([tf.reduce_sum(o * r) for o, r in zip(outs, rs, strict=True)])
    floats = [t for t in ins if t.dtype.is_floating]
    trainable = {id(w) for w in keras_model.trainable_weights}
    weights = list(ours.keras_weights().items())
    assert len(weights) == len(keras_model.weights)
    pairs = [(w, p) for w, (_, p) in zip(keras_model.weights, weights, strict=True)
             if id(w) in trainable]  # fmt: skip
    grads = tape.gradient(loss, floats + [w for w, _ in pairs])
    ours.train(training)
    tx = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in xs]
    mine = ours(*tx)
    mine = list(mine) if isinstance(mine, tuple) else [mine]
    our_loss = sum((m * torch.from_numpy(r)).sum() for m, r in zip(mine, rs, strict=True))
    wanted = [t for t in tx if t.requires_grad] + [p for _, p in pairs]
    our_grads = torch.autograd.grad(our_loss, wanted, allow_unused=True)
    errors = {f"output {k}": scaled_error(m, o.numpy()) for k, (m, o) in
              enumerate(zip(mine, outs, strict=True))}  # fmt: skip
    for k, (g, t) in enumerate(zip(our_grads, grads, strict=True)):
        theirs = tf.convert_to_tensor(t).numpy()
        errors[f"grad {k}"] = scaled_error(torch.zeros(theirs.shape) if g is None else g, theirs)
    bad = {k: f"{e:.1e}" for k, e in errors.items() if not e <= PORT_TOL}
    assert not bad, bad
    return weights


def _port(tmp_path, src, **kw):
    out = tmp_path / "port.pt"
    porting.convert(src, out, layers_only=False, log=lambda *a: None, **kw)
    return torch_lstm_grad.load_model(out)


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("fmt", [".keras", ".h5"])
def test_keras3_models(tmp_path, name, fmt):
    K = keras_module()
    model = MODELS[name](K)
    _randomize(model)
    path = str(tmp_path / f"m{fmt}")
    model.save(path)
    try:
        loaded = K.saving.load_model(path, compile=False)
    except ValueError as err:  # Keras 3 cannot load the ops its own .h5 records ("NotEqual")
        assert fmt == ".h5" and "Unknown layer" in str(err), err
        loaded = model  # the model that wrote the file
    weights = _compare(loaded, _port(tmp_path, path).eval(), _inputs(loaded))
    for (_, p), w in zip(weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), w.numpy())


@pytest.mark.parametrize("name", list(MODELS))
def test_tf_keras_models(tmp_path, name):
    K = _tf_keras()
    model = MODELS[name](K)
    _randomize(model)
    path = str(tmp_path / "m.h5")
    model.save(path)
    loaded = K.models.load_model(path, compile=False)
    weights = _compare(loaded, _port(tmp_path, path).eval(), _inputs(loaded))
    # Keras 2's names as the file stores them, in the order of model.weights
    assert [n for n, _ in weights] == [w.name for w in loaded.weights]


def test_tf_keras_weights_only_with_its_config(tmp_path):
    K = _tf_keras()
    model = _two_inputs(K)
    _randomize(model)
    model.save_weights(str(tmp_path / "w.h5"))
    (tmp_path / "config.json").write_text(model.to_json())
    ours = _port(tmp_path, str(tmp_path / "w.h5"), config=str(tmp_path / "config.json"))
    _compare(model, ours.eval(), _inputs(model))


def test_tf_keras_saved_model(tmp_path):
    K = _tf_keras()
    model = _conv(K)
    _randomize(model)
    model.save(str(tmp_path / "sm"), save_format="tf")
    _compare(model, _port(tmp_path, str(tmp_path / "sm")).eval(), _inputs(model))


@pytest.mark.parametrize("library", ["keras", "tf_keras"])
def test_training_mode_batch_statistics_and_moving_updates(tmp_path, library):
    K = keras_module() if library == "keras" else _tf_keras()
    L = K.layers
    inp = K.Input((None, 3))
    x = L.BatchNormalization(momentum=0.8)(L.LSTM(4, return_sequences=True)(inp))
    model = K.Model(inp, L.Dense(2)(x))
    _randomize(model)
    path = str(tmp_path / ("m.keras" if library == "keras" else "m.h5"))
    model.save(path)
    ours = _port(tmp_path, path)
    xs = _inputs(model)
    _compare(model, ours, xs, training=True)
    bn = next(m for m in ours.modules() if m.__class__.__name__ == "KerasBatchNormalization")
    keras_bn = next(layer for layer in model.layers if "batch_norm" in layer.name)
    for ours_stat, theirs in ((bn.moving_mean, keras_bn.moving_mean),
                              (bn.moving_variance, keras_bn.moving_variance)):  # fmt: skip
        assert scaled_error(ours_stat, theirs.numpy()) <= PORT_TOL


def test_refused_by_name(tmp_path):
    K = keras_module()
    L = K.layers
    inp = K.Input((5, 3))
    model = K.Model(inp, L.Lambda(lambda t: t * 2)(L.LSTM(2, return_sequences=True)(inp)))
    path = str(tmp_path / "lambda.keras")
    model.save(path)
    with pytest.raises(porting.Refused, match="lambda: class = 'Lambda': a Lambda layer"):
        porting.convert(path, tmp_path / "x.pt", layers_only=False, log=lambda *a: None)
    assert not (tmp_path / "x.pt").exists()
    # the recurrent layers alone still convert
    porting.convert(path, tmp_path / "x.pt", layers_only=True, log=lambda *a: None)
    with pytest.raises(ValueError, match="holds no whole model"):
        torch_lstm_grad.load_model(tmp_path / "x.pt")


def test_mixed_precision_and_keras1_are_refused(tmp_path):
    K = keras_module()
    L = K.layers
    inp = K.Input((5, 3))
    model = K.Model(inp, L.Dense(2, dtype="mixed_float16")(L.LSTM(2)(inp)))
    path = str(tmp_path / "mixed.keras")
    model.save(path)
    with pytest.raises(porting.Refused, match="dtype = 'mixed_float16'"):
        porting.convert(path, tmp_path / "x.pt", layers_only=False, log=lambda *a: None)
    keras1 = {"class_name": "Sequential", "keras_version": "1.2.2", "config": [
        {"class_name": "LSTM", "config": {"name": "lstm_1", "output_dim": 4,
                                          "batch_input_shape": [None, 5, 3]}}]}  # fmt: skip
    (tmp_path / "k1.json").write_text(json.dumps(keras1))
    lstm = K.Sequential([K.Input((5, 3)), L.LSTM(4, name="lstm_1")])
    lstm.save_weights(str(tmp_path / "w.weights.h5"))
    with pytest.raises(porting.Refused, match="Keras 1.2.2: Keras 1 files are not read"):
        porting.convert(tmp_path / "w.weights.h5", tmp_path / "x.pt", layers_only=False,
                        config=str(tmp_path / "k1.json"), log=lambda *a: None)  # fmt: skip


def test_a_class_of_the_users_own(tmp_path):
    K = keras_module()
    L = K.layers

    @K.saving.register_keras_serializable(package="tests")
    class Scale(L.Layer):
        def __init__(self, factor=2.0, **kw):
            super().__init__(**kw)
            self.factor = factor

        def build(self, shape):
            self.alpha = self.add_weight(name="alpha", shape=(shape[-1],), initializer="ones")

        def call(self, x):
            return x * self.alpha * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}

    inp = K.Input((None, 3))
    model = K.Model(inp, Scale(3.0)(L.LSTM(4, return_sequences=True)(inp)))
    _randomize(model)
    path = str(tmp_path / "custom.keras")
    model.save(path)
    with pytest.raises(porting.Refused, match="--custom Scale"):
        porting.convert(path, tmp_path / "x.pt", layers_only=False, log=lambda *a: None)
    porting.convert(path, tmp_path / "x.pt", layers_only=False, custom=["Scale"],
                    log=lambda *a: None)  # fmt: skip
    with pytest.raises(ValueError, match="custom_layers=\\{'Scale': factory\\}"):
        torch_lstm_grad.load_model(tmp_path / "x.pt")

    class TorchScale(torch.nn.Module):
        def __init__(self, config, weights):
            super().__init__()
            self.factor, (self.alpha,) = config["factor"], weights.values()

        def forward(self, x, mask=None):
            return x * self.alpha * self.factor

    ours = torch_lstm_grad.load_model(tmp_path / "x.pt", custom_layers={"Scale": TorchScale})
    weights = _compare(model, ours.eval(), _inputs(model))
    assert weights[-1][1] is ours.get_submodule("scale").weights["w0"]  # listed, trained


def test_verify_checks_the_whole_model_and_fails_on_a_planted_defect(tmp_path, monkeypatch):
    K = keras_module()
    model = _two_inputs(K)
    _randomize(model)
    path = str(tmp_path / "m.keras")
    model.save(path)
    porting.convert(path, tmp_path / "m.pt", layers_only=False, log=lambda *a: None)
    report = porting.verify(path, tmp_path / "m.pt")
    assert report.ok and "(whole model)" in report.errors, str(report)
    # two batch sizes, three lengths: the inputs' time axis is free
    assert "verified: the whole model, every output and gradient, over 6 cases" in str(report)
    assert any(k.startswith("d ") for k in report.errors["(whole model)"])
    from torch_lstm_grad.keras_layers import normalization

    planted = normalization.KerasBatchNormalization.forward
    monkeypatch.setattr(normalization.KerasBatchNormalization, "forward",
                        lambda self, x, mask=None: planted(self, x * 1.01, mask))  # fmt: skip
    report = porting.verify(path, tmp_path / "m.pt")
    assert not report.ok
    assert any(layer == "(whole model)" for layer, _, _ in report.failures())
