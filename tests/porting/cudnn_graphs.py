"""TF graphs running a cuDNN RNN op on an opaque params buffer, written by TF here as a TF1
program writes them (graph construction only: no CPU kernel runs the op): a meta graph with a
Saver checkpoint of the buffer's variable, or a frozen GraphDef holding it as a Const."""

import copy
import os

import numpy as np
import torch

from tests.helpers import tf_module
from torch_lstm_grad import layouts, raw_ops


def write_opaque_graph(directory, buffer, *, rnn_mode, num_layers, num_units, input_size,
                       direction="unidirectional", input_mode="linear_input", num_proj=0,
                       op="CudnnRNNV3", sizes="states", frozen=False,
                       lengths=None) -> str:  # fmt: skip
    """The graph's path (a checkpoint prefix, or the frozen .pb) of `op` reading `buffer` (the
    variable or Const `rnn/opaque_kernel`) on a placeholder `x [T, B, input_size]`; `sizes`:
    "states" (zero initial states of constant L·D and widths) or "params_size" (a
    CudnnRNNParamsSize op, as TF1's contrib layer sizes its variable, and fed states);
    `lengths`: V3's sequence_lengths as a constant (else every row x's full length)."""
    tf = tf_module()
    tf1 = tf.compat.v1
    LD = num_layers * (2 if direction == "bidirectional" else 1)
    H, P = num_units, num_proj or num_units
    g = tf1.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [None, None, input_size], name="x")
        if frozen:
            params = tf.constant(buffer, name="rnn/opaque_kernel")
        else:
            params = tf1.get_variable("rnn/opaque_kernel", initializer=buffer)
        if sizes == "params_size":
            tf.raw_ops.CudnnRNNParamsSize(num_layers=num_layers, num_units=H,
                                          input_size=input_size, T=tf.float32, S=tf.int32,
                                          rnn_mode=rnn_mode, input_mode=input_mode,
                                          direction=direction)  # fmt: skip
            h0 = tf1.placeholder(tf.float32, [None, None, H], name="h0")
        else:
            h0 = tf.zeros(tf.stack([LD, tf.shape(x)[1], P]))
        if rnn_mode == "lstm":
            c0 = tf.zeros(tf.stack([LD, tf.shape(x)[1], H]))
        else:
            c0 = tf.constant(0.0)
        extra = {}
        if op == "CudnnRNNV3" and lengths is not None:
            extra["sequence_lengths"] = tf.constant(lengths, tf.int32, name="lengths")
        elif op == "CudnnRNNV3":  # every row the full length
            extra["sequence_lengths"] = tf.fill(tf.shape(x)[1:2], tf.shape(x)[0])
            if P != H:
                extra["num_proj"] = P
        out = getattr(tf.raw_ops, op)(input=x, input_h=h0, input_c=c0, params=params,
                                      rnn_mode=rnn_mode, input_mode=input_mode,
                                      direction=direction, is_training=False,
                                      **extra)  # fmt: skip
        tf.identity(out[0], name="y")
        if frozen:
            path = os.path.join(directory, "frozen.pb")
            with open(path, "wb") as f:
                f.write(g.as_graph_def().SerializeToString())
            return path
        saver = tf1.train.Saver()
        tf1.train.export_meta_graph(os.path.join(directory, "model.meta"),
                                    saver_def=saver.as_saver_def())  # fmt: skip
    # a tf.compat.v1.Session cannot place a graph holding the op on a CPU: the checkpoint is
    # written from a graph of its variable alone
    with tf1.Graph().as_default():
        tf1.get_variable("rnn/opaque_kernel", initializer=buffer)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            tf1.train.Saver().save(s, os.path.join(directory, "model"), write_meta_graph=False)
    return os.path.join(directory, "model")


def as_skip_input(ref) -> np.ndarray:
    """A torch.nn LSTM/GRU/RNN (input size = hidden size) made to compute cuDNN's `skip_input`
    model — each layer-0 gate's input term `x` itself (docs/tf-semantics.md §6.5): its layer-0
    input matrices set to identity blocks, in place — and that model's params buffer (float32)."""
    H = ref.hidden_size
    G = ref.weight_ih_l0.shape[0] // H
    with torch.no_grad():
        for suffix in ("", "_reverse")[: 2 if ref.bidirectional else 1]:
            getattr(ref, f"weight_ih_l0{suffix}").copy_(torch.eye(H).repeat(G, 1))
    return skip_input_buffer(ref).astype(np.float32)


def skip_input_buffer(ref) -> np.ndarray:
    """The `skip_input` params buffer (in `ref`'s dtype) of a torch.nn LSTM/GRU/RNN's weights:
    every weight but the layer-0 input matrices, which that model does not hold."""
    port = layouts.torch_rnn_to_cudnn(copy.deepcopy(ref))
    weights, biases = port.canonical_weights()
    per = len(weights) // (port.num_layers * port.num_dirs)
    G = ref.weight_ih_l0.shape[0] // ref.hidden_size
    for k in range(port.num_dirs):  # layer 0's pseudo-layers
        for g in range(G):
            weights[k * per + g] = weights[k * per + g][:, :0]
    attrs = dict(port._attrs(), input_mode="skip_input")
    return raw_ops.CudnnRNNCanonicalToParamsV2(
        weights=[w.detach() for w in weights], biases=[b.detach() for b in biases], **attrs
    ).numpy()
