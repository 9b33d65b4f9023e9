"""keras_layers/normalization.py against Keras 3 and tf_keras: BatchNormalization at inference
and in training (batch statistics over the unmasked steps where a mask arrives; the moving
statistics updated with Keras' momentum), LayerNormalization, UnitNormalization."""

import numpy as np
import pytest
import torch

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K

pytestmark = needs_tf

B, T, C = 3, 7, 5
X = rng(1).standard_normal((B, T, C)).astype(np.float32)
MASK = rng(2).random((B, T)) > 0.3
BN = ("gamma", "beta", "moving_mean", "moving_variance")


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_batch_normalization(training, masked):
    assert_keras_layer(lambda L: L.layers.BatchNormalization(momentum=0.9, epsilon=1e-2),
                       lambda m: K.KerasBatchNormalization(C, momentum=0.9, epsilon=1e-2,
                                                           keras_major=m),
                       X, MASK if masked else None, BN, training)  # fmt: skip


def test_batch_normalization_without_center_on_2d_inputs_in_training():
    assert_keras_layer(lambda L: L.layers.BatchNormalization(center=False),
                       lambda m: K.KerasBatchNormalization(C, center=False, keras_major=m),
                       X[:, 0], None, ("gamma", "moving_mean", "moving_variance"), True)


def test_batch_normalization_defaults_are_keras_not_torch():
    bn = K.KerasBatchNormalization(4)
    assert (bn.epsilon, bn.momentum) == (1e-3, 0.99)
    x = torch.randn(8, 4) * 3 + 1
    bn.train()(x)
    # moving = 0.99 · moving + 0.01 · batch statistic (the biased variance)
    torch.testing.assert_close(bn.moving_mean, 0.01 * x.mean(0))
    torch.testing.assert_close(bn.moving_variance, 0.99 + 0.01 * x.var(0, unbiased=False))


@pytest.mark.parametrize("center, scale", [(True, True), (False, True), (True, False)])
def test_layer_normalization(center, scale):
    attrs = tuple(a for a, on in (("gamma", scale), ("beta", center)) if on)
    assert_keras_layer(lambda L: L.layers.LayerNormalization(center=center, scale=scale),
                       lambda m: K.KerasLayerNormalization(C, center=center, scale=scale,
                                                           keras_major=m),
                       X, MASK, attrs)  # fmt: skip


def test_unit_normalization():
    assert_keras_layer(lambda L: L.layers.UnitNormalization(),
                       lambda m: K.KerasUnitNormalization(keras_major=m), X, MASK)  # fmt: skip
