"""SavedModels of Keras 3 RNN models as a machine with a visible CUDA GPU writes them, written
on a machine without one.

Keras 3's TF backend chooses the cuDNN path of an LSTM or GRU layer when it traces the layer's
call (`keras/src/backend/tensorflow/rnn.py`: `lstm` and `gru` call `cudnn_ok`, and
`_cudnn_lstm` / `_cudnn_gru` emit `tf.raw_ops.CudnnRNNV3` in place of the `While` loop of
`rnn`). Besides the layer's own arguments (`_do_lstm_arguments_support_cudnn`,
`_do_gru_arguments_support_cudnn`, and, in `keras/src/layers/rnn/lstm.py` and `gru.py`,
`use_cudnn` and `recurrent_dropout`), it reads two facts of the machine:

- a GPU is visible: `cudnn_ok` returns `_is_gpu_available()`, which is
  `bool(tf.config.list_logical_devices("GPU"))`;
- the TF build: `tf.sysconfig.get_build_info()["is_cuda_build"]` decides whether `_cudnn_gru`
  swaps the z and r blocks of the weights into cuDNN's gate order, and `["is_rocm_build"]`
  whether `_cudnn_lstm` reorders the LSTM's gates for MIOpen.

`cudnn_tracing` states those facts, and only those, while it is open: `_is_gpu_available` is
replaced by a function returning True, and `get_build_info` by one returning TF's own build
information with `is_cuda_build` True and `is_rocm_build` False (what a CUDA wheel reports).
Everything else Keras does is its own code, so the graph it traces is the one a GPU machine
traces. Keras pins no op to a device (no `tf.device` in those functions), and tracing and saving
need only the op's registration, which the CPU build holds too, not a kernel; so the graph is
written as traced, with no device in its nodes. Running it needs a GPU: TF has no CPU kernel for
`CudnnRNNV3`. A layer called eagerly inside the context gets TF's InvalidArgumentError (no
kernel), which `lstm` / `gru` turn into NotImplementedError and the layer answers with its loop;
so an eager call there still runs, and only what is traced holds the cuDNN path.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from unittest import mock

__all__ = ["cudnn_tracing", "export_cudnn_traced", "has_cudnn_and_no_loop"]

LOOP_OPS = ("While", "StatelessWhile")
CUDNN_OP = "CudnnRNNV3"


@contextlib.contextmanager
def cudnn_tracing(build_info: bool = True):
    """Keras' TF backend sees a visible GPU and (`build_info`) a CUDA build of TF while this is
    open; `build_info=False` leaves TF's build information as it is."""
    import tensorflow as tf

    # the module (its package exports a function of the same name)
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    own = tf.sysconfig.get_build_info

    def cuda_build_info():
        # a copy: TF returns its own module-level dict
        return {**own(), "is_cuda_build": True, "is_rocm_build": False}

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(rnn, "_is_gpu_available", lambda: True))
        if build_info:
            stack.enter_context(mock.patch.object(tf.sysconfig, "get_build_info", cuda_build_info))
        yield


def export_cudnn_traced(model, path, how: str = "export", build_info: bool = True):
    """Write `model` to the SavedModel directory `path`, traced under `cudnn_tracing`.

    how="export": `model.export(path, format="tf_saved_model")` (Keras' ExportArchive, the
    signature "serve"); how="saved_model": `tf.saved_model.save(model, path)` (the model's
    default signature "serving_default"). The model must be built (called once) beforehand.
    `build_info`: as for `cudnn_tracing`.
    """
    import tensorflow as tf

    if how not in ("export", "saved_model"):
        raise ValueError(f"how must be 'export' or 'saved_model', not {how!r}")
    with cudnn_tracing(build_info):
        if how == "export":
            model.export(path, format="tf_saved_model", verbose=False)
        else:
            tf.saved_model.save(model, path)
    return path


def _saved_model(path):
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    return saved


def has_cudnn_and_no_loop(path) -> tuple[bool, str]:
    """Whether the SavedModel at `path` holds a CudnnRNNV3 node and no While/StatelessWhile
    (in its main graph or any library function), and a line saying what it holds."""
    cudnn, loops = [], []
    for meta_graph in _saved_model(path).meta_graphs:
        graph = meta_graph.graph_def
        bodies = [("", graph.node)]
        bodies += [(f.signature.name, f.node_def) for f in graph.library.function]
        for where, nodes in bodies:
            for node in nodes:
                name = f"{where}::{node.name}" if where else node.name
                if node.op == CUDNN_OP:
                    cudnn.append(name)
                elif node.op in LOOP_OPS:
                    loops.append(name)
    line = f"{len(cudnn)} {CUDNN_OP} node(s); "
    line += f"loops: {', '.join(sorted(loops))}" if loops else "no While/StatelessWhile"
    return bool(cudnn) and not loops, line
