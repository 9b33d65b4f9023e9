"""Writes the Keras 2 fixtures of tests/porting/test_keras2.py with tf_keras (Keras 2.21, the
Keras 2 that TF 2.21 ships as a separate package), and what tf_keras computes on them.

Run by hand where tf_keras is installed (it requires `tensorflow`; with tensorflow-cpu installed,
`pip install --no-deps tf_keras==2.21.0`):

    python tests/data/keras2/make_fixtures.py

Files (all small; weights randomised, biases included):
* model.h5: `model.save()` legacy HDF5, model_config + keras_version 2.21.0
* weights.h5: `model.save_weights("weights.h5")` of the same model (no config)
* ckpt.*: `model.save_weights("ckpt")`, TF format (object graph, `layer_with_weights-N`)
* model.json: `model.to_json()`
* hard.h5: a model whose LSTM has recurrent_activation="hard_sigmoid" (Keras 2's)
* cudnn.h5, cudnn_weights.h5: a model of the legacy CuDNNLSTM and CuDNNGRU layers (cuDNN's
  weight layout: bias [8U] / [6U]); tf_keras runs them only on a GPU, so what they compute is
  taken as Keras defines it: its HDF5 loader converts such weights into LSTM and
  GRU(reset_after=True) (`_convert_rnn_weights`); the twin model of those runs on the CPU.
* expected.npz: inputs, tf_keras' outputs and gradients (loss Σ out_k · R_k) for model.h5's
  model, hard.h5's and the CuDNN model's twin, keyed `<model>/...` (the CuDNN twin's weight
  gradients are with respect to the converted weights).

`python tests/data/keras2/make_fixtures.py saved_model` writes only:
* saved_model/: `model.save(dir, save_format="tf")` (a SavedModel with keras_metadata.pb) of
  a Sequential LSTM(hard_sigmoid, return_sequences) -> GRU(reset_after=False);
* expected_saved_model.npz: what tf_keras computes on it, keyed `savedmodel/...`.

`python tests/data/keras2/make_fixtures.py subclassed` writes only:
* saved_model_subclassed/: the SavedModel of a subclassed model (its `get_config()` lists no
  layers: keras_metadata.pb holds each layer's own config) of a Bidirectional(LSTM) and a
  nested Sequential of a backwards GRU(reset_after=False);
* expected_subclassed.npz: what tf_keras computes on it, keyed `subclassed/...`.
"""

import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
T, B, I = 6, 3, 4  # noqa: E741
MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0]], bool)


def chain(layers, mask):
    x_in = keras.Input((T, I), name="x")
    m_in = keras.Input((T,), dtype="bool", name="m") if mask else None
    y, outs = x_in, []
    for layer in layers:
        out = layer(y, mask=m_in) if mask else layer(y)
        out = out if isinstance(out, (list, tuple)) else [out]
        outs += list(out)
        y = out[0]
    model = keras.Model([x_in, m_in] if mask else [x_in], outs)
    r = np.random.default_rng(len(layers))
    for w in model.trainable_weights:
        w.assign(r.uniform(-0.6, 0.6, tuple(w.shape)).astype(np.float32))
    return model


def run(model, name, mask, out):
    r = np.random.default_rng(7)
    x = r.standard_normal((B, T, I)).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        res = model([xt, tf.constant(MASK)] if mask else xt, training=False)
        res = res if isinstance(res, list) else [res]
        rs = [np.random.default_rng(100 + k).standard_normal(o.shape).astype(np.float32)
              for k, o in enumerate(res)]
        loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(res, rs, strict=True)])
    grads = tape.gradient(loss, [xt] + model.trainable_weights)
    out[f"{name}/x"] = x
    out[f"{name}/mask"] = MASK
    for k, (o, w) in enumerate(zip(res, rs, strict=True)):
        out[f"{name}/out{k}"] = o.numpy()
        out[f"{name}/r{k}"] = w
    out[f"{name}/dx"] = grads[0].numpy()
    for w, g in zip(model.trainable_weights, grads[1:], strict=True):
        out[f"{name}/d/{w.name.removesuffix(':0')}"] = g.numpy()


def main():
    out = {}
    model = chain([
        keras.layers.LSTM(4, return_sequences=True, name="lstm"),
        keras.layers.GRU(3, return_sequences=True, reset_after=False, go_backwards=True,
                         name="gru_before"),
        keras.layers.GRU(3, return_sequences=True, name="gru_after"),
        keras.layers.SimpleRNN(2, return_sequences=True, name="rnn"),
        keras.layers.Bidirectional(keras.layers.LSTM(2, return_sequences=True), name="bi"),
    ], mask=True)
    model.save(os.path.join(HERE, "model.h5"))
    model.save_weights(os.path.join(HERE, "weights.h5"))
    model.save_weights(os.path.join(HERE, "ckpt"))
    with open(os.path.join(HERE, "model.json"), "w") as fh:
        fh.write(model.to_json())
    run(model, "model", True, out)
    hard = chain([keras.layers.LSTM(4, recurrent_activation="hard_sigmoid", name="hard")], False)
    hard.save(os.path.join(HERE, "hard.h5"))
    run(hard, "hard", False, out)
    from tf_keras.src.layers.rnn.cudnn_gru import CuDNNGRU
    from tf_keras.src.layers.rnn.cudnn_lstm import CuDNNLSTM

    cudnn = chain([CuDNNLSTM(3, return_sequences=True, name="clstm"),
                   CuDNNGRU(2, return_sequences=True, go_backwards=True, name="cgru")], False)
    cudnn.save(os.path.join(HERE, "cudnn.h5"))
    cudnn.save_weights(os.path.join(HERE, "cudnn_weights.h5"))
    twin = chain([keras.layers.LSTM(3, return_sequences=True, name="clstm"),
                  keras.layers.GRU(2, return_sequences=True, go_backwards=True,
                                   reset_after=True, name="cgru")], False)
    twin.load_weights(os.path.join(HERE, "cudnn_weights.h5"))  # Keras converts the layout
    run(twin, "cudnn", False, out)
    np.savez_compressed(os.path.join(HERE, "expected.npz"), **out)
    print("wrote", sorted(os.listdir(HERE)), "with tf_keras", keras.__version__)


def save_and_run(model, seed, directory, prefix):
    """Weights drawn from U(-0.6, 0.6) with `seed`, the model saved as a SavedModel in
    `directory`, and what tf_keras computes on it, keyed `prefix/...`."""
    r = np.random.default_rng(seed)
    for w in model.trainable_weights:
        w.assign(r.uniform(-0.6, 0.6, tuple(w.shape)).astype(np.float32))
    model.save(os.path.join(HERE, directory), save_format="tf")
    out = {}
    run(model, prefix, False, out)
    return out


def saved_model():
    model = keras.Sequential([
        keras.Input((T, I)),
        keras.layers.LSTM(4, recurrent_activation="hard_sigmoid", return_sequences=True,
                          name="lstm"),
        keras.layers.GRU(3, reset_after=False, name="gru"),
    ])
    out = save_and_run(model, 21, "saved_model", "savedmodel")
    np.savez_compressed(os.path.join(HERE, "expected_saved_model.npz"), **out)
    print("wrote saved_model/ with tf_keras", keras.__version__)


def subclassed():
    class Net(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.bi = keras.layers.Bidirectional(
                keras.layers.LSTM(3, return_sequences=True), name="bi")
            self.inner = keras.Sequential([
                keras.layers.GRU(2, reset_after=False, return_sequences=True, go_backwards=True,
                                 name="gru"),
            ], name="inner")

        def call(self, x):
            return self.inner(self.bi(x))

    model = Net(name="net")
    model(np.zeros((B, T, I), np.float32))
    out = save_and_run(model, 22, "saved_model_subclassed", "subclassed")
    # the weights' names without the models' scopes, as the ported layers are named
    out = {k.replace("/d/net/inner/", "/d/").replace("/d/net/", "/d/"): v for k, v in out.items()}
    np.savez_compressed(os.path.join(HERE, "expected_subclassed.npz"), **out)
    print("wrote saved_model_subclassed/ with tf_keras", keras.__version__, sorted(out))


if __name__ == "__main__":
    import sys

    modes = {"saved_model": saved_model, "subclassed": subclassed}
    modes.get(sys.argv[1] if len(sys.argv) > 1 else "", main)()
