"""`porting.build.build`, a description to a module: a description no module computes is refused
naming the layer and the attribute, and nothing is built."""

import numpy as np
import pytest

from tests.helpers import needs_tf
from torch_lstm_grad import modules


@needs_tf
def test_builder_refusals():
    """A description no module computes is refused naming the layer and the attribute (a
    variant the module's constructor rejects, a constructor that rejects the layer itself, a
    kind without a builder), and nothing is built."""
    from torch_lstm_grad.porting import build as builders
    from torch_lstm_grad.porting.describe.description import LayerDescription, Refused

    def gru(activation):
        d = LayerDescription("cell", "tf1.GRUCell", "test")
        for key, value in (("units", 3), ("input_size", 2), ("activation", activation)):
            d.set(key, value, "test")
        d.weights = {n: n for n in ("gates/kernel", "gates/bias", "candidate/kernel",
                                    "candidate/bias")}  # fmt: skip
        return d

    variables = {
        "gates/kernel": np.zeros((5, 6), np.float32),
        "gates/bias": np.zeros(6, np.float32),
        "candidate/kernel": np.zeros((5, 3), np.float32),
        "candidate/bias": np.zeros(3, np.float32),
    }
    entries, warned = builders.build([gru("tanh")], variables)
    assert list(entries) == ["cell"] and warned == []
    with pytest.raises(Refused, match="cell: activation = 'softsign': not computed by this "
                       "version's GRUBlockCell"):  # fmt: skip
        builders.build([gru("softsign")], variables)
    with pytest.raises(Refused, match="x: kind = 'tf1.Unknown': no module builder"):
        builders.build([LayerDescription("x", "tf1.Unknown", "test")], {})
    keras_lstm = LayerDescription("k", "keras.LSTM", "test")
    for key, value in (("units", 0), ("input_size", 3), ("activation", "tanh"),
                       ("gate_activation", "sigmoid"), ("use_bias", True), ("dtype", "float32"),
                       ("zero_output_for_mask", False)):  # fmt: skip
        keras_lstm.set(key, value, "test")
    with pytest.raises(Refused, match="k: layer = 'keras.LSTM': units, input_size: expected"):
        builders.build([keras_lstm], {})

    class Older(modules.GRUBlockCell):  # a version whose module rejects the layer itself
        def __init__(self, *args, **kwargs):
            raise TypeError("unexpected keyword argument 'input_size'")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(modules, "GRUBlockCell", Older)
        with pytest.raises(Refused, match="cell: layer = 'tf1.GRUCell': unexpected keyword"):
            builders.build([gru("tanh")], variables)
