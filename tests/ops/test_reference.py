"""The float64 reference (torch_lstm_grad/reference.py) reproduces TensorFlow's fused RNN raw ops.

TF runs in float32 (its block ops have no float64 kernel); the reference runs in float64 on the same
float32 inputs cast up, and both are compared in float64.
"""

import importlib.util
import pathlib

import pytest
import torch

from tests.helpers import REPO_ROOT, tf_raw

pytest.importorskip("tensorflow")


def _load(name, path):
    # By file path: the package's __init__ imports a compiled extension that may not be built.
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load("_torch_lstm_grad_reference",
            pathlib.Path(REPO_ROOT, "torch_lstm_grad", "reference.py"))  # fmt: skip


# float32 TF vs float64 reference. TF's CPU sigmoid/tanh are Eigen approximations up to ~5 ulp off
# the correctly rounded value, and its float32 GEMMs and per-step gradient accumulation add their
# own rounding; on inputs scaled as below (uniform(-1, 1) * 0.5 weights, O(1) values) the observed
# differences are ~1e-6 at most.
ATOL = RTOL = 1e-5
B, I, H, T = 8, 3, 5, 6  # noqa: E741 (the names of docs/tf-semantics.md)
FORGET_BIAS = 0.7  # not the default, so a missing or misplaced forget_bias is caught
CLIP = 0.3  # small enough that 35-75 % of the cells clip


def _u(*shape, scale=1.0):
    return (torch.rand(*shape, dtype=torch.float32) * 2 - 1) * scale


def _lstm_weights():
    return dict(
        w=_u(I + H, 4 * H, scale=0.5),
        wci=_u(H, scale=0.5),
        wcf=_u(H, scale=0.5),
        wco=_u(H, scale=0.5),
        b=_u(4 * H, scale=0.5),
    )


def _f64(d):
    return {k: v.double() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


def _close(tf_outs, ref_outs, names):
    assert len(tf_outs) == len(ref_outs) == len(names)
    for name, got, want in zip(names, tf_outs, ref_outs, strict=True):
        torch.testing.assert_close(
            got.double(),
            want.detach(),
            atol=ATOL,
            rtol=RTOL,
            msg=lambda m, name=name: f"{name}: {m}",
        )


def _assert_clipped_a_lot(cs, cell_clip):
    if cell_clip > 0 and cs.numel():
        assert (cs.abs() == cell_clip).double().mean() > 0.25  # the clip really is exercised


LSTM_OUT = ("i", "cs", "f", "o", "ci", "co", "h")
CELL_GRAD_OUT = ("cs_prev_grad", "dicfo", "wci_grad", "wcf_grad", "wco_grad")
BLOCK_GRAD_OUT = (
    "x_grad",
    "cs_prev_grad",
    "h_prev_grad",
    "w_grad",
    "wci_grad",
    "wcf_grad",
    "wco_grad",
    "b_grad",
)
peephole = pytest.mark.parametrize("use_peephole", [False, True], ids=["nopeep", "peep"])
clip = pytest.mark.parametrize("cell_clip", [0.0, CLIP], ids=["noclip", "clip"])


def _cell_inputs():
    return dict(x=_u(B, I), cs_prev=_u(B, H, scale=1.5), h_prev=_u(B, H), **_lstm_weights())


@peephole
@clip
def test_lstm_block_cell(use_peephole, cell_clip):
    inp = _cell_inputs()
    attrs = dict(forget_bias=FORGET_BIAS, cell_clip=cell_clip, use_peephole=use_peephole)
    got = tf_raw("LSTMBlockCell", **inp, **attrs)
    _assert_clipped_a_lot(got[1], cell_clip)
    _close(got, ref.lstm_block_cell(**_f64(inp), **attrs), LSTM_OUT)


@peephole
@clip
def test_lstm_block_cell_grad(use_peephole, cell_clip):
    inp = _cell_inputs()
    grads = dict(cs_grad=_u(B, H), h_grad=_u(B, H))
    fwd = tf_raw(
        "LSTMBlockCell",
        **inp,
        forget_bias=FORGET_BIAS,
        cell_clip=cell_clip,
        use_peephole=use_peephole,
    )
    _assert_clipped_a_lot(fwd[1], cell_clip)
    got = tf_raw(
        "LSTMBlockCellGrad",
        **inp,
        **dict(zip(LSTM_OUT[:6], fwd[:6], strict=True)),
        **grads,
        use_peephole=use_peephole,
    )
    want = ref.lstm_block_cell_grad(
        **_f64(inp),
        **_f64(grads),
        forget_bias=FORGET_BIAS,
        cell_clip=cell_clip,
        use_peephole=use_peephole,
    )
    _close(got, want, CELL_GRAD_OUT)


# (TF forward op, TF grad op, reference gate order, forget_bias); BlockLSTMV2 has no forget_bias
# attribute (it is 0).
VERSIONS = {
    "V1": ("BlockLSTM", "BlockLSTMGrad", "icfo", FORGET_BIAS),
    "V2": ("BlockLSTMV2", "BlockLSTMGradV2", "ifco", 0.0),
}
block_cases = pytest.mark.parametrize("version", sorted(VERSIONS))
seq_lens = pytest.mark.parametrize("seq_len_max", [T, 3, 0], ids=["full", "partial", "zero"])


def _block_setup(version, cell_clip, use_peephole):
    fwd_op, grad_op, gate_order, forget_bias = VERSIONS[version]
    tf_attrs = dict(cell_clip=cell_clip, use_peephole=use_peephole)
    if version == "V1":
        tf_attrs["forget_bias"] = forget_bias
    ref_attrs = dict(
        cell_clip=cell_clip,
        use_peephole=use_peephole,
        forget_bias=forget_bias,
        gate_order=gate_order,
    )
    inp = dict(x=_u(T, B, I), cs_prev=_u(B, H, scale=1.5), h_prev=_u(B, H), **_lstm_weights())
    return fwd_op, grad_op, tf_attrs, ref_attrs, inp


@block_cases
@peephole
@clip
@seq_lens
def test_block_lstm(version, use_peephole, cell_clip, seq_len_max):
    fwd_op, _, tf_attrs, ref_attrs, inp = _block_setup(version, cell_clip, use_peephole)
    got = tf_raw(fwd_op, seq_len_max=seq_len_max, **inp, **tf_attrs)
    want = ref.block_lstm(seq_len_max, **_f64(inp), **ref_attrs)
    _assert_clipped_a_lot(got[1][:seq_len_max], cell_clip)
    # TF leaves i, f, o, ci, co uninitialised for t >= seq_len_max and zeroes cs and h there;
    # the reference zeroes all seven.
    L = seq_len_max
    _close([got[k][:L] for k in range(7)], [want[k][:L] for k in range(7)], LSTM_OUT)
    _close([got[1][L:], got[6][L:]], [want[1][L:], want[6][L:]], ("cs_tail", "h_tail"))
    for name, tail in zip(LSTM_OUT, want, strict=True):
        assert not tail[L:].any(), name


@block_cases
@peephole
@clip
@seq_lens
def test_block_lstm_grad(version, use_peephole, cell_clip, seq_len_max):
    fwd_op, grad_op, tf_attrs, ref_attrs, inp = _block_setup(version, cell_clip, use_peephole)
    grads = dict(
        cs_grad=_u(T, B, H), h_grad=_u(T, B, H)
    )  # entries at t >= seq_len_max must be ignored
    fwd = tf_raw(fwd_op, seq_len_max=seq_len_max, **inp, **tf_attrs)
    _assert_clipped_a_lot(fwd[1][:seq_len_max], cell_clip)
    got = tf_raw(
        grad_op,
        seq_len_max=seq_len_max,
        **inp,
        **dict(zip(LSTM_OUT, fwd, strict=True)),
        **grads,
        use_peephole=use_peephole,
    )
    want = ref.block_lstm_grad(seq_len_max, **_f64(inp), **_f64(grads), **ref_attrs)
    _close(got, want, BLOCK_GRAD_OUT)


def _gru_inputs():
    return dict(
        x=_u(B, I),
        h_prev=_u(B, H),
        w_ru=_u(I + H, 2 * H, scale=0.5),
        w_c=_u(I + H, H, scale=0.5),
        b_ru=_u(2 * H, scale=0.5),
        b_c=_u(H, scale=0.5),
    )


def test_gru_block_cell():
    inp = _gru_inputs()
    _close(
        tf_raw("GRUBlockCell", **inp), ref.gru_block_cell(**_f64(inp)), ("r", "u", "c", "h")
    )


def test_gru_block_cell_grad():
    inp = _gru_inputs()
    d_h = _u(B, H)
    r, u, c, _ = tf_raw("GRUBlockCell", **inp)
    got = tf_raw("GRUBlockCellGrad", **inp, r=r, u=u, c=c, d_h=d_h)
    want = ref.gru_block_cell_grad(**_f64(inp), d_h=d_h.double())
    _close(got, want, ("d_x", "d_h_prev", "d_c_bar", "d_r_bar_u_bar"))
