"""TF parity of GRUBlockCell and GRUBlockCellGrad (TF's reset-before GRU, docs/tf-semantics.md §5).

Every output of ``torch_lstm_grad.raw_ops.<Op>`` is compared with ``tf.raw_ops.<Op>`` (CPU; TF's
GRU kernels are float32 only) and with the pure-torch reference ``torch_lstm_grad.reference`` in
float64 (those tests run without TensorFlow). Ours also runs float16 and bfloat16 (float32
inside), checked against the float64 reference. Autograd through ``raw_ops.GRUBlockCell`` must
equal TF1's Python gradient (GRUBlockCellGrad plus the weight products); r, u and c are not
differentiable (docs/differences.md).
"""

import numpy as np
import pytest
import torch

import torch_lstm_grad
from tests.helpers import grad_leaves, nan_strided, needs_tf, tf_module, tf_raw, uniform
from torch_lstm_grad import raw_ops
from torch_lstm_grad import reference as ref

# ---------------------------------------------------------------------------------------------
# Tolerances, in ONE place. Criterion (see _close): |ours - theirs| <= tol * (|theirs| + scale)
# element-wise, scale = max(1, max|theirs|) per output (the weight/bias grads of the autograd test
# are sums over B). Inputs are O(1): x/h_prev uniform(-1, 1), weights and biases
# uniform(-0.5, 0.5). "Measured" is the largest error over this file's grid for 4 seeds (the
# MAX_ERR dict below records it).
TOL = {
    # ours float32 vs TF float32: Eigen's sigmoid/tanh (<= 5 ulp) vs ours (<= ~3 ulp), and the
    # GEMMs ([x, h]·w_ru, [x, r⊙h]·w_c, d·wᵀ) summed in different orders. Measured: 5.6e-7
    # forward, 4.5e-8 GRUBlockCellGrad, 2.2e-7 autograd.
    ("tf", torch.float32): 3e-6,
    # ours float64 vs the float64 reference: summation order, libm vs torch activations.
    # Measured: 9.6e-16.
    ("ref", torch.float64): 1e-12,
    # ours float16 / bfloat16 (float32 inside, each output rounded once on store) vs the float64
    # reference on the same rounded inputs: about one rounding of the storage format (eps 9.8e-4
    # / 7.8e-3), plus the grad op reading the rounded r, u, c. Measured: 4.1e-4 float16, 3.6e-3
    # bfloat16 (its tolerance was 2e-2, 5.6x that).
    ("ref", torch.float16): 2e-3,
    ("ref", torch.bfloat16): 6e-3,
}
# Ours on non-contiguous views vs ours on contiguous copies: other GEMM paths, same math.
# Measured: 6.6e-8.
TOL_LAYOUT = 5e-7


GRU_IN = ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")
GRU_OUT = ("r", "u", "c", "h")
GRU_GRAD_OUT = ("d_x", "d_h_prev", "d_c_bar", "d_r_bar_u_bar")
# (B, I, H). "par": B * H large enough that the kernels' pointwise passes split into chunks;
# "b32": rows and gate columns (2H = 512) where the r/u gate product runs transposed
# (csrc/cpu/gemm.h's times_transposed; the c product, H = 256 columns, does not).
SHAPES = {"odd": (3, 7, 5), "B1": (1, 4, 3), "H1": (2, 3, 1), "par": (70, 9, 64),
          "b32": (32, 24, 256)}  # fmt: skip
shapes = pytest.mark.parametrize("shape", list(SHAPES))

# Largest scaled error seen per (comparison, dtype, op, output), filled as the tests run: to
# re-measure the tolerances above, run this file with pytest.main() in one process and print
# test_gru_block_cell.MAX_ERR.
MAX_ERR = {}


def _inputs(shape, dtype=torch.float32):
    B, I, H = SHAPES[shape]  # noqa: E741 (the names of docs/tf-semantics.md)
    return dict(
        x=uniform(B, I, dtype=dtype),
        h_prev=uniform(B, H, dtype=dtype),
        w_ru=uniform(I + H, 2 * H, scale=0.5, dtype=dtype),
        w_c=uniform(I + H, H, scale=0.5, dtype=dtype),
        b_ru=uniform(2 * H, scale=0.5, dtype=dtype),
        b_c=uniform(H, scale=0.5, dtype=dtype),
    )


def _close(key, name, got, want, tol=None):
    """|got - want| <= tol * (|want| + scale), scale = max(1, max|want|); records the max of
    |got - want| / (|want| + scale) in MAX_ERR."""
    tol = TOL[key[:2]] if tol is None else tol
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.detach().double(), want.detach().double()
    scale = max(1.0, w.abs().max().item()) if w.numel() else 1.0
    if g.numel():
        err = ((g - w).abs() / (w.abs() + scale)).max().item()
        k = (*key, name)
        MAX_ERR[k] = max(MAX_ERR.get(k, 0.0), err)
    torch.testing.assert_close(g, w, atol=tol * scale, rtol=tol,
                               msg=lambda m: f"{key} {name}: {m}")  # fmt: skip


def _check(key, names, got, want, tol=None):
    assert len(got) == len(want) == len(names)
    for name, g, w in zip(names, got, want, strict=True):
        _close(key, name, g, w, tol)


# ---------------------------------------------------------------------------------------------
# Ours vs TF (float32): the forward, then the Grad op fed the same inputs on both sides (TF's
# forward outputs r, u, c and a random d_h).


@needs_tf
@shapes
def test_gru_block_cell_and_grad_vs_tf(shape):
    B, _, H = SHAPES[shape]
    inp = _inputs(shape)
    want = tf_raw("GRUBlockCell", **inp)
    got = raw_ops.GRUBlockCell(**inp)
    _check(("tf", torch.float32, "GRUBlockCell"), GRU_OUT, got, want)

    r, u, c, _ = want
    d_h = uniform(B, H)
    want_g = tf_raw("GRUBlockCellGrad", **inp, r=r, u=u, c=c, d_h=d_h)
    got_g = raw_ops.GRUBlockCellGrad(**inp, r=r, u=u, c=c, d_h=d_h)
    _check(("tf", torch.float32, "GRUBlockCellGrad"), GRU_GRAD_OUT, got_g, want_g)


# ---------------------------------------------------------------------------------------------
# Ours vs the float64 reference (no TensorFlow needed): float64, and float16/bfloat16.


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16],
                         ids=["f64", "f16", "bf16"])  # fmt: skip
@shapes
def test_gru_block_cell_and_grad_vs_reference(dtype, shape):
    """Low-precision ours run on rounded inputs; the reference gets the same values in float64.
    The grad op is fed ours' forward outputs (rounded r, u, c for half/bfloat16)."""
    B, _, H = SHAPES[shape]
    inp = _inputs(shape, dtype)
    inp64 = {k: v.double() for k, v in inp.items()}
    got = raw_ops.GRUBlockCell(**inp)
    assert all(t.dtype == dtype for t in got)
    key = ("ref", dtype)
    _check((*key, "GRUBlockCell"), GRU_OUT, [t.double() for t in got],
           ref.gru_block_cell(**inp64))  # fmt: skip

    d_h = uniform(B, H, dtype=dtype)
    r, u, c, _ = got
    got_g = raw_ops.GRUBlockCellGrad(**inp, r=r, u=u, c=c, d_h=d_h)
    assert all(t.dtype == dtype for t in got_g)
    want_g = ref.gru_block_cell_grad(**inp64, d_h=d_h.double())
    _check((*key, "GRUBlockCellGrad"), GRU_GRAD_OUT, [t.double() for t in got_g], want_g)


# ---------------------------------------------------------------------------------------------
# Input forms.


@needs_tf
def test_noncontiguous_inputs_vs_tf():
    shape = "odd"
    B, _, H = SHAPES[shape]
    inp = _inputs(shape)
    nc = {k: nan_strided(v) for k, v in inp.items()}
    nc["x"] = inp["x"].t().contiguous().t()  # transposed views
    nc["w_ru"] = inp["w_ru"].t().contiguous().t()
    for name, t in nc.items():
        assert not t.is_contiguous(), name
    want = tf_raw("GRUBlockCell", **inp)
    got = raw_ops.GRUBlockCell(**nc)
    key = ("tf", torch.float32, "GRUBlockCell")
    _check(key, GRU_OUT, got, want)
    _check((*key, "layout"), GRU_OUT, got, raw_ops.GRUBlockCell(**inp), tol=TOL_LAYOUT)

    r, u, c, _ = want
    d_h = uniform(B, H)
    want_g = tf_raw("GRUBlockCellGrad", **inp, r=r, u=u, c=c, d_h=d_h)
    got_g = raw_ops.GRUBlockCellGrad(**nc, r=nan_strided(r), u=nan_strided(u), c=nan_strided(c),
                                     d_h=nan_strided(d_h))  # fmt: skip
    key = ("tf", torch.float32, "GRUBlockCellGrad")
    _check(key, GRU_GRAD_OUT, got_g, want_g)
    contiguous_g = raw_ops.GRUBlockCellGrad(**inp, r=r, u=u, c=c, d_h=d_h)
    _check((*key, "layout"), GRU_GRAD_OUT, got_g, contiguous_g, tol=TOL_LAYOUT)


def test_numpy_inputs():
    shape = "odd"
    B, _, H = SHAPES[shape]
    inp = _inputs(shape)
    want = raw_ops.GRUBlockCell(**inp)
    r, u, c, _ = want
    d_h = uniform(B, H)
    want_g = raw_ops.GRUBlockCellGrad(**inp, r=r, u=u, c=c, d_h=d_h)
    np_inp = {k: v.numpy() for k, v in inp.items()}
    got = raw_ops.GRUBlockCell(**np_inp)
    got_g = raw_ops.GRUBlockCellGrad(**np_inp, r=r.numpy(), u=u.numpy(), c=c.numpy(),
                                     d_h=d_h.numpy())  # fmt: skip
    for a, b in zip((*got, *got_g), (*want, *want_g), strict=True):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype
        assert torch.equal(a, b)
    assert isinstance(np_inp["x"], np.ndarray)


# ---------------------------------------------------------------------------------------------
# Autograd.


def _tf_gru_gradient(inp, r, u, c, d_h):
    """TF1 contrib's Python gradient of GRUBlockCell, with TF ops: GRUBlockCellGrad, then
    d_w_ru = [x, h_prev]ᵀ·d_r_bar_u_bar, d_w_c = [x, r⊙h_prev]ᵀ·d_c_bar, biases BiasAddGrad.
    Returns grads in the input order (x, h_prev, w_ru, w_c, b_ru, b_c)."""
    tf = tf_module()
    with tf.device("/CPU:0"):
        t = {k: tf.constant(v.numpy()) for k, v in inp.items()}
        r, u, c, d_h = (tf.constant(v.numpy()) for v in (r, u, c, d_h))
        d_x, d_h_prev, d_c_bar, d_ru = tf.raw_ops.GRUBlockCellGrad(**t, r=r, u=u, c=c, d_h=d_h)
        x, h_prev = t["x"], t["h_prev"]
        d_w_ru = tf.matmul(tf.concat([x, h_prev], 1), d_ru, transpose_a=True)
        d_w_c = tf.matmul(tf.concat([x, r * h_prev], 1), d_c_bar, transpose_a=True)
        d_b_ru = tf.raw_ops.BiasAddGrad(out_backprop=d_ru)
        d_b_c = tf.raw_ops.BiasAddGrad(out_backprop=d_c_bar)
        out = (d_x, d_h_prev, d_w_ru, d_w_c, d_b_ru, d_b_c)
    return tuple(torch.from_numpy(v.numpy().copy()) for v in out)


@needs_tf
@shapes
def test_autograd_vs_tf(shape):
    B, _, H = SHAPES[shape]
    inp = _inputs(shape)
    d_h = uniform(B, H)
    leaves = grad_leaves(inp)
    out = raw_ops.GRUBlockCell(**leaves)
    got = torch.autograd.grad(out.h, list(leaves.values()), d_h)
    r, u, c, _ = tf_raw("GRUBlockCell", **inp)
    want = _tf_gru_gradient(inp, r, u, c, d_h)
    _check(("tf", torch.float32, "autograd GRUBlockCell"), GRU_IN, got, want)


@shapes
def test_autograd_vs_reference_f64(shape):
    B, _, H = SHAPES[shape]
    inp = _inputs(shape, torch.float64)
    d_h = uniform(B, H, dtype=torch.float64)
    leaves = grad_leaves(inp)
    got = torch.autograd.grad(raw_ops.GRUBlockCell(**leaves).h, list(leaves.values()), d_h)
    leaves = grad_leaves(inp)
    want = torch.autograd.grad(ref.gru_block_cell(**leaves)[3], list(leaves.values()), d_h)
    _check(("ref", torch.float64, "autograd GRUBlockCell"), GRU_IN, got, want)


# Subsets of the inputs that need a gradient: the backward op computes only those (without d_x,
# the gate products cover only h_prev's rows of the weights).
SUBSETS = [("h_prev", "w_ru", "w_c", "b_ru", "b_c"), ("x",), ("h_prev",), ("w_c", "b_c"),
           ("x", "w_ru")]  # fmt: skip


@needs_tf
@pytest.mark.parametrize("subset", SUBSETS, ids="+".join)
@pytest.mark.parametrize("shape", ["B1", "b32", "par"])
def test_autograd_of_some_inputs_vs_tf(shape, subset):
    B, _, H = SHAPES[shape]
    inp = _inputs(shape)
    d_h = uniform(B, H)
    args = {k: v.clone().requires_grad_(k in subset) for k, v in inp.items()}
    got = torch.autograd.grad(raw_ops.GRUBlockCell(**args).h, [args[k] for k in subset], d_h)
    r, u, c, _ = tf_raw("GRUBlockCell", **inp)
    want = dict(zip(GRU_IN, _tf_gru_gradient(inp, r, u, c, d_h), strict=True))
    _check(("tf", torch.float32, "autograd GRUBlockCell, some inputs"), subset, got,
           [want[k] for k in subset])  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])  # fmt: skip
@pytest.mark.parametrize("shape", list(SHAPES))
def test_backward_op_is_grad_op_then_weight_products(shape, dtype):
    """The fused backward (CPU kernel) against its definition, GRUBlockCellGrad then TF1's
    products, which is also the kernel of the devices without one (CompositeExplicitAutograd):
    the same bits with every output asked for; each mask's outputs and Nones."""
    B, _, H = SHAPES[shape]
    inp = _inputs(shape, dtype)
    r, u, c, _ = raw_ops.GRUBlockCell(**inp)
    d_h = uniform(B, H, dtype=dtype)
    args = (*inp.values(), r, u, c, d_h)
    op = torch.ops.torch_lstm_grad._gru_block_cell_backward.default
    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    d_x, d_h_prev, d_c_bar, d_ru = raw_ops.GRUBlockCellGrad(**inp, r=r, u=u, c=c, d_h=d_h)
    x, h_prev = inp["x"], inp["h_prev"]
    want = (d_x, d_h_prev, torch.cat([x, h_prev], 1).t() @ d_ru,
            torch.cat([x, r * h_prev], 1).t() @ d_c_bar, d_ru.sum(0), d_c_bar.sum(0))  # fmt: skip
    # Without d_x or d_h_prev, the products over part of the weights' rows may round
    # differently (MKL's order depends on the output's width): d_c_bar's outputs stay exact.
    tol = TOL_LAYOUT if dtype == torch.float32 else TOL[("ref", dtype)]
    for mask in ([True] * 6, [False] + [True] * 5, [True, False] * 3, [False] * 6):
        for kernel, got in (("cpu", op(*args, mask)),
                            ("composite", op._op_dk(composite, *args, mask))):  # fmt: skip
            for k, (g, w, m) in enumerate(zip(got, want, mask, strict=True)):
                if not m:
                    assert g is None, (kernel, mask, k)
                elif kernel == "composite" or all(mask[:2]) or k in (3, 5):
                    assert torch.equal(g, w), (kernel, mask, k)
                else:
                    _close(("layout", dtype), GRU_IN[k], g, w, tol)


@pytest.mark.parametrize("entry", ["raw_ops", "Function"])
@pytest.mark.parametrize("gate", ["r", "u", "c"])
def test_gate_outputs_are_not_differentiable(entry, gate):
    leaves = grad_leaves(_inputs("odd"))
    if entry == "raw_ops":
        out = raw_ops.GRUBlockCell(**leaves)
    else:
        out = raw_ops.GRUBlockCellOutput(*torch_lstm_grad.GRUBlockCellFunction.apply(
            *leaves.values()))  # fmt: skip
    assert not getattr(out, gate).requires_grad
    with pytest.raises(RuntimeError):
        getattr(out, gate).sum().backward()
    assert out.h.requires_grad
    out.h.sum().backward()
    for name, leaf in leaves.items():
        assert leaf.grad is not None and leaf.grad.abs().sum() > 0, name
