"""Writes the valid seed files that `fuzz_readers.py` mutates: one small model per format that
`torch-lstm-grad convert` reads, each written by TF / Keras themselves.

    python harness/fuzz_seeds.py DIR

DIR/<format>/ gets the files (tests/data/fuzz_seeds/ holds the committed copy, so the CI fuzz
test needs no TensorFlow to write them). Formats: keras (Keras 3 `.keras`), h5 (Keras 3's
legacy `model.save("x.h5")`), weights_h5 (`.weights.h5` with its model config in
`config.json`), tf2_ckpt (`tf.train.Checkpoint(model=...)`), tf1_ckpt (a TF1 Saver checkpoint
with its `.meta` graph), saved_model (Keras 3 `export()`), frozen_pb and pbtxt (a TF1 graph
frozen by `convert_variables_to_constants`, binary and text). The `.pt` seed is converted from
the `.keras` one by the fuzz run itself (the package's current file format).
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np

T, B, I = 4, 2, 2  # noqa: E741


def _randomize(weights, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for w in weights:
        w.assign(rng.uniform(-0.6, 0.6, tuple(w.shape)).astype(np.float32))


def _keras_model():
    import keras

    model = keras.Sequential(
        [
            keras.Input((T, I)),
            keras.layers.Masking(0.0),
            keras.layers.LSTM(3, return_sequences=True, name="lstm"),
            keras.layers.GRU(2, name="gru"),
            keras.layers.Dense(1, name="dense"),
        ]
    )
    _randomize(model.weights, 1)
    return model


def _tf1_graph(out: str) -> None:
    """A TF1 LSTMCell run by dynamic_rnn: its Saver checkpoint with the meta graph, and the graph
    frozen (binary and text)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        xs = tf.compat.v1.placeholder(tf.float32, [T, B, I], name="x")
        # TF's own TF1 cells (tf.compat.v1.nn.rnn_cell needs tf_keras under Keras 3)
        from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl

        cell = rnn_cell_impl.LSTMCell(3, forget_bias=0.5)
        outs, state = tf.compat.v1.nn.dynamic_rnn(cell, xs, time_major=True, dtype=tf.float32)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            rng = np.random.default_rng(2)
            for v in tf.compat.v1.global_variables():
                v.load(rng.uniform(-0.6, 0.6, v.shape.as_list()).astype(np.float32), sess)
            os.makedirs(f"{out}/tf1_ckpt", exist_ok=True)
            tf.compat.v1.train.Saver().save(sess, f"{out}/tf1_ckpt/model")
            names = sorted({t.op.name for t in [outs, *tf.nest.flatten(state)]})
            frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), names
            )
    os.makedirs(f"{out}/frozen_pb", exist_ok=True)
    with open(f"{out}/frozen_pb/frozen.pb", "wb") as fh:
        fh.write(frozen.SerializeToString())
    tf.io.write_graph(frozen, f"{out}/pbtxt", "frozen.pbtxt", as_text=True)


def write_seeds(out: str) -> None:
    import tensorflow as tf

    for sub in ("keras", "h5", "weights_h5", "tf2_ckpt", "saved_model"):
        shutil.rmtree(f"{out}/{sub}", ignore_errors=True)
        os.makedirs(f"{out}/{sub}")
    model = _keras_model()
    model.save(f"{out}/keras/model.keras")
    model.save(f"{out}/h5/model.h5")
    model.save_weights(f"{out}/weights_h5/model.weights.h5")
    with open(f"{out}/weights_h5/config.json", "w") as fh:
        fh.write(model.to_json())
    tf.train.Checkpoint(model=model).write(f"{out}/tf2_ckpt/ckpt")
    shutil.rmtree(f"{out}/saved_model")
    model.export(f"{out}/saved_model", verbose=False)
    _tf1_graph(out)
    for root, _, files in os.walk(out):
        for name in files:
            if name == "checkpoint":  # TF's text file naming the latest prefix: not read
                os.remove(os.path.join(root, name))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    write_seeds(sys.argv[1])
