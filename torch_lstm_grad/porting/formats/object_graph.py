"""TF2 checkpoints' object graph, read without TensorFlow.

A `tf.train.Checkpoint` (and Keras' TF-format `save_weights`) stores, next to the tensors, a
string tensor `_CHECKPOINTABLE_OBJECT_GRAPH`: a serialized TrackableObjectGraph
(tensorflow/core/protobuf/trackable_object_graph.proto). Its `nodes` (= 1) are the tracked
objects, node 0 the root; each `TrackableObject` has `children` (= 1: ObjectReference
{node_id = 1, local_name = 2}), `attributes` (= 2: SerializedTensor {name = 1, full_name = 2,
checkpoint_key = 3}; a variable's value is the attribute named `VARIABLE_VALUE`) and
`slot_variables` (= 3, not read: a slot is reached only through its optimizer, which is what
makes it optimizer state here).

A variable's checkpoint key is the *first* path TF found to it, which after `model.fit` is often
the optimizer's (`optimizer/_trainable_variables/0/...`): the key says nothing about the layer.
Its `full_name` is the variable's own name (Keras: `<layer>/<cell>/<weight>`, e.g.
`lstm/lstm_cell/kernel`, `bidirectional/forward_lstm/lstm_cell/kernel`), and the graph holds every
path to it. `read_object_graph` returns, per variable, the key, the full name and the model's
own path (one that does not go through an `optimizer` edge), and tells model variables from
optimizer state (slots, moments, iteration counters).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..decoding import proto

__all__ = ["GraphVariable", "read_object_graph"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_OPTIMIZER_EDGES = {"optimizer"}


@dataclass(frozen=True)
class GraphVariable:
    checkpoint_key: str
    full_name: str  # the variable's own name ("" when TF stored none)
    path: str | None  # the model's path to it ("a/b/c"), None when only the optimizer holds it
    optimizer_state: bool  # a slot, moment or counter of an optimizer, not a model weight
    node: int = -1  # the object's number in the graph (a SavedModel's object graph shares it)


def _nodes(data: bytes):
    out = []
    for node in proto.fields(data).get(1, []):
        f = proto.fields(node)
        children = [
            (proto.integer(c, 1), proto.string(c, 2)) for c in map(proto.fields, f.get(1, []))
        ]
        attrs = [
            (proto.string(a, 1), proto.string(a, 2), proto.string(a, 3))
            for a in map(proto.fields, f.get(2, []))
        ]
        out.append((children, attrs))
    return out


def _paths(nodes, skip: set[str], budget: int) -> dict[int, str]:
    """Shortest path (local names joined by "/") from the root to every node reachable without
    crossing an edge named in `skip`. Each node's path repeats its parents' names: a hostile
    graph (a long chain of long names) would make them quadratic in its size, so their total
    length is bounded by `budget`."""
    seen = {0: ""}
    queue = deque([0])
    while queue:
        n = queue.popleft()
        for child, name in nodes[n][0]:
            if name in skip or child in seen or not 0 <= child < len(nodes):
                continue
            seen[child] = f"{seen[n]}/{name}" if seen[n] else name
            budget -= len(seen[child])
            if budget < 0:
                raise ValueError("object graph: its paths are too long for its size")
            queue.append(child)
    return seen


def read_object_graph(data: bytes) -> list[GraphVariable]:
    """The variables of a serialized TrackableObjectGraph (see the module docstring)."""
    nodes = _nodes(data)
    if not nodes:
        return []
    budget = 16 * len(data) + (1 << 20)  # real graphs' paths take a few times their size
    model = _paths(nodes, _OPTIMIZER_EDGES, budget)
    anywhere = _paths(nodes, set(), budget)
    out = []
    for i, (_, attrs) in enumerate(nodes):
        for name, full_name, key in attrs:
            if name != "VARIABLE_VALUE":
                continue
            path = model.get(i)
            # Keras 3 optimizers list the weights they update under `_trainable_variables`:
            # those are model weights even when nothing else in the checkpoint leads to them.
            trained = "/_trainable_variables/" in f"/{anywhere.get(i, '')}"
            out.append(
                GraphVariable(
                    checkpoint_key=key,
                    full_name=full_name,
                    path=path,
                    optimizer_state=path is None and not trained,
                    node=i,
                )
            )
    return out
