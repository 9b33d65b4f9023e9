"""Test helper: cuDNN's RNNs as TF composites, run by TF 2.21 eagerly on the CPU.

Not a test module. TF has no CPU kernel for CudnnRNN, so TF's own kernel tests compare it with
composite cells (contrib's CudnnCompatibleLSTMCell = LSTMCell with forget_bias 0,
CudnnCompatibleGRUCell, BasicRNNCell) run by dynamic_rnn. TF 2.21 no longer ships the contrib
cells; this module does what they did, with TF ops, one step at a time (one GEMM of
concat([x_t, h]) and the step's kernel per step, as those cells do), so TF's gradient sums the
weight gradients step by step, as TF's composite did. The loop is eager Python under a
GradientTape (a dynamic_rnn graph computes the same per-step products, slower to build).

Weights come in and gradients go out in TF's canonical order (tf_semantics.md §7.1): per
pseudo-layer k = layer * D + direction, W_0..W_{G-1} [H, in], R_0..R_{G-1} [H, P], [W_proj
[P, H]]; biases bW_0..bW_{G-1}, bR_0..bR_{G-1} [H]. Gate order is cuDNN's (lstm i, f, g, o;
gru r, z, n). Sequences are time-major; rows past their length output zeros and keep their
state (dynamic_rnn's sequence_length); the backward direction runs each row's valid steps in
reverse (reverse_sequence), as bidirectional_dynamic_rnn does.
"""

from __future__ import annotations

import numpy as np
from tf_oracle import tf_module

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _cell(tf, mode, H, P, x, h, c, k):
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


def _variables(tf, mode, weights, biases, L, D, H, P, dtype):
    """The composite's kernels per pseudo-layer, from the canonical lists."""
    G = GATES[mode]
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


def _canonical_grads(mode, grads, weights, L, D, H, P, in_sizes):
    """The composite variables' gradients back in canonical order (bW and bR of a summed bias
    both get the bias' gradient)."""
    G = GATES[mode]
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


def cudnn_rnn(mode, x, h0, c0, weights, biases, *, L, D, H, P=None, lengths=None,
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
    vs = _variables(tf, mode, weights, biases, L, D, H, P, dtype)
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
                    h_new, c_new = _cell(tf, mode, H, P, seq[t], h, c, vs[k])
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
    dw, db = _canonical_grads(mode, g_vs, weights, L, D, H, P, in_sizes)
    grads = (g_x.numpy(), g_h.numpy(), g_c.numpy() if mode == "lstm" else None, dw, db)
    return (output.numpy(), output_h.numpy(), output_c.numpy() if mode == "lstm" else None,
            grads)  # fmt: skip
