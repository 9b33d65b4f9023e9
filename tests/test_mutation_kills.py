"""Tests the mutation run (benchmarks/mutation_run.py, issue 34) asked for: each kills mutants
of the Python layers no other test killed. Every expectation is TensorFlow's, Keras' or the
float64 reference's (`torch_lstm_grad.reference`), never this package's own numbers."""

import pytest
import torch

from torch_lstm_grad import ops, reference

T, B, I, H = 3, 2, 4, 5  # noqa: E741


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def _raised(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the type is what is compared
        return type(err)
    return None


@pytest.mark.parametrize("attr", ["gate_order", "gate_activation", "activation", "clip_gradient"])
@pytest.mark.parametrize("value", [None, 1])
def test_fused_ops_refuse_a_non_string_attribute_as_the_reference(attr, value):
    """A non-string attribute (None, 1) raises the ValueError the float64 reference raises
    (the op's schema alone would raise a RuntimeError, "Expected a value of type 'str'"):
    ops.block_lstm_ex, ops.block_lstm_inference and ops.keras_gru check their attributes
    before the call. Kills the mutants dropping those checks."""
    x, cs, h, w, b = _f64(T, B, I), _f64(B, H), _f64(B, H), _f64(I + H, 4 * H), _f64(4 * H)
    z = torch.zeros(H, dtype=torch.float64)
    want = _raised(lambda: reference.block_lstm(T, x, cs, h, w, z, z, z, b, **{attr: value}))
    assert want is ValueError
    assert _raised(lambda: ops.block_lstm_ex(x, cs, h, w, b, **{attr: value})) is want
    if attr != "clip_gradient":  # block_lstm_inference has no clip_gradient (no backward)
        assert _raised(lambda: ops.block_lstm_inference(x, cs, h, w, b, **{attr: value})) is want
    if attr in ("gate_activation", "activation"):
        k, rk, bias = _f64(I, 3 * H), _f64(H, 3 * H), _f64(2, 3 * H)
        want = _raised(lambda: reference.keras_gru(T, x, h, k, rk, bias, **{attr: value}))
        assert want is ValueError
        assert _raised(lambda: ops.keras_gru(x, h, k, rk, bias, **{attr: value})) is want
