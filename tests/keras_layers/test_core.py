"""keras_layers/core.py against Keras 3 and tf_keras running the same layers with the same
random weights: Dense with every activation either Keras defines, Embedding (mask_zero: the mask
`ids != 0`), Masking, Activation, ActivityRegularization and the noise layers (the identity at
training=False); outputs, the inputs' and weights' gradients, and the output masks."""

import numpy as np
import pytest

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K
from torch_lstm_grad.keras_layers.activations import ACTIVATIONS, activation

pytestmark = needs_tf

B, T, C = 3, 7, 5
X = rng(1).standard_normal((B, T, C)).astype(np.float32)
MASK = rng(2).random((B, T)) > 0.3


@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS[2]) | set(ACTIVATIONS[3])))
def test_dense_with_each_activation(name):
    majors = tuple(m for m in (2, 3) if name in ACTIVATIONS[m])
    assert_keras_layer(lambda L: L.layers.Dense(4, activation=name),
                       lambda m: K.KerasDense(C, 4, name, keras_major=m), X, MASK,
                       ("kernel", "bias"), majors=majors)  # fmt: skip


def test_dense_without_bias_on_a_2d_input():
    assert_keras_layer(lambda L: L.layers.Dense(4, use_bias=False),
                       lambda m: K.KerasDense(C, 4, None, False, keras_major=m), X[:, 0], None,
                       ("kernel",))  # fmt: skip


def test_hard_sigmoid_is_each_majors_own():
    import torch

    x = torch.tensor([-3.0, -2.0, 0.5, 2.0, 3.0])
    assert torch.equal(activation("hard_sigmoid", 2)(x), torch.clamp(0.2 * x + 0.5, 0, 1))
    assert torch.equal(activation("hard_sigmoid", 3)(x), torch.clamp(x + 3, 0, 6) / 6)
    with pytest.raises(NotImplementedError, match="'hard_silu' is not one Keras 2 defines"):
        activation("hard_silu", 2)


@pytest.mark.parametrize("mask_zero", [False, True])
def test_embedding(mask_zero):
    ids = rng(3).integers(0, 9, (B, T)).astype(np.int32)
    ids[0, 4:] = 0
    assert_keras_layer(lambda L: L.layers.Embedding(9, 4, mask_zero=mask_zero),
                       lambda m: K.KerasEmbedding(9, 4, mask_zero, keras_major=m), ids, None,
                       ("embeddings",))  # fmt: skip


def test_masking():
    x = np.where(MASK[..., None], X, 0.0).astype(np.float32)
    assert_keras_layer(lambda L: L.layers.Masking(0.0),
                       lambda m: K.KerasMasking(0.0, keras_major=m), x)  # fmt: skip


def test_activation_and_activity_regularization_pass_the_mask_on():
    assert_keras_layer(lambda L: L.layers.Activation("tanh"),
                       lambda m: K.KerasActivation("tanh", keras_major=m), X, MASK)  # fmt: skip
    assert_keras_layer(lambda L: L.layers.ActivityRegularization(l2=0.1),
                       lambda m: K.KerasActivityRegularization(keras_major=m), X, MASK)  # fmt: skip


@pytest.mark.parametrize("cls, ours", [
    ("Dropout", K.KerasDropout), ("SpatialDropout1D", K.KerasSpatialDropout1D),
    ("GaussianNoise", K.KerasGaussianNoise), ("GaussianDropout", K.KerasGaussianDropout),
    ("AlphaDropout", K.KerasAlphaDropout),
])  # fmt: skip
def test_noise_layers_are_the_identity_at_inference(cls, ours):
    assert_keras_layer(lambda L: getattr(L.layers, cls)(0.4),
                       lambda m: ours(0.4, keras_major=m), X, MASK)  # fmt: skip


def test_noise_layers_draw_noise_in_training():
    import torch

    x = torch.ones(64, 8, 16)
    for layer in (K.KerasDropout(0.5), K.KerasSpatialDropout1D(0.5), K.KerasGaussianNoise(0.5),
                  K.KerasGaussianDropout(0.5), K.KerasAlphaDropout(0.5)):  # fmt: skip
        y = layer.train()(x)
        assert not torch.equal(y, x), type(layer).__name__
        assert torch.equal(layer.eval()(x), x)
    kept = (K.KerasDropout(0.5).train()(x) != 0).float().mean()
    assert 0.4 < float(kept) < 0.6
    spatial = K.KerasSpatialDropout1D(0.5).train()(x)
    assert torch.all((spatial == 0).all(dim=1) | (spatial != 0).all(dim=1))  # whole channels
