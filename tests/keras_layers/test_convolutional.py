"""keras_layers/convolutional.py against Keras 3 and tf_keras: Conv1D with every padding
(valid, TF's same, causal), strides and dilation, both data formats; pooling with TF's padding
(average pooling over `same` counts only the steps inside); the global poolings (the average
of the unmasked steps where a mask arrives); padding, cropping, up-sampling."""

import numpy as np
import pytest

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K

pytestmark = needs_tf

B, T, C = 3, 11, 5
X = rng(1).standard_normal((B, T, C)).astype(np.float32)
MASK = rng(2).random((B, T)) > 0.3
MASK[:, 0] = True


@pytest.mark.parametrize("padding, strides, dilation", [
    ("valid", 1, 1), ("valid", 2, 1), ("valid", 1, 2), ("same", 1, 1), ("same", 2, 1),
    ("same", 3, 1), ("same", 1, 2), ("causal", 1, 1), ("causal", 1, 3),
])  # fmt: skip
def test_conv1d(padding, strides, dilation):
    assert_keras_layer(
        lambda L: L.layers.Conv1D(4, 3, strides=strides, padding=padding,
                                  dilation_rate=dilation, activation="relu"),
        lambda m: K.KerasConv1D(C, 4, 3, strides, padding, dilation_rate=dilation,
                                activation="relu", keras_major=m),
        X, MASK, ("kernel", "bias"),
    )  # fmt: skip


def test_conv1d_channels_first():
    assert_keras_layer(lambda L: L.layers.Conv1D(4, 3, data_format="channels_first"),
                       lambda m: K.KerasConv1D(T, 4, 3, data_format="channels_first",
                                               keras_major=m), X, None, ("kernel", "bias"))


@pytest.mark.parametrize("cls, ours", [("MaxPooling1D", K.KerasMaxPooling1D),
                                       ("AveragePooling1D", K.KerasAveragePooling1D)])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("size, strides", [(2, None), (3, 2), (3, 1), (4, 3)])
def test_pooling(cls, ours, padding, size, strides):
    assert_keras_layer(lambda L: getattr(L.layers, cls)(size, strides, padding),
                       lambda m: ours(size, strides, padding, keras_major=m), X)  # fmt: skip


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pooling(masked, keepdims):
    mask = MASK if masked else None
    assert_keras_layer(lambda L: L.layers.GlobalAveragePooling1D(keepdims=keepdims),
                       lambda m: K.KerasGlobalAveragePooling1D(keepdims=keepdims, keras_major=m),
                       X, mask)  # fmt: skip
    assert_keras_layer(lambda L: L.layers.GlobalMaxPooling1D(keepdims=keepdims),
                       lambda m: K.KerasGlobalMaxPooling1D(keepdims=keepdims, keras_major=m),
                       X, mask)  # fmt: skip


def test_padding_cropping_upsampling():
    assert_keras_layer(lambda L: L.layers.ZeroPadding1D((1, 3)),
                       lambda m: K.KerasZeroPadding1D((1, 3), keras_major=m), X)
    assert_keras_layer(lambda L: L.layers.Cropping1D((2, 1)),
                       lambda m: K.KerasCropping1D((2, 1), keras_major=m), X)
    assert_keras_layer(lambda L: L.layers.UpSampling1D(3),
                       lambda m: K.KerasUpSampling1D(3, keras_major=m), X)
