"""TF's composite cells computing what cuDNN's RNN op computes on a params buffer: `verify`'s
oracle for graphs that run CudnnRNN / V2 / V3 on an opaque buffer, which TensorFlow runs on a GPU
only (docs/cudnn.md §14).

The file's buffer, split into its canonical weights by this project's
CudnnRNNParamsToCanonicalV2 (cuDNN's layout, docs/tf-semantics.md §7; docs/cudnn.md §4) for the
model the graph's op names, is written into cells TF ships, each pseudo-layer (layer,
direction) one cell run step by step over the sequence:

* lstm: TF1's `LSTMCell` (`rnn_cell_impl`, as TF 2.21 ships it) with `forget_bias=0` and cuDNN's
  `num_proj`; kernel rows `[x; h]`, gate columns in TF's order i, c, f, o; one bias `bW + bR`;
* gru: Keras' `GRUCell(reset_after=True)` (cuDNN's GRU), gate columns z, r, h, bias rows
  `bW`, `bR`;
* rnn_tanh / rnn_relu: Keras' `SimpleRNNCell` with that activation, one bias `bW + bR`.

Layer 0 under `skip_input` has no input matrices (its input term is `x`, docs/tf-semantics.md
§6.5): its kernel is identity blocks, a constant. A layer's input is the previous layer's
outputs, the directions concatenated; the backward direction runs the steps in reverse. No
dropout (the module is compared in inference).

The cells' variables are TF's side of the weights: `packed_gradient` maps their gradients back
to the canonical lists (a summed bias's gradient is both biases') and packs those as the buffer's
gradient (CudnnRNNCanonicalToParamsV2), which the module's gradient must equal.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import raw_ops

__all__ = ["CompositeCudnn"]

# The canonical gate order (docs/tf-semantics.md §7.1) -> each cell's kernel column blocks:
# TF1 LSTMCell i, j (= c), f, o; Keras' GRUCell z, r, h.
_COLUMNS = {"lstm": [0, 2, 1, 3], "gru": [1, 0, 2], "rnn_tanh": [0], "rnn_relu": [0]}


class CompositeCudnn:
    """TF cells holding the canonical weights of the params `buffer` (a 1-D array) of the model
    `attrs` (the op's rnn_mode, input_mode, direction, num_proj) of `num_layers` layers of
    `num_units` on `input_size` inputs; `__call__` runs them on time-major input."""

    def __init__(self, tf, buffer, attrs: dict, num_layers: int, num_units: int,
                 input_size: int) -> None:  # fmt: skip
        self.tf = tf
        self.mode = attrs["rnn_mode"]
        if self.mode not in _COLUMNS:
            raise ValueError(f"rnn_mode {self.mode!r} is not one of cuDNN's {sorted(_COLUMNS)}")
        proj = int(attrs.get("num_proj") or 0)
        self.L, self.D = int(num_layers), 2 if attrs["direction"] == "bidirectional" else 1
        self.H, self.P = int(num_units), proj or int(num_units)
        self.attrs = dict(num_layers=self.L, num_units=self.H, input_size=int(input_size),
                          rnn_mode=self.mode, input_mode=attrs["input_mode"],
                          direction=attrs["direction"], num_proj=proj)  # fmt: skip
        self.G = len(_COLUMNS[self.mode])
        if self.mode == "lstm":  # TF1's cells, as TF 2.21 ships them
            from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl

            self._rnn_cell_impl = rnn_cell_impl
        n = self.L * self.D * 2 * self.G
        canonical = raw_ops.CudnnRNNParamsToCanonicalV2(
            params=torch.as_tensor(np.asarray(buffer, np.float32)),
            num_params_weights=n + (n // (2 * self.G) if proj else 0), num_params_biases=n,
            **self.attrs,
        )  # fmt: skip
        self.weights = [w.double().numpy() for w in canonical.weights]
        self.biases = [b.double().numpy() for b in canonical.biases]
        self.per_layer = 2 * self.G + (1 if proj else 0)  # weights per pseudo-layer
        self.cells = [self._cell(k) for k in range(self.L * self.D)]

    # -- the cells ------------------------------------------------------------------------------

    def _canonical(self, k):
        w = self.weights[k * self.per_layer : (k + 1) * self.per_layer]
        b = self.biases[k * 2 * self.G : (k + 1) * 2 * self.G]
        return w[: self.G], w[self.G : 2 * self.G], w[2 * self.G :], b[: self.G], b[self.G :]

    def _cell(self, k):
        tf, H = self.tf, self.H
        W, R, proj, bW, bR = self._canonical(k)
        skip = W[0].shape[1] == 0  # skip_input's layer 0: the input term is x itself
        cols = _COLUMNS[self.mode]
        kernel_in = np.concatenate([np.eye(H) if skip else W[g].T for g in cols], axis=1)
        kernel_r = np.concatenate([R[g].T for g in cols], axis=1)
        in_size = kernel_in.shape[0]
        if self.mode == "lstm":
            cell = self._rnn_cell_impl.LSTMCell(
                H, num_proj=self.P if proj else None, forget_bias=0.0, state_is_tuple=True,
                name=f"cell_{k}",
            )  # fmt: skip
            cell.build(tf.TensorShape([None, in_size]))
            values = [np.concatenate([kernel_in, kernel_r]),
                      np.concatenate([bW[g] + bR[g] for g in cols])]  # fmt: skip
            if proj:
                values.append(proj[0].T)
        else:
            import keras

            if self.mode == "gru":
                cell = keras.layers.GRUCell(H, reset_after=True, name=f"cell_{k}")
                bias = np.stack([np.concatenate([bW[g] for g in cols]),
                                 np.concatenate([bR[g] for g in cols])])  # fmt: skip
            else:
                cell = keras.layers.SimpleRNNCell(H, activation=self.mode[4:], name=f"cell_{k}")
                bias = bW[0] + bR[0]
            cell.build((None, in_size))
            values = [kernel_in, kernel_r, bias]
        variables = self._variables(cell)
        if len(variables) != len(values):
            raise RuntimeError(f"{type(cell).__name__} holds {len(variables)} weights, not "
                               f"{len(values)}")  # fmt: skip
        for v, value in zip(variables, values, strict=True):
            v.assign(value.astype(np.float32))
        return cell

    def _variables(self, cell) -> list:
        """The cell's weights in the order `_cell` assigns them: (kernel, bias[, projection])
        for TF1's LSTMCell (its rows `[x; h]`), (kernel, recurrent_kernel, bias) for Keras'."""
        if self.mode == "lstm":
            return list(cell.variables)
        return [cell.kernel, cell.recurrent_kernel, cell.bias]

    @property
    def variables(self) -> list:
        return [v for cell in self.cells for v in self._variables(cell)]

    # -- the computation ------------------------------------------------------------------------

    def __call__(self, x, initial) -> list:
        """`x [T, B, I]`, `initial` `[h0]` or `[h0, c0]` (each `[L·D, B, n]`, tensors):
        `[output [T, B, D·P], h_n, (c_n)]` as the module returns them."""
        tf = self.tf
        T = x.shape[0]
        steps = [x[t] for t in range(T)]
        h_n, c_n = [], []
        for layer in range(self.L):
            outs = []
            for d in range(self.D):
                k = layer * self.D + d
                cell = self.cells[k]
                h = initial[0][k]
                c = initial[1][k] if self.mode == "lstm" else None
                out = [None] * T
                for t in reversed(range(T)) if d == 1 else range(T):
                    if self.mode == "lstm":
                        h, (c, _) = cell(steps[t], self._rnn_cell_impl.LSTMStateTuple(c, h))
                    else:
                        h, _ = cell(steps[t], [h], training=False)
                    out[t] = h
                outs.append(out)
                h_n.append(h)
                c_n.append(c)
            steps = [tf.concat([o[t] for o in outs], axis=1) for t in range(T)]
        result = [tf.stack(steps), tf.stack(h_n)]
        if self.mode == "lstm":
            result.append(tf.stack(c_n))
        return result

    def packed_gradient(self, grads) -> np.ndarray:
        """The gradients of `variables` (TF's, in that order) as the buffer's gradient."""
        G, cols = self.G, _COLUMNS[self.mode]
        grads = [np.asarray(g, np.float64) for g in grads]
        d_weights, d_biases = [], []
        at = 0
        for k, cell in enumerate(self.cells):
            W, R, proj, _, _ = self._canonical(k)
            n = len(self._variables(cell))
            mine, at = grads[at : at + n], at + n
            in_size = W[0].shape[1]
            dW, dR, dbW, dbR = [None] * G, [None] * G, [None] * G, [None] * G
            if self.mode == "lstm":
                kernel, bias = mine[0], mine[1]
                rows = in_size or self.H  # skip_input: H rows of identity, no weight's
                d_in, d_r = kernel[:rows], kernel[rows:]
            else:
                d_in, d_r, bias = mine
            for j, g in enumerate(cols):
                block = slice(j * self.H, (j + 1) * self.H)
                dW[g] = d_in[:, block].T if in_size else np.zeros((self.H, 0))
                dR[g] = d_r[:, block].T
                if self.mode == "gru":
                    dbW[g], dbR[g] = bias[0, block], bias[1, block]
                else:  # one bias, bW + bR
                    dbW[g] = dbR[g] = bias[block]
            d_weights += dW + dR + ([mine[2].T] if proj else [])
            d_biases += dbW + dbR
        as_t = [torch.from_numpy(np.ascontiguousarray(a, np.float32)) for a in d_weights]
        as_b = [torch.from_numpy(np.ascontiguousarray(a, np.float32)) for a in d_biases]
        packed = raw_ops.CudnnRNNCanonicalToParamsV2(weights=as_t, biases=as_b, **self.attrs)
        return packed.numpy()
