"""Keras 3 SavedModels traced on cuDNN's kernel (written here as a GPU machine writes them:
tests/porting/cudnn_saved_models.py), converted with no flags and compared with Keras' standard
path on the same weights (TF has no CPU kernel for CudnnRNNV3): outputs and every gradient on
the valid steps, zeros at padded steps, the final states at each row's length; a mask that is
not right-padded refused at call, as the graph's Assert refuses it; a params buffer that is not
Keras' weights refused by name."""

import numpy as np
import pytest
import torch

from tests.helpers import (
    PORT_TOL,
    cli_convert,
    convert_without_tf,
    keras_module,
    needs_tf,
    same_modules,
    scaled_error,
    tf_module,
)
from tests.porting.cudnn_saved_models import export_cudnn_traced, has_cudnn_and_no_loop
from torch_lstm_grad import porting

pytestmark = needs_tf
T, B, I = 6, 3, 4  # noqa: E741
# Row 0 full, rows 1 and 2 right-padded: the masks cuDNN's path takes.
RIGHT_PADDED = np.array([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)


def _stack(K):
    L = K.layers
    return [L.LSTM(5, return_sequences=True, name="lstm"), L.GRU(4, return_sequences=True,
            return_state=True, name="gru"), L.LSTM(3, go_backwards=True, return_state=True,
            name="lstm_back")]  # fmt: skip


def _bidirectional(K):
    L = K.layers
    return [
        L.Bidirectional(L.LSTM(3, return_sequences=True), name="bi_concat"),
        L.Bidirectional(L.GRU(2, return_sequences=True), merge_mode="sum", name="bi_sum"),
        L.Bidirectional(L.LSTM(2, return_sequences=True), merge_mode="mul", name="bi_mul"),
        L.Bidirectional(
            L.GRU(3, return_sequences=True, go_backwards=False), merge_mode="ave", name="bi_ave"
        ),  # fmt: skip
        L.Bidirectional(L.GRU(2, return_state=True), name="bi_states"),
    ]


def _backwards(K):
    L = K.layers
    return [L.GRU(4, go_backwards=True, return_sequences=True, name="gru_back"),
            L.LSTM(3, go_backwards=True, return_sequences=True, return_state=True,
                   name="lstm_back_seq")]  # fmt: skip


MODELS = {"stack": _stack, "bidirectional": _bidirectional, "backwards": _backwards}


def _model(make_layers, mask: bool, seed: int):
    keras = keras_module()
    x_in = keras.Input((T, I), name="x")
    m_in = keras.Input((T,), dtype="bool", name="m") if mask else None
    y, outputs, layers = x_in, [], make_layers(keras)
    model_flips = []  # per output: a go_backwards layer's sequence, in its reading order
    for layer in layers:
        out = layer(y, mask=m_in) if mask else layer(y)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        outputs += out
        model_flips += [getattr(layer, "go_backwards", False)] * len(out)
        y = out[0]
    model = keras.Model([x_in, m_in] if mask else x_in, outputs)
    model.flips = model_flips
    g = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(g.uniform(-0.6, 0.6, w.shape).astype(np.float32))
    return model, [layer.name for layer in layers]


def _compare(model, names, mods, mask):
    """Keras (its standard path, on this CPU) against the ported layers chained: every output,
    the gradient of the input and of every weight; a sequence output's padded steps are left
    out of the loss (Keras' standard path repeats the last output there, cuDNN's gives zeros,
    checked here)."""
    tf = tf_module()
    g = np.random.default_rng(1)
    x = g.standard_normal((B, T, I)).astype(np.float32)
    m = RIGHT_PADDED if mask else np.ones((B, T), bool)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        outs = model([xt, tf.constant(m)] if mask else xt)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        weights = [g.standard_normal(o.shape).astype(np.float32) for o in outs]
        valid = [m[:, ::-1] if f else m for f in model.flips]
        weights = [w * v[:, :, None] if w.ndim == 3 else w for w, v in zip(weights, valid,
                   strict=True)]  # fmt: skip
        loss = tf.add_n([tf.reduce_sum(o * w) for o, w in zip(outs, weights, strict=True)])
    tvars = model.trainable_weights
    grads = tape.gradient(loss, [xt, *tvars])
    x_t = torch.from_numpy(x).requires_grad_()
    y, mine = x_t, []
    for name in names:
        out = mods[name](y, mask=torch.from_numpy(m) if mask else None)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        mine += out
        y = out[0]
    assert len(mine) == len(outs)
    errors = {}
    for k, (ours, theirs, v) in enumerate(zip(mine, outs, valid, strict=True)):
        theirs = theirs.numpy()
        if theirs.ndim == 3:  # valid steps compared, padded ones zero in ours
            assert not ours.detach()[torch.from_numpy(~v)].any(), f"output {k}: padded steps"
            theirs = theirs * v[:, :, None]
        errors[f"output {k}"] = scaled_error(ours, theirs)
    ours_loss = sum((o * torch.from_numpy(w)).sum() for o, w in zip(mine, weights, strict=True))
    wanted = [x_t] + [_param(mods, v.path) for v in tvars]
    for k, (ours, theirs) in enumerate(
        zip(torch.autograd.grad(ours_loss, wanted), grads, strict=True)
    ):
        errors[f"grad {k}"] = scaled_error(ours, tf.convert_to_tensor(theirs).numpy())
    bad = {k: f"{e:.1e}" for k, e in errors.items() if not e <= PORT_TOL}
    assert not bad, bad


def _param(mods, path: str):
    """The module parameter of Keras' variable `path` (`lstm/lstm_cell/kernel`,
    `bi_concat/forward_lstm_2/lstm_cell/kernel`)."""
    parts = path.split("/")
    module = mods[parts[0]]
    if len(parts) == 4:  # a Bidirectional's direction
        module = getattr(module, parts[1].split("_")[0] + "_layer")
    return getattr(module, parts[-1])


@pytest.mark.parametrize("mask", [False, True], ids=["no_mask", "right_padded"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_cudnn_traced_export_matches_keras(tmp_path, capsys, kind, mask):
    model, names = _model(MODELS[kind], mask, seed=3)
    src = export_cudnn_traced(model, str(tmp_path / "sm"), "export")
    held, line = has_cudnn_and_no_loop(src)
    assert held, line
    mods, log = cli_convert(src, tmp_path, capsys)
    assert "cudnn_mask           = True  <- the SavedModel's" in log
    _compare(model, names, mods, mask)


def test_tf_saved_model_save_and_a_mask_not_right_padded(tmp_path, capsys):
    model, names = _model(_stack, True, seed=5)
    src = export_cudnn_traced(model, str(tmp_path / "sm"), "saved_model")
    mods, _ = cli_convert(src, tmp_path, capsys)
    _compare(model, names, mods, True)
    x = torch.randn(B, T, I)
    holes = torch.from_numpy(RIGHT_PADDED.copy())
    holes[2, 1] = False  # a step masked before a valid one
    with pytest.raises(ValueError, match="only right-padded"):
        mods["lstm"](x, mask=holes)
    empty = torch.from_numpy(RIGHT_PADDED.copy())
    empty[1] = False  # a row with no step
    with pytest.raises(ValueError, match="at least one step"):
        mods["lstm"](x, mask=empty)


def test_params_not_keras_weights_are_refused(tmp_path, capsys):
    """A GRU traced where TF is no CUDA build keeps Keras' z, r order in cuDNN's buffer (Keras
    swaps the blocks on CUDA builds only), and an LSTM traced on a ROCm build has its gates
    reordered for MIOpen: neither computes the layer's cell on cuDNN, and both are refused."""
    from unittest import mock

    tf = tf_module()
    keras = keras_module()
    info = tf.sysconfig.get_build_info()
    x = keras.Input((T, I))
    model = keras.Model(
        x, [keras.layers.GRU(3, name="gru")(x), keras.layers.LSTM(2, name="lstm")(x)]
    )
    rocm = {**info, "is_cuda_build": False, "is_rocm_build": True}
    with mock.patch.object(tf.sysconfig, "get_build_info", lambda: rocm):
        src = export_cudnn_traced(model, str(tmp_path / "sm"), "export", build_info=False)
    assert has_cudnn_and_no_loop(src)[0]
    err = cli_convert(src, tmp_path, capsys, code=2)
    assert "the z and r blocks are not swapped into cuDNN's r, z order" in err
    assert "lstm_1/split_3/value (Pack), not from the layer's weights" in err  # MIOpen's order


def test_read_without_tensorflow(tmp_path, capsys):
    """The reader is the package's own: the same modules where TF cannot be imported."""
    model, _ = _model(_bidirectional, True, seed=7)
    src = export_cudnn_traced(model, str(tmp_path / "sm"), "export")
    mods, _ = cli_convert(src, tmp_path, capsys)
    log = convert_without_tf(src, tmp_path / "no_tf.pt")
    assert "cudnn_mask           = True" in log
    same_modules(mods, porting.load(tmp_path / "no_tf.pt"))
