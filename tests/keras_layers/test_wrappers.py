"""keras_layers/wrappers.py against Keras 3 and tf_keras: TimeDistributed of a Dense and of a
Conv1D, with its output mask (Keras 3 passes the input mask on; Keras 2 takes the inner
layer's)."""

import numpy as np

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K

pytestmark = needs_tf

X = rng(1).standard_normal((3, 7, 5)).astype(np.float32)
MASK = rng(2).random((3, 7)) > 0.3


def test_time_distributed_dense():
    assert_keras_layer(lambda L: L.layers.TimeDistributed(L.layers.Dense(4, activation="tanh")),
                       lambda m: K.KerasTimeDistributed(K.KerasDense(5, 4, "tanh", keras_major=m),
                                                        keras_major=m),
                       X, MASK, ("layer.kernel", "layer.bias"))  # fmt: skip


def test_time_distributed_conv1d():
    x = rng(3).standard_normal((2, 4, 9, 3)).astype(np.float32)
    assert_keras_layer(lambda L: L.layers.TimeDistributed(L.layers.Conv1D(2, 3, padding="same")),
                       lambda m: K.KerasTimeDistributed(K.KerasConv1D(3, 2, 3, padding="same",
                                                                      keras_major=m),
                                                        keras_major=m),
                       x, None, ("layer.kernel", "layer.bias"))  # fmt: skip
