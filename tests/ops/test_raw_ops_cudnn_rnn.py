"""The CudnnRNN family on CPU (docs/tf-semantics.md §6–8; docs/differences.md, "CudnnRNN").

TF has no CPU kernel for these ops (docs/tf-semantics.md §6.1), so the oracles are:
- `torch.nn.LSTM` / `GRU` / `RNN` in float64 (same cuDNN math: DOUBLE_BIAS, gru linear-before-
  reset, lstm i,f,g,o; projection = nn.LSTM's proj_size), with the weights moved through
  `raw_ops.CudnnRNNCanonicalToParams(V2)` and the gradients moved back through
  `raw_ops.CudnnRNNParamsToCanonical(V2)`; varied lengths through `pack_padded_sequence`;
- Keras 3 LSTM/GRU on the TF CPU backend (single layer, params built the way Keras' cuDNN path
  builds them, docs/tf-semantics.md §8.2), outputs and tape gradients;
- float64 gradcheck, and self-consistency (V1/V2 vs V3, the Backprop raw ops vs autograd).

Also: params size and canonical round trips, skip_input / auto_select, dropout and its seeds,
zero-length rows, batch-major state reinterpretation, bad input (eager and fake path), low
precision vs float64, opcheck and torch.compile.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd import gradcheck
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_lstm_grad
from tests.helpers import CUDNN_GATES as GATES
from tests.helpers import DATA, assert_bad_input_message
from tests.helpers import CudnnCfg as Cfg
from tests.helpers import cudnn_fwd_inputs as _fwd_inputs
from tests.helpers import cudnn_params_size as params_size
from tests.helpers import cudnn_rand_params as rand_params
from tests.helpers import cudnn_states as states
from tests.helpers import cudnn_uniform as u
from tests.helpers import randn as r
from tests.helpers import set_args as _set
from torch_lstm_grad import raw_ops
from torch_lstm_grad._library.cudnn_rnn_config import params_layout

ops = torch.ops.torch_lstm_grad
F32, F64 = torch.float32, torch.float64
I32 = torch.int32


MODES = list(GATES)

# ---------------------------------------------------------------------------------------------
# Tolerances, in ONE place. Criterion (`_close`): |ours - want| <= tol * (|want| + scale) element-
# wise, scale = max(1, max|want|) per tensor, so reductions (params grads: sums over T*B terms)
# are judged against their own magnitude. Inputs are O(1) (x, h0 uniform(-1, 1), c0 uniform(-2,
# 2), weights nn's default uniform(±1/sqrt(H))). MAX_ERR records the largest error measured per
# key in this run (printed by `test_zz_report_max_errors` with -s).
TOL = {
    # ours float64 vs nn.LSTM/GRU/RNN float64 (oneDNN / aten cells) and vs Keras float64 (Eigen):
    # same math, different summation order and activation implementations. Measured 6.4e-16;
    # the margin covers other BLAS/oneDNN builds (the project's float64 tolerance elsewhere).
    "f64": 1e-12,
    # ours float32 vs ours float64 on the same (float32-representable) inputs: float32 GEMMs and
    # activations (eps 1.2e-7), errors carried over T steps and L layers. Measured 2.0e-7.
    F32: 1e-6,
    # float16 / bfloat16 compute in float32 inside and round once on store (the reserve keeps the
    # float32 activations), so the error vs float64 on the same rounded inputs is about one
    # rounding of the output, relative <= 2^-11 = 4.9e-4 (f16), 2^-8 = 3.9e-3 (bf16); bound x 2.
    # Measured 2.2e-4 (f16), 1.4e-3 (bf16).
    torch.float16: 1e-3,
    torch.bfloat16: 8e-3,
}
MAX_ERR: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report_max_errors():
    """Prints the largest errors of this run against their tolerances (visible with -s)."""
    yield
    for key, err in sorted(MAX_ERR.items(), key=str):
        print(f"\nmax error {key}: {err:.3g} (tol {TOL[key]:.3g})", end="")


def _close(got: torch.Tensor, want: torch.Tensor, key, what: str = "") -> None:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    got, want = got.detach().double(), want.detach().double()
    if want.numel() == 0:
        return
    scale = max(1.0, want.abs().max().item())
    err = ((got - want).abs() / (want.abs() + scale)).max().item()
    MAX_ERR[key] = max(MAX_ERR.get(key, 0.0), err)
    assert err <= TOL[key], f"{what}: error {err:.3g} > tol {TOL[key]:.3g} ({key})"


# ---------------------------------------------------------------------------------------------
# Models: torch.nn modules <-> canonical lists <-> params


def nn_module(c: Cfg) -> torch.nn.Module:
    kw = dict(num_layers=c.L, bidirectional=c.D == 2, dtype=F64)
    if c.mode == "lstm":
        return torch.nn.LSTM(c.I, c.H, proj_size=c.P, **kw)
    if c.mode == "gru":
        return torch.nn.GRU(c.I, c.H, **kw)
    return torch.nn.RNN(c.I, c.H, nonlinearity=c.mode[4:], **kw)


def nn_canonical(m: torch.nn.Module, c: Cfg, grad=False):
    """(weights, biases) in TF's canonical order (docs/tf-semantics.md §7.1) from nn's parameters
    (or their .grad): per pseudo-layer W_0..W_{G-1}, R_0..R_{G-1}, [W_proj]; bW..., bR...
    nn's gate order equals cuDNN's (lstm i,f,g,o; gru r,z,n)."""

    def get(name):
        p = getattr(m, name)
        return (p.grad if grad else p).detach()

    weights, biases = [], []
    for layer in range(c.L):
        for d in range(c.D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            weights += list(get("weight_ih" + sfx).chunk(c.G)) + list(
                get("weight_hh" + sfx).chunk(c.G)
            )
            if c.P:
                weights.append(get("weight_hr" + sfx))
            biases += list(get("bias_ih" + sfx).chunk(c.G)) + list(get("bias_hh" + sfx).chunk(c.G))
    return weights, biases


def to_params(c: Cfg, weights, biases, input_mode="linear_input"):
    kw = dict(num_layers=c.L, num_units=c.H, input_size=c.I, weights=weights, biases=biases,
              rnn_mode=c.mode, input_mode=input_mode, direction=c.direction)  # fmt: skip
    if c.P:
        return raw_ops.CudnnRNNCanonicalToParamsV2(**kw, num_proj=c.P)
    return raw_ops.CudnnRNNCanonicalToParams(**kw)


def to_canonical(c: Cfg, params, input_mode="linear_input"):
    kw = dict(num_layers=c.L, num_units=c.H, input_size=c.I, params=params, rnn_mode=c.mode,
              input_mode=input_mode, direction=c.direction)  # fmt: skip
    nw = c.L * c.D * (2 * c.G + (1 if c.P else 0))
    if c.P:
        out = raw_ops.CudnnRNNParamsToCanonicalV2(**kw, num_params_weights=nw,
                                                  num_params_biases=c.L * c.D * 2 * c.G,
                                                  num_proj=c.P)  # fmt: skip
    else:
        out = raw_ops.CudnnRNNParamsToCanonical(**kw, num_params=nw)
    return out.weights, out.biases


def upstream(c: Cfg, B=None, dtype=F64):
    """Random gradients for output [T, B, D*n], output_h [L*D, B, n], output_c [L*D, B, H]
    (time-major frame)."""
    B = c.B if B is None else B
    gy = torch.randn(c.T, B, c.D * c.n, dtype=dtype)
    gh = torch.randn(c.L * c.D, B, c.n, dtype=dtype)
    gc = torch.randn(c.L * c.D, B, c.H, dtype=dtype) if c.lstm else None
    return gy, gh, gc


def nn_run(m, c: Cfg, x, h0, c0, lengths, ups):
    """nn module forward (time-major x [T, B, I]) + backward of sum(out*gy)+sum(hn*gh)+sum(cn*gc).
    Returns (output, h_n, c_n or None, dx, dh0, dc0 or None, canonical param grads)."""
    m.zero_grad()
    x = x.detach().clone().requires_grad_()
    h0 = h0.detach().clone().requires_grad_()
    hx = h0
    if c.lstm:
        c0 = c0.detach().clone().requires_grad_()
        hx = (h0, c0)
    if lengths is None:
        out, hn = m(x, hx)
    else:
        packed = pack_padded_sequence(x, torch.as_tensor(lengths), enforce_sorted=False)
        out, hn = m(packed, hx)
        out, _ = pad_packed_sequence(out, total_length=c.T)
    hn, cn = hn if c.lstm else (hn, None)
    gy, gh, gc = ups
    loss = (out * gy).sum() + (hn * gh).sum() + ((cn * gc).sum() if c.lstm else 0)
    loss.backward()
    grads = nn_canonical(m, c, grad=True)
    return (out.detach(), hn.detach(), None if cn is None else cn.detach(), x.grad, h0.grad,
            c0.grad if c.lstm else None, grads)  # fmt: skip


def ours_run(c: Cfg, x, h0, c0, params, lengths, ups, time_major=True, op="V3", **attrs):
    """CudnnRNNV3 (or V1/V2) + autograd with the same loss as nn_run, all in the time-major frame:
    batch-major input is x.transpose(0, 1) and batch-major states are h0's MEMORY read as
    [B, L*D, n] (TF reinterprets, docs/tf-semantics.md §6.3)."""
    x = x.detach().clone().requires_grad_()
    h0 = h0.detach().clone().requires_grad_()
    c0 = c0.detach().clone().requires_grad_(c.lstm)
    params = params.detach().clone().requires_grad_()
    xin = x if time_major else x.transpose(0, 1)
    hin = h0 if time_major else h0.reshape(c.B, c.L * c.D, c.n)
    cin = c0 if time_major or not c.lstm else c0.reshape(c.B, c.L * c.D, c.H)
    kw = dict(rnn_mode=c.mode, direction=c.direction, **attrs)
    if op == "V3":
        seq = None if lengths is None else torch.tensor(lengths, dtype=I32)
        res = raw_ops.CudnnRNNV3(xin, hin, cin, params, seq, num_proj=c.P, time_major=time_major,
                                 **kw)  # fmt: skip
    else:
        assert time_major and lengths is None and not c.P
        res = getattr(raw_ops, {"V1": "CudnnRNN", "V2": "CudnnRNNV2"}[op])(xin, hin, cin, params,
                                                                           **kw)  # fmt: skip
    out = res.output if time_major else res.output.transpose(0, 1)
    hn = res.output_h.reshape(c.L * c.D, c.B, c.n)
    cn = res.output_c.reshape(c.L * c.D, c.B, c.H) if c.lstm else res.output_c
    gy, gh, gc = ups
    loss = (out * gy).sum() + (hn * gh).sum() + ((cn * gc).sum() if c.lstm else 0)
    leaves = [x, h0, params] + ([c0] if c.lstm else [])
    g = torch.autograd.grad(loss, leaves)
    dx, dh0, dp = g[:3]
    dc0 = g[3] if c.lstm else None
    return res, out.detach(), hn.detach(), cn.detach() if c.lstm else None, dx, dh0, dc0, dp


def compare_with_nn(c: Cfg, lengths=None, time_major=True, key="f64"):
    m = nn_module(c)
    weights, biases = nn_canonical(m, c)
    params = to_params(c, weights, biases)
    assert params.numel() == sum(p.numel() for p in m.parameters())
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    ups = upstream(c)
    want = nn_run(m, c, x, h0, c0, lengths, ups)
    res, *got = ours_run(c, x, h0, c0, params, lengths, ups, time_major)
    names = ["output", "output_h", "output_c", "input_backprop", "input_h_backprop",
             "input_c_backprop"]  # fmt: skip
    for name, g, w in zip(names, got[:6], want[:6], strict=True):
        if w is not None:
            _close(g, w, key, name)
    got_w, got_b = to_canonical(c, got[6])
    want_w, want_b = want[6]
    for k, (g, w) in enumerate(zip(got_w + got_b, want_w + want_b, strict=True)):
        _close(g, w, key, f"params_backprop canonical #{k}")
    return res, got, x


# ---------------------------------------------------------------------------------------------
# Forward and every backward output against torch.nn, float64


NN_LAYOUTS = [(1, 1), (1, 2), (2, 2), (3, 1)]  # (L, D)


@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("lengths", [None, "equal", "varied"])
@pytest.mark.parametrize(("L", "D"), NN_LAYOUTS, ids=[f"L{L}D{D}" for L, D in NN_LAYOUTS])
@pytest.mark.parametrize("mode", MODES)
def test_vs_torch_nn(mode, L, D, lengths, time_major):
    c = Cfg(mode=mode, L=L, D=D, I=4, H=3, T=5, B=4)
    lens = {None: None, "equal": [c.T] * c.B, "varied": [3, 5, 1, 4]}[lengths]
    res, got, x = compare_with_nn(c, lens, time_major)
    out, dx = got[0], got[3]
    assert res.output.shape == ((c.T, c.B, D * c.H) if time_major else (c.B, c.T, D * c.H))
    if lens is not None:
        for b, n in enumerate(lens):
            # Padded outputs are exactly zero (cuDNN's paddingFill = 0); input_backprop too.
            assert not out[n:, b].any()
            assert not dx[n:, b].any()
            assert out[n - 1, b].abs().sum() > 0


PROJ_CASES = [(1, 1), (2, 2), (3, 1)]


@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("lengths", [None, [4, 2, 5]], ids=["full", "varied"])
@pytest.mark.parametrize(("L", "D"), PROJ_CASES, ids=[f"L{L}D{D}" for L, D in PROJ_CASES])
def test_vs_torch_nn_lstm_projection(L, D, lengths, time_major):
    """num_proj = nn.LSTM's proj_size: h (size P) is the recurrent state, output and output_h;
    c (size H) is output_c; canonical W_proj is weight_hr [P, H]."""
    c = Cfg(mode="lstm", L=L, D=D, I=3, H=4, P=2, T=5, B=3)
    res, got, _ = compare_with_nn(c, lengths, time_major)
    for b, n in enumerate(lengths or []):
        assert not got[0][n:, b].any() and not got[3][n:, b].any()
    lead = (c.L * c.D, c.B) if time_major else (c.B, c.L * c.D)
    assert res.output_h.shape == (*lead, 2) and res.output_c.shape == (*lead, 4)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_vs_torch_nn_parallel_row_chunks(mode):
    """B * G * H large enough that the kernels' pointwise passes split the batch into several
    parallel chunks; varied lengths, two bidirectional layers."""
    c = Cfg(mode=mode, L=2, D=2, I=5, H=64, T=3, B=20)
    lengths = [3, 1, 2, 3, 2, 1, 3, 3, 2, 1, 1, 2, 3, 1, 2, 3, 3, 2, 1, 2]
    compare_with_nn(c, lengths, time_major=True)


@pytest.mark.parametrize("varied", [False, True], ids=["equal", "varied"])
@pytest.mark.parametrize("is_training", [True, False])
def test_lstm_same_bits_on_one_thread_and_two(varied, is_training):
    """float32, bidirectional: on two threads the LSTM's steps split by rows where the gate
    panels fit half a core's L2, every row runs every step and each thread has 4 rows or more
    (csrc/cpu/gemm.h's panel_row_blocks: 33 rows in blocks of 16 and 17, H = 56 ending in a
    partial panel), else by units, as on one thread: the same sums, so the same bits; and
    within float32's rounding of float64."""
    torch.manual_seed(0)
    c = Cfg(mode="lstm", L=1, D=2, I=7, H=56, T=4, B=33)
    params = rand_params(c, scale=c.H**-0.5)
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    seq = torch.full((c.B,), c.T, dtype=I32)
    if varied:
        seq[::3] = 2

    def run(threads, dtype=F32):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with torch.no_grad():
                o = raw_ops.CudnnRNNV3(*(t.to(dtype) for t in (x, h0, c0, params)), seq,
                                       is_training=is_training, **c.attrs())
        finally:
            torch.set_num_threads(before)
        return [o.output, o.output_h, o.output_c]

    truth, one, two = run(1, F64), run(1), run(2)
    for a, b, f64 in zip(one, two, truth, strict=True):
        assert torch.equal(a, b)
        assert (b.double() - f64).abs().max() <= 1e-5 * max(1.0, f64.abs().max().item())


def test_num_proj_equal_to_num_units_means_no_projection():
    """num_proj == num_units (allowed: num_proj <= num_units) has no W_proj, like cuDNN with
    recProjSize == hiddenSize: the same model as num_proj = 0."""
    c = Cfg("lstm", 2, 2, I=3, H=3)
    assert params_size(Cfg("lstm", 2, 2, I=3, H=3, P=3)) == params_size(c)
    x, h0, c0, params = _fwd_inputs(c)
    a = raw_ops.CudnnRNNV3(x, h0, c0, params, None, direction="bidirectional", num_proj=3)
    b = raw_ops.CudnnRNNV3(x, h0, c0, params, None, direction="bidirectional")
    assert torch.equal(a.output, b.output) and torch.equal(a.output_c, b.output_c)
    w, b = raw_ops.CudnnRNNParamsToCanonicalV2(2, 3, 3, params, num_params_weights=32,
                                               num_params_biases=32, direction="bidirectional",
                                               num_proj=3)  # fmt: skip
    assert [t.shape for t in w] == [t.shape for t in to_canonical(c, params)[0]]


def test_sequence_lengths_forms():
    """int32 (TF's dtype), int64, a non-contiguous view, a Python list and a numpy array give the
    same results; None equals every length = T."""
    c = Cfg("gru", 2, 2, I=3, H=3, T=4, B=3)
    x, h0, c0, params = _fwd_inputs(c)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, torch.tensor([4, 1, 3], dtype=I32), **c.attrs())
    forms = [torch.tensor([4, 1, 3]), torch.tensor([4, 9, 1, 9, 3], dtype=I32)[::2], [4, 1, 3],
             np.array([4, 1, 3], dtype=np.int64), (4, 1, 3)]  # fmt: skip
    for seq in forms:
        got = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, **c.attrs())
        assert torch.equal(got.output, want.output) and torch.equal(got.output_h, want.output_h)
    full = raw_ops.CudnnRNNV3(x, h0, c0, params, [4, 4, 4], **c.attrs())
    none = raw_ops.CudnnRNNV3(x, h0, c0, params, None, **c.attrs())
    assert torch.equal(full.output, none.output)


def test_numpy_inputs_are_converted():
    """numpy arrays are accepted (and converted) like TF's eager inputs."""
    c = Cfg("lstm", 1, 2, I=3, H=3, T=4, B=2)
    x, h0, c0, params = _fwd_inputs(c)
    seq = torch.tensor([4, 2], dtype=I32)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, direction="bidirectional")
    got = raw_ops.CudnnRNNV3(x.numpy(), h0.numpy(), c0.numpy(), params.numpy(), seq.numpy(),
                             direction="bidirectional")  # fmt: skip
    for name in ("output", "output_h", "output_c", "reserve_space"):
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    bp_args = (x, h0, c0, params, seq, want.output, want.output_h, want.output_c,
               torch.ones_like(want.output), torch.ones_like(want.output_h),
               torch.ones_like(want.output_c), want.reserve_space, want.host_reserved)  # fmt: skip
    bp = raw_ops.CudnnRNNBackpropV3(*bp_args, direction="bidirectional")
    bp_np = raw_ops.CudnnRNNBackpropV3(*(t.numpy() for t in bp_args), direction="bidirectional")
    for name in bp._fields:
        assert torch.equal(getattr(bp_np, name), getattr(bp, name)), name
    w, b = to_canonical(c, params)
    back = raw_ops.CudnnRNNCanonicalToParams(
        1, 3, 3, [t.numpy() for t in w], [t.numpy() for t in b], direction="bidirectional"
    )
    assert torch.equal(back, params)
    w_np, _ = raw_ops.CudnnRNNParamsToCanonical(np.int32(1), np.int32(3), np.int32(3),
                                                params.numpy(), num_params=16,
                                                direction="bidirectional")  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(w_np, w, strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_batch_major_states_are_reinterpreted_not_transposed(mode):
    """time_major=False with L*D > 1: TF reads input_h [B, L*D, n] memory as [L*D, B, n]
    (docs/tf-semantics.md §6.3, docs/differences.md). Ours == the time-major op fed
    input_h.reshape(L*D, B, n) (and the output states come back the same way); a transpose gives
    different numbers."""
    c = Cfg(mode=mode, L=2, D=2, I=3, H=3, T=4, B=3)
    params = rand_params(c)
    x = u(c.B, c.T, c.I)
    h_bm = u(c.B, c.L * c.D, c.n)
    c_bm = u(c.B, c.L * c.D, c.H) if c.lstm else torch.zeros(())
    seq = torch.tensor([4, 2, 3], dtype=I32)
    bm = raw_ops.CudnnRNNV3(x, h_bm, c_bm, params, seq, time_major=False, **c.attrs())

    def tm_call(h, cc):
        return raw_ops.CudnnRNNV3(x.transpose(0, 1), h, cc, params, seq, **c.attrs())

    reint = tm_call(h_bm.reshape(c.L * c.D, c.B, c.n),
                    c_bm.reshape(c.L * c.D, c.B, c.H) if c.lstm else c_bm)  # fmt: skip
    torch.testing.assert_close(bm.output, reint.output.transpose(0, 1), rtol=0, atol=1e-14)
    torch.testing.assert_close(bm.output_h, reint.output_h.reshape(c.B, c.L * c.D, c.n),
                               rtol=0, atol=1e-14)  # fmt: skip
    if c.lstm:
        torch.testing.assert_close(bm.output_c, reint.output_c.reshape(c.B, c.L * c.D, c.H),
                                   rtol=0, atol=1e-14)  # fmt: skip
    transposed = tm_call(h_bm.transpose(0, 1), c_bm.transpose(0, 1) if c.lstm else c_bm)
    assert (bm.output - transposed.output.transpose(0, 1)).abs().max() > 1e-3


@pytest.mark.parametrize("mode", MODES)
def test_batch_major_single_slot_state_equals_transpose(mode):
    """L*D == 1 (Keras' [B, 1, n]): the reinterpretation coincides with a transpose."""
    c = Cfg(mode=mode, L=1, D=1, I=3, H=3, T=4, B=3)
    params = rand_params(c)
    x = u(c.B, c.T, c.I)
    h_bm = u(c.B, 1, c.n)
    c_bm = u(c.B, 1, c.H) if c.lstm else torch.zeros(())
    seq = torch.tensor([4, 1, 3], dtype=I32)
    bm = raw_ops.CudnnRNNV3(x, h_bm, c_bm, params, seq, time_major=False, **c.attrs())
    tm = raw_ops.CudnnRNNV3(x.transpose(0, 1), h_bm.transpose(0, 1),
                            c_bm.transpose(0, 1) if c.lstm else c_bm, params, seq,
                            **c.attrs())  # fmt: skip
    torch.testing.assert_close(bm.output, tm.output.transpose(0, 1), rtol=0, atol=1e-14)
    torch.testing.assert_close(bm.output_h, tm.output_h.transpose(0, 1), rtol=0, atol=1e-14)
    if c.lstm:
        torch.testing.assert_close(bm.output_c, tm.output_c.transpose(0, 1), rtol=0, atol=1e-14)


def test_noncontiguous_inputs_equal_contiguous():
    """Strided views (incl. a non-contiguous batch-major input_h, whose LOGICAL row-major order
    is what gets reinterpreted) give the contiguous results."""
    c = Cfg(mode="lstm", L=2, D=2, I=3, H=3, T=4, B=3)
    params = rand_params(c)
    x = u(c.B, c.T, c.I)
    h = u(c.B, c.L * c.D, c.n)
    cc = u(c.B, c.L * c.D, c.H)
    seq = torch.tensor([4, 2, 3], dtype=I32)
    ref = raw_ops.CudnnRNNV3(x, h, cc, params, seq, time_major=False, **c.attrs())

    def strided(t):
        s = torch.stack([t, torch.full_like(t, float("nan"))], dim=-1)[..., 0]
        assert not s.is_contiguous()
        return s

    c_view = cc.transpose(0, 1).contiguous().transpose(0, 1)  # another non-contiguous view
    assert not c_view.is_contiguous()
    got = raw_ops.CudnnRNNV3(strided(x), strided(h), c_view, strided(params), seq,
                             time_major=False, **c.attrs())  # fmt: skip
    for name in ("output", "output_h", "output_c"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=0, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# Zero-length rows (docs/differences.md: allowed; outputs zero, final state = initial state,
# gradients flow to the initial state)


@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("mode", MODES)
def test_zero_length_rows(mode, time_major):
    # Batch-major states are reinterpreted memory, so "row b" is only a state row when L*D == 1.
    L, D = (2, 2) if time_major else (1, 1)
    c = Cfg(mode=mode, L=L, D=D, I=3, H=3, T=4, B=5)
    lengths = [3, 0, 4, 0, 1]
    live = [b for b, n in enumerate(lengths) if n > 0]
    dead = [b for b, n in enumerate(lengths) if n == 0]
    m = nn_module(c)
    params = to_params(c, *nn_canonical(m, c))
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    ups = upstream(c)
    res, out, hn, cn, dx, dh0, dc0, dp = ours_run(c, x, h0, c0, params, lengths, ups, time_major)
    # Dead rows: zero outputs, final state = initial state, state grads = upstream state grads,
    # no input grad.
    assert not out[:, dead].any()
    assert torch.equal(hn[:, dead], h0[:, dead])
    assert torch.equal(dh0[:, dead], ups[1][:, dead])
    assert not dx[:, dead].any()
    if c.lstm:
        assert torch.equal(cn[:, dead], c0[:, dead])
        assert torch.equal(dc0[:, dead], ups[2][:, dead])
    # Live rows (and the params grads, to which dead rows add nothing) equal nn on those rows.
    sub = Cfg(**{**c.__dict__, "B": len(live)})
    ups_live = (ups[0][:, live], ups[1][:, live], None if ups[2] is None else ups[2][:, live])
    want = nn_run(m, sub, x[:, live], h0[:, live], c0[:, live] if c.lstm else c0,
                  [lengths[b] for b in live], ups_live)  # fmt: skip
    got = [out[:, live], hn[:, live], cn[:, live] if c.lstm else None, dx[:, live],
           dh0[:, live], dc0[:, live] if c.lstm else None]  # fmt: skip
    for k, (g, w) in enumerate(zip(got, want[:6], strict=True)):
        if w is not None:
            _close(g, w, "f64", f"live rows #{k}")
    got_w, got_b = to_canonical(c, dp)
    for k, (g, w) in enumerate(zip(got_w + got_b, want[6][0] + want[6][1], strict=True)):
        _close(g, w, "f64", f"params_backprop canonical #{k}")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_all_rows_zero_length(mode):
    c = Cfg(mode=mode, L=2, D=2, I=3, H=3, T=3, B=2)
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    ups = upstream(c)
    res, out, hn, cn, dx, dh0, dc0, dp = ours_run(c, x, h0, c0, rand_params(c), [0, 0], ups)
    assert not out.any() and not dx.any() and not dp.any()
    assert torch.equal(hn, h0) and torch.equal(dh0, ups[1])
    if c.lstm:
        assert torch.equal(cn, c0) and torch.equal(dc0, ups[2])


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_empty_sequence_and_empty_batch(mode):
    """T = 0 (no step runs) and B = 0 run, forward and backward, with the right shapes."""
    for T, B in ((0, 2), (3, 0)):
        c = Cfg(mode=mode, L=2, D=2, I=3, H=3, T=T, B=B)
        x = u(T, B, c.I)
        h0, c0 = states(c)
        res, out, hn, cn, dx, dh0, dc0, dp = ours_run(c, x, h0, c0, rand_params(c), None,
                                                      upstream(c))  # fmt: skip
        assert out.shape == (T, B, c.D * c.H) and dx.shape == x.shape
        assert torch.equal(hn, h0) if T == 0 else hn.shape == h0.shape
        assert not dp.any()


# ---------------------------------------------------------------------------------------------
# Keras 3 (TF CPU backend), single layer; params built as Keras' cuDNN path does (§8.2)


def _keras():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip(f"Keras backend is {keras.backend.backend()}, not tensorflow")
    import tensorflow as tf

    return keras, tf


def _keras_to_cudnn(mode, kernel, rec, bias, U):
    """Keras weights -> canonical lists, as Keras' _cudnn_lstm / _cudnn_gru build params."""
    if mode == "lstm":  # i, f, c, o (already cuDNN's order); bW = 0, bR = bias
        W = [kernel[:, k * U : (k + 1) * U].T for k in range(4)]
        R = [rec[:, k * U : (k + 1) * U].T for k in range(4)]
        return W + R, [torch.zeros(U, dtype=F64)] * 4 + [
            bias[k * U : (k + 1) * U] for k in range(4)
        ]
    order = [1, 0, 2]  # Keras z, r, h -> cuDNN r, z, h

    def blocks(t):
        return [t[..., k * U : (k + 1) * U] for k in order]

    W = [w.T for w in blocks(kernel)]
    R = [r.T for r in blocks(rec)]
    return W + R, blocks(bias[0]) + blocks(bias[1])


def _cudnn_grads_to_keras(mode, dW, db, U):
    """Canonical grads -> Keras kernel/recurrent_kernel/bias grads (inverse of the above)."""
    G = GATES[mode]
    inv = [0, 1, 2, 3] if mode == "lstm" else [1, 0, 2]  # cuDNN index of each Keras gate
    kernel = torch.cat([dW[k].T for k in inv], dim=1)
    rec = torch.cat([dW[G + k].T for k in inv], dim=1)
    if mode == "lstm":  # Keras' bias feeds bR (bW is a constant zero)
        bias = torch.cat([db[G + k] for k in inv])
    else:
        bias = torch.stack([torch.cat([db[k] for k in inv]), torch.cat([db[G + k] for k in inv])])
    return kernel, rec, bias


@pytest.mark.parametrize("masked", [False, True], ids=["nomask", "mask"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_vs_keras(mode, masked):
    keras, tf = _keras()
    B, T, I, U = 3, 5, 4, 3  # noqa: E741
    kw = dict(return_sequences=True, return_state=True, dtype="float64")
    layer = (keras.layers.LSTM(U, **kw) if mode == "lstm"
             else keras.layers.GRU(U, reset_after=True, **kw))  # fmt: skip
    layer.build((B, T, I))
    rng = np.random.default_rng(0)
    layer.set_weights([rng.uniform(-0.6, 0.6, w.shape) for w in layer.get_weights()])
    kernel, rec, bias = (torch.from_numpy(w) for w in layer.get_weights())
    x = rng.uniform(-1, 1, (B, T, I))
    h0 = rng.uniform(-1, 1, (B, U))
    c0 = rng.uniform(-2, 2, (B, U))
    lengths = [5, 2, 3] if masked else [T] * B
    valid = np.arange(T)[None, :] < np.array(lengths)[:, None]  # right-padded mask
    gy = rng.standard_normal((B, T, U)) * valid[..., None]  # Keras repeats h at masked steps
    gh = rng.standard_normal((B, U))
    gc = rng.standard_normal((B, U))

    # Keras
    xt = tf.constant(x)
    init = [tf.constant(h0)] + ([tf.constant(c0)] if mode == "lstm" else [])
    with tf.GradientTape() as tape:
        tape.watch([xt, *init])
        res = layer(xt, initial_state=init, mask=tf.constant(valid) if masked else None)
        out, h = res[0], res[1]
        loss = tf.reduce_sum(out * gy) + tf.reduce_sum(h * gh)
        if mode == "lstm":
            loss += tf.reduce_sum(res[2] * gc)
    k_grads = tape.gradient(loss, [xt, *init, *layer.trainable_weights])
    k_grads = [torch.from_numpy(g.numpy()) for g in k_grads]

    # Ours: CudnnRNNV3 batch-major, states [B, 1, U] (Keras' expand_dims), lengths = mask sums.
    weights, biases = _keras_to_cudnn(mode, kernel, rec, bias, U)
    c = Cfg(mode=mode, L=1, D=1, I=I, H=U, T=T, B=B)
    params = to_params(c, weights, biases).requires_grad_()
    xs = torch.from_numpy(x).requires_grad_()
    hs = torch.from_numpy(h0).unsqueeze(1).requires_grad_()
    cs = torch.from_numpy(c0).unsqueeze(1).requires_grad_() if mode == "lstm" else 0
    ours = raw_ops.CudnnRNNV3(xs, hs, cs, params, torch.tensor(lengths, dtype=I32),
                              rnn_mode=mode, time_major=False)  # fmt: skip
    out_t = torch.from_numpy(out.numpy())
    valid_t = torch.from_numpy(valid)[..., None]
    _close(ours.output * valid_t, out_t * valid_t, "f64", "output at valid steps")
    assert not ours.output[~valid_t.expand_as(ours.output)].any()  # cuDNN zero-fills padding
    _close(ours.output_h[:, 0], torch.from_numpy(h.numpy()), "f64", "output_h")
    if mode == "lstm":
        _close(ours.output_c[:, 0], torch.from_numpy(res[2].numpy()), "f64", "output_c")
    loss = (ours.output * torch.from_numpy(gy)).sum() + (
        ours.output_h[:, 0] * torch.from_numpy(gh)
    ).sum()
    leaves = [xs, hs]
    if mode == "lstm":
        loss = loss + (ours.output_c[:, 0] * torch.from_numpy(gc)).sum()
        leaves.append(cs)
    g = torch.autograd.grad(loss, [*leaves, params])
    dW, db = to_canonical(c, g[-1])
    got = [g[0], *(t[:, 0] for t in g[1:-1]), *_cudnn_grads_to_keras(mode, dW, db, U)]
    names = ["d_input", "d_h0", *(["d_c0"] if mode == "lstm" else []), "d_kernel",
             "d_recurrent_kernel", "d_bias"]  # fmt: skip
    for name, a, b in zip(names, got, k_grads, strict=True):
        _close(a, b, "f64", name)


# ---------------------------------------------------------------------------------------------
# Backprop raw ops, V1/V2 vs V3, reserve_space, is_training


BACKPROP_CFGS = [Cfg("lstm", 2, 2), Cfg("gru", 2, 1), Cfg("rnn_tanh", 1, 2),
                 Cfg("rnn_relu", 3, 1), Cfg("lstm", 2, 2, I=3, H=4, P=2)]  # fmt: skip


def _cfg_id(c: Cfg) -> str:
    return f"{c.mode}-L{c.L}D{c.D}" + (f"P{c.P}" if c.P else "")


@pytest.mark.parametrize("time_major", [True, False], ids=["tm", "bm"])
@pytest.mark.parametrize("c", BACKPROP_CFGS, ids=_cfg_id)
def test_wiring_backprop_v3_raw_op_equals_autograd(c, time_major, device):
    """Wiring, not parity: the raw Backprop op called by hand gives what autograd gets from the
    same kernel (ours against ours; the numbers are checked against torch.nn and TF's composite
    in test_vs_torch_nn and tests/tf_ported/test_tf_ported_cudnn_rnn.py)."""
    x, h0, c0, params = (t.to(device) for t in _fwd_inputs(c))
    seq = torch.tensor([4, 1, 3], dtype=I32)
    if not time_major:
        x = x.transpose(0, 1).contiguous()
        h0 = h0.transpose(0, 1).contiguous()
        c0 = c0.transpose(0, 1).contiguous() if c.lstm else c0
    leaves = [t.requires_grad_() for t in (x, h0, params)] + (
        [c0.requires_grad_()] if c.lstm else []
    )
    fwd = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, time_major=time_major, **c.attrs())
    gy, gh = torch.randn_like(fwd.output), torch.randn_like(fwd.output_h)
    gc = torch.randn_like(fwd.output_c) if c.lstm else fwd.output.new_zeros(())
    outs = [fwd.output, fwd.output_h] + ([fwd.output_c] if c.lstm else [])
    # retain_graph: on the GPU a backward that does not retain it consumes the reserve
    auto = torch.autograd.grad(outs, leaves, [gy, gh] + ([gc] if c.lstm else []),
                               retain_graph=True)  # fmt: skip
    bp = raw_ops.CudnnRNNBackpropV3(x.detach(), h0.detach(), c0.detach(), params.detach(), seq,
                                    fwd.output.detach(), fwd.output_h.detach(),
                                    fwd.output_c.detach(), gy, gh, gc, fwd.reserve_space,
                                    fwd.host_reserved, time_major=time_major,
                                    **c.attrs())  # fmt: skip
    assert torch.equal(bp.input_backprop, auto[0])
    assert torch.equal(bp.input_h_backprop, auto[1])
    assert torch.equal(bp.params_backprop, auto[2])
    if c.lstm:
        assert torch.equal(bp.input_c_backprop, auto[3])
    else:
        assert bp.input_c_backprop.shape == ()  # TF: a scalar for non-LSTM
    assert all(g.abs().sum() > 0 for g in auto)


@pytest.mark.parametrize("mode", MODES)
def test_wiring_v1_v2_equal_v3_with_full_lengths(mode):
    """Wiring: CudnnRNN / CudnnRNNV2 (and their Backprops) are V3 with every length = T
    (docs/differences.md), ours against ours."""
    c = Cfg(mode=mode, L=2, D=2, I=3, H=3, T=4, B=3)
    x, h0, c0, params = _fwd_inputs(c)
    ups = upstream(c)
    full = [c.T] * c.B
    v3 = ours_run(c, x, h0, c0, params, full, ups)
    v3_none = ours_run(c, x, h0, c0, params, None, ups)
    for op in ("V1", "V2"):
        got = ours_run(c, x, h0, c0, params, None, ups, op=op)
        for a, b, d in zip(got[1:], v3[1:], v3_none[1:], strict=True):
            if b is not None:
                torch.testing.assert_close(a, b, rtol=0, atol=1e-14)
                torch.testing.assert_close(d, b, rtol=0, atol=1e-14)
        res = got[0]
        assert len(res) == (4 if op == "V1" else 5)
        if op == "V2":
            assert res.host_reserved.dtype == torch.int8 and res.host_reserved.shape == ()
    # The Backprop raw ops V1 / V2 equal V3.
    fwd = raw_ops.CudnnRNN(x, h0, c0, params, rnn_mode=mode, direction=c.direction)
    gy, gh, gc = ups
    gc = gc if c.lstm else torch.zeros(())
    common = (x, h0, c0, params)
    tail = (fwd.output, fwd.output_h, fwd.output_c, gy, gh, gc, fwd.reserve_space)
    kw = dict(rnn_mode=mode, direction=c.direction)
    b1 = raw_ops.CudnnRNNBackprop(*common, *tail, **kw)
    b2 = raw_ops.CudnnRNNBackpropV2(*common, *tail, torch.zeros((), dtype=torch.int8), **kw)
    b3 = raw_ops.CudnnRNNBackpropV3(*common, torch.tensor(full, dtype=I32), *tail,
                                    torch.zeros((), dtype=torch.int8), **kw)  # fmt: skip
    for name in b3._fields:
        assert torch.equal(getattr(b1, name), getattr(b3, name)), name
        assert torch.equal(getattr(b2, name), getattr(b3, name)), name


@pytest.mark.parametrize("c", BACKPROP_CFGS, ids=_cfg_id)
def test_reserve_space_survives_retain_graph(c):
    x, h0, c0, params = _fwd_inputs(c)
    leaves = [t.requires_grad_() for t in (x, h0, params)] + (
        [c0.requires_grad_()] if c.lstm else []
    )
    fwd = raw_ops.CudnnRNNV3(x, h0, c0, params, torch.tensor([4, 2, 3], dtype=I32), **c.attrs())
    reserve = fwd.reserve_space.clone()
    loss = (fwd.output * torch.randn_like(fwd.output)).sum() + fwd.output_h.pow(2).sum()
    if c.lstm:
        loss = loss + fwd.output_c.sum()
    first = torch.autograd.grad(loss, leaves, retain_graph=True)
    second = torch.autograd.grad(loss, leaves)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    assert torch.equal(fwd.reserve_space, reserve)  # the backward does not write into it


def test_backward_gives_up_the_reserve_only_when_the_graph_is_not_kept():
    """The autograd backward lets cuDNN write into a CUDA reserve only where nothing can read
    it again: torch's keep_graph flag (a private API, checked here on this torch) is False for
    a plain backward and True with retain_graph or create_graph; a CPU reserve is never given
    up (the CPU kernels only read theirs)."""
    from torch_lstm_grad.autograd import _reserve_given_up

    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, g):
            seen.append(torch._C._autograd._get_current_graph_task_keep_graph())
            seen.append(_reserve_given_up(g))
            return g * 2

    x = torch.ones(3, requires_grad=True)
    Probe.apply(x).sum().backward()
    Probe.apply(x).sum().backward(retain_graph=True)
    Probe.apply(x).sum().backward(create_graph=True)
    assert seen == [False, False, True, False, True, False]


@pytest.mark.parametrize("op", ["CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_inference_refuses_backward_with_tf_message(op, mode):
    c = Cfg(mode=mode, L=1, D=1)
    x, h0, c0, params = _fwd_inputs(c)
    x.requires_grad_()
    params.requires_grad_()
    args = (x, h0, c0, params) + ((None,) if op == "CudnnRNNV3" else ())
    res = getattr(raw_ops, op)(*args, rnn_mode=mode, is_training=False)
    assert res.reserve_space.shape == ()  # TF: a scalar dummy in inference
    with pytest.raises(ValueError) as info:
        res.output.sum().backward()
    assert str(info.value) == f"To use {op} in gradients, is_training must be set to True."
    # Same numbers as training.
    train = getattr(raw_ops, op)(*args, rnn_mode=mode, is_training=True)
    assert torch.equal(train.output, res.output) and torch.equal(train.output_h, res.output_h)


@pytest.mark.parametrize("mode", ["gru", "rnn_tanh", "rnn_relu"])
def test_non_lstm_output_c_and_its_gradient_are_0d(mode):
    c = Cfg(mode=mode, L=2, D=2)
    x, h0, _, params = _fwd_inputs(c)
    for input_c in (0, torch.zeros(()), torch.randn(7, dtype=F64)):  # any tensor: never read
        res = raw_ops.CudnnRNNV3(x, h0, input_c, params, None, **c.attrs())
        assert res.output_c.shape == () and res.output_c.dtype == F64
        assert not res.output_c.requires_grad
        bp = raw_ops.CudnnRNNBackpropV3(x, h0, input_c, params, None, res.output, res.output_h,
                                        res.output_c, torch.ones_like(res.output),
                                        torch.ones_like(res.output_h), torch.zeros(()),
                                        res.reserve_space, res.host_reserved,
                                        **c.attrs())  # fmt: skip
        assert bp.input_c_backprop.shape == ()
    assert res.host_reserved.dtype == torch.int8 and res.host_reserved.shape == ()


def test_output_names_and_differentiability():
    c = Cfg("lstm", 1, 1)
    x, h0, c0, params = _fwd_inputs(c)
    params.requires_grad_()
    res = raw_ops.CudnnRNNV3(x, h0, c0, params, None)
    assert res._fields == ("output", "output_h", "output_c", "reserve_space", "host_reserved")
    assert raw_ops.CudnnRNN(x, h0, c0, params)._fields == res._fields[:4]
    assert res.output.requires_grad and res.output_h.requires_grad and res.output_c.requires_grad
    assert not res.reserve_space.requires_grad and not res.host_reserved.requires_grad
    bp_fields = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")
    assert raw_ops.CudnnRNNBackpropOutput._fields == bp_fields
    assert torch_lstm_grad.CudnnRNNFunction is not None


# ---------------------------------------------------------------------------------------------
# CudnnRNNParamsSize and the canonical conversions


PARAM_CFGS = [Cfg(m, L, D, I=5, H=3) for m in MODES for L, D in ((1, 1), (2, 2), (3, 1))]
PARAM_CFGS += [Cfg("lstm", L, D, I=5, H=4, P=2) for L, D in ((1, 1), (2, 2))]


@pytest.mark.parametrize("c", PARAM_CFGS, ids=_cfg_id)
def test_params_size_equals_nn_and_layout(c):
    m = nn_module(c)
    expected = sum(p.numel() for p in m.parameters())
    for S in (torch.int32, torch.int64):
        for T in (torch.float16, torch.bfloat16, F32, F64):
            out = raw_ops.CudnnRNNParamsSize(num_layers=c.L, num_units=c.H, input_size=c.I, T=T,
                                             S=S, rnn_mode=c.mode, direction=c.direction,
                                             num_proj=c.P)  # fmt: skip
            assert out.shape == (1,) and out.dtype == S
            assert out.item() == expected
    # int32 scalar tensors (TF's inputs) work too.
    out = raw_ops.CudnnRNNParamsSize(torch.tensor(c.L, dtype=I32), torch.tensor(c.H, dtype=I32),
                                     torch.tensor(c.I, dtype=I32), T=F32, S=torch.int32,
                                     rnn_mode=c.mode, direction=c.direction,
                                     num_proj=c.P)  # fmt: skip
    assert out.item() == expected
    # Closed form of docs/tf-semantics.md §7.2.
    P = c.P or c.H
    closed = sum(c.G * c.H * (c.I if layer == 0 else c.D * P) + c.G * c.H * P
                 + (P * c.H if c.P else 0) + 2 * c.G * c.H
                 for layer in range(c.L) for _ in range(c.D))  # fmt: skip
    assert closed == expected


def test_single_layer_lstm_size_formula():
    """4H(I + H + 2) for one unidirectional LSTM layer (docs/tf-semantics.md §7.2)."""
    for I, H in ((1, 1), (7, 5), (32, 16)):  # noqa: E741
        assert params_size(Cfg("lstm", 1, 1, I=I, H=H)) == 4 * H * (I + H + 2)


def _canonical_shapes(c: Cfg, input_mode="linear_input"):
    P = c.P or c.H
    skip = input_mode == "skip_input"
    w, b = [], []
    for layer in range(c.L):
        for _ in range(c.D):
            in_l = c.I if layer == 0 else c.D * P
            w += [(c.H, 0 if skip and layer == 0 else in_l)] * c.G + [(c.H, P)] * c.G
            w += [(P, c.H)] if c.P else []
            b += [(c.H,)] * (2 * c.G)
    return w, b


@pytest.mark.parametrize("c", PARAM_CFGS, ids=_cfg_id)
def test_params_canonical_round_trip(c):
    params = rand_params(c)
    weights, biases = to_canonical(c, params)
    w_shapes, b_shapes = _canonical_shapes(c)
    assert [tuple(t.shape) for t in weights] == w_shapes
    assert [tuple(t.shape) for t in biases] == b_shapes
    assert all(t.dtype == F64 for t in weights + biases)
    back = to_params(c, weights, biases)
    assert back.shape == params.shape and torch.equal(back, params)
    # And canonical -> params -> canonical.
    w2 = [torch.randn(s, dtype=F64) for s in w_shapes]
    b2 = [torch.randn(s, dtype=F64) for s in b_shapes]
    w3, b3 = to_canonical(c, to_params(c, w2, b2))
    assert all(torch.equal(a, b) for a, b in zip(w2 + b2, w3 + b3, strict=True))
    # The outputs are copies (TF's outputs are their own buffers): writing to them leaves params.
    before = params.clone()
    for t in weights + biases:
        t.zero_()
    assert torch.equal(params, before)


def test_canonical_conversions_are_differentiable():
    """Training nn-layout weights through the ops: CanonicalToParams (a concatenation) and
    ParamsToCanonical (copies) pass gradients; nn's parameters get nn's own gradients."""
    c = Cfg("gru", 2, 2, I=3, H=3, T=4, B=2)
    m = nn_module(c)
    x, (h0, _) = u(c.T, c.B, c.I), states(c)
    out, hn = m(x, h0)
    loss = out.pow(2).sum() + hn.sum()
    want = torch.autograd.grad(loss, list(m.parameters()))
    params = to_params(c, *_nn_canonical_live(m, c))
    res = raw_ops.CudnnRNNV3(x, h0, 0, params, None, rnn_mode="gru", direction=c.direction)
    loss = res.output.pow(2).sum() + res.output_h.sum()
    got = torch.autograd.grad(loss, list(m.parameters()))
    for a, b in zip(got, want, strict=True):
        _close(a, b, "f64", "nn parameter grad through CanonicalToParams")
    p = rand_params(c).requires_grad_()
    w, b = to_canonical(c, p)
    (g,) = torch.autograd.grad(sum((t * (k + 1)).sum() for k, t in enumerate(w + b)), p)
    w_idx, b_idx = to_canonical(c, g)
    assert all((t == k + 1).all() for k, t in enumerate(w_idx + b_idx))


def _nn_canonical_live(m, c: Cfg):
    """nn_canonical without detaching (chunks are views that keep the autograd graph)."""
    weights, biases = [], []
    for layer in range(c.L):
        for d in range(c.D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            weights += list(getattr(m, "weight_ih" + sfx).chunk(c.G))
            weights += list(getattr(m, "weight_hh" + sfx).chunk(c.G))
            biases += list(getattr(m, "bias_ih" + sfx).chunk(c.G))
            biases += list(getattr(m, "bias_hh" + sfx).chunk(c.G))
    return weights, biases


def test_single_layer_opaque_layout():
    """L = D = 1: [W_0..W_{G-1}, R_0..R_{G-1}, bW..., bR...], each row-major (docs/tf-semantics.md
    §7.3, the layout Keras builds)."""
    for mode in MODES:
        c = Cfg(mode, 1, 1, I=5, H=3)
        w = [torch.randn(s, dtype=F64) for s in _canonical_shapes(c)[0]]
        b = [torch.randn(s, dtype=F64) for s in _canonical_shapes(c)[1]]
        flat = torch.cat([t.reshape(-1) for t in w + b])
        assert torch.equal(to_params(c, w, b), flat)


@pytest.mark.parametrize(
    ("kwargs", "exc", "start", "contains"),
    [
        (dict(T=torch.int32), TypeError, "T: ", "got torch.int32"),
        (dict(S=F32), TypeError, "S: ", "got torch.float32"),
        (dict(num_layers=0), ValueError, "num_layers: ", "got 0"),
        (dict(num_units=0), ValueError, "num_units: ", "got 0"),
        (dict(num_layers=2.0), TypeError, "num_layers: ", "got float"),
        (dict(num_units=torch.tensor(3.0)), TypeError, "num_units: ", "got dtype Float"),
        (dict(input_size=torch.tensor([3])), ValueError, "input_size: ", "got shape [1]"),
        (dict(input_size=0), ValueError, "input_size: ", "cuDNN refuses"),
        (dict(rnn_mode="lstm2"), ValueError, "rnn_mode: ", "got 'lstm2'"),
        (dict(input_mode="skip"), ValueError, "input_mode: ", "got 'skip'"),
        (dict(direction="backward"), ValueError, "direction: ", "got 'backward'"),
        (dict(num_proj=2, rnn_mode="gru"), ValueError, "num_proj: ", "rnn_mode='gru'"),
        (dict(num_proj=4), ValueError, "num_proj: ", "<= num_units = 3, got 4"),
        (dict(num_layers=torch.tensor(True)), TypeError, "num_layers: ", "got dtype Bool"),
        (dict(input_size=np.True_), TypeError, "input_size: ", "got dtype Bool"),
    ],
    ids=[
        "T",
        "S",
        "num_layers_0",
        "num_units_0",
        "num_layers_float",
        "num_units_float_tensor",
        "input_size_1d",
        "input_size_0",
        "rnn_mode",
        "input_mode",
        "direction",
        "num_proj_gru",
        "num_proj_big",
        "num_layers_bool_tensor",
        "input_size_numpy_bool",
    ],
)
def test_params_size_bad_attributes(kwargs, exc, start, contains):
    args = dict(num_layers=1, num_units=3, input_size=2, T=F32, S=I32) | kwargs
    with pytest.raises(exc) as info:
        raw_ops.CudnnRNNParamsSize(**args)
    assert str(info.value).startswith(start) and contains in str(info.value), str(info.value)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_forward_refuses_inputs_without_features(device):
    """cuDNN refuses inputSize = 0; the CPU kernel and the fake kernel give the same ValueError,
    so a model behaves alike on every device."""
    c = Cfg("lstm", 1, 1, I=1, H=3)
    x, h0, c0, params = _fwd_inputs(c)  # the shape check of input comes before params'
    with pytest.raises(ValueError, match=r"^input_size: expected a value >= 1 \(cuDNN refuses"):
        raw_ops.CudnnRNNV3(*(t.to(device) for t in (x[:, :, :0], h0, c0, params)), None)


def test_params_ops_reject_wrong_counts_and_sizes():
    c = Cfg("lstm", 2, 2, I=5, H=3)
    params = rand_params(c)
    with pytest.raises(ValueError, match=r"^num_params: expected num_layers \* D \* 2G = 32"):
        raw_ops.CudnnRNNParamsToCanonical(2, 3, 5, params, num_params=31, direction="bidirectional")
    with pytest.raises(ValueError, match=r"^params: expected a 1-D tensor of CudnnRNNParamsSize"):
        raw_ops.CudnnRNNParamsToCanonical(2, 3, 5, params[:-1], num_params=32,
                                          direction="bidirectional")  # fmt: skip
    w, b = to_canonical(c, params)
    with pytest.raises(ValueError, match=r"^weights: expected .* = 32 tensors"):
        raw_ops.CudnnRNNCanonicalToParams(2, 3, 5, w[:-1], b, direction="bidirectional")
    with pytest.raises(ValueError, match=r"^weights\[3\]: expected 15 elements"):
        raw_ops.CudnnRNNCanonicalToParams(2, 3, 5, w[:3] + [w[3][:, :4]] + w[4:], b,
                                          direction="bidirectional")  # fmt: skip
    with pytest.raises(ValueError, match=r"^biases\[0\]: expected 3 elements"):
        raw_ops.CudnnRNNCanonicalToParams(2, 3, 5, w, [b[0][:2]] + b[1:], direction="bidirectional")
    with pytest.raises(ValueError, match=r"^num_params_weights: expected .* = 36"):
        raw_ops.CudnnRNNParamsToCanonicalV2(2, 4, 5, rand_params(Cfg("lstm", 2, 2, 5, 4, 2)),
                                            num_params_weights=32, num_params_biases=32,
                                            direction="bidirectional", num_proj=2)  # fmt: skip


def test_count_messages_name_each_lists_formula():
    """With projection the weights list has one more tensor per pseudo-layer than the biases
    list: each count error gives its own list's formula and count, weights checked first."""
    c = Cfg("lstm", 2, 2, I=5, H=4, P=2)
    params = rand_params(c)
    w, b = to_canonical(c, params)
    tail = " (G = 4 for rnn_mode='lstm'), got "
    weights_36 = "num_layers * D * (2G + 1) = 36"
    kw = dict(num_layers=2, num_units=4, input_size=5, direction="bidirectional", num_proj=2)
    with pytest.raises(ValueError) as info:
        raw_ops.CudnnRNNParamsToCanonicalV2(**kw, params=params, num_params_weights=32,
                                            num_params_biases=32)  # fmt: skip
    assert str(info.value) == f"num_params_weights: expected {weights_36}{tail}32"
    with pytest.raises(ValueError) as info:
        raw_ops.CudnnRNNParamsToCanonicalV2(**kw, params=params, num_params_weights=36,
                                            num_params_biases=36)  # fmt: skip
    assert str(info.value) == f"num_params_biases: expected num_layers * D * 2G = 32{tail}36"
    with pytest.raises(ValueError) as info:
        raw_ops.CudnnRNNCanonicalToParamsV2(**kw, weights=w[:-1], biases=b[:-1])
    assert str(info.value) == f"weights: expected {weights_36} tensors{tail}35"
    with pytest.raises(ValueError) as info:
        raw_ops.CudnnRNNCanonicalToParamsV2(**kw, weights=w, biases=b + b[:1])
    assert str(info.value) == f"biases: expected num_layers * D * 2G = 32 tensors{tail}33"


def test_canonical_v2_defaults_to_no_projection():
    """num_proj's default is 0 (no projection), as TF's: V2 without it is V1."""
    c = Cfg("gru", 2, 1, I=3, H=4)
    params = rand_params(c)
    kw = dict(num_layers=2, num_units=4, input_size=3, rnn_mode="gru")
    v1 = raw_ops.CudnnRNNParamsToCanonical(**kw, params=params, num_params=12)
    v2 = raw_ops.CudnnRNNParamsToCanonicalV2(**kw, params=params, num_params_weights=12,
                                             num_params_biases=12)  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(v1.weights + v1.biases, v2.weights + v2.biases,
                                                  strict=True))  # fmt: skip
    back = raw_ops.CudnnRNNCanonicalToParamsV2(**kw, weights=v2.weights, biases=v2.biases)
    assert torch.equal(back, params)


def test_canonical_lists_may_be_any_iterable():
    """weights and biases are read once, in order: generators and tuples give what lists give."""
    c = Cfg("lstm", 1, 2, I=3, H=2)
    params = rand_params(c)
    w, b = to_canonical(c, params)
    kw = dict(num_layers=1, num_units=2, input_size=3, direction="bidirectional")
    back = raw_ops.CudnnRNNCanonicalToParams(**kw, weights=(t for t in w), biases=tuple(b))
    assert torch.equal(back, params)


def test_canonical_dtype_comes_from_the_first_tensor_with_a_region():
    """The params' dtype is the first torch tensor's among the tensors that have a region (TF's
    rule for an input list): a float64 numpy weights[0] before float32 tensors becomes float32.
    skip_input's absent input matrices (any 0-element tensor) take no part: a float32 empty
    among float64 tensors changes nothing."""
    c = Cfg("gru", 1, 1, I=3, H=3)
    params = rand_params(c)
    w, b = to_canonical(c, params)
    kw = dict(num_layers=1, num_units=3, input_size=3, rnn_mode="gru")
    weights = [w[0].numpy()] + [t.float() for t in w[1:]]
    got = raw_ops.CudnnRNNCanonicalToParams(**kw, weights=weights, biases=[t.float() for t in b])
    assert got.dtype == torch.float32 and torch.equal(got, params.float())
    params = rand_params(c, "skip_input")
    w, b = to_canonical(c, params, "skip_input")
    assert w[0].numel() == 0 and w[0].dtype == F64
    w = [torch.empty(0) if t.numel() == 0 else t for t in w]
    got = raw_ops.CudnnRNNCanonicalToParams(**kw, weights=w, biases=b, input_mode="skip_input")
    assert got.dtype == F64 and torch.equal(got, params)


def test_sequence_lengths_keep_their_integers_and_count_bools():
    """Python and numpy lengths are not narrowed to int32 (2**32 + 2 is out of range, not 2);
    bools are 0 and 1, as TF converts them; a torch bool tensor is refused, as TF does."""
    c = Cfg("gru", 1, 1, I=3, H=3, T=4, B=3)
    x, h0, c0, params = _fwd_inputs(c)
    out_of_range = r"^sequence_lengths: expected values in \[0, T\] = \[0, 4\], got 4294967298 "
    for lengths in ([4, 2**32 + 2, 1], np.array([4, 2**32 + 2, 1])):
        with pytest.raises(ValueError, match=out_of_range + "at index 1"):
            raw_ops.CudnnRNNV3(x, h0, c0, params, lengths, **c.attrs())
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, [1, 0, 1], **c.attrs())
    for lengths in ([True, False, True], np.array([True, False, True])):
        got = raw_ops.CudnnRNNV3(x, h0, c0, params, lengths, **c.attrs())
        assert torch.equal(got.output, want.output) and torch.equal(got.output_h, want.output_h)
    with pytest.raises(TypeError, match="^sequence_lengths: expected an integer dtype"):
        raw_ops.CudnnRNNV3(x, h0, c0, params, torch.tensor([True, False, True]), **c.attrs())


# ---------------------------------------------------------------------------------------------
# skip_input / auto_select


def _skip_reference(c: Cfg, skip_weights, biases, x, h0, c0, lengths, ups):
    """nn module whose layer-0 input matrices are identity blocks, loaded with the skip model's
    weights (cuDNN's skip mode: x itself enters every gate, plus bW)."""
    m = nn_module(c)
    eye = torch.eye(c.H, dtype=F64)
    full = list(skip_weights)
    per = 2 * c.G + (1 if c.P else 0)
    for d in range(c.D):
        for g in range(c.G):
            full[d * per + g] = eye
    with torch.no_grad():
        for k, p in enumerate(_nn_param_list(m, c)):
            p.copy_(torch.cat(_nn_param_sources(c, full, biases)[k]))
    return nn_run(m, c, x, h0, c0, lengths, ups)


def _nn_param_list(m, c: Cfg):
    out = []
    for layer in range(c.L):
        for d in range(c.D):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            out += [getattr(m, "weight_ih" + sfx), getattr(m, "weight_hh" + sfx)]
            out += [getattr(m, "weight_hr" + sfx)] if c.P else []
            out += [getattr(m, "bias_ih" + sfx), getattr(m, "bias_hh" + sfx)]
    return out


def _nn_param_sources(c: Cfg, weights, biases):
    """For each tensor of _nn_param_list: the canonical tensors that concatenate to it."""
    out, per = [], 2 * c.G + (1 if c.P else 0)
    for k in range(c.L * c.D):
        w = weights[k * per : (k + 1) * per]
        b = biases[k * 2 * c.G : (k + 1) * 2 * c.G]
        out += [w[: c.G], w[c.G : 2 * c.G]] + ([[w[-1]]] if c.P else []) + [b[: c.G], b[c.G :]]
    return out


@pytest.mark.parametrize("mode", [*MODES, "lstm_proj"])
def test_skip_input_vs_identity_input_matrices(mode):
    if mode == "lstm_proj":  # skip needs input_size == cell units H (x enters the gates)
        c = Cfg(mode="lstm", L=2, D=2, I=3, H=3, P=2, T=4, B=3)
    else:
        c = Cfg(mode=mode, L=2, D=2, I=3, H=3, T=4, B=3)
    size_skip = params_size(c, "skip_input")
    assert size_skip == params_size(c) - c.D * c.G * c.H * c.I
    params = rand_params(c, "skip_input")
    weights, biases = to_canonical(c, params, "skip_input")
    assert [tuple(t.shape) for t in weights] == _canonical_shapes(c, "skip_input")[0]
    assert torch.equal(to_params(c, weights, biases, "skip_input"), params)
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    ups = upstream(c)
    lengths = [4, 2, 3]
    want = _skip_reference(c, weights, biases, x, h0, c0, lengths, ups)
    res, *got = ours_run(c, x, h0, c0, params, lengths, ups, input_mode="skip_input")
    for k, (g, w) in enumerate(zip(got[:6], want[:6], strict=True)):
        if w is not None:
            _close(g, w, "f64", f"skip_input output #{k}")
    gw, gb = to_canonical(c, got[6], "skip_input")
    ww, wb = want[6]
    per = 2 * c.G + (1 if c.P else 0)
    for k, (g, w) in enumerate(zip(gw + gb, ww + wb, strict=True)):
        if k < len(gw) and k % per < c.G and k < c.D * per:
            assert g.shape == (c.H, 0)  # the absent layer-0 input matrices
            continue
        _close(g, w, "f64", f"skip_input params_backprop canonical #{k}")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_skip_input_hand_written_loop(mode):
    """One layer, one direction: the gate pre-activation of layer 0 is x + bW + R h + bR."""
    c = Cfg(mode=mode, L=1, D=1, I=3, H=3, T=4, B=2)
    params = rand_params(c, "skip_input")
    w, b = to_canonical(c, params, "skip_input")
    R = torch.cat(w[c.G : 2 * c.G])
    bW, bR = torch.cat(b[: c.G]), torch.cat(b[c.G :])
    x = u(c.T, c.B, c.I)
    h0, c0 = states(c)
    h, cell, outs = h0[0], c0[0] if c.lstm else None, []
    for t in range(c.T):
        xi = x[t].repeat(1, c.G) + bW
        hr = h @ R.T + bR
        if mode == "lstm":
            i, f, g, o = (xi + hr).chunk(4, dim=1)
            cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(cell)
        else:
            xr, xz, xn = xi.chunk(3, dim=1)
            hr_, hz, hn = hr.chunk(3, dim=1)
            r, z = torch.sigmoid(xr + hr_), torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
        outs.append(h)
    res = raw_ops.CudnnRNNV3(x, h0, c0, params, None, rnn_mode=mode, input_mode="skip_input")
    _close(res.output, torch.stack(outs), "f64", "skip loop output")
    _close(res.output_h[0], h, "f64", "skip loop output_h")


@pytest.mark.parametrize("mode", MODES)
def test_auto_select(mode):
    """auto_select = skip_input iff input_size == input_h.shape[2], else linear_input."""
    for I in (3, 4):  # noqa: E741
        c = Cfg(mode=mode, L=2, D=1, I=I, H=3, T=3, B=2)
        skip = I == c.H
        chosen = "skip_input" if skip else "linear_input"
        assert params_size(c, "auto_select") == params_size(c, chosen)
        params = rand_params(c, chosen)
        x, (h0, c0) = u(c.T, c.B, c.I), states(c)
        auto = raw_ops.CudnnRNNV3(x, h0, c0, params, None, rnn_mode=mode,
                                  input_mode="auto_select")  # fmt: skip
        want = raw_ops.CudnnRNNV3(x, h0, c0, params, None, rnn_mode=mode, input_mode=chosen)
        assert torch.equal(auto.output, want.output) and torch.equal(auto.output_h, want.output_h)
        if skip:  # a linear-sized buffer is refused: auto_select did pick skip_input
            with pytest.raises(ValueError, match="^params: "):
                raw_ops.CudnnRNNV3(x, h0, c0, rand_params(c), None, rnn_mode=mode,
                                   input_mode="auto_select")  # fmt: skip
        w, b = to_canonical(c, params, "auto_select")
        assert w[0].shape == ((c.H, 0) if skip else (c.H, c.I))


def test_auto_select_with_projection_compares_input_h_units():
    """With num_proj, the forward's auto_select compares input_size with input_h.shape[2] = P
    (docs/tf-semantics.md §6.5, docs/differences.md), the params ops with their num_units argument.
    """
    # input_size == H != P: the forward picks linear_input.
    c = Cfg("lstm", 1, 1, I=4, H=4, P=2, T=3, B=2)
    x, h0, c0, params = _fwd_inputs(c)
    auto = raw_ops.CudnnRNNV3(x, h0, c0, params, None, num_proj=2, input_mode="auto_select")
    lin = raw_ops.CudnnRNNV3(x, h0, c0, params, None, num_proj=2)
    assert torch.equal(auto.output, lin.output)
    # ... while CudnnRNNParamsSize(num_units=H) sees input_size == num_units: skip_input.
    assert params_size(c, "auto_select") == params_size(c, "skip_input") < params.numel()
    # input_size == P != H: the forward picks skip_input, which needs input_size == H.
    c = Cfg("lstm", 1, 1, I=2, H=4, P=2, T=3, B=2)
    x, h0, c0, params = _fwd_inputs(c)
    with pytest.raises(ValueError, match=r"^input_mode: 'auto_select' uses x itself"):
        raw_ops.CudnnRNNV3(x, h0, c0, params, None, num_proj=2, input_mode="auto_select")


@pytest.mark.parametrize("op", ["forward", "params_size", "canonical"])
def test_skip_input_needs_input_size_equal_num_units(op):
    c = Cfg("lstm", 1, 1, I=4, H=3)
    with pytest.raises(ValueError) as info:
        if op == "forward":
            x, h0, c0, _ = _fwd_inputs(c)
            raw_ops.CudnnRNNV3(x, h0, c0, torch.zeros(200, dtype=F64), None,
                               input_mode="skip_input")  # fmt: skip
        elif op == "params_size":
            params_size(c, "skip_input")
        else:
            raw_ops.CudnnRNNParamsToCanonical(1, 3, 4, torch.zeros(84, dtype=F64), num_params=8,
                                              input_mode="skip_input")  # fmt: skip
    msg = str(info.value)
    assert msg.startswith("input_mode: "), msg
    assert "input_size == num_units = 3" in msg and "got input_size = 4" in msg


# ---------------------------------------------------------------------------------------------
# Dropout (between layers, training only; docs/tf-semantics.md §6.7)


def _dropout_run(c, inputs, dropout, seed, seed2, is_training=True, requires_grad=False):
    x, h0, c0, params = (t.detach().requires_grad_(requires_grad) if t.dim() else t
                         for t in inputs)  # fmt: skip
    return raw_ops.CudnnRNNV3(x, h0, c0, params, None, dropout=dropout, seed=seed, seed2=seed2,
                              is_training=is_training, **c.attrs())  # fmt: skip


def test_dropout_changes_outputs_between_layers_only():
    c = Cfg("lstm", L=3, D=2, I=3, H=4, T=4, B=3)
    inputs = _fwd_inputs(c)
    plain = _dropout_run(c, inputs, 0.0, 0, 0)
    drop = _dropout_run(c, inputs, 0.5, 11, 12)
    assert (drop.output - plain.output).abs().max() > 1e-3
    # Layer 0 (slots 0, 1) sees no dropout: its final states are unchanged; layers >= 1 change.
    assert torch.equal(drop.output_h[:2], plain.output_h[:2])
    assert torch.equal(drop.output_c[:2], plain.output_c[:2])
    assert (drop.output_h[2:] - plain.output_h[2:]).abs().max() > 1e-3
    # The masked reserve is larger (it stores the masks).
    assert drop.reserve_space.numel() > plain.reserve_space.numel()


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_dropout_one_drops_everything_between_layers(mode):
    """dropout = 1 (TF accepts [0, 1]): in training every input of the layers above the first is
    zero, so the top layer's outputs are what a zero input gives, and nothing of x reaches
    them; outputs and gradients finite (no 0 * 1/0)."""
    c = Cfg(mode, L=2, D=1, I=3, H=4, T=4, B=3)
    x, h0, c0, params = (t.requires_grad_() for t in _fwd_inputs(c))
    out = raw_ops.CudnnRNNV3(x, h0, c0, params, None, dropout=1.0, **c.attrs())
    # Reference: the same model with layer 1's input matrices zeroed and no dropout.
    layout = params_layout(mode, "linear_input", "unidirectional", 2, c.H, c.I)
    p0 = params.detach().clone()
    upper = layout.layers[1]
    p0[upper.w: upper.w + c.G * c.H * upper.in_size] = 0
    want = raw_ops.CudnnRNNV3(x.detach(), h0.detach(), c0.detach() if c.lstm else c0, p0, None,
                              **c.attrs())  # fmt: skip
    torch.testing.assert_close(out.output, want.output)
    grads = torch.autograd.grad(out.output.sum(), [x, h0, params])
    assert all(torch.isfinite(g).all() for g in grads)
    assert not grads[0].any()  # x reaches the top layer only through the dropped inputs
    dW1 = grads[2][upper.w: upper.w + c.G * c.H * upper.in_size]
    assert not dW1.any()  # layer 1's input matrices saw zeros


@pytest.mark.parametrize("case", ["one_layer", "inference"])
def test_dropout_not_applied(case):
    c = Cfg("gru", L=1 if case == "one_layer" else 2, D=2, T=4, B=3)
    inputs = _fwd_inputs(c)
    training = case == "one_layer"
    plain = _dropout_run(c, inputs, 0.0, 0, 0, is_training=training)
    for seeds in ((0, 0), (5, 6)):
        torch.manual_seed(3)
        drop = _dropout_run(c, inputs, 0.9, *seeds, is_training=training)
        after = torch.rand(2)
        assert torch.equal(drop.output, plain.output)
        assert torch.equal(drop.output_h, plain.output_h)
        assert drop.reserve_space.shape == plain.reserve_space.shape  # no masks stored
        torch.manual_seed(3)
        assert torch.equal(torch.rand(2), after)  # no masks drawn


_MASK_CFG = Cfg("rnn_relu", L=2, D=1, I=8, H=8, T=10, B=25)


def _visible_mask(p, seed, seed2, op="CudnnRNNV3", requires_grad=False):
    """The dropout mask made visible: two rnn_relu layers with identity input matrices and no
    recurrence or bias, x > 0, so output = mask * x. Returns (mask [T, B, H], output_h, x).
    requires_grad: x records a gradient (the forward then runs through CudnnRNNFunction)."""
    c = _MASK_CFG
    eye, zero = torch.eye(c.H, dtype=F64), torch.zeros(c.H, c.H, dtype=F64)
    params = to_params(c, [eye, zero, eye, zero], [torch.zeros(c.H, dtype=F64)] * 4)
    x = u(c.T, c.B, c.I, lo=0.5, hi=1.5).requires_grad_(requires_grad)
    h0 = torch.zeros(2, c.B, c.H, dtype=F64)
    lengths = (None,) if op == "CudnnRNNV3" else ()
    res = getattr(raw_ops, op)(x, h0, 0, params, *lengths, rnn_mode="rnn_relu", dropout=p,
                               seed=seed, seed2=seed2)  # fmt: skip
    return (res.output / x).detach(), res.output_h.detach(), x.detach()


@pytest.mark.parametrize("p", [0.3, 0.75])
def test_dropout_mask_is_inverted_bernoulli(p):
    """Every element is dropped with probability p and kept ones are scaled by 1 / (1 - p)
    (cuDNN's inverted dropout)."""
    mask, output_h, x = _visible_mask(p, 41, int(100 * p))
    kept = mask != 0
    torch.testing.assert_close(mask[kept], torch.full_like(mask[kept], 1 / (1 - p)))
    frac = 1 - kept.double().mean().item()
    assert abs(frac - p) < 0.05, frac  # 2000 Bernoulli draws: std ~ 0.01
    assert torch.equal(output_h[0], x[-1])  # layer 0 is not dropped


def _cpu_dropout_seed(seed: int, seed2: int) -> int:
    """docs/differences.md's rule for the CPU generator of a seed pair: TF's 64-bit seed
    (seed << 32) | seed2 (seed2 sign-extended), splitmix64's finalizer, the halves xor-ed into
    the 32 bits torch's Mersenne Twister keeps."""
    m64 = (1 << 64) - 1
    key = ((seed << 32) | (seed2 & m64)) & m64
    key = ((key ^ (key >> 30)) * 0xBF58476D1CE4E5B9) & m64
    key = ((key ^ (key >> 27)) * 0x94D049BB133111EB) & m64
    key ^= key >> 31
    return (key ^ (key >> 32)) & 0xFFFFFFFF


@pytest.mark.parametrize(
    "op, seed, seed2, requires_grad",
    [("CudnnRNN", 20261, 126, False), ("CudnnRNNV2", 126, 20261, False),
     ("CudnnRNNV3", 7, -3, False), ("CudnnRNNV3", 8, 5, True)],
)  # fmt: skip
def test_seed_pair_draws_the_documented_masks(op, seed, seed2, requires_grad):
    """A pair's first masks are those of a torch generator seeded by docs/differences.md's rule,
    through every forward op, with a negative seed2 and through the autograd Function (pairs no
    other test uses: a pair's generator advances from call to call)."""
    p = 0.4
    mask, _, _ = _visible_mask(p, seed, seed2, op, requires_grad)
    c = _MASK_CFG
    g = torch.Generator().manual_seed(_cpu_dropout_seed(seed, seed2))
    want = torch.empty(c.T, c.B, c.H, dtype=F64).bernoulli_(1 - p, generator=g).div_(1 - p)
    torch.testing.assert_close(mask, want, rtol=1e-12, atol=0)


def test_the_last_16_seed_pairs_are_kept():
    """A pair used again draws its next masks while it is among the last 16 pairs used; beyond,
    it is forgotten and starts again from its first masks (as on the GPU), so a caller passing a
    new pair per call holds 16 generators, not one per call."""
    first = _visible_mask(0.5, 9001, 1)[0]
    for k in range(15):
        _visible_mask(0.5, 9002 + k, 1)
    second = _visible_mask(0.5, 9001, 1)[0]  # kept: its next masks
    assert not torch.equal(second, first)
    for k in range(16):
        _visible_mask(0.5, 9002 + k, 1)
    assert torch.equal(_visible_mask(0.5, 9001, 1)[0], first)


def test_seed_pairs_differing_in_one_seed_draw_other_masks():
    """(seed, seed2) is TF's 64-bit seed: pairs that share seed2 (Keras' op seed under another
    graph-level seed) or swap the two draw different masks. torch's Mersenne Twister keeps 32
    bits of its seed, so seeding it with the 64 bits as they are kept seed2 alone."""
    masks = [_visible_mask(0.5, seed, seed2)[0] for seed, seed2 in ((1, 99), (2, 99), (99, 1))]
    for k in range(3):
        assert not torch.equal(masks[k], masks[(k + 1) % 3])


def test_seeded_dropout_advances_per_call():
    """A seed pair's generator advances from call to call, as TF's per-kernel cuDNN state: two
    calls with the same seeds draw different masks."""
    c = Cfg("lstm", L=2, D=1, I=3, H=4, T=4, B=3)
    inputs = _fwd_inputs(c)
    a = _dropout_run(c, inputs, 0.5, 101, 202)
    b = _dropout_run(c, inputs, 0.5, 101, 202)
    assert (a.output - b.output).abs().max() > 1e-3


def test_seeded_dropout_does_not_touch_the_global_rng():
    c = Cfg("lstm", L=2, D=1, I=3, H=4, T=4, B=3)
    inputs = _fwd_inputs(c)
    torch.manual_seed(5)
    _dropout_run(c, inputs, 0.5, 3, 4)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(torch.rand(3), after)


def test_unseeded_dropout_follows_torch_manual_seed():
    """seed = seed2 = 0: masks from torch's default generator (reproducible with manual_seed)."""
    c = Cfg("lstm", L=2, D=2, I=3, H=4, T=4, B=3)
    inputs = _fwd_inputs(c)
    torch.manual_seed(7)
    a = _dropout_run(c, inputs, 0.5, 0, 0)
    b = _dropout_run(c, inputs, 0.5, 0, 0)
    torch.manual_seed(7)
    a2 = _dropout_run(c, inputs, 0.5, 0, 0)
    assert torch.equal(a.output, a2.output) and torch.equal(a.reserve_space, a2.reserve_space)
    assert (a.output - b.output).abs().max() > 1e-3


REPO = pathlib.Path(torch_lstm_grad.__file__).resolve().parents[1]
_FIRST_CALL_SCRIPT = textwrap.dedent("""
    import sys, torch
    from torch_lstm_grad import raw_ops
    x, h, c, p = torch.load(sys.argv[1])
    torch.manual_seed(int(sys.argv[2]))  # must not matter for a nonzero seed pair
    out = raw_ops.CudnnRNNV3(x, h, c, p, None, dropout=0.5, seed=987, seed2=654)
    torch.save(out.output, sys.argv[3])
""")


def test_fresh_seed_pair_is_reproducible_across_processes(tmp_path):
    """The first call of a fresh nonzero seed pair draws the same masks in any process, whatever
    torch's global seed."""
    c = Cfg("lstm", L=2, D=1, I=3, H=4, T=4, B=3)
    inputs = _fwd_inputs(c)
    torch.save(inputs, tmp_path / "in.pt")
    outs = []
    for k, global_seed in enumerate((1, 2)):
        path = tmp_path / f"out{k}.pt"
        subprocess.run([sys.executable, "-c", _FIRST_CALL_SCRIPT, str(tmp_path / "in.pt"),
                        str(global_seed), str(path)], check=True, cwd=REPO)  # fmt: skip
        outs.append(torch.load(path))
    assert torch.equal(outs[0], outs[1])
    plain = _dropout_run(c, inputs, 0.0, 0, 0)
    assert (outs[0] - plain.output).abs().max() > 1e-3


def test_dropout_backward_uses_its_own_forward_masks():
    c = Cfg("lstm", L=2, D=2, I=3, H=4, T=4, B=3)
    inputs = [t.requires_grad_() for t in _fwd_inputs(c)]
    x, h0, c0, params = inputs
    seq = torch.tensor([4, 2, 3], dtype=I32)
    attrs = c.attrs(dropout=0.5, seed=31, seed2=32)
    fwd1 = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, **attrs)
    fwd2 = raw_ops.CudnnRNNV3(x, h0, c0, params, seq, **attrs)  # other masks
    assert not torch.equal(fwd1.reserve_space, fwd2.reserve_space)
    gy = torch.randn_like(fwd1.output)
    auto = torch.autograd.grad((fwd1.output * gy).sum(), inputs)
    zeros_h, zeros_c = torch.zeros_like(fwd1.output_h), torch.zeros_like(fwd1.output_c)
    det = [t.detach() for t in inputs]

    def backprop(fwd):
        return raw_ops.CudnnRNNBackpropV3(
            *det,
            seq,
            fwd.output.detach(),
            fwd.output_h.detach(),
            fwd.output_c.detach(),
            gy,
            zeros_h,
            zeros_c,
            fwd.reserve_space,
            fwd.host_reserved,
            **attrs,
        )

    own, other = backprop(fwd1), backprop(fwd2)
    assert torch.equal(own.input_backprop, auto[0]) and torch.equal(own.params_backprop, auto[3])
    assert (other.input_backprop - auto[0]).abs().max() > 1e-6


@pytest.mark.parametrize("op", ["CudnnRNN", "CudnnRNNV2"])
def test_dropout_backprop_v1_v2_equal_autograd(op):
    """CudnnRNNBackprop / V2 given their forward's dropout and seeds (nonzero, so an attribute
    passed in another's place changes the call) give autograd's gradients."""
    c = Cfg("lstm", L=2, D=2, I=3, H=4, T=4, B=3)
    inputs = [t.requires_grad_() for t in _fwd_inputs(c)]
    attrs = dict(rnn_mode="lstm", direction=c.direction, dropout=0.5, seed=35, seed2=36)
    fwd = getattr(raw_ops, op)(*inputs, **attrs)
    gy, gh, gc = upstream(c)
    loss = (fwd.output * gy).sum() + (fwd.output_h * gh).sum() + (fwd.output_c * gc).sum()
    auto = torch.autograd.grad(loss, inputs)
    det = [t.detach() for t in inputs]
    outs = (fwd.output.detach(), fwd.output_h.detach(), fwd.output_c.detach())
    args = (*det, *outs, gy, gh, gc, fwd.reserve_space)
    if op == "CudnnRNN":
        back = raw_ops.CudnnRNNBackprop(*args, **attrs)
    else:
        back = raw_ops.CudnnRNNBackpropV2(*args, fwd.host_reserved, **attrs)
    for got, want in zip(back, auto, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("mode", ["lstm", "rnn_tanh", "lstm_proj"])
def test_dropout_gradcheck(mode):
    """gradcheck with dropout: seed = seed2 = 0 and a fixed torch.manual_seed before every
    forward give every evaluation the same masks; the backward must use them."""
    c = (Cfg("lstm", L=2, D=2, I=3, H=3, P=2, T=3, B=2) if mode == "lstm_proj"
         else Cfg(mode, L=2, D=2, I=3, H=2, T=3, B=2))  # fmt: skip
    x, h0, c0, params = (t.requires_grad_() if t.dim() else t for t in _fwd_inputs(c))

    def f(x, h0, params, *rest):
        torch.manual_seed(1234)
        res = raw_ops.CudnnRNNV3(x, h0, rest[0] if rest else c0, params,
                                 torch.tensor([3, 1], dtype=I32), dropout=0.4,
                                 **c.attrs())  # fmt: skip
        return (res.output, res.output_h) + ((res.output_c,) if c.lstm else ())

    args = (x, h0, params) + ((c0,) if c.lstm else ())
    assert gradcheck(f, args)


# ---------------------------------------------------------------------------------------------
# gradcheck, float64


GRADCHECK = {
    "lstm": (Cfg("lstm", 1, 1, I=3, H=3, T=3, B=2), None, True, "linear_input"),
    "gru": (Cfg("gru", 1, 1, I=3, H=3, T=3, B=3), None, True, "linear_input"),
    "rnn_tanh": (Cfg("rnn_tanh", 1, 1, I=3, H=3, T=3, B=2), None, True, "linear_input"),
    "rnn_relu": (Cfg("rnn_relu", 2, 1, I=3, H=3, T=3, B=2), None, True, "linear_input"),
    "lstm_bi_2layer": (Cfg("lstm", 2, 2, I=3, H=2, T=3, B=2), None, True, "linear_input"),
    "gru_bi_2layer_lengths": (
        Cfg("gru", 2, 2, I=3, H=2, T=3, B=3),
        [3, 0, 2],
        True,
        "linear_input",
    ),  # fmt: skip
    "lstm_proj_bi": (Cfg("lstm", 2, 2, I=3, H=3, P=2, T=3, B=2), [3, 1], True, "linear_input"),
    "lstm_batch_major_lengths": (
        Cfg("lstm", 2, 1, I=3, H=2, T=3, B=3),
        [2, 3, 0],
        False,
        "linear_input",
    ),  # fmt: skip
    "rnn_relu_bi_batch_major": (
        Cfg("rnn_relu", 1, 2, I=3, H=3, T=3, B=2),
        [3, 2],
        False,
        "linear_input",
    ),  # fmt: skip
    "lstm_skip_input": (Cfg("lstm", 2, 2, I=2, H=2, T=3, B=2), [3, 2], True, "skip_input"),
    "gru_skip_input": (Cfg("gru", 1, 1, I=3, H=3, T=3, B=2), None, True, "skip_input"),
}


@pytest.mark.parametrize("name", list(GRADCHECK))
def test_gradcheck(name, device):
    c, lengths, time_major, input_mode = GRADCHECK[name]
    x, h0, c0, params = (t.to(device) for t in _fwd_inputs(c))
    params = rand_params(c, input_mode).to(device)
    if not time_major:
        x = x.transpose(0, 1).contiguous()
        h0 = h0.reshape(c.B, c.L * c.D, c.n)
        c0 = c0.reshape(c.B, c.L * c.D, c.H) if c.lstm else c0
    if c.mode == "rnn_relu":
        x = x.sign() * (x.abs() + 0.2)  # keep pre-activations away from relu's kink
    seq = None if lengths is None else torch.tensor(lengths, dtype=I32)

    def f(x, h0, params, *rest):
        res = raw_ops.CudnnRNNV3(x, h0, rest[0] if rest else c0, params, seq,
                                 input_mode=input_mode, time_major=time_major,
                                 **c.attrs())  # fmt: skip
        return (res.output, res.output_h) + ((res.output_c,) if c.lstm else ())

    args = tuple(t.requires_grad_() for t in (x, h0, params, *((c0,) if c.lstm else ())))
    assert gradcheck(f, args)


def test_gradcheck_function_apply_subset():
    """CudnnRNNFunction.apply with only params requiring grad (the others get None)."""
    c = Cfg("gru", 1, 2, I=3, H=2, T=3, B=2)
    x, h0, c0, params = _fwd_inputs(c)
    fn = torch_lstm_grad.CudnnRNNFunction

    def f(p):
        out = fn.apply(x, h0, c0, p, None, "gru", "linear_input", "bidirectional", 0.0, 0, 0, 0,
                       True, True)  # fmt: skip
        return out[0], out[1]

    assert gradcheck(f, (params.requires_grad_(),))


def test_double_backward_raises():
    c = Cfg("lstm", 1, 1, I=3, H=2, T=2, B=2)
    x, h0, c0, params = (t.requires_grad_() for t in _fwd_inputs(c))
    res = raw_ops.CudnnRNNV3(x, h0, c0, params, None)
    (g,) = torch.autograd.grad(res.output.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# ---------------------------------------------------------------------------------------------
# Low precision vs float64


@pytest.mark.parametrize("dtype", [F32, torch.float16, torch.bfloat16],
                         ids=["f32", "f16", "bf16"])  # fmt: skip
@pytest.mark.parametrize("c", [Cfg("lstm", 2, 2, I=4, H=3, T=5, B=3), Cfg("gru", 2, 1),
                               Cfg("rnn_tanh", 1, 2), Cfg("lstm", 2, 1, I=3, H=4, P=2)],
                         ids=_cfg_id)  # fmt: skip
def test_low_precision_vs_float64(c, dtype):
    """Ours in dtype vs ours in float64 on the same (rounded) inputs: forward and backward."""
    x, h0, c0, params = (t.to(dtype) for t in _fwd_inputs(c))
    ups = [None if t is None else t.to(dtype) for t in upstream(c)]
    lengths = [5, 2, 4][: c.B] if c.T == 5 else [4, 2, 3][: c.B]
    got = ours_run(c, x, h0, c0, params, lengths, ups)
    want = ours_run(c, x.double(), h0.double(), c0.double(), params.double(), lengths,
                    [None if t is None else t.double() for t in ups])  # fmt: skip
    names = ["output", "output_h", "output_c", "input_backprop", "input_h_backprop",
             "input_c_backprop", "params_backprop"]  # fmt: skip
    for name, g, w in zip(names, got[1:], want[1:], strict=True):
        if w is None:
            continue
        assert g.dtype == dtype, name
        _close(g, w, dtype, name)
    assert got[0].reserve_space.dtype == dtype


def test_float32_lstm_steps_split_over_threads_vs_float64():
    """float32 LSTM large enough (B·H·4H >= 2^18) that each step's recurrent product is split
    by columns over the threads, both directions, varied lengths with a zero-length row; vs ours
    in float64."""
    c = Cfg("lstm", 1, 2, I=5, H=96, T=6, B=16)
    x, h0, c0, params = (t.float() for t in _fwd_inputs(c))
    ups = [t.float() for t in upstream(c)]
    lengths = [6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 6, 0, 3, 5]
    got = ours_run(c, x, h0, c0, params, lengths, ups)
    want = ours_run(c, x.double(), h0.double(), c0.double(), params.double(), lengths,
                    [t.double() for t in ups])  # fmt: skip
    names = ["output", "output_h", "output_c", "input_backprop", "input_h_backprop",
             "input_c_backprop", "params_backprop"]  # fmt: skip
    for name, g, w in zip(names, got[1:], want[1:], strict=True):
        _close(g, w, F32, name)


@pytest.mark.parametrize("B", [60, 72], ids=["panels", "blocks"])
@pytest.mark.parametrize("varied", [False, True], ids=["equal", "varied"])
def test_float32_lstm_backward_loop_on_one_thread_and_two(B, varied):
    """float32 LSTM whose steps' dh = dpre·R take one product each (B·4H·H over 2^21, not the
    pairwise sums): the backward runs its steps in one parallel region, on R's panels (60 rows:
    by rows on two threads where every row runs every step) or brgemm's blocks (72 rows: by
    units), H = 104 ending in a partial panel. The same bits on one thread and two; vs ours in
    float64 (the step-by-step loop), varied lengths with a zero-length row."""
    torch.manual_seed(0)
    c = Cfg("lstm", 1, 2, I=5, H=104, T=5, B=B)
    assert c.B * 4 * c.H * c.H > 2**21
    x, h0, c0, params = (t.float() for t in _fwd_inputs(c))
    ups = [t.float() for t in upstream(c)]
    lengths = [c.T] * c.B
    if varied:
        lengths[1::4] = [3] * len(lengths[1::4])
        lengths[2::7] = [1] * len(lengths[2::7])
        lengths[5] = 0

    def run(threads):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return ours_run(c, x, h0, c0, params, lengths, ups)
        finally:
            torch.set_num_threads(before)

    one, two = run(1), run(2)
    want = ours_run(c, x.double(), h0.double(), c0.double(), params.double(), lengths,
                    [t.double() for t in ups])  # fmt: skip
    names = ["output", "output_h", "output_c", "input_backprop", "input_h_backprop",
             "input_c_backprop", "params_backprop"]  # fmt: skip
    for name, a, b, w in zip(names, one[1:], two[1:], want[1:], strict=True):
        assert torch.equal(a, b), name
        _close(b, w, F32, name)


def test_params_layout_op():
    """_cudnn_rnn_params_layout: [total, per pseudo-layer (w, r, proj, bw, br, in_l)]; offsets
    -1 when absent."""
    flat = ops._cudnn_rnn_params_layout("lstm", "linear_input", "bidirectional", 2, 4, 3, 2)
    c = Cfg("lstm", 2, 2, I=3, H=4, P=2)
    assert flat[0] == params_size(c) and len(flat) == 1 + 6 * 4
    # cuDNN's order (cudnnGetRNNWeightParams on an H200, cuDNN 9.19; docs/cudnn.md §4): every
    # pseudo-layer's W [16, in], R [16, 2], proj [2, 4] first, then
    # every pseudo-layer's bW [16], bR [16].
    assert flat[1:] == [0, 48, 80, 384, 400, 3,
                        88, 136, 168, 416, 432, 3,
                        176, 240, 272, 448, 464, 4,
                        280, 344, 376, 480, 496, 4]  # fmt: skip
    assert flat[0] == 512
    skip = ops._cudnn_rnn_params_layout("gru", "skip_input", "unidirectional", 1, 3, 3, 0)
    # skip_input: no layer-0 input matrices (w = -1): R [9, 3] at 0, bW at 27, bR at 36.
    assert skip == [45, -1, 0, -1, 27, 36, 3]
    assert skip[0] == params_size(Cfg("gru", 1, 1, I=3, H=3), "skip_input")
    with pytest.raises(ValueError, match="^rnn_mode: "):
        ops._cudnn_rnn_params_layout("lstmx", "linear_input", "unidirectional", 1, 3, 3, 0)


def test_params_layout_is_the_weight_space_cudnn_gave_on_a_gpu():
    """Every region's offset in our layout against cuDNN's own weight space, as recorded on an
    H200 (cuDNN 9.19, torch 2.11.0+cu130, 2026-11-26: nn.LSTM/GRU/RNN(5, 6) after
    flatten_parameters(), each parameter's offset in the flat buffer; tests/data/
    cudnn_weight_order_h200.txt, written by release/cudnn_weight_order.py): every
    mode, 1-3 layers, both directions, with and without projection."""
    path = pathlib.Path(DATA) / "cudnn_weight_order_h200.txt"
    lines = path.read_text().splitlines()
    assert len(lines) == 24
    for line in lines:
        mode, layers, direction, _, proj, *params = line.split()
        seen = {}
        for item in params:
            name, at = item.split("@")
            seen[name] = int(at.split("+")[0])
        layout = params_layout(mode, "linear_input",
                               "bidirectional" if direction == "bi" else "unidirectional",
                               int(layers), 6, 5, int(proj))  # fmt: skip
        ours = {}
        D = 2 if direction == "bi" else 1
        for k, p in enumerate(layout.layers):
            sfx = f"_l{k // D}" + ("_reverse" if k % D else "")
            ours.update({"weight_ih" + sfx: p.w, "weight_hh" + sfx: p.r, "bias_ih" + sfx: p.bw,
                         "bias_hh" + sfx: p.br})  # fmt: skip
            if p.proj is not None:
                ours["weight_hr" + sfx] = p.proj
        assert ours == seen, line


def test_built_with_cuda_op():
    flag = ops._built_with_cuda()
    assert isinstance(flag, bool) and flag == torch_lstm_grad.built_with_cuda()


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError (shapes, values) / TypeError (dtypes); the message starts with the
# argument's name and gives the expected and the actual. Value-independent cases must raise the
# same on the fake path (FakeTensorMode with a ShapeEnv: the training reserve has a dynamic size).

BT, BB, BI, BH = 3, 2, 3, 4  # T, B, I, H of the bad-input cases (L = 1, bidirectional: D = 2)


def valid_args(op: str, mode="lstm", dropout=0.0, L=1) -> dict:
    c = Cfg(mode, L, 2, I=BI, H=BH, T=BT, B=BB)
    x, h0, c0, params = _fwd_inputs(c, F32)
    a = dict(input=x, input_h=h0, input_c=c0, params=params,
             sequence_lengths=torch.tensor([3, 1], dtype=I32), rnn_mode=mode,
             direction="bidirectional", dropout=dropout)  # fmt: skip
    if op == "CudnnRNNBackpropV3":
        fwd = raw_ops.CudnnRNNV3(**a)
        a.update(output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                 output_backprop=torch.randn_like(fwd.output),
                 output_h_backprop=torch.randn_like(fwd.output_h),
                 output_c_backprop=torch.randn_like(fwd.output_c) if c.lstm else torch.zeros(()),
                 reserve_space=fwd.reserve_space, host_reserved=fwd.host_reserved)  # fmt: skip
    return a


@dataclass
class Case:
    id: str
    op: str
    mutate: Callable[[dict], None]
    exc: type
    name: str
    contains: tuple[str, ...]
    value_dependent: bool = False
    mode: str = "lstm"
    args: dict | None = None  # valid_args overrides (dropout, L)


NP = params_size(Cfg("lstm", 1, 2, I=BI, H=BH))  # 2 * 4*4*(3 + 4 + 2) = 288


def _cases(op: str) -> list[Case]:
    out = []

    def add(id_, mutate, exc, name, *contains, vd=False, mode="lstm", args=None):
        out.append(Case(f"{op}-{id_}", op, mutate, exc, name, contains, vd, mode, args))

    size = f"CudnnRNNParamsSize = {NP} elements"
    add("params_short", _set(params=lambda: r(NP - 1)), ValueError, "params", size,
        f"got shape [{NP - 1}]")  # fmt: skip
    add("params_long", _set(params=lambda: r(NP + 4)), ValueError, "params", size,
        f"got shape [{NP + 4}]")  # fmt: skip
    add("params_2d", _set(params=lambda: r(1, NP)), ValueError, "params", size,
        f"got shape [1, {NP}]")  # fmt: skip
    add("params_float64", _set(params=lambda: r(NP, dtype=F64)), TypeError, "params",
        "expected dtype Float", "got Double")  # fmt: skip
    add("seq_lengths_short", _set(sequence_lengths=lambda: torch.tensor([3], dtype=I32)),
        ValueError, "sequence_lengths", "[B] = [2]", "got [1]")  # fmt: skip
    add("seq_lengths_long", _set(sequence_lengths=lambda: torch.tensor([3, 1, 2], dtype=I32)),
        ValueError, "sequence_lengths", "[B] = [2]", "got [3]")  # fmt: skip
    add("seq_lengths_2d", _set(sequence_lengths=lambda: torch.tensor([[3, 1]], dtype=I32)),
        ValueError, "sequence_lengths", "[B] = [2]", "got [1, 2]")  # fmt: skip
    add(
        "seq_lengths_T_plus_1",
        _set(sequence_lengths=lambda: torch.tensor([3, 4], dtype=I32)),
        ValueError,
        "sequence_lengths",
        "[0, T] = [0, 3]",
        "got 4 at index 1",
        vd=True,
    )
    add(
        "seq_lengths_negative",
        _set(sequence_lengths=lambda: torch.tensor([-1, 2], dtype=I32)),
        ValueError,
        "sequence_lengths",
        "[0, T] = [0, 3]",
        "got -1 at index 0",
        vd=True,
    )
    add("seq_lengths_float", _set(sequence_lengths=lambda: torch.tensor([3.0, 1.0])), TypeError,
        "sequence_lengths", "expected an integer dtype", "got Float")  # fmt: skip
    add("seq_lengths_python_floats", _set(sequence_lengths=[3.0, 1.0]), TypeError,
        "sequence_lengths", "expected an integer dtype", "got Double")  # fmt: skip
    add("seq_lengths_bool", _set(sequence_lengths=lambda: torch.tensor([True, True])), TypeError,
        "sequence_lengths", "expected an integer dtype", "got Bool")  # fmt: skip
    add("rnn_mode", _set(rnn_mode="LSTM"), ValueError, "rnn_mode",
        "'lstm', 'gru', 'rnn_tanh', 'rnn_relu'", "got 'LSTM'")  # fmt: skip
    add("input_mode", _set(input_mode="linear"), ValueError, "input_mode",
        "'linear_input', 'skip_input' or 'auto_select'", "got 'linear'")  # fmt: skip
    add("direction", _set(direction="bidi"), ValueError, "direction",
        "'unidirectional' or 'bidirectional'", "got 'bidi'")  # fmt: skip
    add("skip_input_I_ne_H", _set(input_mode="skip_input"), ValueError, "input_mode",
        "input_size == num_units = 4", "got input_size = 3")  # fmt: skip
    add("num_proj_gru", _set(num_proj=2), ValueError, "num_proj", "only defined for",
        "num_proj = 2 with rnn_mode='gru'", mode="gru")  # fmt: skip
    add("num_proj_negative", _set(num_proj=-1), ValueError, "num_proj", ">= 0", "got -1")
    add("input_h_wrong_B", _set(input_h=lambda: r(2, BB + 1, BH)), ValueError, "input_h",
        "[num_layers * D, B, num_units] = [2, 2, 4]", "got [2, 3, 4]")  # fmt: skip
    add("input_h_odd_slots", _set(input_h=lambda: r(3, BB, BH)), ValueError, "input_h",
        "= [2, 2, 4]", "got [3, 2, 4]")  # fmt: skip
    add("input_h_one_slot_bidirectional", _set(input_h=lambda: r(1, BB, BH)), ValueError,
        "input_h", "at least 2 state slots", "got shape [1, 2, 4]")  # fmt: skip
    add("input_h_rank2", _set(input_h=lambda: r(BB, BH)), ValueError, "input_h", "3-D tensor",
        "got shape [2, 4]")  # fmt: skip
    add("input_h_float64", _set(input_h=lambda: r(2, BB, BH, dtype=F64)), TypeError, "input_h",
        "expected dtype Float", "got Double")  # fmt: skip
    add("input_c_wrong_H", _set(input_c=lambda: r(2, BB, BH + 1)), ValueError, "input_c",
        "= [2, 2, 4]", "got [2, 2, 5]")  # fmt: skip
    add("input_c_wrong_B", _set(input_c=lambda: r(2, BB + 1, BH)), ValueError, "input_c",
        "= [2, 2, 4]", "got [2, 3, 4]")  # fmt: skip
    add("input_c_rank0", _set(input_c=lambda: r()), ValueError, "input_c", "3-D tensor",
        "got shape []")  # fmt: skip
    add("input_rank2", _set(input=lambda: r(BT, BI)), ValueError, "input",
        "3-D tensor [T, B, input_size]", "got shape [3, 3]")  # fmt: skip
    add("input_int", _set(input=lambda: r(BT, BB, BI).int()), TypeError, "input",
        "float16, bfloat16, float32 or float64", "got Int")  # fmt: skip
    add("dropout_above_one", _set(dropout=1.5), ValueError, "dropout", "[0, 1]", "got 1.5")
    add("dropout_negative", _set(dropout=-0.1), ValueError, "dropout", "[0, 1]", "got -0.1")
    add("dropout_nan", _set(dropout=float("nan")), ValueError, "dropout", "[0, 1]", "got nan")
    add("seq_lengths_uint64_above_int64",
        _set(sequence_lengths=lambda: torch.tensor([3, 2**64 - 1], dtype=torch.uint64)),
        ValueError, "sequence_lengths", "[0, T] = [0, 3]", f"got {2**64 - 1} at index 1",
        vd=True)  # fmt: skip
    # Absurd sizes (zero-size tensors: B = 0 holds nothing): shape arithmetic in checked int64.
    # H = 2^31: G * H * input_size = 2^33 * 2^31 wrapped to 0 and a wrong params size passed.
    H31 = 2**31
    add("params_size_overflow",
        _set(input=lambda: torch.empty(BT, 0, H31), input_h=lambda: torch.empty(2, 0, H31),
             input_c=lambda: torch.empty(2, 0, H31), params=lambda: torch.empty(0),
             sequence_lengths=lambda: torch.empty(0, dtype=I32)),
        ValueError, "params",
        f"G * H * input_size = {4 * H31} * {H31} overflows int64")  # fmt: skip
    add("output_width_overflow",
        _set(input=lambda: torch.empty(BT, 0, 1), input_h=lambda: torch.empty(2, 0, 2**62),
             input_c=lambda: torch.empty(2, 0, 2**62), params=lambda: torch.empty(0),
             sequence_lengths=lambda: torch.empty(0, dtype=I32)),
        ValueError, "input_h", f"D * num_units = 2 * {2**62} overflows int64")  # fmt: skip
    if op == "CudnnRNNBackpropV3":
        out_shape = "[T, B, D * num_units] = [3, 2, 8]"
        for n in ("output", "output_backprop"):
            add(f"{n}_wrong_T", _set(**{n: lambda: r(BT + 1, BB, 2 * BH)}), ValueError, n,
                out_shape, "got [4, 2, 8]")  # fmt: skip
            add(f"{n}_one_direction", _set(**{n: lambda: r(BT, BB, BH)}), ValueError, n,
                out_shape, "got [3, 2, 4]")  # fmt: skip
        for n in ("output_h", "output_h_backprop", "output_c", "output_c_backprop"):
            add(f"{n}_wrong_B", _set(**{n: lambda: r(2, BB + 1, BH)}), ValueError, n,
                "shape = [2, 2, 4]", "got [2, 3, 4]")  # fmt: skip
            add(f"{n}_float64", _set(**{n: lambda: r(2, BB, BH, dtype=F64)}), TypeError, n,
                "expected dtype Float", "got Double")  # fmt: skip
        add(
            "reserve_space_short",
            lambda a: a.update(reserve_space=a["reserve_space"][:-2]),
            ValueError,
            "reserve_space",
            "expected the reserve_space",
            "got",
            vd=True,
        )
        add("reserve_space_inference", _set(reserve_space=lambda: torch.zeros(())), ValueError,
            "reserve_space", "is_training=True", "got shape []", vd=True)  # fmt: skip
        # The reserve carries its forward's configuration and lengths (docs/differences.md): a
        # Backprop with other ones raises (TF computes with the reserve it is given).
        add("reserve_space_without_masks", _set(dropout=0.5), ValueError, "reserve_space",
            "made by a forward with dropout = 0", "this call has dropout = 0.5", vd=True,
            args=dict(L=2))  # fmt: skip
        add("reserve_space_other_lengths",
            _set(sequence_lengths=lambda: torch.tensor([3, 2], dtype=I32)), ValueError,
            "sequence_lengths", "the forward that made reserve_space ran sequence_lengths [3, 1]",
            "this call has [3, 2] (they differ at index 1)", vd=True)  # fmt: skip
        # rnn_tanh and rnn_relu have the same params size: only the reserve tells.
        add("reserve_space_other_mode", _set(rnn_mode="rnn_relu"), ValueError, "reserve_space",
            "made by a forward with another rnn_mode", vd=True, mode="rnn_tanh")  # fmt: skip
        add("reserve_space_other_input_mode",
            _set(input_mode="skip_input", input=lambda: r(BT, BB, BH),
                 params=lambda: r(params_size(Cfg("lstm", 1, 2, I=BH, H=BH), "skip_input"))),
            ValueError, "reserve_space", "another input_mode (skip_input) (0), this call has 1",
            vd=True)  # fmt: skip
        add("reserve_space_not_a_reserve", _set(reserve_space=lambda: torch.zeros(1000)),
            ValueError, "reserve_space", "not made by one", vd=True)  # fmt: skip
        # Word 11 names the kernels that made the reserve: the CPU's and cuDNN's layouts differ,
        # so a reserve carried to the other device raises (here: a CPU reserve marked cuDNN's).
        add("reserve_space_made_by_cudnn", lambda a: a.update(reserve_space=_maker(a, 2)),
            ValueError, "reserve_space", "made by cuDNN (CUDA), this call runs on the CPU kernels",
            vd=True)  # fmt: skip
        add("reserve_space_made_by_cudnn_small_h", lambda a: a.update(reserve_space=_maker(a, 3)),
            ValueError, "reserve_space", "made by cuDNN (CUDA), its persistent small-H algorithm, "
            "this call runs on the CPU kernels", vd=True)  # fmt: skip
        add("reserve_space_unknown_maker", lambda a: a.update(reserve_space=_maker(a, 7)),
            ValueError, "reserve_space", "made by unknown kernels (maker word 7)", vd=True)
    return out


def _maker(args: dict, maker: int) -> torch.Tensor:
    """A copy of args' reserve_space whose maker word (int64 word 11 of its header) is `maker`."""
    reserve = args["reserve_space"].clone()
    reserve.view(torch.uint8)[88:96] = torch.tensor([maker], dtype=torch.int64).view(torch.uint8)
    return reserve


CASES = _cases("CudnnRNNV3") + _cases("CudnnRNNBackpropV3")
SHAPE_CASES = [c for c in CASES if not c.value_dependent]
assert len({c.id for c in CASES}) == len(CASES)


def bad_args(case: Case) -> dict:
    kw = dict(case.args or {})
    a = valid_args(case.op, case.mode, **kw)
    case.mutate(a)
    return a


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_raises(case):
    args = bad_args(case)
    with pytest.raises(case.exc) as info:
        getattr(raw_ops, case.op)(**args)
    assert type(info.value) is case.exc
    assert_bad_input_message(info.value, case)


@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: c.id)
def test_bad_input_fake_path_raises_same(case):
    args = bad_args(case)
    with pytest.raises(case.exc) as info:
        getattr(raw_ops, case.op)(**args)
    eager = info.value
    mode = FakeTensorMode(shape_env=ShapeEnv())
    fake = {
        k: mode.from_tensor(v, static_shapes=True) if isinstance(v, torch.Tensor) else v
        for k, v in args.items()
    }
    with mode, pytest.raises(Exception) as info:
        getattr(raw_ops, case.op)(**fake)
    assert type(info.value) is type(eager)
    assert str(info.value) == str(eager)


@pytest.mark.parametrize("op", ["CudnnRNNV3", "CudnnRNNBackpropV3"])
def test_fake_path_accepts_valid_and_value_dependent_input(op):
    """The fake path gives the real output metadata, and does not judge values it cannot see."""
    args = valid_args(op)
    real = getattr(raw_ops, op)(**args)
    for lengths in (args["sequence_lengths"], torch.tensor([3, 4], dtype=I32)):
        mode = FakeTensorMode(shape_env=ShapeEnv())
        fake = {k: mode.from_tensor(v, static_shapes=True) if isinstance(v, torch.Tensor) else v
                for k, v in {**args, "sequence_lengths": lengths}.items()}  # fmt: skip
        with mode:
            out = getattr(raw_ops, op)(**fake)
        for name in out._fields:
            f, t = getattr(out, name), getattr(real, name)
            assert f.dtype == t.dtype, name
            if name != "reserve_space":  # its size is the device kernel's own (unbacked)
                assert tuple(f.shape) == tuple(t.shape), name
    if op == "CudnnRNNV3":  # inference on the meta device: a plain 0-d reserve
        meta = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        out = raw_ops.CudnnRNNV3(**meta, is_training=False)
        assert out.output.shape == real.output.shape and out.reserve_space.shape == ()


def test_dtype_mismatch_message_names_the_op_argument():
    """The dtype reference of the CudnnRNN ops is their argument `input` (there is no `x`)."""
    args = valid_args("CudnnRNNV3")
    args["input_h"] = args["input_h"].double()
    with pytest.raises(TypeError) as info:
        raw_ops.CudnnRNNV3(**args)
    assert "(the dtype of input)" in str(info.value), str(info.value)
