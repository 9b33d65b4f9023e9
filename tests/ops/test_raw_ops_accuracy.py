"""Accuracy against float64, ours against TF's, on TF's test shapes: for every op and every
output and gradient, ours may be off a float64 truth by at most 1.5x TF's own error, or by
ULPS_AT_ROUNDING ulps of the tensor's largest value (float32's rounding level for these sums;
TF's own errors reach 1.7 ulps of it, and which side rounds closer there is chance).

TF's side is TF 2.21 on the CPU: its BlockLSTM / BlockLSTMGrad, LSTMBlockCell(Grad) and
GRUBlockCell(Grad) kernels for the block ops (float32 only), and its composite cells for CudnnRNN,
which has no CPU kernel (composite_rnn, tests/helpers.py). The truth: the project's float64
reference (torch_lstm_grad.reference) for the block ops, TF's composite in float64 for CudnnRNN,
our kernels in float64 for BlockLSTM (their float64 is checked against the reference at 1e-12
elsewhere). Inputs uniform [0, 1) as TF's CudnnRNN tests draw them, so sums over steps do not
cancel; weights as TF's tests draw them (uniform +-0.01; +-0.5 for the GRU, whose TF test
initialises with Glorot).

Shapes: CudnnRNN's NAMED_RNN_TESTCASES small / medium / large (cudnn_rnn_ops_test.py); the
block LSTM's lstm_ops_test.py shape (B 2, I 3, H 4, T 4) and, since summation order only
shows on longer sums, CudnnRNN's "large" one (I = H = 128, B 16, T 32); GRU's gru_ops_test.py
shape (B 4, H 5, I 6) and that large one; and model sizes ("model", I = H = 256, B 32, T 16,
and T 17, B 30; for the cells B 1 to 32, H 256 to 512), where the products pass the pairwise
bounds or, in a cell, how a step's [x, h_prev]·w sums its I + H terms shows. The differences
found there are documented (docs/differences.md) and pinned as strict xfails.

RESULTS records every comparison (ours and TF's max error, the floor); `python -m pytest
tests/ops/test_raw_ops_accuracy.py -s` prints the table at the end of the module.
"""

import numpy as np
import pytest
import torch

from tests.helpers import CUDNN_GATES, composite_rnn, needs_tf, tf_raw
from torch_lstm_grad import raw_ops, reference

pytestmark = needs_tf
ULPS_AT_ROUNDING = 3
RESULTS: dict[str, tuple[float, float, float]] = {}


def _np64(t):
    return t.detach().double().numpy() if torch.is_tensor(t) else np.asarray(t, np.float64)


def _check(case: str, named: dict) -> list[str]:
    """named[name] = (ours, tf, truth); returns the names that fail, records all."""
    bad = []
    for name, (ours, tf, truth) in named.items():
        o, t, w = (_np64(a) for a in (ours, tf, truth))
        assert o.shape == w.shape == t.shape, (name, o.shape, t.shape, w.shape)
        if w.size == 0:
            continue
        eo, et = float(np.abs(o - w).max()), float(np.abs(t - w).max())
        floor = ULPS_AT_ROUNDING * 2.0**-23 * float(np.abs(w).max())
        RESULTS[f"{case} {name}"] = (eo, et, floor)
        if eo > max(1.5 * et, floor):
            bad.append(f"{name}: ours {eo:.2e}, TF {et:.2e}, floor {floor:.2e}")
    return bad


# ---------------------------------------------------------------------------------------------
# CudnnRNN: ours against TF's composite cells, both against the composite in float64.

CUDNN_SHAPES = {"small": (4, 4, 4, 4), "medium": (128, 64, 8, 16), "large": (128, 128, 16, 32),
                "model": (256, 256, 32, 16)}  # H, I, B, T  # fmt: skip
CUDNN_MODES = ["lstm", "lstm_proj", "gru", "rnn_tanh", "rnn_relu"]
# At model sizes the LSTM modes' weight gradients are 3-8x TF's error from float64 and
# input_h's 1.6x: a documented difference (docs/differences.md), pinned as strict xfails.
CUDNN_MODEL_SIZE_LIMITS = {("lstm", "model"), ("lstm_proj", "model")}
CUDNN_CASES = [
    pytest.param(v, s, id=f"{v}-{s}", marks=pytest.mark.xfail(
        strict=True, reason="weight gradients at model sizes (docs/differences.md)",
    ) if (v, s) in CUDNN_MODEL_SIZE_LIMITS else ())
    for s in CUDNN_SHAPES for v in CUDNN_MODES
]  # fmt: skip


def _params_size(mode, H, I, P):  # noqa: E741
    return int(raw_ops.CudnnRNNParamsSize(num_layers=1, num_units=H, input_size=I, T=torch.float32,
                                          S=torch.int64, rnn_mode=mode, num_proj=P)[0])  # fmt: skip


def _canonical(mode, params, H, I, P):  # noqa: E741
    G = CUDNN_GATES[mode]
    w, b = raw_ops.CudnnRNNParamsToCanonicalV2(
        num_layers=1, num_units=H, input_size=I, params=torch.as_tensor(params),
        num_params_weights=2 * G + (1 if P else 0), num_params_biases=2 * G, rnn_mode=mode,
        num_proj=P)
    return [t.detach().double().numpy() for t in w], [t.detach().double().numpy() for t in b]


@pytest.mark.parametrize("variant, shape", CUDNN_CASES)
def test_cudnn_rnn_vs_float64(variant, shape):
    mode = "lstm" if variant == "lstm_proj" else variant
    H, I, B, T = CUDNN_SHAPES[shape]  # noqa: E741
    P = H // 2 if variant == "lstm_proj" else 0
    rng = np.random.RandomState(0)
    x = rng.rand(T, B, I).astype(np.float32)
    h0 = rng.rand(1, B, P or H).astype(np.float32)
    c0 = rng.rand(1, B, H).astype(np.float32)
    lengths = rng.randint(1, T + 1, size=B)
    lengths[0] = T
    params = rng.uniform(-0.01, 0.01, _params_size(mode, H, I, P)).astype(np.float32)
    leaves = [torch.tensor(a, requires_grad=True) for a in (x, h0, c0, params)]
    out = raw_ops.CudnnRNNV3(*leaves, sequence_lengths=lengths, rnn_mode=mode, num_proj=P)
    loss = out.output.sum() + out.output_h.sum() + (out.output_c.sum() if mode == "lstm" else 0)
    grads = torch.autograd.grad(loss, leaves if mode == "lstm" else [leaves[0], leaves[1],
                                                                     leaves[3]])  # fmt: skip
    dw, db = _canonical(mode, grads[-1].double().numpy(), H, I, P)
    w64, b64 = _canonical(mode, params.astype(np.float64), H, I, P)
    theirs, truth = (composite_rnn(mode, x, h0, c0, w64, b64, L=1, D=1, H=H, P=P, lengths=lengths,
                                  dtype=dt) for dt in (np.float32, np.float64))  # fmt: skip
    named = {"output": (out.output, theirs[0], truth[0]),
             "output_h": (out.output_h, theirs[1], truth[1]),
             "d input": (grads[0], theirs[3][0], truth[3][0]),
             "d input_h": (grads[1], theirs[3][1], truth[3][1])}  # fmt: skip
    if mode == "lstm":
        named["output_c"] = (out.output_c, theirs[2], truth[2])
        named["d input_c"] = (grads[2], theirs[3][2], truth[3][2])
    G = CUDNN_GATES[mode]
    names = [f"W{g}" for g in range(G)] + [f"R{g}" for g in range(G)] + (["W_proj"] if P else [])
    for k, n in enumerate(names):
        named[f"d {n}"] = (dw[k], theirs[3][3][k], truth[3][3][k])
    for k in range(len(db)):
        named[f"d b{'WR'[k // G]}{k % G}"] = (db[k], theirs[3][4][k], truth[3][4][k])
    bad = _check(f"CudnnRNNV3 {variant} {shape}", named)
    assert not bad, bad


# ---------------------------------------------------------------------------------------------
# Block ops: ours against TF's kernels, both against the float64 reference.

# T, B, I, H; "model_510_rows": T·B = 510, not a multiple of long_sum_out's chunks.
BLOCK_SHAPES = {"lstm_ops_test": (4, 2, 3, 4), "cudnn_large": (32, 16, 128, 128),
                "model": (16, 32, 256, 256), "model_510_rows": (17, 30, 256, 256)}  # fmt: skip
BLOCK_GRADS = ["x_grad", "cs_prev_grad", "h_prev_grad", "w_grad", "wci_grad", "wcf_grad",
               "wco_grad", "b_grad"]  # fmt: skip
# x_grad (over the 4H gate columns), h_prev_grad (the per-step dh, likewise) and w_grad (over all
# T·B rows) are the long sums: added in sequence by one GEMM they are 1.7-4.4x TF's error on
# the "cudnn_large" shape; the CPU kernels sum them pairwise (csrc/cpu/pairwise_gemm.h). At
# model sizes ("model") w_grad's product is above the pairwise bound: on the AVX2 kernels it is
# summed in chunks of 256 rows (long_sum_out, 1.1-1.3x TF's error), on AVX-512 it keeps one
# oneDNN GEMM's rounding, 4-5x TF's error: a documented difference (docs/differences.md),
# pinned there as a strict xfail so that the docs change with it; h_prev_grad is summed
# pairwise (it was 1.8x).
ONE_GEMM_LONG_SUMS = str(torch.ops.torch_lstm_grad._cpu_isa()) != "avx2"
MODEL_SIZE_LIMITS = {
    (v, s, "w_grad") for v in ("V1", "V2") for s in ("model", "model_510_rows")
    if ONE_GEMM_LONG_SUMS
}  # fmt: skip


def _block_inputs(T, B, I, H, seed=0):  # noqa: E741
    """TF's blocks_match: weights and peepholes uniform(-0.01, 0.01) (lstm_ops_test.py; biases
    too here, TF's are zero); inputs and states uniform [0, 1) as in the CudnnRNN tests."""
    g = np.random.RandomState(seed)
    f = lambda *s: torch.tensor(g.rand(*s).astype(np.float32))  # noqa: E731
    u = lambda *s: torch.tensor(g.uniform(-0.01, 0.01, s).astype(np.float32))  # noqa: E731
    return dict(x=f(T, B, I), cs_prev=f(B, H), h_prev=f(B, H), w=u(I + H, 4 * H), wci=u(H),
                wcf=u(H), wco=u(H), b=u(4 * H))  # fmt: skip


def _block_case(version, shape):
    T, B, I, H = BLOCK_SHAPES[shape]  # noqa: E741
    inp = _block_inputs(T, B, I, H)
    attrs = dict(cell_clip=0.0, use_peephole=True)
    if version == "V1":
        attrs["forget_bias"] = 1.0
    op = "BlockLSTM" if version == "V1" else "BlockLSTMV2"
    grad_op = "BlockLSTMGrad" if version == "V1" else "BlockLSTMGradV2"
    g = np.random.RandomState(1)
    cs_grad = torch.tensor(g.rand(T, B, H).astype(np.float32))
    h_grad = torch.tensor(g.rand(T, B, H).astype(np.float32))
    ours_fwd = getattr(raw_ops, op)(seq_len_max=T, **inp, **attrs)
    tf_fwd = tf_raw(op, seq_len_max=T, **inp, **attrs)
    names = ("i", "cs", "f", "o", "ci", "co", "h")
    fwd_args = lambda f: dict(zip(names, f, strict=True))  # noqa: E731
    ours_g = getattr(raw_ops, grad_op)(seq_len_max=T, **inp, **fwd_args(ours_fwd), cs_grad=cs_grad,
                                       h_grad=h_grad, use_peephole=True)  # fmt: skip
    tf_g = tf_raw(grad_op, seq_len_max=T, **inp, **fwd_args(tf_fwd), cs_grad=cs_grad,
                  h_grad=h_grad, use_peephole=True)  # fmt: skip
    # The truth: our kernels in float64 (matched to the float64 reference at 1e-12 by
    # tests/ops/test_raw_ops_lstm_block.py; the reference's autograd loop takes seconds at this
    # shape).
    inp64 = {k: v.double() for k, v in inp.items()}
    truth_fwd = getattr(raw_ops, op)(seq_len_max=T, **inp64, **attrs)
    truth_g = getattr(raw_ops, grad_op)(seq_len_max=T, **inp64, **fwd_args(truth_fwd),
                                        cs_grad=cs_grad.double(), h_grad=h_grad.double(),
                                        use_peephole=True)  # fmt: skip
    named = {n: (ours_fwd[k], tf_fwd[k], truth_fwd[k]) for k, n in enumerate(names)}
    named.update({n: (ours_g[k], tf_g[k], truth_g[k]) for k, n in enumerate(BLOCK_GRADS)})
    return named


BLOCK_CASES = [
    pytest.param(v, s, n, id=f"{v}-{s}-{n}", marks=pytest.mark.xfail(
        strict=True, reason="one GEMM's rounding above the pairwise bound (docs/differences.md)",
    ) if (v, s, n) in MODEL_SIZE_LIMITS else ())
    for v in ("V1", "V2") for s in BLOCK_SHAPES for n in ["forward", *BLOCK_GRADS]
]  # fmt: skip


_BLOCK_CACHE: dict = {}


@pytest.mark.parametrize("version, shape, output", BLOCK_CASES)
def test_block_lstm_vs_float64(version, shape, output):
    if (version, shape) not in _BLOCK_CACHE:
        _BLOCK_CACHE[version, shape] = _block_case(version, shape)
    named = _BLOCK_CACHE[version, shape]
    keys = ("i", "cs", "f", "o", "ci", "co", "h") if output == "forward" else (output,)
    bad = _check(f"Block{version} {shape}", {k: named[k] for k in keys})
    assert not bad, bad


@pytest.mark.parametrize("shape", [(2, 7, 9), (13, 29, 31), (1, 256, 256), (32, 256, 256),
                                   (8, 512, 512)])  # fmt: skip
def test_lstm_block_cell_vs_float64(shape):
    """rnn_grad_test.py's testLSTMBlockCell draws B, I, H in [1, 32): two such draws; and steps
    at model sizes, where [x, h_prev]·w summed in one GEMM (MKL's GEMV at B = 1, oneDNN from
    2^23 multiply-adds) puts ci 1.6-2.6x TF's error from float64 (csrc/cpu/lstm_backend.h's
    sum_matmul)."""
    B, I, H = shape  # noqa: E741
    inp = _block_inputs(1, B, I, H)
    inp["x"] = inp["x"][0]
    g = np.random.RandomState(1)
    cs_grad = torch.tensor(g.rand(B, H).astype(np.float32))
    h_grad = torch.tensor(g.rand(B, H).astype(np.float32))
    attrs = dict(forget_bias=1.0, cell_clip=0.0, use_peephole=True)
    names = ("i", "cs", "f", "o", "ci", "co", "h")
    ours = raw_ops.LSTMBlockCell(**inp, **attrs)
    tf = tf_raw("LSTMBlockCell", **inp, **attrs)
    inp64 = {k: v.double() for k, v in inp.items()}
    truth = reference.lstm_block_cell(*inp64.values(), forget_bias=1.0, cell_clip=0.0,
                                      use_peephole=True)  # fmt: skip
    named = {n: (ours[k], tf[k], truth[k]) for k, n in enumerate(names)}
    grad_names = ("cs_prev_grad", "dicfo", "wci_grad", "wcf_grad", "wco_grad")
    ga = dict(cs_grad=cs_grad, h_grad=h_grad, use_peephole=True)
    ours_g = raw_ops.LSTMBlockCellGrad(**inp, **dict(zip(names[:6], ours[:6], strict=True)), **ga)
    tf_g = tf_raw("LSTMBlockCellGrad", **inp, **dict(zip(names[:6], tf[:6], strict=True)), **ga)
    truth_g = reference.lstm_block_cell_grad(*inp64.values(), cs_grad.double(), h_grad.double(),
                                             forget_bias=1.0, cell_clip=0.0,
                                             use_peephole=True)  # fmt: skip
    named.update({n: (ours_g[k], tf_g[k], truth_g[k]) for k, n in enumerate(grad_names)})
    bad = _check(f"LSTMBlockCell {shape}", named)
    assert not bad, bad


@pytest.mark.parametrize("shape", [(4, 6, 5), (16, 128, 128), (1, 256, 256), (32, 256, 256)],
                         ids=["gru_ops_test", "large", "B1-H256", "B32-H256"])  # fmt: skip
def test_gru_block_cell_vs_float64(shape):
    """gru_ops_test.py's shape, CudnnRNN's "large" one, and steps at model sizes, where one GEMM
    a product (MKL's GEMV at B = 1) put r, u, c and h 2-4x TF's error from float64."""
    B, I, H = shape  # noqa: E741
    g = np.random.RandomState(0)
    f = lambda *s: torch.tensor(g.rand(*s).astype(np.float32))  # noqa: E731
    u = lambda *s: torch.tensor(g.uniform(-0.5, 0.5, s).astype(np.float32))  # noqa: E731
    inp = dict(x=f(B, I), h_prev=f(B, H), w_ru=u(I + H, 2 * H), w_c=u(I + H, H), b_ru=u(2 * H),
               b_c=u(H))  # fmt: skip
    d_h = f(B, H)
    ours = raw_ops.GRUBlockCell(**inp)
    tf = tf_raw("GRUBlockCell", **inp)
    inp64 = {k: v.double() for k, v in inp.items()}
    truth = reference.gru_block_cell(*inp64.values())
    named = {n: (ours[k], tf[k], truth[k]) for k, n in enumerate(("r", "u", "c", "h"))}
    ours_g = raw_ops.GRUBlockCellGrad(**inp, r=ours.r, u=ours.u, c=ours.c, d_h=d_h)
    tf_g = tf_raw("GRUBlockCellGrad", **inp, r=tf[0], u=tf[1], c=tf[2], d_h=d_h)
    truth_g = reference.gru_block_cell_grad(*inp64.values(), d_h.double())
    for k, n in enumerate(("d_x", "d_h_prev", "d_c_bar", "d_r_bar_u_bar")):
        named[n] = (ours_g[k], tf_g[k], truth_g[k])
    bad = _check(f"GRUBlockCell {shape}", named)
    assert not bad, bad


def teardown_module(module):
    """The table, for `pytest -s`: case output, ours, TF's, floor (max errors vs float64)."""
    for key, (eo, et, floor) in RESULTS.items():
        print(f"{key:55s} ours {eo:9.2e}  TF {et:9.2e}  floor {floor:9.2e}  "
              f"ours/TF {eo / et if et else float('inf'):6.2f}")
