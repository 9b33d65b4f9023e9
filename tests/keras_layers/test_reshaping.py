"""keras_layers/reshaping.py against Keras 3 and tf_keras: Flatten, Reshape, Permute,
RepeatVector (and the masks they drop)."""

import numpy as np

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K

pytestmark = needs_tf

X = rng(1).standard_normal((3, 6, 4)).astype(np.float32)
MASK = rng(2).random((3, 6)) > 0.3


def test_reshaping_layers():
    assert_keras_layer(lambda L: L.layers.Flatten(), lambda m: K.KerasFlatten(keras_major=m), X,
                       MASK)  # fmt: skip
    assert_keras_layer(lambda L: L.layers.Reshape((4, -1)),
                       lambda m: K.KerasReshape((4, -1), keras_major=m), X)
    assert_keras_layer(lambda L: L.layers.Permute((2, 1)),
                       lambda m: K.KerasPermute((2, 1), keras_major=m), X)
    assert_keras_layer(lambda L: L.layers.RepeatVector(5),
                       lambda m: K.KerasRepeatVector(5, keras_major=m), X[:, 0])
