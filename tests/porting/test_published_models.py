"""Published Keras models nobody here wrote (tests/data/published/README.md), ported whole and
compared with tf_keras running the same file: outputs and the gradient of every trainable
weight, on token ids of each model's vocabulary with padding.

tf_keras 2.21 refuses some of what Keras 2.0-2.2 wrote, so its copy of the config is edited
where Keras 2.0-2.2 meant what the edit says: a GRU without `reset_after` is the reset-before
GRU (`reset_after=False`); an Embedding's `dtype` "int32" was its input's. The port reads the
file as it is."""

import json
import os
import shutil

import h5py
import numpy as np
import pytest
import torch

import torch_lstm_grad
from tests.helpers import DATA, PORT_TOL, needs_tf, rng, scaled_error, tf_module
from torch_lstm_grad import porting
from torch_lstm_grad.porting.verify import as_keras_2_2_meant

pytestmark = needs_tf

PUBLISHED = os.path.join(DATA, "published")
FILES = {
    "ethnicolr_keras_2.0.2_list_sequential": "ethnicolr-0.2.4/census2000_ln_lstm_old.h5",
    "sentinews_keras_2.0.6_masked_reset_before_grus": "sentinews-0.5.0/default_best.h5",
    "dgaintel_conv1d_lstm": "dgaintel-2.3/domain_classifier_model.h5",
    "dgad_keras_2.4_sequential": "dgad-3.1.4/lstm_best.h5",
}


def _as_tf_keras_reads_it(path, tmp_path) -> str:
    copy = str(tmp_path / "for_tf_keras.h5")
    shutil.copy(path, copy)
    with h5py.File(copy, "r+") as f:
        cfg = as_keras_2_2_meant(json.loads(f.attrs["model_config"]))
        f.attrs["model_config"] = json.dumps(cfg)
    return copy


@pytest.mark.parametrize("name", list(FILES))
def test_published_model(tmp_path, name):
    tf = tf_module()
    tk = pytest.importorskip("tf_keras", reason="tf_keras (Keras 2) is not installed")
    path = os.path.join(PUBLISHED, FILES[name])
    porting.convert(path, tmp_path / "m.pt", layers_only=False, log=lambda *a: None)
    ours = torch_lstm_grad.load_model(tmp_path / "m.pt").eval()
    model = tk.models.load_model(_as_tf_keras_reads_it(path, tmp_path), compile=False)
    embedding = next(layer for layer in model.layers if type(layer).__name__ == "Embedding")
    shape = [3] + [9 if d is None else d for d in model.inputs[0].shape[1:]]
    x = rng(0).integers(1, embedding.input_dim, shape).astype(np.int32)
    x[0, shape[1] // 2 :] = 0
    with tf.GradientTape() as tape:
        out = model(tf.constant(x), training=False)
        r = rng(1).standard_normal(out.shape).astype(np.float32)
        loss = tf.reduce_sum(out * r)
    trainable = {id(w) for w in model.trainable_weights}
    weights = list(ours.keras_weights().values())
    pairs = [(w, p) for w, p in zip(model.weights, weights, strict=True) if id(w) in trainable]
    theirs = tape.gradient(loss, [w for w, _ in pairs])
    mine = ours(torch.from_numpy(x))
    grads = torch.autograd.grad((mine * torch.from_numpy(r)).sum(), [p for _, p in pairs])
    assert scaled_error(mine, out.numpy()) <= PORT_TOL
    for (w, _), g, t in zip(pairs, grads, theirs, strict=True):
        t = tf.convert_to_tensor(t).numpy()
        assert scaled_error(g, t) <= PORT_TOL, w.name
    for w, p in zip(model.weights, weights, strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), w.numpy())
