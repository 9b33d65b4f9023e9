"""TF checkpoints (`<prefix>.index` + `.data-*`): TF1 `Saver` and TF2 `tf.train.Checkpoint` /
Keras' TF-format `save_weights`.

Tensors are read with `tf.train.load_checkpoint` when TensorFlow imports, else with the
TF-free `tensorbundle.TensorBundleReader` (`reader="tensorflow" | "tensorbundle" | "auto"`, or
the environment variable TORCH_LSTM_GRAD_CHECKPOINT_READER). Then:

* TF2 (the checkpoint holds `_CHECKPOINTABLE_OBJECT_GRAPH`): the object graph names each
  variable (`object_graph.py`): Keras layers' variables get their Keras names
  (`lstm/lstm_cell/kernel`) whatever path the checkpoint key took, optimizer state is set
  aside. The graph's object names tell Keras 3 (`_operations`, `_functional`, `_tracked`)
  from tf.keras (`layer_with_weights-N`), whose version the checkpoint does not store.
* TF1: variables keep their names; the `<prefix>.meta` graph, when it is there, is read for the
  cells' attributes (`graphs/tf1_cells.py`).
"""

from __future__ import annotations

import os

import numpy as np

from ..decoding import guard
from ..source import Source, Writer
from .object_graph import OBJECT_GRAPH_KEY, read_object_graph

__all__ = ["READER_ENV", "open_checkpoint", "read_checkpoint"]

READER_ENV = "TORCH_LSTM_GRAD_CHECKPOINT_READER"
_READERS = ("auto", "tensorflow", "tensorbundle")
_KERAS3_OBJECTS = ("_operations", "_functional", "_tracked", "_layers")
_TF_KERAS_OBJECTS = ("layer_with_weights-", "layer-")
_TF1_COUNTERS = {"beta1_power", "beta2_power", "global_step"}
# What convert tried before the checkpoint reader (convert.read_source).
_NOT_READ = (
    "not a SavedModel directory, a frozen GraphDef (.pb, .pbtxt), a Keras file (.keras, .h5) "
    "nor a readable TF checkpoint prefix"
)


class _Reader:
    """The two readers behind one interface: names -> shapes, float tensors, string tensors.

    Either way the package's own reader opens the checkpoint first and checks its index (block
    checksums, every entry parsed, each tensor's bytes inside its data file and as many as its
    shape takes, slices inside their variable): TF's reader aborts the whole process (a C++
    CHECK) on an index entry it cannot parse or a shape it cannot hold, and allocates what a
    hostile entry's shape says. TF's reader then checks each tensor's crc32c as it reads it,
    the package's own likewise."""

    def __init__(self, path: str, kind: str):
        from .tensorbundle import TensorBundleReader

        self.kind, self.path = kind, path
        try:
            self.bundle = TensorBundleReader(path)
        except FileNotFoundError as err:
            raise ValueError(f"{path}: {_NOT_READ} ({err})") from err
        except (OSError, ValueError) as err:
            if not os.path.isfile(path + ".index") or "not an SSTable" in str(err):
                raise ValueError(f"{path}: {_NOT_READ} ({err})") from err
            if path in str(err):  # it names the index or data file and the check
                raise guard.CorruptFile(str(err)) from err
            raise guard.CorruptFile(f"{path}: a TF checkpoint that cannot be read: {err}") from err
        self.dtypes = self.bundle.get_variable_to_dtype_map()
        if kind == "tensorflow":
            import tensorflow as tf

            with guard.reading(path, "TF's checkpoint reader", ("tensorflow",)):
                self.r = tf.train.load_checkpoint(path)
                self.shapes = self.r.get_variable_to_shape_map()
        else:
            self.r = self.bundle
            self.shapes = self.bundle.get_variable_to_shape_map()

    def float_tensor(self, name: str) -> np.ndarray | None:
        if self.dtypes.get(name) in ("string", "resource", "variant"):
            return None
        with guard.reading(self.path, f"tensor {name!r}", ("tensorflow",)):
            value = np.asarray(self.r.get_tensor(name))
        if value.dtype.name == "bfloat16":  # TF's (ml_dtypes) bfloat16: widened exactly
            return value.astype(np.float32)
        return value if value.dtype.kind == "f" else None

    def bytes_tensor(self, name: str) -> bytes:
        with guard.reading(self.path, f"tensor {name!r}", ("tensorflow",)):
            if self.kind == "tensorflow":
                value = self.r.get_tensor(name)
            else:
                value = self.r.get_strings(name)[0]
        if not isinstance(value, bytes):
            raise guard.CorruptFile(f"{self.path}: tensor {name!r} is not a string")
        return value


def open_checkpoint(path: str, reader: str | None = None) -> _Reader:
    if reader is None:
        reader = os.environ.get(READER_ENV) or "auto"
    if reader not in _READERS:
        raise ValueError(f"reader={reader!r}: expected one of {_READERS}")
    if reader == "auto":
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            reader = "tensorbundle"
        else:
            reader = "tensorflow"
    return _Reader(path, reader)


def _tf2_writer(paths: list[str]) -> Writer:
    parts = {p for path in paths for p in path.split("/")}
    if parts & set(_KERAS3_OBJECTS):
        return Writer("keras", None, 3, "Keras 3's object names in the checkpoint")
    if any(p.startswith(_TF_KERAS_OBJECTS) for p in parts):
        return Writer(
            "keras", None, 2, "tf.keras' object names in the checkpoint; its version is not stored"
        )
    return Writer("tf2", how="a TF2 object checkpoint")


def read_checkpoint(path: str, reader: str | None = None) -> Source:
    r = open_checkpoint(path, reader)
    if OBJECT_GRAPH_KEY not in r.shapes:
        variables, ignored = {}, {}
        for name in sorted(r.shapes):
            owner = name.rpartition("/")[0]
            if owner in r.shapes:  # TF1 optimizers name a slot `<variable>/<Optimizer>[_N]`
                ignored[name] = f"optimizer slot of {owner}"
            elif name in _TF1_COUNTERS:
                ignored[name] = "optimizer or training counter"
            elif (value := r.float_tensor(name)) is None:
                ignored[name] = "not a floating-point tensor"
            else:
                variables[name] = value
        source = Source(
            path,
            "TF1 checkpoint (Saver)",
            Writer("tf1", how="a TF1 Saver checkpoint"),
            variables,
            {n: n for n in variables},
            ignored=ignored,
        )
        meta = path + ".meta"
        if os.path.isfile(meta):
            from ..graphs.graph_def import read_meta_graph

            source.graph = read_meta_graph(meta)
            source.format += f" with its meta graph ({os.path.basename(meta)})"
        return source
    with guard.reading(path, f"the object graph ({OBJECT_GRAPH_KEY})"):
        graph = read_object_graph(r.bytes_tensor(OBJECT_GRAPH_KEY))
    full_names = [g.full_name for g in graph if not g.optimizer_state]
    variables, keys, ignored = {}, {}, {}
    for g in graph:
        key = g.checkpoint_key
        if g.optimizer_state:
            ignored[key] = f"optimizer state ({g.full_name or 'unnamed'})"
            continue
        # A variable's own name is its Keras name; a path stands in where names repeat.
        name = (
            g.full_name
            if g.full_name and full_names.count(g.full_name) == 1
            else (g.path or key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE"))
        )
        value = r.float_tensor(key) if key in r.shapes else None
        if value is None:
            ignored[key] = "not a floating-point tensor" if key in r.shapes else "not in the file"
            continue
        variables[name], keys[name] = value, key
    for name in r.shapes:
        if name != OBJECT_GRAPH_KEY and name not in keys.values() and name not in ignored:
            ignored[name] = "not a variable of the object graph"
    writer = _tf2_writer([g.path or "" for g in graph] + [g.checkpoint_key for g in graph])
    return Source(
        path, "TF2 object checkpoint (object graph read)", writer, variables, keys, ignored=ignored
    )
