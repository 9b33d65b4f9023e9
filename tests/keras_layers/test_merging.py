"""keras_layers/merging.py against Keras 3 and tf_keras, with no mask, one and two masks: the
element-wise layers (Keras 2 ANDs the masks the inputs have, Keras 3 ORs them and gives none
when an input has none; Keras 3's Maximum, Minimum and Multiply read the masks) and
Concatenate (`all` over the last axis in Keras 2, `any` in Keras 3), broadcasting ranks."""

import numpy as np
import pytest

from tests.helpers import assert_keras_layer, needs_tf, rng
from torch_lstm_grad import keras_layers as K

pytestmark = needs_tf

X = rng(1).standard_normal((3, 7, 5)).astype(np.float32)
Y = rng(2).standard_normal((3, 7, 5)).astype(np.float32)
M1 = rng(3).random((3, 7)) > 0.3
M2 = rng(4).random((3, 7)) > 0.5
MASKS = {"no mask": [None, None], "one mask": [M1, None], "two masks": [M1, M2]}


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize("cls", ["Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum"])
def test_element_wise(cls, masks):
    assert_keras_layer(lambda L: getattr(L.layers, cls)(),
                       lambda m: getattr(K, f"Keras{cls}")(keras_major=m), [X, Y],
                       MASKS[masks])  # fmt: skip


@pytest.mark.parametrize("masks", list(MASKS))
def test_concatenate(masks):
    assert_keras_layer(lambda L: L.layers.Concatenate(),
                       lambda m: K.KerasConcatenate(keras_major=m), [X, Y], MASKS[masks])


def test_concatenate_along_time_and_add_across_ranks():
    assert_keras_layer(lambda L: L.layers.Concatenate(axis=1),
                       lambda m: K.KerasConcatenate(axis=1, keras_major=m), [X, Y], [M1, M2])
    assert_keras_layer(lambda L: L.layers.Add(), lambda m: K.KerasAdd(keras_major=m),
                       [X, Y[:, 0]])  # fmt: skip
