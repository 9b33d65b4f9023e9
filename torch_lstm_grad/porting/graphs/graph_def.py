"""GraphDefs read without TensorFlow: the graph of a TF1 meta graph (`<prefix>.meta`, written by
`Saver.save`), of a frozen graph, and the function library of a SavedModel.

A MetaGraphDef (tensorflow/core/protobuf/meta_graph.proto: meta_info_def = 1 {tensorflow_version
= 5}, graph_def = 2) holds a GraphDef (node = 1, library = 2 {function = 1}); a NodeDef has name
= 1, op = 2, input = 3 ("node", "node:k", "^control"), attr = 5 (map<string, AttrValue>: s = 2,
i = 3, f = 4, b = 5, tensor = 8, func = 10 {name = 1}). Functions (FunctionDef: signature = 1
{input_arg = 2 {name = 1}}, node_def = 3) hold the bodies of TF2-style control flow: TF >= 2
builds `dynamic_rnn`'s loop as a `While`/`StatelessWhile` node whose `body` function receives
the loop's inputs as its arguments, in order; TF1 builds it in the main graph with `Enter`
nodes. `Graph` links both to the values they read, so a matcher (`tf1_cells.py`,
`keras_loops.py`) follows a cell's operands from the loop body out to the variables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..decoding import guard, proto

__all__ = [
    "INPUT_ARGS",
    "OUTPUT_ARGS",
    "Graph",
    "Node",
    "graph_from_graph_def",
    "meta_graph_parts",
    "read_meta_graph",
    "through_identities",
]

_PASS_THROUGH = {"Identity", "ReadVariableOp", "Enter", "RefEnter", "Snapshot"}
_VARIABLES = {"VarHandleOp", "VariableV2", "Variable"}
_ACCUMULATORS = {"TensorListPushBack", "StackPushV2", "StackPush"}
# The fused ops' input arguments, in order (tensorflow/core/ops/rnn_ops.cc): each one tensor.
_LSTM_WEIGHTS = ("w", "wci", "wcf", "wco", "b")
INPUT_ARGS = {
    "BlockLSTM": ("seq_len_max", "x", "cs_prev", "h_prev", *_LSTM_WEIGHTS),
    "BlockLSTMV2": ("seq_len_max", "x", "cs_prev", "h_prev", *_LSTM_WEIGHTS),
    "LSTMBlockCell": ("x", "cs_prev", "h_prev", *_LSTM_WEIGHTS),
    "GRUBlockCell": ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c"),
}
# The number of (data) inputs of the ops whose inputs the matchers read by position: TF imports
# no node with another count, and neither does this reader (a hostile graph would otherwise end
# in an IndexError). Checked against TF's op registry in test_tf1_graph.
_ARITY = {
    # (Add and AddV2 are left to the describers, which refuse the layer whose step holds one,
    # naming it: keras_loops' and tf1_cells' own "has 3 inputs, not 2".)
    **dict.fromkeys(("MatMul", "BiasAdd", "Mul", "Minimum", "Maximum", "Split"), 2),
    **{op: len(args) for op, args in INPUT_ARGS.items()},
}
# A function body names an input "node:argument:k", k counting within the op's output argument;
# the flat index (the main graph's "node:k") adds the outputs of the arguments before it. These
# ops' outputs are several arguments of one tensor each (tensorflow/core/ops/rnn_ops.cc,
# cudnn_rnn_ops.cc); every other op a cell's pattern follows has one output argument, where k
# is the flat index.
_LSTM_OUTPUTS = ("i", "cs", "f", "o", "ci", "co", "h")
_CUDNN_OUTPUTS = ("output", "output_h", "output_c", "reserve_space")
OUTPUT_ARGS = {
    "BlockLSTM": _LSTM_OUTPUTS,
    "BlockLSTMV2": _LSTM_OUTPUTS,
    "LSTMBlockCell": _LSTM_OUTPUTS,
    "GRUBlockCell": ("r", "u", "c", "h"),
    "CudnnRNN": _CUDNN_OUTPUTS,
    "CudnnRNNV2": (*_CUDNN_OUTPUTS, "host_reserved"),
    "CudnnRNNV3": (*_CUDNN_OUTPUTS, "host_reserved"),
}


def _is_gradient(name: str) -> bool:
    """A node of the gradient graph: under a `gradients[_N]` scope (TF1's tf.gradients), or in
    a function TF built for a gradient (`..._grad...`)."""
    function, _, node = name.rpartition("::")
    return "_grad" in function or any(
        p == "gradients" or re.fullmatch(r"gradients_\d+", p) for p in node.split("/")
    )


@dataclass
class Node:
    name: str
    op: str
    inputs: list[tuple[str, int]]  # (node key, output index)
    attrs: dict
    raw: bytes = b""  # the NodeDef as stored (`verify` runs copies of a cell's ops)
    caller: tuple[str, int] | None = None  # a function argument: the node and input feeding it
    varies: bool = False  # a loop variable the loop's body changes (not its input's value)


def _attr_value(buf: bytes):
    f = proto.fields(buf)
    if 2 in f:
        return proto.message(f, 2).decode(errors="replace")
    if 3 in f:
        return proto.int64(proto.integer(f, 3))
    if 4 in f:
        return proto.float32(f, 4)
    if 5 in f:
        return bool(proto.integer(f, 5))
    if 8 in f:
        return proto.tensor_value(proto.message(f, 8))
    if 10 in f:
        return {"func": proto.string(proto.fields(proto.message(f, 10)), 1)}
    if 1 in f:  # a list: its ints (Squeeze's squeeze_dims), other lists not read
        items = proto.fields(proto.message(f, 1))
        if 3 in items:
            return [proto.int64(v) for v in proto.packed_varints(items[3])]
    return None


def _parse_node(buf: bytes, prefix: str, args: set[str]) -> tuple[Node, dict]:
    """The node, and (in a function body) its inputs named by output argument: {input
    position: (argument, k)}, made flat by `_flat_index` once the body's every node is known."""
    f = proto.fields(buf)
    name = proto.string(f, 1)
    inputs, named = [], {}
    for ref in proto.strings(f, 3):
        if ref.startswith("^"):
            continue
        if prefix:  # an argument, or "node:out_arg:k", inside a function body
            node, arg, k = _body_reference(ref, args, "reads")
            if arg is not None:
                named[len(inputs)] = (arg, k)  # made flat below (_flat_index)
            inputs.append((f"{prefix}{node}", 0))
        else:  # "node" or "node:k" in the main graph
            parts = ref.split(":")
            inputs.append((parts[0], _output_index(parts[1]) if len(parts) == 2 else 0))
    attrs = {}
    for entry in f.get(5, []):
        e = proto.fields(entry)
        attrs[proto.string(e, 1)] = _attr_value(proto.message(e, 2))
    return Node(f"{prefix}{name}", proto.string(f, 2), inputs, attrs, buf), named


def _body_reference(ref: str, args: set[str], verb: str) -> tuple[str, str | None, int]:
    """`(node, out_arg, k)` of a function body's reference to a value, as its inputs and its
    return values write it: an argument's bare name (`out_arg` None), or `node:out_arg:k`.
    TF's function_def_to_graph finds nothing else (not `node`, `node:k`, `arg:0`), and
    neither do we: a lenient reading would pick output 0 of whatever the name held."""
    parts = ref.split(":")
    if ref in args:
        return ref, None, 0
    if len(parts) != 3 or parts[0] in args:
        raise ValueError(
            f"a function body {verb} {ref[:80]!r}: not an argument or node:output:index"
        )
    return parts[0], parts[1], _output_index(parts[2])


def _flat_index(nodes: dict, key: str, arg: str, k: int) -> int:
    """The flat output index of output `k` of argument `arg` of node `key` (see OUTPUT_ARGS);
    a node not in the graph is refused later, by name."""
    n = nodes.get(key)
    names = OUTPUT_ARGS.get(n.op) if n is not None else None
    if names is None:
        return k
    if arg not in names or k:
        raise ValueError(f"{key!r} ({n.op}) has no output {arg}:{k} (its outputs: {names})")
    return names.index(arg)


def _output_index(text: str) -> int:
    if not (text.isascii() and text.isdecimal()) or len(text) > 9:  # TF reads ASCII digits
        raise ValueError(f"an input's output index {text[:20]!r} is not a number")
    return int(text)


class Graph:
    """The nodes of a meta graph (main graph and function bodies; a body's node `n` of
    function `F` is keyed `F::n`), with function arguments resolved to their callers' inputs."""

    def __init__(self, nodes: dict[str, Node], label: str = "meta graph"):
        self.nodes, self.label = nodes, label
        self.functions: dict[str, list[str]] = {}  # function -> its argument nodes, in order
        self.returns: set[tuple[str, int]] = set()  # values a function returns
        self.function_returns: dict[str, list[tuple[str, int]]] = {}  # in output order
        # Variable name -> the nodes that hold it where those are named otherwise (a
        # SavedModel's captured variables: `saved_model.py`).
        self.aliases: dict[str, list[str]] = {}
        self.signature_outputs: list[str] = []  # a SavedModel signature's output tensors
        self.consumers: dict[tuple[str, int], list[tuple[str, int]]] = {}
        for n in nodes.values():
            # The training graph reads the same values (and stores forward values for it: TF 2
            # pushes them onto TensorLists in a rewritten loop body, TF 1 onto stacks): not the
            # cell.
            if _is_gradient(n.name) or n.op in _ACCUMULATORS:
                continue
            for pos, ref in enumerate(n.inputs):
                self.consumers.setdefault(self.resolve(ref), []).append((n.name, pos))

    def resolve(self, ref: tuple[str, int], depth: int = 0) -> tuple[str, int]:
        """Follows identities, variable reads, loop entries and function arguments (not a loop
        variable its body changes) back to the node that produces the value."""
        node = self.nodes.get(ref[0])
        if node is None or depth > 64:
            return ref
        if node.op in _PASS_THROUGH and node.inputs:
            return self.resolve(node.inputs[0], depth + 1)
        if node.op == "_Arg" and node.caller is not None and not node.varies:
            caller, index = node.caller
            return self.resolve(self.nodes[caller].inputs[index], depth + 1)
        return ref

    def users(self, name: str, index: int = 0, ops=None) -> list[Node]:
        """The nodes that read output `index` of `name` through identities, variable reads,
        loop entries and function arguments (`consumers` files every reader under the value
        `resolve` finds, so those in between are skipped, not walked), optionally only those
        whose op is in `ops`."""
        out = {}
        for user, _ in self.consumers.get((name, index), []):
            n = self.nodes[user]
            if n.op not in _PASS_THROUGH and (ops is None or n.op in ops):
                out[n.name] = n
        return sorted(out.values(), key=lambda n: n.name)

    def const(self, ref: tuple[str, int]) -> float | None:
        node = self.nodes.get(self.resolve(ref)[0])
        if (
            node is None
            or node.op != "Const"
            or not isinstance(node.attrs.get("value"), np.ndarray)
        ):
            return None
        value = node.attrs["value"]
        return float(value) if value.size == 1 else None

    def ints(self, ref: tuple[str, int]) -> list[int] | None:
        """The integers of the Const at `ref` (an axis list, a permutation, a shape), or None."""
        node = self.nodes.get(self.resolve(ref)[0])
        value = node.attrs.get("value") if node is not None and node.op == "Const" else None
        return [int(v) for v in value.reshape(-1)] if isinstance(value, np.ndarray) else None

    def variable(self, name: str) -> Node | None:
        """The variable node `name`, or in a frozen graph the float `Const` that replaced it
        (`convert_variables_to_constants` keeps the variable's name)."""
        n = self.nodes.get(name)
        if n is not None and n.op == "Const":
            value = n.attrs.get("value")
            frozen = isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim
            return n if frozen else None
        return n if n is not None and n.op in _VARIABLES else None

    def forward_matmul(self, n: Node, variable: str) -> bool:
        """`x · variable` as a cell's forward computes it (the gradient graph multiplies by its
        transpose, and lives under a `gradients` scope)."""
        return (
            n.op == "MatMul"
            and self.resolve(n.inputs[1])[0] == variable  # _ARITY: a MatMul has 2 inputs
            and not n.attrs.get("transpose_a")
            and not n.attrs.get("transpose_b")
        )


def function_of(key: str) -> str:
    """The function a node key `F::n` belongs to ("" for the main graph)."""
    return key.partition("::")[0] if "::" in key else ""


def local_name(key: str) -> str:
    """A node key's name inside its function (`n` of `F::n`), as TF names it there."""
    return key.rpartition("::")[2]


def graph_from_graph_def(graph_def: bytes, label: str = "meta graph") -> Graph:
    """The nodes of a serialized GraphDef (node = 1, library = 2 {function = 1}), with every
    function body's arguments linked to the inputs of the node that calls it."""
    graph = proto.fields(graph_def)
    nodes: dict[str, Node] = {}
    for buf in graph.get(1, []):
        n, _ = _parse_node(buf, "", set())
        nodes[n.name] = n
    bodies: dict[str, list[str]] = {}  # function -> argument node keys, in order
    returns: set[tuple[str, int]] = set()  # the values functions return
    ordered: dict[str, list[tuple[str, int]]] = {}  # function -> its return values, in order
    for lib in graph.get(2, []):
        for fn in proto.fields(lib).get(1, []):
            ff = proto.fields(fn)
            sig = proto.fields(proto.message(ff, 1))
            fname = proto.string(sig, 1)
            args = [proto.string(proto.fields(a), 1) for a in sig.get(2, [])]
            arg_names = set(args)
            prefix = f"{fname}::"
            for a in args:
                nodes[prefix + a] = Node(prefix + a, "_Arg", [], {})
            body = [_parse_node(buf, prefix, arg_names) for buf in ff.get(3, [])]
            nodes.update((n.name, n) for n, _ in body)
            for n, named in body:
                for pos, (arg, k) in named.items():
                    n.inputs[pos] = (n.inputs[pos][0], _flat_index(nodes, n.inputs[pos][0], arg, k))
            bodies[fname] = [prefix + a for a in args]
            ret = {}  # ret: map<output name, "node:out_arg:k" or an argument>
            for entry in ff.get(4, []):
                e = proto.fields(entry)
                node, arg, k = _body_reference(proto.string(e, 2), arg_names, "returns")
                key = prefix + node
                ret[proto.string(e, 1)] = (
                    key,
                    k if arg is None else _flat_index(nodes, key, arg, k),
                )
            outputs = [proto.string(proto.fields(a), 1) for a in sig.get(3, [])]
            ordered[fname] = [ret[o] for o in outputs if o in ret]
            returns |= set(ret.values())
    # TF refuses a graph whose node reads a node that is not there (import_graph_def): so do we,
    # before a matcher looks the name up.
    for n in nodes.values():
        for ref in n.inputs:
            if ref[0] not in nodes:
                raise ValueError(f"node {n.name!r} reads {ref[0]!r}, which is not in the graph")
        if n.op in _ARITY and len(n.inputs) != _ARITY[n.op]:
            raise ValueError(
                f"node {n.name!r} ({n.op}) has {len(n.inputs)} inputs; TF's op takes {_ARITY[n.op]}"
            )
    # A loop or call passes its inputs to its function's arguments, in order. A loop's argument
    # holds its input only while the body returns it unchanged (a captured kernel, the input
    # list); one the body computes anew (a state, the step counter) `varies`, and `resolve`
    # does not trace it out of the loop: a value the body changes is never read as the initial.
    for n in list(nodes.values()):
        body = n.attrs.get("body")
        body = body.get("func") if isinstance(body, dict) else None
        for key in ("body", "cond", "f"):
            fn = n.attrs.get(key)
            if isinstance(fn, dict) and fn.get("func") in bodies:
                for index, arg in enumerate(bodies[fn["func"]]):
                    if index < len(n.inputs):
                        nodes[arg].caller = (n.name, index)
                        nodes[arg].varies = key != "f" and not _loop_invariant(
                            nodes, bodies, ordered, body, index
                        )
    g = Graph(nodes, label)
    g.functions, g.returns = bodies, {g.resolve(r) for r in returns}
    g.function_returns = ordered
    return g


def through_identities(nodes: dict, ref: tuple[str, int]) -> tuple[str, int]:
    """`ref` through Identity/Snapshot nodes (at most 16), stopping at any other op and at a
    function's arguments (`Graph.resolve` follows those out to the caller)."""
    for _ in range(16):
        n = nodes.get(ref[0])
        if n is None or n.op not in ("Identity", "Snapshot") or not n.inputs:
            return ref
        ref = n.inputs[0]
    return ref


def _loop_invariant(nodes, bodies, returns, body: str | None, index: int) -> bool:
    """Whether loop variable `index` of the loop whose body is `body` is returned unchanged
    (through identities) by that body."""
    if body not in bodies or index >= len(bodies[body]) or index >= len(returns.get(body, [])):
        return False
    return through_identities(nodes, returns[body][index]) == (bodies[body][index], 0)


def meta_graph_parts(data: bytes) -> tuple[bytes, str]:
    """`(graph_def, tensorflow_version)` of a serialized MetaGraphDef (meta_info_def = 1
    {tensorflow_version = 5}, graph_def = 2)."""
    meta = proto.fields(data)
    info = proto.fields(proto.message(meta, 1))
    return proto.message(meta, 2), proto.string(info, 5) or "?"


def read_meta_graph(path: str) -> Graph:
    with open(path, "rb") as fh:
        data = fh.read()
    with guard.reading(path, "TF1 meta graph (MetaGraphDef)"):
        return graph_from_graph_def(meta_graph_parts(data)[0])
