"""SavedModel directories (TF2's export format: `tf.saved_model.save`, Keras 3's `export()`,
tf.keras' `save_format="tf"`; TF1's `SavedModelBuilder`), read without TensorFlow.

`saved_model.pb` is a SavedModel (tensorflow/core/protobuf/saved_model.proto: meta_graphs = 2)
of MetaGraphDefs (meta_graph.proto: meta_info_def = 1 {tags = 4, tensorflow_version = 5},
graph_def = 2, signature_def = 5 map<name, SignatureDef {outputs = 2 map<key, TensorInfo
{name = 1}>}>, object_graph_def = 7). The object graph (saved_object_graph.proto) lists every
saved object: nodes = 1 (SavedObject: children = 1 {node_id = 1, local_name = 2}, user_object = 4
{identifier = 1, metadata = 3}, variable = 7 {name = 6}) and concrete_functions = 2
(map<function, SavedConcreteFunction {bound_inputs = 2}>: the object nodes a function captures,
its last arguments, in order).

The variables are a checkpoint, `variables/variables.{index,data-*}`, read as `checkpoint.py`
reads one (TensorFlow or the TF-free reader). TF2: its object graph numbers the objects as the
SavedModel's does, and each SavedVariable carries the variable's own name
(`lstm/lstm_cell/kernel`, Keras 3 `sequential/lstm/lstm_cell/kernel`). TF1 (SavedModelBuilder):
no object graph; the variables keep their TF1 names and the meta graph is read as a TF1
checkpoint's `.meta`.

What each layer computed:
* `keras_metadata.pb` (tf.keras / tf_keras 2.x; SavedMetadata {nodes = 1 {node_path = 3,
  identifier = 4, metadata = 5 (JSON)}}; before TF 2.5 the same JSON in the object graph's
  `user_object.metadata`): the model config and the Keras version, as a `.h5` file's;
* otherwise (Keras 3, `tf.saved_model.save`) the saved functions' graphs: `graphs/keras_loops.py`
  reads each recurrent layer back from the loop that computes it, in the functions the chosen
  signature runs (`serving_default`, or `signature=`);
* TF1: the cells' op patterns (`graphs/tf1_cells.py`), as for a checkpoint with its meta graph.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from ..decoding import guard, proto
from ..graphs.graph_def import Graph, graph_from_graph_def, meta_graph_parts
from ..graphs.keras_loops import keras_layers_from_graph
from ..source import Source, Writer, keras_rnn_scopes, keras_version_tuple
from .checkpoint import open_checkpoint, read_checkpoint
from .keras_files import layers_from_config
from .object_graph import OBJECT_GRAPH_KEY, read_object_graph

__all__ = ["is_saved_model", "read_saved_model", "saved_model_dir"]

DEFAULT_SIGNATURE = "serving_default"
_INIT_SIGNATURE = "__saved_model_init_op"


def saved_model_dir(path: str) -> str | None:
    """The SavedModel directory `path` names (the directory, or its `saved_model.pb`), or None."""
    if os.path.isdir(path):
        for name in ("saved_model.pb", "saved_model.pbtxt"):
            if os.path.isfile(os.path.join(path, name)):
                return path
        return None
    if os.path.isfile(path) and os.path.basename(path) in ("saved_model.pb", "saved_model.pbtxt"):
        return os.path.dirname(path) or "."
    return None


def is_saved_model(path: str) -> bool:
    return saved_model_dir(path) is not None


@dataclass
class SavedObjects:
    """The object graph: per node its user-object identifier, its variable name; per saved
    concrete function the nodes it captures (what reads a layer needs: the checkpoint's own
    object graph gives the paths)."""

    identifiers: dict[int, str] = field(default_factory=dict)
    metadata: dict[int, bytes] = field(default_factory=dict)
    # node -> its path from the root (node 0): "root", "root.lstm", "root.lstm.cell", ...
    paths: dict[int, str] = field(default_factory=dict)
    variable_names: dict[int, str] = field(default_factory=dict)
    bound_inputs: dict[str, list[int]] = field(default_factory=dict)


def _objects(buf: bytes) -> SavedObjects:
    out = SavedObjects()
    f = proto.fields(buf)
    nodes = f.get(1, [])
    out.paths[0] = "root"
    for i, node in enumerate(nodes):
        n = proto.fields(node)
        for child in map(proto.fields, n.get(1, [])):
            c = proto.integer(child, 1)
            # the first path to a node is its own (keras_metadata.pb's node_path rule); TF
            # lists the nodes breadth first, so a parent's path is known before its children
            if i in out.paths and c not in out.paths and 0 <= c < len(nodes):
                out.paths[c] = f"{out.paths[i]}.{proto.string(child, 2)}"
        if 4 in n:
            u = proto.fields(proto.message(n, 4))
            out.identifiers[i] = proto.string(u, 1)
            if proto.message(u, 3):
                out.metadata[i] = proto.message(u, 3)
        if 7 in n:
            out.variable_names[i] = proto.string(proto.fields(proto.message(n, 7)), 6)
    for entry in f.get(2, []):
        e = proto.fields(entry)
        fn = proto.fields(proto.message(e, 2))
        out.bound_inputs[proto.string(e, 1)] = proto.packed_varints(fn.get(2, []))
    return out


@dataclass
class MetaGraph:
    tags: list[str]
    tf_version: str
    graph_def: bytes
    signatures: dict[str, list[str]]  # name -> output tensor names ("node:k")
    objects: SavedObjects | None


def _meta_graphs(path: str, data: bytes) -> list[MetaGraph]:
    out = []
    for buf in proto.fields(data).get(2, []):
        m = proto.fields(buf)
        info = proto.fields(proto.message(m, 1))
        graph_def, version = meta_graph_parts(buf)
        signatures = {}
        for entry in m.get(5, []):
            e = proto.fields(entry)
            sig = proto.fields(proto.message(e, 2))
            outputs = [
                proto.string(proto.fields(proto.message(proto.fields(o), 2)), 1)
                for o in sig.get(2, [])
            ]
            signatures[proto.string(e, 1)] = outputs
        objects = _objects(proto.message(m, 7)) if 7 in m else None
        out.append(MetaGraph(proto.strings(info, 4), version, graph_def, signatures, objects))
    if not out:
        raise ValueError(f"{path}: a saved_model.pb without meta graphs")
    return out


def _choose_meta_graph(path: str, graphs: list[MetaGraph]) -> MetaGraph:
    serving = [g for g in graphs if "serve" in g.tags]
    if len(graphs) == 1 or len(serving) == 1:
        return graphs[0] if len(graphs) == 1 else serving[0]
    raise ValueError(
        f"{path}: {len(graphs)} meta graphs (tag sets "
        f"{', '.join('+'.join(g.tags) or '(none)' for g in graphs)}) and not one tagged 'serve': "
        "cannot tell which one to port"
    )


def choose_signature(path: str, meta: MetaGraph, signature: str | None) -> str | None:
    """The signature whose functions describe the layers: `signature`, else serving_default,
    else the only one; None where the SavedModel has no signatures."""
    names = sorted(n for n in meta.signatures if n != _INIT_SIGNATURE)
    if signature is not None:
        if signature not in names:
            raise ValueError(
                f"--signature {signature}: {path} has no such signature (it has: "
                f"{', '.join(names) or 'none'})"
            )
        return signature
    if DEFAULT_SIGNATURE in names:
        return DEFAULT_SIGNATURE
    if len(names) == 1:
        return names[0]
    if not names:
        return None
    raise ValueError(
        f"{path}: several signatures and no {DEFAULT_SIGNATURE!r} ({', '.join(names)}): "
        "choose one with --signature NAME"
    )


# -- Keras' stored configs ------------------------------------------------------------------------


def _keras_metadata(directory: str, objects: SavedObjects):
    """`({node path: model or layer JSON dict}, where)` from keras_metadata.pb (node
    paths "root", "root.lstm", ...), else from the object graph's user_object.metadata (tf.keras
    before TF 2.5: the same paths from its children); `({}, "")` when neither stores any."""
    path = os.path.join(directory, "keras_metadata.pb")
    entries: list[tuple[str, bytes]] = []
    where = ""
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            data = fh.read()
        with guard.reading(path, "keras_metadata.pb (SavedMetadata)"):
            for node in map(proto.fields, proto.fields(data).get(1, [])):
                entries.append((proto.string(node, 3), proto.message(node, 5)))
        where = "keras_metadata.pb"
    elif objects.metadata:
        entries = [(objects.paths.get(i, f"node {i}"), raw) for i, raw in objects.metadata.items()]
        where = "the object graph's user_object.metadata"
    out = {}
    for key, raw in entries:
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError) as err:  # the C decoder's nesting limit
            raise guard.CorruptFile(f"{directory}: {where}: an entry is not JSON ({err})") from err
        if isinstance(value, dict):
            out[key] = value
    return out, where


def _layered_config(entry: dict) -> dict | None:
    """A model entry's config with its layers (Sequential, Functional), else None: a layer's,
    or a subclassed model's (its `get_config()` lists no layers)."""
    config = entry.get("model_config") or {
        "class_name": entry.get("class_name"),
        "config": entry.get("config"),
    }
    return config if "layers" in (config.get("config") or {}) else None


def _subclassed_layers(entries: dict) -> list[dict]:
    """The layer entries of a subclassed model (root): each layer held by it or by a subclassed
    model in it, a Sequential or Functional model in it whole (its config lists its layers), and
    not the layers inside those (a Bidirectional's halves, an RNN's cell, a nested model's
    layers: their owner's config holds them)."""
    owners = {k for k, e in entries.items() if "is_graph_network" in e and not _layered_config(e)}
    return [
        e
        for k, e in entries.items()
        if k not in owners and k.rpartition(".")[0] in owners and "config" in e
    ]


def _apply_keras_metadata(source: Source, entries: dict, where: str) -> None:
    version = next(
        (str(e["keras_version"]) for e in entries.values() if e.get("keras_version")), None
    )
    # The saved model's own config where it lists its layers; a subclassed model's lists none
    # (its get_config() is the base Model's): then each of its layers' own entries. A Keras
    # model held by an object that is not Keras (tf.saved_model.save of a tf.Module): the
    # outermost model, the first in the object graph's breadth-first order.
    models = (e for e in entries.values() if "is_graph_network" in e)
    root = entries.get("root") or next(models, None)
    config = _layered_config(root) if root is not None else None
    if config is None:
        config = {"class_name": "Model", "config": {"layers": _subclassed_layers(entries)}}
    source.model_config = config if isinstance(config, dict) else None
    source.layers, source.mask_layers = layers_from_config(config)
    source.config_origin = where
    major = keras_version_tuple(version)[0] if version else 2
    source.writer = Writer(
        "keras",
        version,
        major,
        where + ("" if version else " (no keras_version: tf.keras 2)"),
    )


# -- variables ------------------------------------------------------------------------------------


def _tf2_variables(prefix: str, reader, objects: SavedObjects):
    """Variables by their SavedVariable names; duplicates of one name (Keras 3 saves some
    variables twice) kept once when their values are equal."""
    r = open_checkpoint(prefix, reader)
    with guard.reading(prefix, f"the object graph ({OBJECT_GRAPH_KEY})"):
        nodes = read_object_graph(r.bytes_tensor(OBJECT_GRAPH_KEY))
    bound = {i for ids in objects.bound_inputs.values() for i in ids}
    variables: dict[str, np.ndarray] = {}
    keys: dict[str, str] = {}
    ignored: dict[str, str] = {}
    by_name: dict[str, int] = {}
    for g in sorted(nodes, key=lambda g: (g.node not in bound, g.node)):
        key = g.checkpoint_key
        name = objects.variable_names.get(g.node) or g.full_name or g.path or key
        if g.optimizer_state:
            ignored[key] = f"optimizer state ({name})"
            continue
        value = r.float_tensor(key) if key in r.shapes else None
        if value is None:
            ignored[key] = "not a floating-point tensor" if key in r.shapes else "not in the file"
            continue
        if name in variables:
            if (
                variables[name].shape == value.shape
                and variables[name].tobytes() == value.tobytes()
            ):
                ignored[key] = f"another copy of {name} (the same values)"
                continue
            name = g.path or key
        variables[name], keys[name] = value, key
        by_name[name] = g.node
    return variables, keys, ignored, by_name


def _link_variables(graph: Graph, objects: SavedObjects, by_name: dict[str, int]) -> None:
    """`graph.aliases`: each variable's nodes. A concrete function's last arguments are the
    objects it captures (bound_inputs); a call passes them the main graph's VarHandleOps."""
    name_of = {node: name for name, node in by_name.items()}
    aliases: dict[str, set[str]] = {}
    for fname, bound in objects.bound_inputs.items():
        args = graph.functions.get(fname)
        if not args or not bound or len(bound) > len(args):
            continue
        for arg, node in zip(args[len(args) - len(bound) :], bound, strict=True):
            if node in name_of:
                aliases.setdefault(name_of[node], set()).add(graph.resolve((arg, 0))[0])
    graph.aliases = {n: sorted(keys) for n, keys in aliases.items()}


def read_saved_model(path: str, reader: str | None = None, signature: str | None = None) -> Source:
    directory = saved_model_dir(path)
    if directory is None:
        raise ValueError(f"{path}: not a SavedModel directory (no saved_model.pb)")
    pb = os.path.join(directory, "saved_model.pb")
    if not os.path.isfile(pb):
        raise ValueError(
            f"{directory}: saved_model.pbtxt (the text form) is not read; save the model in the "
            "binary form (the default of tf.saved_model.save)"
        )
    with open(pb, "rb") as fh:
        data = fh.read()
    try:
        meta = _choose_meta_graph(pb, _meta_graphs(pb, data))
    except ValueError as err:
        raise guard.CorruptFile(f"{pb}: not a readable SavedModel ({err})") from err
    chosen = choose_signature(directory, meta, signature)
    prefix = os.path.join(directory, "variables", "variables")
    if not os.path.isfile(prefix + ".index"):
        raise ValueError(
            f"{directory}: no variables/variables.index (a SavedModel without variables)"
        )
    label = "SavedModel's graph" + (f" (signature {chosen})" if chosen else "")
    with guard.reading(pb, "the meta graph's GraphDef"):
        graph = graph_from_graph_def(meta.graph_def, label)
    graph.signature_outputs = meta.signatures.get(chosen, []) if chosen else []
    r = open_checkpoint(prefix, reader)
    if OBJECT_GRAPH_KEY not in r.shapes:  # TF1: SavedModelBuilder
        source = read_checkpoint(prefix, reader)
        source.path = directory
        source.format = f"TF1 SavedModel (tags {'+'.join(meta.tags)}; TF {meta.tf_version})"
        source.writer = Writer("tf1", how="a TF1 SavedModel (SavedModelBuilder)")
        graph.label = "SavedModel's meta graph"
        source.graph = graph
        return source
    if meta.objects is None:
        raise ValueError(f"{pb}: a TF2 SavedModel (object-based variables) without an object graph")
    variables, keys, ignored, by_name = _tf2_variables(prefix, reader, meta.objects)
    _link_variables(graph, meta.objects, by_name)
    entries, where = _keras_metadata(directory, meta.objects)
    where_path = (
        os.path.join(directory, "keras_metadata.pb") if where == "keras_metadata.pb" else pb
    )
    identifiers = set(meta.objects.identifiers.values())
    source = Source(
        directory,
        f"TF2 SavedModel (tags {'+'.join(meta.tags)}; TF {meta.tf_version}"
        + (f"; signature {chosen}" if chosen else "")
        + ")",
        Writer("tf2", how="a TF2 SavedModel"),
        variables,
        keys,
        ignored=ignored,
    )
    source.graph = graph
    source.signature = chosen
    if entries:
        with guard.reading(where_path, f"the Keras model config in {where}", ("json",)):
            _apply_keras_metadata(source, entries, where)
        source.format += f" with the Keras model config ({where})"
        # The config says what each layer computes; the saved loops, where they read, say where
        # it runs in the functions (for `verify` without tf_keras).
        from_graph, _ = keras_layers_from_graph(graph, variables)
        for name, layer in source.layers.items():
            read = from_graph.get(name)
            if read is not None and read.problem is None:
                layer.graph_io = read.graph_io
    elif keras_rnn_scopes(variables):
        # No config: each layer as the saved loop that computes it.
        tf_keras = any(i.startswith("_tf_keras") for i in identifiers)
        source.writer = Writer(
            "keras",
            None,
            2 if tf_keras else 3,
            "tf.keras' layer objects in the object graph"
            if tf_keras
            else "Keras variable names without tf.keras' layer objects (Keras 3)",
        )
        source.layers, not_run = keras_layers_from_graph(graph, variables)
        for layer, names in not_run.items():
            for name in names:
                del variables[name]
                source.ignored[name] = f"layer {layer} is not run by signature {chosen}"
        source.config_origin = "the SavedModel's saved functions"
        source.format += ", layers read from its saved functions (no Keras config stored)"
    return source
