"""Frozen GraphDefs (TF1's deployment format: `freeze_graph`, `convert_variables_to_constants`),
read without TensorFlow: binary `.pb` or text `.pbtxt`.

Freezing replaces each variable with a `Const` node of the same name holding its value (the
`<name>/read` identities stay), so the weights are the graph's floating-point constants and the
cells are found as in a TF1 meta graph (`graphs/tf1_cells.py`, `describe/tf1_cells.py`): by the
variables' scopes and leaf names, then by the ops that read them. The variables of a frozen graph
are its `Const` nodes holding floating-point tensors of rank >= 1 (scalars are an op's constants: a
forget bias, a clip); those that are no recurrent cell's are listed as left out.
"""

from __future__ import annotations

import os
import re

import numpy as np

from ..decoding import guard, proto, textproto
from ..graphs.graph_def import graph_from_graph_def
from ..source import Source, Writer

__all__ = ["is_graph_def", "read_graph_def"]

_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/>]*")
_OP = re.compile(r"[A-Za-z_][A-Za-z0-9_>]*")


def _check_nodes(path: str, data: bytes) -> int:
    """The number of nodes of a GraphDef, or ValueError when `data` is not one (every node must
    have a TF node name and an op name)."""
    try:
        nodes = proto.fields(data).get(1, [])
        for buf in nodes:
            f = proto.fields(buf)
            name = proto.string(f, 1)
            op = proto.string(f, 2)
            if not _NAME.fullmatch(name) or not _OP.fullmatch(op):
                raise ValueError(f"a node named {name[:40]!r} with op {op[:40]!r}")
    except ValueError as err:
        raise ValueError(f"{path}: not a GraphDef ({err})") from err
    if not nodes:
        raise ValueError(f"{path}: not a GraphDef (no nodes)")
    return len(nodes)


def _load(path: str) -> tuple[bytes, str]:
    with open(path, "rb") as fh:
        data = fh.read()
    if path.endswith(".pbtxt"):
        try:
            text = data.decode()
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: a .pbtxt that is not UTF-8 text ({err})") from err
        try:
            return textproto.to_wire(text, "GraphDef"), "text"
        except ValueError as err:
            raise ValueError(f"{path}: not a GraphDef in text form ({err})") from err
    return data, "binary"


def is_graph_def(path: str) -> bool:
    """A `.pb` / `.pbtxt` file (not a SavedModel's `saved_model.pb`, which the SavedModel
    reader takes with its directory)."""
    return (
        os.path.isfile(path)
        and path.endswith((".pb", ".pbtxt"))
        and not os.path.basename(path).startswith("saved_model.")
    )


def read_graph_def(path: str) -> Source:
    data, form = _load(path)
    count = _check_nodes(path, data)
    with guard.reading(path, "frozen GraphDef"):
        graph = graph_from_graph_def(data, label="frozen graph")
        f = proto.fields(data)
        versions = proto.fields(proto.message(f, 4))  # VersionDef {producer = 1}
        producer = proto.integer(versions, 1, None)
    variables = {}
    for name, node in graph.nodes.items():
        if node.op != "Const" or "::" in name:  # function bodies' constants are the ops'
            continue
        value = node.attrs.get("value")
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim:
            variables[name] = value
    # TF 2's convert_variables_to_constants_v2 names a function's captured variable after the
    # placeholder that held it (`<op>/ReadVariableOp/resource`), not after the variable
    renamed = sorted(n for n in variables if n.endswith("/ReadVariableOp/resource"))
    if renamed:
        raise ValueError(
            f"{path}: a TF 2 function frozen by convert_variables_to_constants_v2: its weights "
            f"are named after the ops that read them ({renamed[0]}, ...), not after their "
            "variables, which tell this converter the layers; convert the SavedModel, Keras "
            "file or checkpoint the function came from"
        )
    how = "a frozen GraphDef" + (f" (graph version {producer})" if producer else "")
    source = Source(
        path,
        f"frozen GraphDef ({form}, {count} nodes; weights from Const nodes)",
        Writer("tf1", how=how),
        variables,
        {n: n for n in variables},
    )
    source.graph = graph
    return source
