"""The public functions of ops.py given only their tensors or a bad attribute: block_lstm_ex and
block_lstm_inference compute with their documented defaults (the float64 reference's), and
a non-string attribute of block_lstm_ex, block_lstm_inference or keras_gru raises the
ValueError the reference raises, before the op is called."""

import pytest
import torch

from tests.helpers import needs_tf
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


@needs_tf
@pytest.mark.parametrize("proj", [False, True], ids=["noproj", "proj"])
def test_fused_lstm_ops_defaults_vs_float64(proj):
    """ops.block_lstm_ex and ops.block_lstm_inference given only the tensors (peephole vectors
    too, without use_peephole): their documented defaults, forget_bias 1, no cell clip, no
    projection clip, peepholes off, every step; as the float64 reference computes them, with a
    large cell state and projection where a clip would show; B != H."""
    from torch_lstm_grad import ops, reference

    f64 = torch.float64
    T, B, I_, H, P = 4, 3, 2, 5, (2 if proj else 5)
    x = torch.randn(T, B, I_, dtype=f64)
    cs, h = torch.randn(B, H, dtype=f64) * 4, torch.randn(B, P, dtype=f64)
    w, b = torch.randn(I_ + P, 4 * H, dtype=f64) * 0.8, torch.randn(4 * H, dtype=f64)
    w_proj = torch.randn(H, P, dtype=f64) * 3 if proj else None
    peep = [torch.randn(H, dtype=f64) for _ in range(3)]
    extra = {"w_proj": w_proj, "proj_clip": 0.0} if proj else {}
    want = reference.block_lstm(T, x, cs, h, w, *(torch.zeros(H, dtype=f64),) * 3, b,
                                forget_bias=1.0, cell_clip=0.0, **extra)  # fmt: skip
    got = ops.block_lstm_ex(x, cs, h, w, b, wci=peep[0], wcf=peep[1], wco=peep[2],
                            w_proj=w_proj)  # fmt: skip
    torch.testing.assert_close(got.h, want[6], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.cs, want[1], rtol=1e-12, atol=1e-12)
    inf = ops.block_lstm_inference(x, cs, h, w, b, wci=peep[0], wcf=peep[1], wco=peep[2],
                                   w_proj=w_proj)  # fmt: skip
    torch.testing.assert_close(inf.h, want[6], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(inf.cs, want[1][-1], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(inf.h_last, want[6][-1], rtol=1e-12, atol=1e-12)
    # No peephole vectors: zeros of [H], with use_peephole or not; per-row lengths as a list.
    for on in (False, True):
        none = ops.block_lstm_ex(x, cs, h, w, b, w_proj=w_proj, use_peephole=on)
        assert torch.equal(none.h, got.h) and torch.equal(none.cs, got.cs)
        none = ops.block_lstm_inference(x, cs, h, w, b, w_proj=w_proj, use_peephole=on)
        assert torch.equal(none.h, inf.h) and torch.equal(none.cs, inf.cs)
    lengths = [T, 2, 0]
    rows = ops.block_lstm_inference(x, cs, h, w, b, w_proj=w_proj, sequence_length=lengths)
    torch.testing.assert_close(rows.h[:, 0], want[6][:, 0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rows.h[:2, 1], want[6][:2, 1], rtol=1e-12, atol=1e-12)
    assert not rows.h[2:, 1].any() and not rows.h[:, 2].any()
    torch.testing.assert_close(rows.cs[1], want[1][1, 1], rtol=1e-12, atol=1e-12)
    assert torch.equal(rows.cs[2], cs[2]) and torch.equal(rows.h_last[2], h[2])
