"""Test helper: call TensorFlow raw ops (CPU) on torch tensors and get torch tensors back.

Not a test module. TensorFlow is optional: check :func:`available` (or use
``pytest.importorskip``) first. TF is pinned to one intra-op and one inter-op thread so that its
GEMM summation order is deterministic.
"""

import importlib

import torch

_tf = None


def available():
    """Whether TensorFlow can be imported."""
    try:
        importlib.import_module("tensorflow")
    except ImportError:
        return False
    return True


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
