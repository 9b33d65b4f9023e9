"""Port a small TF model to PyTorch and reproduce its outputs and gradients.

The TF model: a TF1-style LSTM cell with peepholes and cell clipping (variables named as
`tf.nn.rnn_cell.LSTMCell` / contrib `LSTMBlockCell` name them), run by `tf.raw_ops.BlockLSTM`,
then a dense layer on the last output. It is trained for a few SGD steps in TF (graph mode), saved
with a TF1 `Saver` (which writes the `.meta` graph next to the checkpoint), converted with
`torch-lstm-grad convert`'s library function, which reads the cell's `forget_bias`,
`cell_clip` and peepholes from the BlockLSTM op in that graph, loaded into
`torch_lstm_grad.LSTMBlockFusedCell` (the module of the BlockLSTM op), and run in PyTorch.
Outputs and the gradients of a loss with respect to the input and every weight are compared
with TF's.

Run:  python examples/port_tf1_lstm.py        (needs tensorflow-cpu; exits 1 on a mismatch)
"""

import os
import sys
import tempfile

import numpy as np
import torch

import torch_lstm_grad
from torch_lstm_grad import porting

T, B, I, H, OUT = 12, 4, 6, 8, 3
FORGET_BIAS, CELL_CLIP = 0.5, 3.0  # stored in the meta graph (the BlockLSTM op's attributes)
TOL = 2e-5  # float32: TF's Eigen activations and GEMM order vs ours (see tests/)


def train_and_save_in_tf(ckpt: str, x: np.ndarray, y: np.ndarray):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():

        def var(name, *shape):
            init = rng.uniform(-0.3, 0.3, shape).astype(np.float32)
            return tf.compat.v1.get_variable(name, initializer=tf.constant(init))

        kernel, bias = var("rnn/lstm_cell/kernel", I + H, 4 * H), var("rnn/lstm_cell/bias", 4 * H)
        wci, wcf, wco = (var(f"rnn/lstm_cell/w_{g}_diag", H) for g in "ifo")
        dense_k, dense_b = var("dense/kernel", H, OUT), var("dense/bias", OUT)
        xs = tf.compat.v1.placeholder(tf.float32, [T, B, I])
        zero = tf.zeros([B, H])
        h = tf.raw_ops.BlockLSTM(
            seq_len_max=tf.constant(T, tf.int64), x=xs, cs_prev=zero, h_prev=zero, w=kernel,
            wci=wci, wcf=wcf, wco=wco, b=bias, forget_bias=FORGET_BIAS, cell_clip=CELL_CLIP,
            use_peephole=True,
        ).h  # fmt: skip
        logits = tf.matmul(h[-1], dense_k) + dense_b
        loss = tf.reduce_mean((logits - y) ** 2)
        weights = [xs, kernel, bias, wci, wcf, wco, dense_k, dense_b]
        grads = tf.gradients(loss, weights)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for step in range(5):
                _, value = sess.run([train, loss], {xs: x})
                print(f"TF step {step}: loss {value:.5f}")
            saver.save(sess, ckpt)
            return sess.run([logits, loss, grads], {xs: x})


def main() -> int:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((T, B, I)).astype(np.float32)
    y = rng.standard_normal((B, OUT)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, out_pt = os.path.join(tmp, "model.ckpt"), os.path.join(tmp, "model.pt")
        tf_logits, tf_loss, tf_grads = train_and_save_in_tf(ckpt, x, y)

        # The LSTM converts to a module (its attributes read from the meta graph, printed with
        # their origin); the dense layer is read as plain variables.
        porting.convert(ckpt, out_pt)
        cell = torch_lstm_grad.load(out_pt)["rnn.lstm_cell"]
        assert (cell.forget_bias, cell.cell_clip) == (FORGET_BIAS, CELL_CLIP)
        variables = porting.read_variables(ckpt)
    dense_k = torch.from_numpy(variables["dense/kernel"]).requires_grad_()
    dense_b = torch.from_numpy(variables["dense/bias"]).requires_grad_()

    xt = torch.from_numpy(x).requires_grad_()
    _, (_, h) = cell(xt)  # the whole sequence at once, as TF's BlockLSTM op; h of the last step
    logits = h @ dense_k + dense_b
    loss = ((logits - torch.from_numpy(y)) ** 2).mean()
    weights = [xt, cell.kernel, cell.bias, cell.w_i_diag, cell.w_f_diag, cell.w_o_diag,
               dense_k, dense_b]  # fmt: skip
    grads = torch.autograd.grad(loss, weights)

    names = ["logits", "loss", "x", "kernel", "bias", "w_i_diag", "w_f_diag", "w_o_diag",
             "dense/kernel", "dense/bias"]  # fmt: skip
    ours = [logits, loss, *grads]
    theirs = [tf_logits, tf_loss, *tf_grads]
    worst = 0.0
    for name, a, b in zip(names, ours, theirs, strict=True):
        err = (a.detach() - torch.as_tensor(b)).abs().max().item()
        worst = max(worst, err / max(1.0, float(np.abs(b).max())))
        print(f"{name:14s} max |torch - tf| = {err:.2e}")
    print("OK" if worst <= TOL else "MISMATCH", f"(worst scaled error {worst:.2e}, tol {TOL})")
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    sys.exit(main())
