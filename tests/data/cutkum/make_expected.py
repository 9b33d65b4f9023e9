"""Writes expected.npz beside it: TensorFlow's own run of cutkum's frozen graph on seeded inputs,
for the tests that have no TensorFlow to run it (tests/porting/test_cuda.py, on the GPU machine).

    python tests/data/cutkum/make_expected.py

Stores x [T, B, 80], lengths [B], state [1, B, 896] (the three GRUs' initial states,
concatenated) and outputs (the graph's rnn/TensorArrayStack/TensorArrayGatherV3, [T, B, 128])
with keep_prob 1. tests/porting/test_tf1.py::test_published_frozen_graph_cutkum runs TF on the
same inputs and checks these outputs are what TF computes there.
"""

import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
T, B = 5, 3
LENGTHS = np.array([5, 2, 4], np.int32)


def run_graph(x, lengths, state):
    graph_def = tf.compat.v1.GraphDef()
    with open(os.path.join(HERE, "frozen_model.pb"), "rb") as fh:
        graph_def.ParseFromString(fh.read())
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            return sess.run(
                "rnn/TensorArrayStack/TensorArrayGatherV3:0",
                {
                    "placeholder/inputs:0": x,
                    "placeholder/seq_lengths:0": lengths,
                    "placeholder/fw_state:0": state,
                    "placeholder/keep_prob:0": 1.0,
                },
            )


def main():
    r = np.random.default_rng(31)
    x = r.standard_normal((T, B, 80)).astype(np.float32)
    state = (0.5 * r.standard_normal((1, B, 896))).astype(np.float32)
    outputs = run_graph(x, LENGTHS, state)
    np.savez(os.path.join(HERE, "expected.npz"), x=x, lengths=LENGTHS, state=state,
             outputs=outputs)  # fmt: skip
    print("wrote expected.npz: TF", tf.__version__, "outputs", outputs.shape)


if __name__ == "__main__":
    main()
