"""How the raw ops convert what they are given: numpy arrays (float64 ones among float32
tensors), Python lists and numpy scalars, to the dtype TF's eager op infers; against TF's own
LSTMBlockCell and, where TF has no kernel (float64 on CPU), the float64 reference."""

import numpy as np
import pytest
import torch

from tests.helpers import needs_tf, tf_module
from torch_lstm_grad import reference

T, B, I, H = 3, 2, 4, 5  # noqa: E741


_CELL_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def _cell_values(dtype=np.float32):
    rng = np.random.default_rng(34)
    shapes = {"x": (B, I), "cs_prev": (B, H), "h_prev": (B, H), "w": (I + H, 4 * H),
              "wci": (H,), "wcf": (H,), "wco": (H,), "b": (4 * H,)}  # fmt: skip
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def _as_given(values, given):
    """Each input as `given[name]` says: "torch" (a tensor of the array's dtype), "numpy" (the
    array), "list" (nested Python floats), "f64" (the array as a float64 numpy array) or
    "scalar" (a numpy float32 scalar: a 0-d input)."""
    out = {}
    for k, v in values.items():
        how = given.get(k, "torch")
        out[k] = {"torch": lambda v: torch.from_numpy(v.copy()), "numpy": lambda v: v,
                  "list": lambda v: v.tolist(), "f64": lambda v: v.astype(np.float64),
                  "scalar": lambda v: np.float32(v.reshape(-1)[0])}[how](v)  # fmt: skip
    return out


@needs_tf
@pytest.mark.parametrize(
    "given",
    [{k: "list" for k in _CELL_INPUTS[1:]}, {"x": "list"}, {k: "numpy" for k in _CELL_INPUTS},
     {"cs_prev": "f64", "w": "f64"}, {"x": "list", "b": "scalar"},
     {k: "list" for k in _CELL_INPUTS}],
    ids=["lists", "x_list", "all_numpy", "numpy_float64_among_float32", "numpy_scalar_bias",
         "all_lists"],
)  # fmt: skip
def test_raw_ops_convert_numpy_and_python_inputs_as_tf(given):
    """raw_ops.LSTMBlockCell given numpy arrays (float64 ones among float32 tensors), Python
    lists (x among them) or a numpy scalar converts them as TF's eager op does (to the dtype of
    the first tensor, else of the first input): the outputs are TF's, float32 like TF's, or both
    refuse (a 0-d bias)."""

    from torch_lstm_grad import raw_ops

    tf = tf_module()
    values = _cell_values()
    ours, theirs = _as_given(values, given), _as_given(values, given)
    theirs = {k: tf.constant(v.numpy()) if isinstance(v, torch.Tensor) else v
              for k, v in theirs.items()}  # fmt: skip
    try:
        want = tf.raw_ops.LSTMBlockCell(**theirs, forget_bias=1.0, cell_clip=3.0)
    except (tf.errors.InvalidArgumentError, ValueError, TypeError):
        want = None
    if want is None:
        with pytest.raises((ValueError, TypeError, RuntimeError), match="b"):
            raw_ops.LSTMBlockCell(**ours)
        return
    got = raw_ops.LSTMBlockCell(**ours)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float32 and w.dtype == tf.float32
        torch.testing.assert_close(g, torch.from_numpy(w.numpy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "given, float64_tensor",
    [({k: "list" for k in _CELL_INPUTS} | {"x": "f64"}, None),
     ({k: "numpy" for k in _CELL_INPUTS} | {"x": "list"}, "cs_prev")],
    ids=["no_tensor_x_float64_numpy", "x_list_cs_prev_float64_tensor"],
)  # fmt: skip
def test_raw_ops_take_float64_where_tf_infers_it(given, float64_tensor):
    """T is float64 where TF infers it: from the first tensor (cs_prev a float64 tensor, x a
    Python list, the rest float32 numpy arrays), or with no tensor from the first input
    converted alone (x a float64 numpy array, the rest lists); every input is converted to it
    and the outputs are the float64 reference's. (TF's own LSTMBlockCell has no float64 kernel
    on CPU.)"""
    from torch_lstm_grad import raw_ops

    values = _cell_values()
    given = _as_given(values, given)
    if float64_tensor:
        given[float64_tensor] = torch.from_numpy(values[float64_tensor].astype(np.float64))
    got = raw_ops.LSTMBlockCell(**given)
    f64 = {k: torch.from_numpy(v.astype(np.float64)) for k, v in values.items()}
    want = reference.lstm_block_cell(**f64)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
