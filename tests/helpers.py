"""Helpers the test files share: TensorFlow and Keras as the oracle, tolerances and error
measures, random inputs, cuDNN model configurations, the TF composites of cuDNN's RNNs, ports of
Keras and TF1 files and their comparison with TF, hand-made protobuf and table bytes, and edits
of saved graphs.

Not a test module. TensorFlow is optional: `tf_available()` (or `needs_tf`, or
``pytest.importorskip``) first; nothing here imports it before a test asks. TF is pinned to one
intra-op and one inter-op thread (`tf_module`) so that its GEMM summation order is
deterministic.
"""

from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import torch_lstm_grad
from torch_lstm_grad import keras_layers, modules, porting, raw_ops
from torch_lstm_grad.porting.build import tf1_cells as build_tf1
from torch_lstm_grad.porting.source import layer_and_rest
from torch_lstm_grad.tools import cli

# --- paths ----------------------------------------------------------------------------------------


TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
DATA = os.path.join(TESTS_DIR, "data")
# tf_keras 2.21's files and the numbers tf_keras computed from them (make_fixtures.py there)
KERAS2 = os.path.join(DATA, "keras2")
# cutkum's published frozen graph (tests/data/cutkum/README.md)
CUTKUM = os.path.join(DATA, "cutkum", "frozen_model.pb")


# --- TensorFlow and Keras, the oracle -------------------------------------------------------------


_tf = None


def tf_available():
    """Whether TensorFlow can be imported."""
    try:
        importlib.import_module("tensorflow")
    except ImportError:
        return False
    return True


needs_tf = pytest.mark.skipif(not tf_available(), reason="TensorFlow is not installed")


def tf_module():
    """Import TensorFlow once, pinned to single-threaded execution before any op runs."""
    global _tf
    if _tf is None:
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except (
            RuntimeError
        ):  # the TF runtime was already initialised by someone else; keep its settings
            pass
        _tf = tf
    return _tf


def _to_tf(tf, name, value):
    """A keyword argument of `tf_raw` as TF takes it."""
    if name == "seq_len_max":
        return tf.constant(int(value), dtype=tf.int64)
    if isinstance(value, torch.Tensor):
        return tf.constant(value.detach().cpu().numpy())  # keeps the dtype
    return value  # an attribute (float, bool, ...)


def tf_raw(op_name, **kwargs):
    """Run ``tf.raw_ops.<op_name>(**kwargs)`` on CPU.

    Keyword names are TF's. Torch tensors become TF tensors of the same dtype (``seq_len_max``
    becomes an int64 scalar); other values are passed as attributes. Returns a tuple of torch
    tensors in TF's output order.
    """
    tf = tf_module()
    with tf.device("/CPU:0"):
        args = {k: _to_tf(tf, k, v) for k, v in kwargs.items()}
        out = getattr(tf.raw_ops, op_name)(**args)
    if isinstance(out, tf.Tensor):
        out = (out,)
    return tuple(torch.from_numpy(o.numpy().copy()) for o in out)


def keras_module():
    """Keras 3 (on TensorFlow, imported single-threaded by `tf_module` first)."""
    tf_module()
    import keras

    return keras


def rnn_cell_impl():
    """TF1's Python cells (`rnn_cell_impl`: LSTMCell, GRUCell, BasicLSTMCell, ...) as TF 2.21 ships
    them, TF imported single-threaded first."""
    tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl

    return rnn_cell_impl


# --- CUDA -----------------------------------------------------------------------------------------


CUDA_OK = torch.cuda.is_available() and torch_lstm_grad.built_with_cuda()


CUDA_SKIP = (
    "no CUDA device visible" if not torch.cuda.is_available() else "extension built without CUDA"
)


# --- tolerances and error measures ----------------------------------------------------------------


PORT_TOL = 1e-5  # scaled: max |ours - TF| / max(1, max |TF|), float32


def scaled_error(ours, theirs) -> float:
    """max |ours - theirs| / max(1, max |theirs|), the shapes equal (NumPy; 0 for empty tensors)."""
    ours = ours.detach().cpu().numpy() if torch.is_tensor(ours) else np.asarray(ours)
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape, f"shape {ours.shape} vs TF's {theirs.shape}"
    if theirs.size == 0:
        return 0.0
    return float(np.abs(ours - theirs).max() / max(1.0, float(np.abs(theirs).max())))


def assert_close(named: dict, tol: float = PORT_TOL) -> None:
    """`named[name] = (ours, theirs)`: every pair within `tol` scaled; the message lists all."""
    errs = {k: scaled_error(a, b) for k, (a, b) in named.items()}
    bad = {k: f"{e:.2e}" for k, e in errs.items() if not e <= tol}
    assert not bad, (
        f"scaled errors above {tol}: {bad} (all: "
        + ", ".join(f"{k} {e:.1e}" for k, e in errs.items())
        + ")"
    )


def scaled_error_f64(got, want):
    """max |got - want| / max(1, max |want|), `got` taken to float64 (torch tensors)."""
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1.0)).item()


def assert_np_close(got, want, rtol=1e-6, atol=1e-6, msg=""):
    """np.testing.assert_allclose of `got` (a tensor or an array) with `want`, in float64,
    assertAllClose's default rtol = atol = 1e-6 (TF's tests' tolerance) unless given."""
    got = got.detach().cpu().numpy() if torch.is_tensor(got) else np.asarray(got)
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol,
                               atol=atol, err_msg=msg)  # fmt: skip


# --- random inputs --------------------------------------------------------------------------------


def rng(seed: int) -> np.random.Generator:
    """NumPy's default generator seeded with `seed`."""
    return np.random.default_rng(seed)


def randomize(weights, seed: int) -> None:
    """Uniform [-0.6, 0.6) into every Keras / TF variable (biases included)."""
    r = rng(seed)
    for w in weights:
        w.assign(r.uniform(-0.6, 0.6, tuple(w.shape)).astype(np.float32))


def loss_weights(arrays, seed: int) -> list[np.ndarray]:
    """A standard-normal array the shape of each of `arrays`: the weights of a loss that uses
    every output."""
    r = rng(seed)
    return [r.standard_normal(np.shape(a)).astype(np.float32) for a in arrays]


def uniform(*shape, scale=1.0, dtype=torch.float32):
    """uniform(-scale, scale), drawn in float64 and rounded once to dtype."""
    return ((torch.rand(*shape, dtype=torch.float64) * 2 - 1) * scale).to(dtype)


def nan_strided(t):
    """Same values, every element followed by a NaN in memory: a non-contiguous view."""
    return torch.stack([t, torch.full_like(t, float("nan"))], dim=-1)[..., 0]


def grad_leaves(inp):
    """A copy of each input that requires grad (the leaves of autograd)."""
    return {k: v.clone().requires_grad_() for k, v in inp.items()}


def counted_rand(*shape, seed=[0]):  # noqa: B006 (a counter)
    """uniform [-0.5, 0.5) float32 of `shape`, each call with the next seed of a counter."""
    seed[0] += 1
    return np.random.default_rng(seed[0]).uniform(-0.5, 0.5, shape).astype(np.float32)


# --- bad-input cases ------------------------------------------------------------------------------


def randn(*shape, dtype=torch.float32):
    """torch.randn(shape) in `dtype` (float32 by default)."""
    return torch.randn(shape, dtype=dtype)


def set_args(**new):
    """An edit of a bad-input case's arguments: each `new` value set (called first if callable)."""
    def mutate(a):
        for k, v in new.items():
            a[k] = v() if callable(v) else v

    return mutate


def assert_bad_input_message(err: BaseException, case) -> None:
    """`err` is `case`'s refusal: it starts with the argument's name, holds each of
    `case.contains`."""
    msg = str(err)
    assert msg.startswith(case.name + ": "), msg
    for part in case.contains:
        assert part in msg, f"{part!r} not in {msg!r}"


# --- cuDNN RNN models: configurations, params, inputs ---------------------------------------------


CUDNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def cudnn_uniform(*shape, lo=-1.0, hi=1.0, dtype=torch.float64):
    """uniform [lo, hi) of `shape` in `dtype` (float64 by default)."""
    return torch.empty(shape, dtype=dtype).uniform_(lo, hi)


@dataclass(frozen=True)
class CudnnCfg:
    """One CudnnRNN model: mode, L layers, D directions, input size I, H units, projection P (0:
    none), T steps, batch B."""
    mode: str = "lstm"
    L: int = 1
    D: int = 1
    I: int = 4  # noqa: E741
    H: int = 3
    P: int = 0  # num_proj (lstm only)
    T: int = 4
    B: int = 3

    @property
    def G(self):
        return CUDNN_GATES[self.mode]

    @property
    def n(self):  # state size of input_h
        return self.P or self.H

    @property
    def direction(self):
        return "bidirectional" if self.D == 2 else "unidirectional"

    @property
    def lstm(self):
        return self.mode == "lstm"

    def attrs(self, **kw):
        return dict(rnn_mode=self.mode, direction=self.direction, num_proj=self.P, **kw)


def cudnn_params_size(c: CudnnCfg, input_mode="linear_input", S=torch.int32,
                      T=torch.float64) -> int:
    """CudnnRNNParamsSize of the model: its opaque params' element count."""
    out = raw_ops.CudnnRNNParamsSize(num_layers=c.L, num_units=c.H, input_size=c.I, T=T, S=S,
                                     rnn_mode=c.mode, input_mode=input_mode,
                                     direction=c.direction, num_proj=c.P)  # fmt: skip
    return int(out[0])


def cudnn_rand_params(c: CudnnCfg, input_mode="linear_input", dtype=torch.float64, scale=0.6):
    """Opaque params of the model, uniform [-scale, scale)."""
    return cudnn_uniform(cudnn_params_size(c, input_mode), lo=-scale, hi=scale, dtype=dtype)


def cudnn_states(c: CudnnCfg, B=None, dtype=torch.float64):
    """(input_h, input_c) of the model, time-major (input_c a 0-d zero for modes without c)."""
    B = c.B if B is None else B
    h0 = cudnn_uniform(c.L * c.D, B, c.n, dtype=dtype)
    c0 = (cudnn_uniform(c.L * c.D, B, c.H, lo=-2, hi=2, dtype=dtype) if c.lstm
          else torch.zeros((), dtype=dtype))  # fmt: skip
    return h0, c0


def cudnn_fwd_inputs(c: CudnnCfg, dtype=torch.float64, B=None):
    """(input, input_h, input_c, params) of the model, time-major, random."""
    B = c.B if B is None else B
    x = cudnn_uniform(c.T, B, c.I, dtype=dtype)
    h0, c0 = cudnn_states(c, B, dtype)
    return x, h0, c0, cudnn_rand_params(c, dtype=dtype)


# --- cuDNN's RNNs as TF composites ----------------------------------------------------------------


def _composite_cell(tf, mode, H, P, x, h, c, k):
    """One step of pseudo-layer k's cell; `k` holds the TF variables of the composite."""
    if mode == "lstm":
        z = tf.matmul(tf.concat([x, h], 1), k["kernel"]) + k["bias"]
        i, f, g, o = tf.split(z, 4, axis=1)
        c_new = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        m = tf.sigmoid(o) * tf.tanh(c_new)
        h_new = tf.matmul(m, k["proj"]) if "proj" in k else m
        return h_new, c_new
    if mode == "gru":
        rz = tf.sigmoid(tf.matmul(tf.concat([x, h], 1), k["gate_kernel"]) + k["gate_bias"])
        r, u = tf.split(rz, 2, axis=1)
        cand = tf.tanh(tf.matmul(x, k["cand_in_kernel"]) + k["cand_in_bias"]
                       + r * (tf.matmul(h, k["cand_hid_kernel"]) + k["cand_hid_bias"]))  # fmt: skip
        return (1 - u) * cand + u * h, c
    z = tf.matmul(tf.concat([x, h], 1), k["kernel"]) + k["bias"]
    return (tf.tanh(z) if mode == "rnn_tanh" else tf.nn.relu(z)), c


def _composite_variables(tf, mode, weights, biases, L, D, H, P, dtype):
    """The composite's kernels per pseudo-layer, from the canonical lists."""
    G = CUDNN_GATES[mode]
    per_w = 2 * G + (1 if P != H else 0)
    out = []
    for k in range(L * D):
        W = weights[k * per_w: k * per_w + G]
        R = weights[k * per_w + G: k * per_w + 2 * G]
        bW = biases[k * 2 * G: k * 2 * G + G]
        bR = biases[k * 2 * G + G: (k + 1) * 2 * G]
        v = {}
        if mode == "gru":
            v["gate_kernel"] = np.concatenate([np.concatenate([W[0], W[1]]).T,
                                               np.concatenate([R[0], R[1]]).T])  # fmt: skip
            v["gate_bias"] = np.concatenate([bW[0] + bR[0], bW[1] + bR[1]])
            v["cand_in_kernel"], v["cand_in_bias"] = W[2].T, bW[2]
            v["cand_hid_kernel"], v["cand_hid_bias"] = R[2].T, bR[2]
        else:
            v["kernel"] = np.concatenate([np.concatenate(W).T, np.concatenate(R).T])
            v["bias"] = np.concatenate([a + b for a, b in zip(bW, bR, strict=True)])
            if P != H:
                v["proj"] = weights[k * per_w + 2 * G].T
        out.append({n: tf.constant(np.asarray(a, dtype)) for n, a in v.items()})
    return out


def _composite_canonical_grads(mode, grads, weights, L, D, H, P, in_sizes):
    """The composite variables' gradients back in canonical order (bW and bR of a summed bias
    both get the bias' gradient)."""
    G = CUDNN_GATES[mode]
    dw, db = [], []
    for k in range(L * D):
        g = grads[k]
        n_in = in_sizes[k // D]
        if mode == "gru":
            gk, gb = g["gate_kernel"], g["gate_bias"]
            W = [gk[:n_in, :H].T, gk[:n_in, H:].T, g["cand_in_kernel"].T]
            R = [gk[n_in:, :H].T, gk[n_in:, H:].T, g["cand_hid_kernel"].T]
            bw = [gb[:H], gb[H:], g["cand_in_bias"]]
            br = [gb[:H], gb[H:], g["cand_hid_bias"]]
        else:
            kern, bias = g["kernel"], g["bias"]
            W = [kern[:n_in, j * H:(j + 1) * H].T for j in range(G)]
            R = [kern[n_in:, j * H:(j + 1) * H].T for j in range(G)]
            bw = br = [bias[j * H:(j + 1) * H] for j in range(G)]
        dw += W + R + ([g["proj"].T] if P != H else [])
        db += list(bw) + list(br)
    return dw, db


def composite_rnn(mode, x, h0, c0, weights, biases, *, L, D, H, P=None, lengths=None,
                  dy=None, dh=None, dc=None, dtype=np.float32):  # fmt: skip
    """Runs the composite. x [T, B, I]; h0 [L*D, B, P]; c0 [L*D, B, H] (lstm). Returns
    (output, output_h, output_c, grads) where grads = (d_x, d_h0, d_c0, d_weights, d_biases)
    of sum(output * dy) + sum(output_h * dh) + sum(output_c * dc) (each default ones)."""
    tf = tf_module()
    P = P or H
    x = np.asarray(x, dtype)
    T, B, n_in = x.shape
    lengths = np.full(B, T, np.int64) if lengths is None else np.asarray(lengths, np.int64)
    in_sizes = [n_in] + [D * P] * (L - 1)
    vs = _composite_variables(tf, mode, weights, biases, L, D, H, P, dtype)
    xt = tf.constant(x)
    h0t = tf.constant(np.asarray(h0, dtype))
    c0t = tf.constant(np.asarray(c0 if mode == "lstm" else np.zeros((L * D, B, H)), dtype))
    lens = tf.constant(lengths)
    with tf.device("/CPU:0"), tf.GradientTape() as tape:
        tape.watch([xt, h0t, c0t, *[t for v in vs for t in v.values()]])
        layer_in = xt
        hs, cs = [], []
        for layer in range(L):
            outs = []
            for d in range(D):
                k = layer * D + d
                seq = layer_in if d == 0 else tf.reverse_sequence(layer_in, lens, 0, 1)
                h, c = h0t[k], c0t[k]
                steps = []
                for t in range(T):
                    h_new, c_new = _composite_cell(tf, mode, H, P, seq[t], h, c, vs[k])
                    live = tf.reshape(t < lens, (B, 1))
                    h = tf.where(live, h_new, h)
                    c = tf.where(live, c_new, c)
                    steps.append(tf.where(live, h_new, tf.zeros_like(h_new)))
                out = tf.stack(steps)
                outs.append(out if d == 0 else tf.reverse_sequence(out, lens, 0, 1))
                hs.append(h)
                cs.append(c)
            layer_in = outs[0] if D == 1 else tf.concat(outs, 2)
        output, output_h, output_c = layer_in, tf.stack(hs), tf.stack(cs)
        ones = np.ones
        loss = (tf.reduce_sum(output * (ones(output.shape, dtype) if dy is None else dy))
                + tf.reduce_sum(output_h * (ones(output_h.shape, dtype) if dh is None else dh)))
        if mode == "lstm":
            loss += tf.reduce_sum(output_c * (ones(output_c.shape, dtype) if dc is None else dc))
    g_x, g_h, g_c, g_vs = tape.gradient(loss, [xt, h0t, c0t, vs])
    g_vs = [{n: t.numpy() for n, t in g.items()} for g in g_vs]
    dw, db = _composite_canonical_grads(mode, g_vs, weights, L, D, H, P, in_sizes)
    grads = (g_x.numpy(), g_h.numpy(), g_c.numpy() if mode == "lstm" else None, dw, db)
    return (output.numpy(), output_h.numpy(), output_c.numpy() if mode == "lstm" else None,
            grads)  # fmt: skip


# --- the variant ops' inputs ----------------------------------------------------------------------


EX_B, EX_I, EX_H, EX_P = 3, 4, 6, 3  # noqa: E741


EX_NAMES = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b", "w_proj")


def block_lstm_ex_inputs(T, dtype, proj, seed=0):
    """block_lstm_ex's tensors by name, [T, EX_B, EX_I] input, EX_H units and, with `proj`, an
    EX_P projection, in `dtype` from one seeded float64 draw."""
    g = torch.Generator().manual_seed(seed)
    n = EX_P if proj else EX_H

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64).mul(scale).to(dtype)

    return {
        "x": r(T, EX_B, EX_I),
        "cs_prev": r(EX_B, EX_H),
        "h_prev": r(EX_B, n),
        "w": r(EX_I + n, 4 * EX_H, scale=0.6),
        "wci": r(EX_H),
        "wcf": r(EX_H),
        "wco": r(EX_H),
        "b": r(4 * EX_H),
        "w_proj": r(EX_H, EX_P) if proj else None,
    }


GRU_B, GRU_I, GRU_H = 3, 4, 5  # noqa: E741


def keras_gru_inputs(T, dtype, reset_after, use_bias=True, seed=0):
    """keras_gru's tensors (x, h_prev, kernel, recurrent_kernel, bias or None), [T, GRU_B, GRU_I]
    input, GRU_H units, the bias [2, 3H] with reset_after, [3H] without, from one seeded draw."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64).mul(scale).to(dtype)

    bias = None
    if use_bias:
        bias = r(2, 3 * GRU_H) if reset_after else r(3 * GRU_H)
    return [r(T, GRU_B, GRU_I), r(GRU_B, GRU_H), r(GRU_I, 3 * GRU_H, scale=0.6),
            r(GRU_H, 3 * GRU_H, scale=0.6), bias]  # fmt: skip


# --- the inference ops' inputs --------------------------------------------------------------------


_OPS = torch.ops.torch_lstm_grad


def tree_leaves(tree):
    """The tensors of a (nested) op output."""
    return torch.utils._pytree.tree_leaves(tree)


def assert_same_outputs(got, want):
    """Two op outputs equal bit for bit: the same leaves, shapes and dtypes."""
    got, want = tree_leaves(got), tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def inference_fused_cell(H, I, dtype=torch.float32, **kw):  # noqa: E741
    """An LSTMBlockFusedCell with a random bias (not the zeros it starts with)."""
    m = modules.LSTMBlockFusedCell(H, I, dtype=dtype, **kw)
    with torch.no_grad():
        m.bias.normal_(0, 0.5)
    return m


def inference_block_args(dtype=torch.float32, proj=False, packed=False, lengths=False,
                         requires=False):  # fmt: skip
    """The positional arguments of ops.block_lstm_inference: with a projection, packed
    recurrent (and, from T·B >= 64, input) weights, per-row lengths, a weight requiring grad."""
    T, B, I, H, P = 5, 2, 3, 20, (6 if proj else 20)  # noqa: E741
    if packed:
        T = 40  # T·B >= 64: the input projection reads packed_x (AVX-512 CPUs)
    x = torch.randn(T, B, I, dtype=dtype)
    w = torch.randn(I + P, 4 * H, dtype=dtype) * 0.4
    args = [x, torch.randn(B, H, dtype=dtype), torch.randn(B, P, dtype=dtype), w,
            *(torch.randn(H, dtype=dtype) for _ in range(3)), torch.randn(4 * H, dtype=dtype),
            torch.randn(H, P, dtype=dtype) if proj else None,
            _OPS.pack_recurrent_weight(w[I:], 4) if packed else None,
            torch.tensor([5, 2]) if lengths else None]  # fmt: skip
    if requires:
        args[3] = args[3].clone().requires_grad_()
    return (*args, 1.0, 1.5, 0.4 if proj else 0.0, True, "icfo", "sigmoid", "tanh",
            _OPS.pack_recurrent_weight(w[:I], 4) if packed else None)  # fmt: skip


def inference_cudnn_args(mode="lstm", packed=False, lengths=False, time_major=True,
                         direction="bidirectional"):  # fmt: skip
    """The positional arguments of ops.cudnn_rnn_inference for a one-layer CudnnLSTM/GRU module's
    weights, with the packed weights the module prepares, per-row lengths, either layout."""
    m = {"lstm": modules.CudnnLSTM, "gru": modules.CudnnGRU}[mode](1, 20, 3, direction=direction)
    D = 2 if direction == "bidirectional" else 1
    x = torch.randn(4, 2, 3) if time_major else torch.randn(2, 4, 3)
    h = torch.randn(D, 2, 20) if time_major else torch.randn(2, D, 20)
    c = h.clone() if mode == "lstm" else torch.zeros(())
    with torch.no_grad():
        packed_r, packed_x = m._prepared(x, 2) if packed else ([], [])
    seq = torch.tensor([4, 1], dtype=torch.int32) if lengths else None
    return (x, h, c, m.opaque_kernel.detach(), seq, packed_r, packed_x, mode, "linear_input",
            direction, 0, time_major)  # fmt: skip


# --- ports and their comparison with TF and Keras -------------------------------------------------


_KERAS2_NUMBERS = {"savedmodel": "expected_saved_model.npz",
                   "subclassed": "expected_subclassed.npz"}  # fmt: skip


def stored_keras2(prefix: str) -> dict:
    """The arrays make_fixtures.py stored for the model `prefix` (x, mask, outK, rK, dx, d/...)."""
    data = np.load(os.path.join(KERAS2, _KERAS2_NUMBERS.get(prefix, "expected.npz")))
    return {k[len(prefix) + 1 :]: data[k] for k in data.files if k.startswith(prefix + "/")}


def _keras_param(mods, path):
    """Our parameter for tf_keras' weight path (`bi/forward_lstm/.../kernel`)."""
    parts = path.split("/")
    module = mods[parts[0]]
    if isinstance(module, keras_layers.KerasBidirectional):
        module = module.forward_layer if parts[1].startswith("forward_") else module.backward_layer
    return getattr(module, parts[-1])


def compare_with_stored_keras2(mods, prefix, names, mask: bool, last_only: bool = False,
                               device: str = "cpu", train: bool = True) -> None:  # fmt: skip
    """The ported modules `names`, chained on tf_keras' stored input, against tf_keras' stored
    outputs and the gradients of Σ out_k·r_k (input and every weight) on `device`; `last_only`:
    the model's output is the last layer's (a Sequential model). `train=False`: outputs only,
    under no_grad (the inference ops)."""
    e = stored_keras2(prefix)
    x = torch.from_numpy(e["x"]).to(device).requires_grad_(train)
    m = torch.from_numpy(e["mask"]).to(device) if mask else None
    outs, y = [], x
    with torch.set_grad_enabled(train):
        for name in names:
            out = flat(mods[name](y, mask=m))
            outs += out
            y = out[0]
    outs = outs[-1:] if last_only else outs
    assert f"out{len(outs)}" not in e
    pairs = {f"output {k}": (o, e[f"out{k}"]) for k, o in enumerate(outs)}
    if train:
        rs = [torch.from_numpy(e[f"r{k}"]).to(device) for k in range(len(outs))]
        grads_want = {k[2:]: v for k, v in e.items() if k.startswith("d/")}
        params = {p: _keras_param(mods, p) for p in grads_want}
        loss = sum((o * r).sum() for o, r in zip(outs, rs, strict=True))
        grads = torch.autograd.grad(loss, [x, *params.values()])
        pairs["d x"] = (grads[0], e["dx"])
        pairs |= {f"d {p}": (g, grads_want[p]) for p, g in zip(params, grads[1:], strict=True)}
    assert_close(pairs)


def step_cells(cells, x_t, lengths, initial=None):
    """dynamic_rnn (time-major `x_t` [T, B, I]) over a MultiRNNCell of LSTMBlockCell /
    GRUBlockCell steps, on `x_t`'s device: each step runs the cells in turn on the one below's
    output; past a row's length (`lengths`, a NumPy array, or None) every state is carried and
    the output is zero. Returns (outputs, the states flattened as tf.nest does: (c, h) per LSTM,
    h per GRU); `initial`: that flat list (default zeros)."""
    T, B = x_t.shape[:2]
    states, flat_initial = [], list(initial) if initial is not None else None
    for cell in cells:
        lstm = isinstance(cell, modules.LSTMBlockCell)
        h_width = getattr(cell, "num_proj", None) or cell.num_units
        widths = [cell.num_units, h_width] if lstm else [cell.num_units]
        if flat_initial is None:
            states.append(tuple(x_t.new_zeros(B, w) for w in widths))
        else:
            states.append(tuple(flat_initial.pop(0) for _ in widths))
    outs = []
    for t in range(T):
        keep = (
            torch.ones(B, 1, dtype=torch.bool)
            if lengths is None
            else torch.from_numpy((t < lengths)[:, None])
        ).to(x_t.device)
        y = x_t[t]
        for k, cell in enumerate(cells):
            y, new = cell(y, states[k] if len(states[k]) == 2 else states[k][0])
            new = tuple(new) if isinstance(new, (tuple, list)) else (new,)
            states[k] = tuple(torch.where(keep, a, b) for a, b in zip(new, states[k], strict=True))
        outs.append(y * keep)
    return torch.stack(outs), tuple(s for state in states for s in state)


def step_cell(cell, x_t, lengths):
    """`step_cells` of one cell."""
    return step_cells([cell], x_t, lengths)


def flat(out) -> list:
    """A module's output as a list (one tensor, or the tuple it returns)."""
    return list(out) if isinstance(out, (list, tuple)) else [out]


def keras_run(model, inputs: list[np.ndarray], seed: int):
    """Runs a Keras model on `inputs`; returns (outputs, loss weights, gradients of
    Σ_k Σ out_k·R_k with respect to the float inputs and to each trainable weight, keyed by the
    weight's path)."""
    tf = tf_module()
    ts = [tf.constant(x) for x in inputs]
    with tf.GradientTape() as tape:
        for t in ts:
            if t.dtype.is_floating:
                tape.watch(t)
        outs = flat(model(ts if len(ts) > 1 else ts[0], training=False))
        rs = loss_weights(outs, seed)
        loss = tf.add_n([tf.reduce_sum(o * r) for o, r in zip(outs, rs, strict=True)])
    weights = model.trainable_weights
    float_inputs = [t for t in ts if t.dtype.is_floating]
    grads = tape.gradient(loss, float_inputs + list(weights))
    in_grads = [g.numpy() for g in grads[: len(float_inputs)]]
    w_grads = {w.path: g.numpy() for w, g in zip(weights, grads[len(float_inputs) :], strict=True)}
    return [o.numpy() for o in outs], rs, in_grads, w_grads


def torch_loss(outs, rs) -> torch.Tensor:
    """Σ_k Σ out_k·R_k, the loss `keras_run` differentiates, on our outputs."""
    return sum((o * torch.from_numpy(r)).sum() for o, r in zip(outs, rs, strict=True))


def module_params(module: torch.nn.Module, prefix: str = "") -> dict[str, torch.nn.Parameter]:
    """A module's parameters by name, each name prefixed with `prefix`."""
    return {f"{prefix}{n}": p for n, p in module.named_parameters()}


def cli_convert(src, tmp_path, capsys, *extra, code=0):
    """`torch-lstm-grad convert SRC -o tmp_path/out.pt` through the CLI's main: (the modules
    loaded, the log) when it exits with 0; its stderr when `code` is another expected exit code."""
    out = tmp_path / "out.pt"
    assert cli.main(["convert", str(src), "-o", str(out), *extra]) == code, capsys.readouterr()
    captured = capsys.readouterr()
    return captured.err if code else (porting.load(out), captured.out)


_NO_TF = (
    "import sys\n"
    "for name in ('tensorflow', 'tf_keras', 'keras'):\n"
    "    sys.modules[name] = None  # `import tensorflow` raises ImportError, as if absent\n"
    "from torch_lstm_grad.tools import cli\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def convert_without_tf(src, out, *extra) -> str:
    """`torch-lstm-grad convert SRC -o OUT` in a fresh interpreter where TensorFlow, Keras and
    tf_keras cannot be imported; returns its log, and fails with it when the exit code is not 0."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _NO_TF, "convert", str(src), "-o", str(out), *map(str, extra)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def same_modules(a: dict, b: dict) -> None:
    """Two conversions' modules: the same names, classes and parameters, bit for bit."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert type(a[name]) is type(b[name]), name
        sa, sb = a[name].state_dict(), b[name].state_dict()
        assert sorted(sa) == sorted(sb), name
        for k in sa:
            assert torch.equal(sa[k], sb[k]), f"{name}.{k}"


def descriptions_as_logged(modules, log: str) -> None:
    """load() gives each module the description `convert` printed for it: every module's
    `port_description.lines()` stand in the log, indented as printed."""
    for m in modules:
        assert "\n".join("  " + line for line in m.port_description.lines()) in log


# --- Keras 3 models built, saved and compared with their ports ------------------------------------


STATES_T, STATES_B, STATES_I = 6, 4, 3  # noqa: E741


def random_states(n: int, units: int, seed: int) -> list[np.ndarray]:
    """`n` initial states [STATES_B, units], uniform [-0.9, 0.9)."""
    r = np.random.default_rng(seed)
    return [r.uniform(-0.9, 0.9, (STATES_B, units)).astype(np.float32) for _ in range(n)]


KERAS_T, KERAS_B, KERAS_I = 6, 3, 4  # noqa: E741


# Row 0 full, row 1 right-padded, row 2 holes anywhere (Keras skips masked steps wherever).
KERAS_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0]], bool)


def chain_model(make_layers, mask: bool, seed: int):
    """Input [B, T, I] (and a boolean mask input) through the layers in turn; the model's outputs
    are every layer's outputs (its states too with return_state), so each is compared."""
    keras = keras_module()
    x_in = keras.Input((KERAS_T, KERAS_I), name="x")
    inputs = [x_in]
    m_in = None
    if mask:
        m_in = keras.Input((KERAS_T,), dtype="bool", name="m")
        inputs.append(m_in)
    y, outputs, layers = x_in, [], make_layers(keras)
    for layer in layers:
        out = layer(y, mask=m_in) if mask else layer(y)
        out = out if isinstance(out, (list, tuple)) else [out]
        outputs += list(out)
        y = out[0]
    model = keras.Model(inputs, outputs)
    randomize(model.trainable_weights, seed)
    return model, [layer.name for layer in layers]


def _run_chain(mods, names, x, mask):
    """Our modules `names` chained on x (and the mask): (the input leaf, every output)."""
    outs, y = [], torch.from_numpy(x).requires_grad_()
    x_t = y
    m = None if mask is None else torch.from_numpy(mask)
    for name in names:
        out = mods[name](y, mask=m)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        outs += out
        y = out[0]
    return x_t, outs


def _chain_param(mods, path: str):
    """The module parameter holding Keras' weight `path` (`lstm/lstm_cell/kernel`,
    `bidirectional/forward_lstm/lstm_cell/kernel`)."""
    layer, rest = layer_and_rest(path.rpartition("/")[0])
    module, leaf = mods[layer], path.rpartition("/")[2]
    if isinstance(module, keras_layers.KerasBidirectional):
        sub = "forward_layer" if rest[0].startswith("forward_") else "backward_layer"
        module = getattr(module, sub)
    return getattr(module, leaf)


def compare_chain(model, names, mods, seed, mask: bool, last_only: bool = False):
    """`last_only`: the model's output is the last layer's (a Sequential model)."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((KERAS_B, KERAS_T, KERAS_I)).astype(np.float32)
    inputs = [x, KERAS_MASK] if mask else [x]
    want, rs, (dx,), dw = keras_run(model, inputs, seed)
    x_t, outs = _run_chain(mods, names, x, KERAS_MASK if mask else None)
    outs = outs[-1:] if last_only else outs
    assert len(outs) == len(want)
    params = {path: _chain_param(mods, path) for path in dw}
    grads = torch.autograd.grad(torch_loss(outs, rs), [x_t, *params.values()])
    pairs = {f"output {k}": (o, w) for k, (o, w) in enumerate(zip(outs, want, strict=True))}
    pairs["d inputs"] = (grads[0], dx)
    pairs.update({f"d {p}": (g, dw[p]) for p, g in zip(params, grads[1:], strict=True)})
    assert_close(pairs)


def save_model(model, path, how: str) -> str:
    """A Keras model saved as a SavedModel by `model.export` (how="export") or
    tf.saved_model.save; its path."""
    tf = tf_module()
    if how == "export":
        model.export(str(path), verbose=False)
    else:
        tf.saved_model.save(model, str(path))
    return str(path)


def graph_readable_kinds(keras):
    """Keras 3 layers of every kind the loop reader reads from a SavedModel."""
    return [
        keras.layers.LSTM(5, return_sequences=True, go_backwards=True, name="lstm_back"),
        keras.layers.LSTM(4, return_sequences=True, return_state=True, use_bias=False),
        keras.layers.GRU(4, return_sequences=True, activation="relu", name="gru_relu"),
        keras.layers.SimpleRNN(
            4, activation="relu", return_sequences=True, zero_output_for_mask=True, name="rnn"
        ),
        keras.layers.GRU(3, return_sequences=True, reset_after=False, name="gru_before"),
        keras.layers.Bidirectional(
            keras.layers.LSTM(3, return_sequences=True), merge_mode="ave", name="bi_ave"
        ),
        keras.layers.Bidirectional(
            keras.layers.GRU(2, return_sequences=True), merge_mode="mul", name="bi_mul"
        ),
        keras.layers.Bidirectional(
            keras.layers.SimpleRNN(2, return_sequences=True), merge_mode="sum", name="bi_sum"
        ),
        keras.layers.Bidirectional(keras.layers.GRU(2, return_state=True), name="bi_concat"),
    ]


# --- TF1 graphs and checkpoints, run and saved by TF ----------------------------------------------


TF1_T, TF1_B, TF1_I = 5, 3, 4  # noqa: E741


TF1_LENGTHS = np.array([5, 2, 4], np.int32)


def _tf1_randomize(sess, tf, variables, seed):
    """uniform [-0.6, 0.6) into every variable of a TF1 session."""
    r = np.random.default_rng(seed)
    for v in variables:
        v.load(r.uniform(-0.6, 0.6, v.shape.as_list()).astype(np.float32), sess)


class TF1Run:
    """A TF1 graph: a cell run by dynamic_rnn or static_rnn (or `body(x)` for raw-op graphs),
    its variables randomised, saved by a Saver, and TF's outputs, final states and gradients."""

    def __init__(
        self,
        path,
        make,
        *,
        driver="dynamic",
        lengths=True,
        seed=0,
        v1_loops=False,
        ref_vars=False,
        meta=True,
        adam=False,
        frozen=None,
        saved_model=False,
    ):
        tf = tf_module()
        r = np.random.default_rng(seed + 100)
        self.x = r.standard_normal((TF1_T, TF1_B, TF1_I)).astype(np.float32)
        self.lengths = TF1_LENGTHS if lengths else None
        if v1_loops:
            tf.compat.v1.disable_control_flow_v2()
        try:
            g = tf.Graph()
            with g.as_default(), tf.compat.v1.variable_scope("", use_resource=not ref_vars):
                xs = tf.compat.v1.placeholder(tf.float32, [TF1_T, TF1_B, TF1_I])
                if driver == "dynamic":
                    outs, state = tf.compat.v1.nn.dynamic_rnn(
                        make(), xs, sequence_length=self.lengths, time_major=True, dtype=tf.float32
                    )
                elif driver == "static":
                    outs, state = tf.compat.v1.nn.static_rnn(
                        make(), tf.unstack(xs), dtype=tf.float32
                    )
                    outs = tf.stack(outs)
                else:
                    outs, state = driver(tf, xs)
                fetch = [outs] + tf.nest.flatten(state)
                self.variables = tf.compat.v1.trainable_variables()
                # The gradient graph is built before any run: TF 2's While op must not change
                # after a session ran it.
                self.rs = loss_weights([np.zeros(f.shape.as_list()) for f in fetch], seed + 200)
                loss = tf.add_n([tf.reduce_sum(o * r) for o, r in zip(fetch, self.rs, strict=True)])
                grad_ops = tf.gradients(loss, [xs, *self.variables])
                # With adam: one Adam step before the save, so the checkpoint holds its slots
                # (kernel/Adam, kernel/Adam_1, beta1_power) and the graph its update ops.
                train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss) if adam else None
                with tf.compat.v1.Session(graph=g) as sess:
                    sess.run(tf.compat.v1.global_variables_initializer())
                    _tf1_randomize(sess, tf, self.variables, seed)
                    if train is not None:
                        sess.run(train, {xs: self.x})
                    self.values = sess.run(fetch, {xs: self.x})
                    grads = sess.run(grad_ops, {xs: self.x})
                    self.dx, self.dvars = (
                        grads[0],
                        dict(zip([v.op.name for v in self.variables], grads[1:], strict=True)),
                    )
                    self.prefix = tf.compat.v1.train.Saver().save(
                        sess, str(path), write_meta_graph=meta
                    )
                    if frozen:
                        self._freeze(tf, sess, g, fetch, xs, path, frozen)
                    if saved_model:  # TF1's SavedModelBuilder, through simple_save
                        self.saved_model = f"{path}_saved_model"
                        outputs = {f"out{k}": t for k, t in enumerate(fetch)}
                        tf.compat.v1.saved_model.simple_save(
                            sess, self.saved_model, {"x": xs}, outputs
                        )
        finally:
            if v1_loops:
                tf.compat.v1.enable_control_flow_v2()

    def _freeze(self, tf, sess, g, fetch, xs, path, form):
        """The graph frozen by TF1's convert_variables_to_constants (every variable a Const of
        its name), written as `<path>.pb` or `.pbtxt`; TF runs the frozen graph and must give
        the values of the graph it was frozen from (the gradients were taken there: a Const's
        gradient is its variable's)."""
        names = sorted({t.op.name for t in fetch})
        frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
            sess, g.as_graph_def(), names
        )
        assert not [n.name for n in frozen.node if "Variable" in n.op or n.op == "VarHandleOp"]
        self.frozen = f"{path}.{form}"
        if form == "pb":
            with open(self.frozen, "wb") as fh:
                fh.write(frozen.SerializeToString())
        else:
            tf.io.write_graph(frozen, str(path.parent), path.name + ".pbtxt", as_text=True)
        again = tf.Graph()
        with again.as_default():
            tf.import_graph_def(frozen, name="")
            with tf.compat.v1.Session(graph=again) as s:
                values = s.run([t.name for t in fetch], {xs.name: self.x})
        # To float32 rounding, not bit for bit: TF's oneDNN may sum the product of a frozen
        # (constant) weight in another order than the variable's (seen with
        # ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU: 1 ulp on 12 of 30 outputs).
        for ours, theirs in zip(values, self.values, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=4e-7, atol=1e-7)

    def compare(self, ours_outs, ours_states, x_t, params: dict):
        """`params`: TF variable name -> our parameter holding it."""
        ours = [ours_outs, *ours_states]
        loss = sum((o * torch.from_numpy(r)).sum() for o, r in zip(ours, self.rs, strict=True))
        grads = torch.autograd.grad(loss, [x_t, *params.values()])
        pairs = {
            f"output {k}": (o, w) for k, (o, w) in enumerate(zip(ours, self.values, strict=True))
        }
        pairs["d x"] = (grads[0], self.dx)
        assert set(params) == set(self.dvars), (sorted(params), sorted(self.dvars))
        pairs.update({f"d {n}": (g, self.dvars[n]) for n, g in zip(params, grads[1:], strict=True)})
        assert_close(pairs)


# The converter's own map of TF1 leaves to module parameters (one for LSTM and GRU cells).
TF1_PARAMS = build_tf1.PARAMS


def tf1_params(run, cell, scope, table, scoped=False):
    """TF variable name -> the cell's parameter, for the run's variables (only those under
    `scope` when `scoped`)."""
    names = [n for n in run.dvars if not scoped or n.startswith(scope + "/")]
    return {n: getattr(cell, table[n[len(scope) + 1 :]]) for n in names}


def tf1_block_lstm_graph(tf, xs):
    """A TF1 graph running tf.raw_ops.BlockLSTM (peepholes, forget bias 0.7, clip 0.5) on
    variables under lstm_fused_cell/: (outputs, (c, h)) for TF1Run."""
    with tf.compat.v1.variable_scope("lstm_fused_cell"):
        w = tf.compat.v1.get_variable("kernel", [TF1_I + 3, 12])
        b = tf.compat.v1.get_variable("bias", [12])
        peep = [tf.compat.v1.get_variable(f"w_{g}_diag", [3]) for g in "ifo"]
    z = tf.zeros([TF1_B, 3])
    out = tf.raw_ops.BlockLSTM(
        seq_len_max=tf.constant(TF1_T, tf.int64),
        x=xs,
        cs_prev=z,
        h_prev=z,
        w=w,
        wci=peep[0],
        wcf=peep[1],
        wco=peep[2],
        b=b,
        forget_bias=0.7,
        cell_clip=0.5,
        use_peephole=True,
    )
    return out.h, (out.cs[-1], out.h[-1])


def _tf1_cudnn_lstm(tf, seq, n_in, H, separate, forget_bias):
    """CudnnCompatibleLSTMCell's math on canonical variables, by tf.raw_ops.BlockLSTM."""
    get = tf.compat.v1.get_variable
    k = get("kernel", [n_in + H, 4 * H])
    b = get("bias", [4 * H])
    if separate:  # TF 1.4-1.6 also saved bW and bR apart; a restore read those
        b = get("bias_cudnn_0", [4 * H]) + get("bias_cudnn_1", [4 * H]) + 0.0 * b
    z = tf.zeros([TF1_B, H])
    out = tf.raw_ops.BlockLSTM(
        seq_len_max=tf.constant(TF1_T, tf.int64),
        x=seq,
        cs_prev=z,
        h_prev=z,
        w=k,
        wci=tf.zeros([H]),
        wcf=tf.zeros([H]),
        wco=tf.zeros([H]),
        b=b,
        forget_bias=forget_bias,
        cell_clip=-1.0,
        use_peephole=False,
    )
    return out.h, out.h[-1]


def _tf1_cudnn_gru(tf, seq, n_in, H, separate, forget_bias):
    """CudnnCompatibleGRUCell's math on canonical variables, step by step with TF ops."""
    get = tf.compat.v1.get_variable
    gk = get("gates/kernel", [n_in + H, 2 * H])
    gb = get("gates/bias", [2 * H])
    if separate:  # saved as "bias_cudnn 0/1" (a space: TF 2 refuses it in a variable name)
        gb = get("bias_cudnn_0", [2 * H]) + get("bias_cudnn_1", [2 * H]) + 0.0 * gb
    ik, ib = (
        get("candidate/input_projection/kernel", [n_in, H]),
        get("candidate/input_projection/bias", [H]),
    )
    hk, hb = (
        get("candidate/hidden_projection/kernel", [H, H]),
        get("candidate/hidden_projection/bias", [H]),
    )
    h, outs = tf.zeros([TF1_B, H]), []
    for t in range(TF1_T):
        ru = tf.sigmoid(tf.matmul(tf.concat([seq[t], h], 1), gk) + gb)
        r, u = ru[:, :H], ru[:, H:]
        c = tf.tanh(tf.matmul(seq[t], ik) + ib + r * (tf.matmul(h, hk) + hb))
        h = (1 - u) * c + u * h
        outs.append(h)
    return tf.stack(outs), h


def tf1_cudnn_graph(kind, L, bidi, separate, outer="cudnn", forget_bias=0.0):
    """A graph computing what TF1's CudnnCompatible cells compute on canonical variables: LSTM
    with tf.raw_ops.BlockLSTM (forget_bias 0, no clip; bias = bW + bR), GRU with TF ops
    (r, u = σ([x, h]·K + b), c = tanh(x·Wᵢ + bᵢ + r ⊙ (h·Wₕ + bₕ))). Bidirectional layers run
    the reversed sequence and concatenate."""
    H = 3

    def graph(tf, xs):
        y, finals = xs, []
        for layer in range(L):
            outs = []
            for d in range(2 if bidi else 1):
                p = (
                    f"{outer}/stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'fb'[d]}w/"
                    if bidi
                    else f"{outer}/rnn/multi_rnn_cell/cell_{layer}/"
                )
                seq = y if d == 0 else tf.reverse(y, [0])
                n_in = seq.shape[-1]
                with tf.compat.v1.variable_scope(p + f"cudnn_compatible_{kind}_cell"):
                    h_seq, h_last = (_tf1_cudnn_lstm if kind == "lstm" else _tf1_cudnn_gru)(
                        tf, seq, n_in, H, separate, forget_bias
                    )
                outs.append(h_seq if d == 0 else tf.reverse(h_seq, [0]))
                finals.append(h_last)
            y = tf.concat(outs, -1) if bidi else outs[0]
        return y, tuple(finals)

    return graph


def tf1_stacked_grus(tf, rci):
    """The layout of cutkum's published graph (tests/data/cutkum): GRUCells, each in a
    DropoutWrapper (keep probability fed, 1 by default), in a MultiRNNCell."""
    keep = tf.compat.v1.placeholder_with_default(1.0, [], name="keep_prob")
    return rci.MultiRNNCell(
        [rci.DropoutWrapper(rci.GRUCell(n), output_keep_prob=keep) for n in (4, 3, 2)]
    )


def tf1_save(path, values: dict):
    """Variables with the given names saved by a tf.compat.v1 Saver (graph mode); the
    checkpoint's path."""
    tf = tf_module()
    g = tf.Graph()
    with g.as_default():
        for n, v in values.items():
            tf.compat.v1.get_variable(n, initializer=tf.constant(v))
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            return tf.compat.v1.train.Saver().save(sess, str(path))


def tf_checkpoint_entries(prefix):
    """Every readable entry of a checkpoint, read by TF: name -> NumPy array."""
    tf = tf_module()
    r = tf.train.load_checkpoint(str(prefix))
    out = {}
    for name, dtype in r.get_variable_to_dtype_map().items():
        if dtype not in (tf.string, tf.resource, tf.variant):
            out[name] = np.asarray(r.get_tensor(name))
    return out


def same_bits(ours, theirs):
    """Equal shape and bytes (bfloat16 from TF compared after widening, as ours is)."""
    if theirs.dtype.name == "bfloat16":
        theirs = theirs.astype(np.float32)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


# --- GraphDefs built by TF ------------------------------------------------------------------------


GRAPH_B, GRAPH_T, GRAPH_I, GRAPH_H = 2, 3, 3, 4


def graph_rand(*shape, seed=0):
    """A standard-normal float32 array of `shape` (a graph's constants)."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def tf_graph_def(build):
    """The GraphDef TF builds from `build()` in a graph of its own."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        build()
    return g.as_graph_def()


def dynamic_rnn_cells():
    """TF1's Python cells run by dynamic_rnn: TF 2's While, its body a library function."""

    import tensorflow as tf
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    x = tf.compat.v1.placeholder(tf.float32, [GRAPH_T, GRAPH_B, GRAPH_I], name="x")
    lstm = rci.LSTMCell(GRAPH_H, use_peepholes=True, cell_clip=1.5, num_proj=2, proj_clip=0.5)
    tf.compat.v1.nn.dynamic_rnn(lstm, x, time_major=True, dtype=tf.float32, scope="lstm")
    tf.compat.v1.nn.dynamic_rnn(rci.GRUCell(GRAPH_H), x, time_major=True, dtype=tf.float32,
                                scope="gru")  # fmt: skip


def dynamic_rnn_cells_v1():
    """The same cells in TF 1's loops: Enter, Merge, Switch, NextIteration, Exit."""
    from tensorflow.python.ops import control_flow_util

    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        dynamic_rnn_cells()
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved


def static_rnn_clipped_lstm():
    """TF1's LSTMCell(cell_clip=1.5) run by static_rnn over two steps."""
    import tensorflow as tf
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    xs = [tf.compat.v1.placeholder(tf.float32, [GRAPH_B, GRAPH_I], name=f"x{t}") for t in range(2)]
    tf.compat.v1.nn.static_rnn(rci.LSTMCell(GRAPH_H, cell_clip=1.5), xs, dtype=tf.float32)


# --- protobuf and table bytes by hand -------------------------------------------------------------


def pb_varint(v: int) -> bytes:
    """`v` as a protobuf varint (negative numbers as their 64-bit two's complement)."""
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def pb_table_block(entries, restarts=1) -> bytes:
    """An SSTable block of raw entries (shared key prefix length, key suffix, value) and one
    restart, at 0; `restarts` is the restart count written, which a hostile block may set past
    what it holds."""
    import struct

    body = b"".join(pb_varint(s) + pb_varint(len(k)) + pb_varint(len(v)) + k + v
                    for s, k, v in entries)  # fmt: skip
    return body + struct.pack("<II", 0, restarts)


def pb_sstable(entries=(), blocks=None, restarts=1) -> bytes:
    """An SSTable (a checkpoint's .index) of `entries` (key, value) in one data block, or of
    `blocks` (data blocks of raw entries, as `pb_table_block` takes them, each with `restarts`),
    every crc32c right: what a hostile writer makes, the checksums no obstacle. The index block
    keys each data block by its last key, which TF's reader seeks."""
    import struct

    from torch_lstm_grad.porting.formats.tensorbundle import masked_crc32c

    if blocks is None:
        blocks = [[(0, k, v) for k, v in entries]]
    out = bytearray()

    def put(contents: bytes) -> bytes:
        handle = pb_varint(len(out)) + pb_varint(len(contents))
        out.extend(contents + b"\x00")
        out.extend(struct.pack("<I", masked_crc32c(contents + b"\x00")))
        return handle

    def last_key(block) -> bytes:
        key = b""
        for shared, suffix, _ in block:
            key = key[:shared] + suffix
        return key

    keyed = [(0, last_key(block), put(pb_table_block(block, restarts))) for block in blocks]
    meta = put(pb_table_block([]))
    index = put(pb_table_block(keyed))
    footer = (meta + index).ljust(40, b"\x00") + struct.pack("<Q", 0xDB4775248B80FB57)
    return bytes(out + footer)


def pb_field(number: int, wire: int, payload: bytes) -> bytes:
    """A protobuf field: its tag, the payload's length for wire type 2, the payload."""
    return pb_varint(number << 3 | wire) + (pb_varint(len(payload)) if wire == 2 else b"") + payload


# --- SavedModels edited ---------------------------------------------------------------------------


def edited_saved_model(src, dst, edit):
    """A copy of the SavedModel `src` with its MetaGraphDef changed by `edit(meta_graph)`."""
    from tensorflow.core.protobuf import saved_model_pb2

    shutil.copytree(src, dst)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((dst / "saved_model.pb").read_bytes())
    edit(sm.meta_graphs[0])
    (dst / "saved_model.pb").write_bytes(sm.SerializeToString())
    return dst


def set_float_const(const, value) -> None:
    """Set the float32 Const node `const` to `value`."""
    tf = tf_module()
    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.float32(value)))


def set_int_const(const, values) -> None:
    """Set the int32 Const node `const` to `values`."""
    tf = tf_module()
    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.array(values, np.int32)))


def add_neg_of(node_def, ref, like):
    """A new node `like`_neg computing Neg of `ref` (read by nothing)."""
    neg = node_def.add()
    neg.name, neg.op = like.name + "_neg", "Neg"
    neg.input.append(ref)
    neg.attr["T"].type = like.attr["T"].type


# --- Keras layers against Keras -----------------------------------------------------------------


def keras_libraries():
    """`[(major, library)]`: Keras 3 and tf_keras (Keras 2), whichever import (TF first)."""
    tf_module()
    out = [(3, keras_module())]
    try:
        out.append((2, importlib.import_module("tf_keras")))
    except ImportError:
        pass
    return out


def _attach_masks(xs, masks):
    for x, m in zip(xs, masks, strict=True):
        if m is not None:
            x._keras_mask = tf_module().constant(m)


def keras_layer_errors(lib, make, module, x, mask=None, attrs=(), training=False, seed=0):
    """A Keras layer module against the layer `make(lib)` of `lib` (Keras 3 or tf_keras) called
    as Keras calls it, the mask attached to its input as Keras attaches it: the layer's weights
    randomised (variances positive) and copied into `module` under `attrs` (in the order of
    the Keras layer's `weights`). Returns `(errors, masks)`: scaled errors of the output, of every
    float input's gradient and every trainable weight's gradient of one random projection of
    the output, and of the moving statistics after a training call; and the output masks,
    Keras' and the module's, as bool lists (None for no mask)."""
    tf = tf_module()
    g = rng(seed)
    multi = isinstance(x, list)
    xs_np = x if multi else [x]
    masks = (mask if multi else [mask]) if mask is not None else [None] * len(xs_np)
    xs = [tf.constant(v) for v in xs_np]
    layer = make(lib)
    _attach_masks(xs, masks)
    layer(xs if multi else xs[0])  # builds the weights
    for w in layer.weights:
        v = g.standard_normal(w.shape).astype(np.float32) * 0.5
        w.assign(np.abs(v) + 0.5 if "variance" in w.name else v)
    values = [w.numpy() for w in layer.weights]
    with tf.GradientTape() as tape:
        for v in xs:
            tape.watch(v)
        _attach_masks(xs, masks)
        out = layer(xs if multi else xs[0], training=training)
        r = g.standard_normal(out.shape).astype(np.float32)
        loss = tf.reduce_sum(out * r)
    floats = [v for v, a in zip(xs, xs_np, strict=True) if a.dtype.kind == "f"]
    grads = tape.gradient(loss, floats + list(layer.trainable_weights))
    grads = [tf.convert_to_tensor(t) if isinstance(t, tf.IndexedSlices) else t for t in grads]
    keras_mask = getattr(out, "_keras_mask", None)
    module.train(training)
    params = dict(module.named_parameters())
    with torch.no_grad():
        for a, v in zip(attrs, values, strict=True):
            (params[a] if a in params else module.get_buffer(a)).copy_(torch.from_numpy(v))
    txs = [torch.tensor(v, requires_grad=v.dtype.kind == "f") for v in xs_np]
    tmasks = [None if m is None else torch.tensor(m) for m in masks]
    tin = txs if multi else txs[0]
    tmask = (tmasks if multi else tmasks[0]) if mask is not None else None
    ours = module(tin, mask=tmask)
    our_mask = module.compute_mask(tin, tmask)
    trainable = [a for a in attrs if a in params and params[a].requires_grad]
    wanted = [t for t in txs if t.requires_grad] + [params[a] for a in trainable]
    our_grads = torch.autograd.grad((ours * torch.from_numpy(r)).sum(), wanted, allow_unused=True)
    errors = {"output": scaled_error(ours, out.numpy())}
    names = [f"d input {k}" for k in range(len(floats))] + [f"d {a}" for a in trainable]
    for name, mine, theirs in zip(names, our_grads, grads, strict=True):
        theirs = np.zeros(mine.shape) if theirs is None else theirs.numpy()
        errors[name] = scaled_error(torch.zeros(theirs.shape) if mine is None else mine, theirs)
    if training:
        for a, w in zip(attrs, layer.weights, strict=True):
            if a.startswith("moving"):
                errors[a] = scaled_error(module.get_buffer(a), w.numpy())

    def as_list(m):
        if m is None:
            return None
        if isinstance(m, (list, tuple)):
            return [as_list(q) for q in m]
        return np.asarray(m).astype(bool).tolist()

    return errors, (as_list(keras_mask), as_list(our_mask))


def assert_keras_layer(make, ours, x, mask=None, attrs=(), training=False, majors=(2, 3)):
    """`keras_layer_errors` for every Keras major in `majors` (`ours(major)` makes the module):
    every error within PORT_TOL and the output masks equal."""
    for major, lib in keras_libraries():
        if major not in majors:
            continue
        errors, (theirs, mine) = keras_layer_errors(lib, make, ours(major), x, mask, attrs,
                                                    training)  # fmt: skip
        bad = {k: f"{e:.1e}" for k, e in errors.items() if not e <= PORT_TOL}
        assert not bad, f"Keras {major}: errors above {PORT_TOL}: {bad}"
        assert mine == theirs, f"Keras {major}: output mask {mine} != Keras' {theirs}"
