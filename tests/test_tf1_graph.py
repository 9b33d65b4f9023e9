"""The graph reader (`porting/tf1_graph.py`) against TensorFlow's own reading of the same
graphs: every node's inputs as TF resolves them (the main graph imported by import_graph_def,
each function body rebuilt by TF's function_def_to_graph, whose flat output indices are what a
body's "node:argument:k" means), every attribute as TF's `get_attr` returns it, each
function's arguments and outputs in order, and the fused ops' output arguments as TF's op
registry lists them. The cells read from such graphs: test_porting_tf1.py, test_verify.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from torch_lstm_grad.porting.decoding import guard
from torch_lstm_grad.porting.graphs import graph_def as tf1_graph
from torch_lstm_grad.porting.graphs import tf1_cells
from torch_lstm_grad.porting.graphs.graph_def import graph_from_graph_def
from torch_lstm_grad.porting.graphs.tf1_cells import cell_at

tf = pytest.importorskip("tensorflow", reason="TensorFlow (the oracle) is not installed")

B, T, I, H = 2, 3, 3, 4
_NUMERIC = (1, 2, 3, 9, 10)  # the tensor dtypes read: float, double, int32, int64, bool


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _cells_v2():
    """TF1's Python cells run by dynamic_rnn: TF 2's While, its body a library function."""
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    x = tf.compat.v1.placeholder(tf.float32, [T, B, I], name="x")
    lstm = rci.LSTMCell(H, use_peepholes=True, cell_clip=1.5, num_proj=2, proj_clip=0.5)
    tf.compat.v1.nn.dynamic_rnn(lstm, x, time_major=True, dtype=tf.float32, scope="lstm")
    tf.compat.v1.nn.dynamic_rnn(rci.GRUCell(H), x, time_major=True, dtype=tf.float32, scope="gru")


def _cells_v1():
    """The same cells in TF 1's loops: Enter, Merge, Switch, NextIteration, Exit."""
    from tensorflow.python.ops import control_flow_util

    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        _cells_v2()
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved


def _fused():
    """The fused ops, their outputs read by name: in the main graph (flat indices, "op:k") and
    in a While body ("op:argument:k", counted within the argument)."""
    raw = tf.raw_ops
    x = tf.compat.v1.placeholder(tf.float32, [T, B, I], name="x")
    w = tf.constant(_rand(I + H, 4 * H), name="w")
    peep, b = tf.constant(_rand(H, seed=1)), tf.constant(_rand(4 * H, seed=2))
    zero = tf.zeros([B, H])
    steps = tf.constant(T, tf.int64)
    seq = raw.BlockLSTM(seq_len_max=steps, x=x, cs_prev=zero, h_prev=zero, w=w, wci=peep,
                        wcf=peep, wco=peep, b=b, forget_bias=0.5, cell_clip=2.0,
                        use_peephole=True)  # fmt: skip
    tf.identity(seq.h, name="h_seq")
    tf.identity(seq.cs, name="cs_seq")
    v2 = raw.BlockLSTMV2(seq_len_max=steps, x=x, cs_prev=zero, h_prev=zero, w=w, wci=peep,
                         wcf=peep, wco=peep, b=b, cell_clip=0.0, use_peephole=False)  # fmt: skip
    tf.add(v2.h, v2.co, name="h_plus_co")
    w_ru, w_c = tf.constant(_rand(I + H, 2 * H, seed=3)), tf.constant(_rand(I + H, H, seed=4))
    b_ru, b_c = tf.constant(_rand(2 * H, seed=5)), tf.constant(_rand(H, seed=6))

    def body(i, h, c, g):
        cell = raw.LSTMBlockCell(x=x[0], cs_prev=c, h_prev=h, w=w, wci=peep, wcf=peep,
                                 wco=peep, b=b, forget_bias=0.25, use_peephole=True)  # fmt: skip
        gru = raw.GRUBlockCell(x=x[0], h_prev=g, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c)
        return i + 1, cell.h + gru.u, cell.cs, gru.h - gru.r

    tf.while_loop(lambda i, h, c, g: i < T, body, (0, zero, zero, zero), name="loop")


def _attributes():
    """An attribute of each kind the reader decodes (s, i, f, b, tensor, func) and of kinds it
    leaves (type, shape, list)."""
    x = tf.compat.v1.placeholder(tf.float32, [B, 4], name="x")
    w = tf.constant(_rand(4, 4), name="w")
    y = tf.matmul(x, w, transpose_b=True)
    y = tf.nn.bias_add(y, tf.constant(_rand(4), name="b"), data_format="NHWC")
    y = tf.nn.leaky_relu(y, alpha=0.125)
    parts = tf.split(y, 2, axis=1, name="split")
    tf.concat([parts[1], parts[0]], axis=1, name="swapped")
    tf.constant(["a", "bc"], name="strings")
    tf.constant([[1, -2]], tf.int64, name="ints")
    tf.constant(True, name="flag")
    tf.constant(-0.0, tf.float64, name="minus_zero")


def _graph_def(build):
    g = tf.Graph()
    with g.as_default():
        build()
    return g.as_graph_def()


GRAPHS = {"cells_v2": _cells_v2, "cells_v1": _cells_v1, "fused": _fused, "attrs": _attributes}


def _tf_reading(graph_def) -> tuple[dict, dict, dict]:
    """TF's reading: {node key: (op, [(producer key, flat index)], {attr: get_attr})}, with a
    body's node `n` of function `F` keyed `F::n` (as the reader keys it); {function: its
    argument keys in order}; {function: its outputs in order}."""
    from tensorflow.python.framework import function_def_to_graph

    def ops_of(graph, prefix, skip=()):
        return {
            prefix + op.name: (
                op.type,
                [(prefix + t.op.name, t.value_index) for t in op.inputs],
                {a: op.get_attr(a) for a in op.node_def.attr},
            )
            for op in graph.get_operations()
            if op.name not in skip
        }

    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    nodes, args, outputs = ops_of(g, ""), {}, {}
    for f in graph_def.library.function:
        prefix = f.signature.name + "::"
        body = function_def_to_graph.function_def_to_graph(f)
        names = [a.name for a in f.signature.input_arg]
        nodes |= ops_of(body, prefix, skip=set(names))  # the arguments: Placeholders in TF's
        args[f.signature.name] = [prefix + a for a in names]
        outputs[f.signature.name] = [(prefix + t.op.name, t.value_index) for t in body.outputs]
    return nodes, args, outputs


def _assert_same_attr(where, ours, theirs):
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    if isinstance(theirs, bytes):
        assert ours == theirs.decode(), where
    elif isinstance(theirs, bool):
        assert ours is theirs, where
    elif isinstance(theirs, int):
        assert type(ours) is int and ours == theirs, where
    elif isinstance(theirs, float):  # an AttrValue's f is a float32
        assert np.float32(ours).tobytes() == np.float32(theirs).tobytes(), where
    elif isinstance(theirs, tensor_pb2.TensorProto) and theirs.dtype in _NUMERIC:
        want = tf.make_ndarray(theirs)
        assert ours.dtype == want.dtype and ours.shape == want.shape, where
        np.testing.assert_array_equal(ours, want, err_msg=where)
        if want.dtype.kind == "f":  # -0.0 kept
            assert np.signbit(ours).tolist() == np.signbit(want).tolist(), where
    elif isinstance(theirs, attr_value_pb2.NameAttrList):
        assert ours == {"func": theirs.name}, where
    else:  # types, shapes, lists, string tensors: no cell reader uses them
        assert ours is None, where


@pytest.mark.parametrize("kind", GRAPHS)
def test_every_node_as_tf_reads_it(kind):
    graph_def = _graph_def(GRAPHS[kind])
    ours = graph_from_graph_def(graph_def.SerializeToString(), label=kind)
    nodes, args, outputs = _tf_reading(graph_def)
    got = {k: n for k, n in ours.nodes.items() if n.op != "_Arg"}
    assert set(got) == set(nodes)
    attrs = 0
    for key, (op, inputs, attr) in nodes.items():
        n = got[key]
        assert (n.op, n.inputs) == (op, inputs), key
        assert set(n.attrs) == set(attr), key
        for name, value in attr.items():
            _assert_same_attr(f"{key}.{name}", n.attrs[name], value)
            attrs += 1
    assert ours.functions == args
    assert ours.function_returns == outputs
    assert attrs > 20 and (kind in ("cells_v1", "attrs")) == (not args)  # TF 1 loops: no functions


def test_the_fused_ops_outputs_are_tf_s():
    """The output arguments the reader counts a fused op's outputs by, against TF's op
    registry: each one tensor, in this order."""
    from tensorflow.python.framework import op_def_registry

    for op, names in tf1_graph.OUTPUT_ARGS.items():
        registered = op_def_registry.get(op).output_arg
        assert tuple(a.name for a in registered) == names, op
        assert not any(a.number_attr or a.type_list_attr for a in registered), op


def test_a_body_reading_an_output_a_fused_op_lacks_is_refused():
    graph_def = _graph_def(_fused)
    (body,) = [f for f in graph_def.library.function if "body" in f.signature.name]
    reader = next(n for n in body.node_def if "LSTMBlockCell:h:0" in n.input)
    for output in ("hidden:0", "h:1"):  # an argument it lacks; a second tensor of one
        edited = type(graph_def)()
        edited.CopyFrom(graph_def)
        (f,) = [f for f in edited.library.function if f.signature.name == body.signature.name]
        (n,) = [n for n in f.node_def if n.name == reader.name]
        n.input[:] = [i.replace("LSTMBlockCell:h:0", f"LSTMBlockCell:{output}") for i in n.input]
        with pytest.raises(ValueError, match=f"\\(LSTMBlockCell\\) has no output {output} "):
            graph_from_graph_def(edited.SerializeToString())


@pytest.mark.parametrize("where", ["reads", "returns"])
def test_a_body_reference_that_is_not_an_argument_or_node_output_index_is_refused(where):
    """Inside a function body an input, and a return value, is an argument's bare name or
    "node:output_arg:k"; TF's function_def_to_graph fails on a bare "node", "node:k" or
    "argument:0" (and the function cannot run): the reader refuses them by name, not reading
    output 0."""
    from tensorflow.python.framework import function_def_to_graph

    graph_def = _graph_def(_cells_v2)
    (body,) = [
        f for f in graph_def.library.function if f.signature.name.startswith("lstm_while_body")
    ]
    arg = body.signature.input_arg[0].name
    if where == "reads":
        node = next(n for n in body.node_def if any(i.count(":") == 2 for i in n.input))
        k = next(k for k, i in enumerate(node.input) if i.count(":") == 2)
        refs = node.input
    else:
        refs = body.ret
        k = next(k for k, v in refs.items() if v.count(":") == 2)
    name = refs[k].split(":")[0]
    for edited in (name, f"{name}:0", f"{arg}:0", f"{arg}:output:0"):
        refs[k] = edited
        with pytest.raises(KeyError):
            function_def_to_graph.function_def_to_graph(body)
        with pytest.raises(
            ValueError, match=f"a function body {where} '{edited}': not an argument or node:out"
        ):
            graph_from_graph_def(graph_def.SerializeToString())


def test_the_fused_ops_inputs_are_tf_s():
    """The input arguments the reader matches a fused op's weights by (w, wci, ...), against
    TF's op registry: each one tensor, in this order."""
    from tensorflow.python.framework import op_def_registry

    for op, names in tf1_graph.INPUT_ARGS.items():
        registered = op_def_registry.get(op).input_arg
        assert tuple(a.name for a in registered) == names, op
        assert not any(a.number_attr or a.type_list_attr for a in registered), op
    assert set(tf1_graph.INPUT_ARGS) == tf1_cells._FUSED_LSTM | tf1_cells._FUSED_GRU


def test_gradient_nodes_are_told_apart_by_tf_s_scopes():
    """Every node each tf.gradients call adds (TF scopes the first `gradients`, the next
    `gradients_1`, ...) is the gradient graph's; no forward node is."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x")
        w = tf.compat.v1.get_variable("kernel", [I, H])
        y = tf.tanh(tf.matmul(x, w), name="y")
        seen = {op.name for op in g.get_operations()}
        added = []
        for _ in range(3):
            tf.compat.v1.gradients(tf.reduce_sum(y * y), [x, w])
            added.append({op.name for op in g.get_operations()} - seen)
            seen |= added[-1]
    scopes = [sorted({n.split("/")[0] for n in names if "/" in n}) for names in added]
    assert scopes[1:] == [["gradients_1"], ["gradients_2"]]
    forward = {op.name for op in g.get_operations()} - set().union(*added)
    assert not any(tf1_graph._is_gradient(n) for n in forward)
    assert all(tf1_graph._is_gradient(n) for names in added for n in names if "/" in n)
    assert tf1_graph._is_gradient("while_body_grad_12::mul") and not tf1_graph._is_gradient("f::g")


def test_every_training_op_is_bookkeeping():
    """TF's optimizers update a variable with Apply*, ResourceApply*, SparseApply* and
    ResourceSparseApply* ops (every one TF registers): none computes a cell."""
    import re

    ops = [n for n in dir(tf.raw_ops) if re.fullmatch(r"(Resource)?(Sparse)?Apply[A-Z]\w*", n)]
    kinds = {re.match(r"(Resource)?(Sparse)?Apply", n).group(0) for n in ops}
    assert kinds == {"Apply", "ResourceApply", "SparseApply", "ResourceSparseApply"}
    assert all(tf1_cells._bookkeeping(n) for n in ops)
    assert not any(tf1_cells._bookkeeping(n) for n in ("MatMul", "BlockLSTM", "Sparse"))


def test_output_indices_are_numbers_of_at_most_nine_digits():
    """`node:k`: k a decimal number of up to nine digits (below 2^31, TF's int32 index);
    anything else (other scripts' digits included, which TF does not read) is refused by
    name, not parsed."""
    assert tf1_graph._output_index("999999999") == 999999999
    for text in ("1234567890", "-1", "1e3", "", "١"):
        with pytest.raises(ValueError, match="is not a number"):
            tf1_graph._output_index(text)
    graph_def = _graph_def(lambda: tf.identity(tf.constant(1.0, name="x"), name="y"))
    (y,) = [n for n in graph_def.node if n.name == "y"]
    y.input[:] = ["x:١"]
    with pytest.raises(ValueError, match="Unknown input node 'x:١'"):
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
    with pytest.raises(ValueError, match="output index '١' is not a number"):
        graph_from_graph_def(graph_def.SerializeToString())


def test_values_are_followed_65_nodes_back_and_cycles_end():
    """resolve follows identities and function arguments back to a value's producer, at most
    65 nodes (a hostile chain or cycle ends there, returned as it stands)."""
    node = tf1_graph.Node

    def chain(n):
        nodes = {"v": node("v", "VariableV2", [], {})}
        for k in range(1, n + 1):
            nodes[f"i{k}"] = node(f"i{k}", "Identity", [(f"i{k - 1}" if k > 1 else "v", 0)], {})
        return tf1_graph.Graph(nodes).resolve((f"i{n}", 0))

    assert chain(1) == chain(65) == ("v", 0)
    assert chain(66) == ("i1", 0)
    # A function whose argument is fed by its own caller's output, and an identity loop.
    arg = node("F::a", "_Arg", [], {}, caller=("call", 0))
    nodes = {"F::a": arg, "call": node("call", "PartitionedCall", [("F::a", 0)], {})}
    nodes["p"] = node("p", "Identity", [("q", 0)], {})
    nodes["q"] = node("q", "Identity", [("p", 0)], {})
    g = tf1_graph.Graph(nodes)
    assert g.resolve(("F::a", 0)) == ("F::a", 0)
    assert g.resolve(("p", 0)) in {("p", 0), ("q", 0)}


def _static_lstm():
    """TF1's LSTMCell run by static_rnn: one copy of the step's ops per time step, all
    reading the one kernel."""
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    xs = [tf.compat.v1.placeholder(tf.float32, [B, I], name=f"x{t}") for t in range(T)]
    tf.compat.v1.nn.static_rnn(rci.LSTMCell(H, forget_bias=0.75), xs, dtype=tf.float32)


def _edited(graph_def, name: str, edit):
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    edit(next(n for n in out.node if n.name == name))
    return graph_from_graph_def(out.SerializeToString())


def _with_node(graph_def, name: str, op: str, inputs: list[str]):
    """`graph_def` read with one float32 node more."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    out.node.add(name=name, op=op, input=inputs).attr["T"].type = tf.float32.as_datatype_enum
    return graph_from_graph_def(out.SerializeToString())


def test_static_rnn_copies_of_a_cell_must_agree():
    """static_rnn computes the step once per time step, each copy with its own constants and
    ops: every copy is read, and one that differs from the first, or that is not a cell the
    reader knows, is refused, never ported as the first copy."""
    graph_def = _graph_def(_static_lstm)
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert (cell.cls, cell.attrs["forget_bias"], cell.problem) == ("LSTMCell", 0.75, None)
    # TF's own names: the forget bias added per step, the candidate's tanh per step
    steps = [("rnn/lstm_cell/add/y", "rnn/lstm_cell/Tanh"),
             ("rnn/lstm_cell/add_2/y", "rnn/lstm_cell/Tanh_2"),
             ("rnn/lstm_cell/add_4/y", "rnn/lstm_cell/Tanh_4")]  # fmt: skip
    # The nodes in another order (TF imports any): the same cell, anchored at the same copy.
    shuffled = type(graph_def)()
    shuffled.CopyFrom(graph_def)
    shuffled.node.sort(key=lambda n: n.name, reverse=True)
    again = cell_at(graph_from_graph_def(shuffled.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert (again.cls, again.attrs, again.where) == (cell.cls, cell.attrs, cell.where)
    assert again.anchor == cell.anchor == "rnn/lstm_cell/MatMul"
    # f + forget_bias written forget_bias + f in every copy (Add's inputs either way round)
    for bias, _ in steps:
        add = next(n for n in shuffled.node if n.name == bias.removesuffix("/y"))
        add.input[:] = list(reversed(add.input))
    again = cell_at(graph_from_graph_def(shuffled.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert (again.cls, again.attrs) == (cell.cls, cell.attrs)
    for bias, tanh in steps[1:]:

        def half(n):
            n.attr["value"].tensor.float_val[:] = [0.5]

        cell = cell_at(_edited(graph_def, bias, half), "rnn/lstm_cell", "lstm")
        assert cell.cls is None and f"the {T} uses of rnn/lstm_cell/kernel disagree" in cell.problem
        assert "'forget_bias': 0.75" in cell.problem and "'forget_bias': 0.5" in cell.problem

        def softsign(n):
            n.op = "Softsign"

        cell = cell_at(_edited(graph_def, tanh, softsign), "rnn/lstm_cell", "lstm")
        assert cell.cls is None and "Softsign" in cell.problem


def _variables_and_products():
    x = tf.compat.v1.placeholder(tf.float32, [H, H], name="x")
    k = tf.compat.v1.Variable(_rand(H, H), name="s/kernel")
    tf.matmul(x, k, name="x_k")
    tf.matmul(k, x, transpose_b=True, name="k_x")
    tf.matmul(x, k, transpose_b=True, name="x_kt")
    tf.matmul(x, k, transpose_a=True, name="xt_k")
    tf.constant(_rand(H, H), name="f/kernel")
    tf.constant(np.ones((H, H), np.int32), name="i/kernel")
    tf.constant(1.5, name="scalar/kernel")


def test_variables_and_the_forward_product_with_them():
    """A variable is a variable op, or in a frozen graph a float Const of rank 1 or more
    (never an int or a scalar Const); a cell's forward product is `x · kernel` as TF's
    MatMul computes it: the kernel its second input, neither transposed."""
    graph_def = _graph_def(_variables_and_products)
    g = graph_from_graph_def(graph_def.SerializeToString())
    assert g.variable("s/kernel").op.startswith("Var") and g.variable("f/kernel").op == "Const"
    assert g.variable("i/kernel") is None and g.variable("scalar/kernel") is None
    assert g.variable("x") is None and g.variable("missing") is None
    products = {n.name: g.forward_matmul(n, "s/kernel") for n in g.users("s/kernel", 0, {"MatMul"})}
    assert products == {"x_k": True, "k_x": False, "x_kt": False, "xt_k": False}


def test_nodes_with_another_number_of_inputs_than_tf_s_op_are_refused():
    """The ops whose inputs the matchers read by position take as many inputs as TF's op
    registry says; a node with another count (a Minimum, a Maximum, a MatMul missing one),
    which TF refuses to import, is refused by name, never an IndexError."""
    from tensorflow.python.framework import op_def_registry

    for op, count in tf1_graph._ARITY.items():
        registered = op_def_registry.get(op).input_arg
        assert len(registered) == count and not any(a.number_attr for a in registered), op
    clipped = _graph_def(_static_clipped_lstm)
    products = _graph_def(_variables_and_products)
    for graph_def, name, op in [
        (clipped, "rnn/lstm_cell/clip_by_value/Minimum", "Minimum"),
        (clipped, "rnn/lstm_cell/clip_by_value", "Maximum"),
        (products, "x_k", "MatMul"),
    ]:
        edited = type(graph_def)()
        edited.CopyFrom(graph_def)
        del next(n for n in edited.node if n.name == name).input[1:]
        with tf.Graph().as_default(), pytest.raises(ValueError, match="input"):
            tf.graph_util.import_graph_def(edited, name="")
        with pytest.raises(
            ValueError, match=f"node '{name}' \\({op}\\) has 1 inputs; TF's op takes 2"
        ):
            graph_from_graph_def(edited.SerializeToString())


def _nested_functions():
    @tf.function
    def f(x):  # one argument, running a loop
        return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2.0), (0, x))[1]

    @tf.function
    def lone(x):  # in the library, called by no node
        return tf.sin(x, name="sine")

    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    tf.identity(f(x), name="out")
    lone.get_concrete_function(tf.TensorSpec([2], tf.float32)).add_to_graph()


def test_a_node_s_outermost_name_is_that_of_the_main_graph_s_node_running_it():
    """A node in a loop body inside a one-argument function: the call node of the main graph
    that runs them (TF's PartitionedCall); a node of a function nothing calls: its own name."""
    graph_def = _graph_def(_nested_functions)
    (call,) = [n.name for n in graph_def.node if n.op.endswith("PartitionedCall")]
    g = graph_from_graph_def(graph_def.SerializeToString())
    (mul,) = [k for k, n in g.nodes.items() if n.op == "Mul"]
    (sine,) = [k for k, n in g.nodes.items() if n.op == "Sin"]
    assert mul.count("::") == 1 and sine.endswith("::sine")
    assert tf1_cells._outermost_name(g, mul) == call
    assert tf1_cells._outermost_name(g, sine) == "sine"
    assert tf1_cells._outermost_name(g, "x") == "x"


def test_a_call_giving_its_function_fewer_inputs_than_arguments_is_read():
    """A hostile graph: a call node giving its function fewer inputs than the function takes
    (TF refuses to import it). The arguments it does not feed have no caller: they resolve to
    themselves, never to an input the node lacks."""

    @tf.function
    def two(x, y):
        return y

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        tf.identity(two(x, x + 1.0), name="out")

    graph_def = _graph_def(build)
    (call,) = [n for n in graph_def.node if n.op.endswith("PartitionedCall")]
    del call.input[1]
    with pytest.raises(ValueError):
        _tf_reading(graph_def)
    g = graph_from_graph_def(graph_def.SerializeToString())
    (fn,) = [f.signature.name for f in graph_def.library.function]
    x_arg, y_arg = (g.nodes[f"{fn}::{a}"] for a in ("x", "y"))
    assert x_arg.caller == (call.name, 0) and y_arg.caller is None
    assert g.resolve((y_arg.name, 0)) == (y_arg.name, 0)
    assert g.resolve((x_arg.name, 0)) == ("x", 0)


def _loop_reading_a_constant():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    w = tf.constant([3.0, 4.0], name="w")
    tf.while_loop(lambda i, y, w: i < 3, lambda i, y, w: (i + 1, y * w, w), (0, x, w))


@pytest.mark.parametrize("edit", ["none", "fewer returns", "fewer arguments", "no body"])
def test_a_loop_argument_is_traced_out_only_where_its_body_returns_it(edit):
    """A loop's argument reads the loop's input only where the body returns it unchanged (the
    constant w, the iteration bound). Any other argument `varies` and resolves to itself, not
    out of the loop: one the body changes; one a hostile body does not return (fewer values
    returned than taken); the cond's last one where a hostile body takes fewer arguments than
    the loop and its cond (w's reads and return made the bound's); each of a hostile loop
    node's that has only its `cond`, no `body`."""
    graph_def = _graph_def(_loop_reading_a_constant)
    (loop,) = [n for n in graph_def.node if n.op.endswith("While")]
    (body,) = [f for f in graph_def.library.function if f.signature.name.startswith("while_body")]
    if edit == "fewer returns":
        last = body.signature.output_arg[-1].name
        del body.signature.output_arg[-1]
        del body.ret[last]
    elif edit == "fewer arguments":
        w_arg, bound = body.signature.input_arg[-1].name, body.signature.input_arg[1].name
        del body.signature.input_arg[-1]
        for node in body.node_def:
            node.input[:] = [bound if i == w_arg else i for i in node.input]
        body.ret[body.signature.output_arg[-1].name] = bound
    elif edit == "no body":
        del loop.attr["body"]
    g = graph_from_graph_def(graph_def.SerializeToString())
    for f in graph_def.library.function:
        args = [g.nodes[f"{f.signature.name}::{a.name}"] for a in f.signature.input_arg]
        if edit == "fewer arguments" and f is body:
            assert [a.caller for a in args] == [(loop.name, k) for k in range(4)]
            continue
        w = args[4]
        if edit == "no body" and f is body:  # no node runs it
            assert all(a.caller is None for a in args)
            assert g.resolve((w.name, 0)) == (w.name, 0)
            continue
        assert [a.caller for a in args] == [(loop.name, k) for k in range(5)]
        if edit == "none":  # the counter, i and y change; the bound and w are returned as read
            assert [a.varies for a in args] == [True, False, True, True, False]
            assert g.resolve((w.name, 0)) == ("w", 0)
        else:
            assert w.varies and g.resolve((w.name, 0)) == (w.name, 0)


def test_a_truncated_meta_graph_is_refused_naming_the_file(tmp_path):
    """A `.meta` cut short: CorruptFile naming the file first, then what it should hold."""
    meta = tf.compat.v1.MetaGraphDef(graph_def=_graph_def(_loop_reading_a_constant))
    data = meta.SerializeToString()
    path = tmp_path / "m.meta"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(guard.CorruptFile) as err:
        tf1_graph.read_meta_graph(str(path))
    assert str(err.value).startswith(f"{path}: TF1 meta graph (MetaGraphDef): "), err.value


def _static_clipped_lstm():
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    xs = [tf.compat.v1.placeholder(tf.float32, [B, I], name=f"x{t}") for t in range(2)]
    tf.compat.v1.nn.static_rnn(rci.LSTMCell(H, cell_clip=1.5), xs, dtype=tf.float32)


def test_a_cell_clip_is_clip_by_value_from_minus_c_to_c():
    """LSTMCell's cell_clip is clip_by_value(c, -cell_clip, cell_clip): read from TF's graph;
    a clip to another interval (here [-1, 1.5] in every copy) is no cell_clip and refused."""
    graph_def = _graph_def(_static_clipped_lstm)
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert (cell.cls, cell.attrs["cell_clip"], cell.problem) == ("LSTMCell", 1.5, None)
    edited = type(graph_def)()
    edited.CopyFrom(graph_def)
    for n in edited.node:  # the lower bounds, the Maximums' second inputs
        if n.name in ("rnn/lstm_cell/clip_by_value/y", "rnn/lstm_cell/clip_by_value_1/y"):
            n.attr["value"].tensor.float_val[:] = [-1.0]
    cell = cell_at(graph_from_graph_def(edited.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert cell.cls is None and "clip to [-1.0, 1.5], not clip_by_value(x, -c, c)" in cell.problem


def _static_peephole_lstm():
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x0")
    tf.compat.v1.nn.static_rnn(rci.LSTMCell(H, use_peepholes=True), [x], dtype=tf.float32)


def test_a_gate_adds_nothing_but_the_forget_bias_and_its_peephole():
    """TF1's LSTMCell adds to its gates the forget bias and, where it holds w_*_diag (the port
    takes use_peepholes from them), the peepholes w_*_diag · c: any other term, or a peephole
    missing or reading another gate's weight, is refused (the module would compute without
    it or with it). TF's own node names are edited."""
    peep = _graph_def(_static_peephole_lstm)
    cell = cell_at(graph_from_graph_def(peep.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert (cell.cls, cell.problem) == ("LSTMCell", None)

    dropped = type(peep)()  # sigmoid(f + forget_bias): the forget gate's peephole term gone
    dropped.CopyFrom(peep)
    (term,) = [k for k, n in enumerate(dropped.node) if n.name == "rnn/lstm_cell/add_1"]
    del dropped.node[term]
    next(n for n in dropped.node if n.name == "rnn/lstm_cell/Sigmoid").input[:] = [
        "rnn/lstm_cell/add"
    ]
    cell = cell_at(graph_from_graph_def(dropped.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert cell.cls is None
    assert "the forget gate adds 0 peephole terms; the graph holds rnn/lstm_cell/w_f_diag" in (
        cell.problem
    )

    def other_weight(n):  # the input gate's peephole multiplying the output gate's weight
        n.input[0] = "rnn/lstm_cell/w_o_diag/Read/Identity"

    cell = cell_at(_edited(peep, "rnn/lstm_cell/mul_2", other_weight), "rnn/lstm_cell", "lstm")
    assert cell.cls is None and (
        "the input gate adds rnn/lstm_cell/add_2 (AddV2), which is not the peephole "
        "rnn/lstm_cell/w_i_diag · c" in cell.problem
    )
    # Without peepholes: a constant added to the input gate of the first step
    plain = _graph_def(_static_lstm)
    extra = type(plain)()
    extra.CopyFrom(plain)
    const = extra.node.add()
    const.CopyFrom(next(n for n in extra.node if n.name == "rnn/lstm_cell/add/y"))
    const.name = "extra/y"
    add = extra.node.add(name="extra", op="AddV2", input=["rnn/lstm_cell/split", "extra/y"])
    add.attr["T"].type = tf.float32.as_datatype_enum
    sigmoid = next(n for n in extra.node if n.name == "rnn/lstm_cell/Sigmoid_1")
    assert list(sigmoid.input) == ["rnn/lstm_cell/split"]
    sigmoid.input[:] = ["extra"]
    cell = cell_at(graph_from_graph_def(extra.SerializeToString()), "rnn/lstm_cell", "lstm")
    assert cell.cls is None and "the input gate adds extra (AddV2)" in cell.problem


_C = "rnn/lstm_cell"
_G = "rnn/gru_cell"


@pytest.mark.parametrize(
    "build, op, reads, message",
    [
        (
            _static_lstm,
            "Sigmoid",
            f"{_C}/add",
            f"one forget gate's addition or activation after {_C}/add",
        ),
        # Beside the forget bias's Add; beside the input gate's Sigmoid, even an op whose
        # value nothing reads (the cell's outputs are unchanged, but the pattern is not TF1's)
        (
            _static_lstm,
            "Sigmoid",
            f"{_C}/split:2",
            f"one forget gate's addition or activation after {_C}/split:2",
        ),
        (
            _static_lstm,
            "Mul",
            f"{_C}/split",
            f"one input gate's addition or activation after {_C}/split",
        ),
        (_static_lstm, "BiasAdd", f"{_C}/MatMul", f"one BiasAdd after {_C}/MatMul"),
        (_static_lstm, "Tanh", f"{_C}/split:1", f"one use of j after {_C}/split:1"),
        (_static_lstm, "Mul", f"{_C}/Tanh", f"one i·act(j) after {_C}/Tanh"),
        (_static_lstm, "AddV2", f"{_C}/mul_1", f"one new c after {_C}/mul_1"),
        (_static_lstm, "Split", f"{_C}/BiasAdd", f"one Split after {_C}/BiasAdd"),
        (_static_clipped_lstm, "Minimum", f"{_C}/add_1", f"one cell clip after {_C}/add_1"),
        (
            _static_clipped_lstm,
            "Maximum",
            f"{_C}/clip_by_value/Minimum",
            f"one cell clip's Maximum after {_C}/clip_by_value/Minimum",
        ),
    ],
)
def test_a_cell_op_read_twice_is_refused_naming_both(build, op, reads, message):
    """One op more reading a step's value where TF1's cell has one (a second activation of the
    forget gate, a second clip of c, a second Maximum of the clip): refused, the problem naming
    what was expected after which node and both readers."""
    inputs = [reads, reads][: 1 if op in ("Sigmoid", "Tanh") else 2]
    cell = cell_at(_with_node(_graph_def(build), "second", op, inputs), _C, "lstm")
    assert cell.cls is None and f"expected {message}, found [" in cell.problem
    assert f"'second ({op})'" in cell.problem


def test_a_forget_bias_is_a_scalar_constant_added_to_the_gate():
    """The forget gate's first Add with one input (TF's import refuses it: refused as such) or
    adding no scalar constant (no forget bias to read): refused."""
    plain = _graph_def(_static_lstm)
    for edit in ("one input", "no constant"):
        edited = type(plain)()
        edited.CopyFrom(plain)
        add = next(n for n in edited.node if n.name == f"{_C}/add")
        if edit == "one input":
            del add.input[1]
            with tf.Graph().as_default(), pytest.raises(ValueError):
                tf.graph_util.import_graph_def(edited, name="")
        else:
            add.input[1] = f"{_C}/split:1"
        cell = cell_at(graph_from_graph_def(edited.SerializeToString()), _C, "lstm")
        assert (
            cell.cls is None
            and (
                f"{_C}/add (AddV2) has 1 inputs, not 2"
                if edit == "one input"
                else f"no constant forget bias added to {_C}/split:2"
            )
            in cell.problem
        )


@pytest.mark.parametrize("count", [3, 4])
def test_a_gate_s_additions_end_at_its_activation(count):
    """Constants added `count` times to the input gate of the first step: the first is named as
    no peephole; four end the walk (no TF1 cell adds more than two to a gate)."""
    plain = _graph_def(_static_lstm)
    extra = type(plain)()
    extra.CopyFrom(plain)
    value = next(n for n in extra.node if n.name == f"{_C}/add/y")
    previous = f"{_C}/split"
    for k in range(count):
        const = extra.node.add()
        const.CopyFrom(value)
        const.name = f"extra{k}/y"
        add = extra.node.add(name=f"extra{k}", op="AddV2", input=[previous, const.name])
        add.attr["T"].type = tf.float32.as_datatype_enum
        previous = add.name
    next(n for n in extra.node if n.name == f"{_C}/Sigmoid_1").input[:] = [previous]
    with tf.Graph().as_default():
        tf.graph_util.import_graph_def(extra, name="")  # a graph TF imports
    cell = cell_at(graph_from_graph_def(extra.SerializeToString()), _C, "lstm")
    assert cell.cls is None
    if count == 4:
        assert f"the input gate at {_C}/split: too many additions" in cell.problem
    else:
        assert "the input gate adds extra0 (AddV2), which is not the peephole" in cell.problem


@pytest.mark.parametrize(
    "gate, node", [("forget", "Sigmoid"), ("input", "Sigmoid_1"), ("output", "Sigmoid_2")]
)
def test_each_gate_s_activation_is_a_sigmoid(gate, node):
    """One gate's sigmoid made a tanh in the first step: refused, naming that gate."""
    plain = _graph_def(_static_lstm)

    def tanh(n):
        n.op = "Tanh"

    cell = cell_at(_edited(plain, f"{_C}/{node}", tanh), _C, "lstm")
    assert cell.cls is None and (
        f"the {gate} gate's activation {_C}/{node} is Tanh, not the Sigmoid" in cell.problem
    )


def _static_lstmp():
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    xs = [tf.compat.v1.placeholder(tf.float32, [B, I], name=f"x{t}") for t in range(2)]
    tf.compat.v1.nn.static_rnn(rci.LSTMCell(H, num_proj=2, proj_clip=0.5), xs, dtype=tf.float32)


def test_a_projection_multiplies_the_cell_s_own_h():
    """LSTMCell's num_proj: the projection kernel's MatMul of the step's h = o · act(c) (each
    static_rnn copy has its own), then proj_clip. One multiplying c instead, or a second
    MatMul of h by the kernel, is refused, naming the h it looked for."""
    plain = _graph_def(_static_lstmp)
    cell = cell_at(graph_from_graph_def(plain.SerializeToString()), _C, "lstm")
    assert (cell.cls, cell.attrs["proj_clip"], cell.problem) == ("LSTMCell", 0.5, None)
    kernel = f"{_C}/projection/kernel"

    def of_c(n):
        n.input[0] = f"{_C}/add_1"

    cell = cell_at(_edited(plain, f"{_C}/MatMul_1", of_c), _C, "lstm")
    assert cell.cls is None and (
        f"expected one MatMul of {kernel} after the cell's h {_C}/mul_2:0, found none"
        in cell.problem
    )
    twice = _with_node(plain, "second", "MatMul", [f"{_C}/mul_2", f"{kernel}/Read/Identity"])
    cell = cell_at(twice, _C, "lstm")
    assert cell.cls is None and f"'{_C}/MatMul_1 (MatMul)', 'second (MatMul)'" in cell.problem


def _static_gru():
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    xs = [tf.compat.v1.placeholder(tf.float32, [B, I], name=f"x{t}") for t in range(2)]
    tf.compat.v1.nn.static_rnn(rci.GRUCell(H), xs, dtype=tf.float32)


@pytest.mark.parametrize("node", ["Tanh", "Tanh_1"])
def test_each_static_rnn_copy_of_a_gru_reads_its_own_candidate(node):
    """static_rnn's GRU copies share the candidate kernel: each copy's candidate is the MatMul
    of its own concat(x, r·h). One step's candidate activation made a relu is refused as copies
    that disagree; before, every copy read the first copy's candidate, and a relu in the
    second step was ported as tanh."""
    plain = _graph_def(_static_gru)
    cell = cell_at(graph_from_graph_def(plain.SerializeToString()), "rnn/gru_cell", "gru")
    assert (cell.cls, cell.attrs, cell.problem) == ("GRUCell", {"activation": "tanh"}, None)

    def relu(n):
        n.op = "Relu"

    cell = cell_at(_edited(plain, f"rnn/gru_cell/{node}", relu), "rnn/gru_cell", "gru")
    assert cell.cls is None and "the 2 uses of rnn/gru_cell/gates/kernel disagree" in cell.problem
    assert "{'activation': 'relu'} at ops rnn/gru_cell/MatMul" in cell.problem


def test_a_peephole_is_read_with_its_operands_either_way_round():
    """`c · w_*_diag` is the peephole `w_*_diag · c` (Mul commutes): read as TF's own order."""
    peep = _graph_def(_static_peephole_lstm)
    for n in peep.node:
        if n.op == "Mul" and any(i.endswith("_diag/Read/Identity") for i in n.input):
            n.input[:] = list(reversed(n.input))
    cell = cell_at(graph_from_graph_def(peep.SerializeToString()), _C, "lstm")
    assert (cell.cls, cell.problem) == ("LSTMCell", None)


def _rewired(graph_def, name: str, edit):
    """`graph_def` with node `name` edited by `edit(node)`: (the graph, whether TF imports it)."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    edit(next(n for n in out.node if n.name == name))
    try:
        with tf.Graph().as_default():
            tf.graph_util.import_graph_def(out, name="")
    except ValueError:
        return out, False
    return out, True


def _read_twice(scope: str, value: str, own: str, extra: str) -> str:
    """The refusal of a step's `value` read by `extra` besides `own`, its one reader in TF1's
    cell."""
    readers = sorted([f"{scope}/{own}", f"{scope}/{extra}"])
    return f"{scope}/{value} is read by {readers}; in TF1's cell by ['{scope}/{own}'] alone"


def _input(k: int, value: str):
    def edit(n):
        n.input[k] = value

    return edit


def _third_input(n):
    n.input.append(n.input[0])


def _int_value(value: int):
    """A Const (an axis) holding `value` instead."""

    def edit(n):
        n.attr["value"].tensor.int_val[:] = [value]

    return edit


def _add_v2(n):
    n.op = "AddV2"
    n.input[:] = list(reversed(n.input))
    del n.attr["data_format"]


_Z = "rnn/LSTMCellZeroState/zeros"  # c_prev (zeros_1: h)


@pytest.mark.parametrize(
    "node, edit, imports, message",
    [
        # Graphs TF runs, each computing something the module would not
        ("BiasAdd", _input(1, f"{_C}/bias/Initializer/zeros"), True,
         f"{_C}/BiasAdd (BiasAdd) adds {_C}/MatMul, {_C}/bias/Initializer/zeros, not "
         f"{_C}/bias to {_C}/MatMul"),
        ("mul_3", _input(0, f"{_C}/Sigmoid"), True,
         f"{_C}/mul_3 (Mul) reads {_C}/Sigmoid, {_C}/Tanh, not i · act(j) ({_C}/Sigmoid_1, "
         f"{_C}/Tanh)"),
        ("mul_1", _input(0, f"{_C}/Sigmoid_1"), True,
         f"{_C}/mul_1 (Mul) reads {_C}/Sigmoid_1, {_Z}, not the forget gate {_C}/Sigmoid"),
        ("add_3", _input(0, _Z), True,
         f"{_C}/add_3 adds {_Z} to i · act(j), not f · c_prev"),
        ("mul_2", _input(1, f"{_Z}_1"), True,
         f"the input gate adds {_C}/add_2 (AddV2), which is not the peephole {_C}/w_i_diag · c "
         f"({_Z})"),
        ("mul", _input(1, f"{_Z}_1"), True,
         f"the forget gate adds {_C}/add_1 (AddV2), which is not the peephole {_C}/w_f_diag · c "
         f"({_Z})"),
        ("mul_4", _input(1, _Z), True,
         f"the output gate adds {_C}/add_4 (AddV2), which is not the peephole {_C}/w_o_diag · c "
         f"({_C}/add_3)"),
        ("mul_5", _input(1, f"{_C}/add_3"), True,
         f"expected one o · act(c) Mul of {_C}/Sigmoid_2 after {_C}/Tanh_1, found none"),
        # Graphs TF refuses to import: refused here too, not read in part
        ("add_3", _third_input, False, f"{_C}/add_3 (AddV2) has 3 inputs, not 2"),
        ("add_1", _third_input, False, f"{_C}/add_1 (AddV2) has 3 inputs, not 2"),
        ("add", _third_input, False, f"{_C}/add (AddV2) has 3 inputs, not 2"),
        ("split", _input(0, f"{_C}/BiasAdd"), False,
         f"{_C}/split splits {_C}/BiasAdd in 4 along axis None, not {_C}/BiasAdd in 4 along "
         "axis 1"),
        ("concat", _input(2, f"{_C}/split/split_dim"), True, None),  # axis 1 either way
        # The same step written otherwise: read as the cell
        ("concat/axis", _int_value(-1), True, None),
        ("split/split_dim", _int_value(-1), True, None),
        ("BiasAdd", _add_v2, True, None),  # bias + x·W
        # bias_add(bias, x·W): not the bias added to the product (nor a graph TF runs)
        ("BiasAdd", lambda n: n.input.reverse(), False,
         f"{_C}/BiasAdd (BiasAdd) adds {_C}/bias, {_C}/MatMul, not {_C}/bias to {_C}/MatMul"),
        ("concat/axis", _int_value(0), False,
         f"{_C}/MatMul multiplies {_C}/concat (ConcatV2), not concat([x, h], 1)"),
        # A step input computed by the step (h the forget peephole's product)
        ("concat", _input(1, f"{_C}/mul"), True,
         _read_twice(_C, "mul", "add_1", "concat")),
    ],
)  # fmt: skip
def test_each_op_of_an_lstm_step_combines_the_cell_s_values(node, edit, imports, message):
    """TF1's LSTMCell with peepholes, one step: c = f·c_prev + i·act(j) with f = σ(f + bias +
    w_f·c_prev), i = σ(i + w_i·c_prev); h = σ(o + w_o·c)·act(c). One operand of one op
    rewired (TF's node names), the cell is refused naming the op and what it reads; before,
    each was ported as the cell TF no longer computes."""
    graph_def, ok = _rewired(_graph_def(_static_peephole_lstm), f"{_C}/{node}", edit)
    assert ok is imports
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), _C, "lstm")
    if message is None:
        assert (cell.cls, cell.problem) == ("LSTMCell", None)
    else:
        assert cell.cls is None and message in cell.problem


@pytest.mark.parametrize(
    "build, scope, kind, node, edit, message",
    [
        # c = f·f + i·act(j): c_prev is the step's own forget gate
        (_static_lstm, _C, "lstm", "mul", _input(1, f"{_C}/Sigmoid"),
         f"the step's c is {_C}/Sigmoid, a value of the step"),
        # c = f·o + i·act(j): the output gate read twice
        (_static_lstm, _C, "lstm", "mul", _input(1, f"{_C}/Sigmoid_2"),
         _read_twice(_C, "Sigmoid_2", "mul_2", "mul")),
        # the second step's c_prev the first step's i·act(j), f·c_prev or unprojected h
        (_static_lstm, _C, "lstm", "mul_3", _input(1, f"{_C}/mul_1"),
         _read_twice(_C, "mul_1", "add_1", "mul_3")),
        (_static_lstm, _C, "lstm", "mul_3", _input(1, f"{_C}/mul"),
         _read_twice(_C, "mul", "add_1", "mul_3")),
        (_static_lstmp, _C, "lstm", "mul_3", _input(1, f"{_C}/mul_2"),
         _read_twice(_C, "mul_2", "MatMul_1", "mul_3")),
        # h the input gate's peephole product
        (_static_peephole_lstm, _C, "lstm", "concat", _input(1, f"{_C}/mul_2"),
         _read_twice(_C, "mul_2", "add_2", "concat")),
        # the second step's c_prev the first step's c before its clip, or half-way through it
        (_static_clipped_lstm, _C, "lstm", "mul_3", _input(1, f"{_C}/add_1"),
         _read_twice(_C, "add_1", "clip_by_value/Minimum", "mul_3")),
        (_static_clipped_lstm, _C, "lstm", "mul_3", _input(1, f"{_C}/clip_by_value/Minimum"),
         _read_twice(_C, "clip_by_value/Minimum", "clip_by_value", "mul_3")),
        # the second step's r·h multiplies the first step's u·h, not its h
        (_static_gru, _G, "gru", "mul_3", _input(1, f"{_G}/mul_1"),
         _read_twice(_G, "mul_1", "add", "mul_3")),
    ],
)  # fmt: skip
def test_a_step_is_closed(build, scope, kind, node, edit, message):
    """Each value inside a step is read by the one op of the cell that reads it in TF1's
    cells, and x, h, c_prev come from outside the step: graphs TF runs that break either
    (each ported before as the cell) are refused, naming the value and its readers."""
    graph_def, ok = _rewired(_graph_def(build), f"{scope}/{node}", edit)
    assert ok
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), scope, kind)
    assert cell.cls is None and message in cell.problem


@pytest.mark.parametrize("v1_loops", [False, True])
def test_one_loop_variable_read_as_c_and_h_is_refused(v1_loops):
    """dynamic_rnn's step reading its c loop variable where LSTMCell reads h (concat(x, c)):
    no LSTM, refused (the same zeros tensor read as both by static_rnn's first step is the
    caller's initial state: test_each_op_of_an_lstm_step_combines_the_cell_s_values)."""
    graph_def = _graph_def(_cells_v1 if v1_loops else _cells_v2)
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    if v1_loops:
        nodes = list(out.node)
    else:
        (body,) = [f for f in out.library.function
                   if any(n.name == "lstm_cell/concat" for n in f.node_def)]  # fmt: skip
        nodes = list(body.node_def)
    by_name = {n.name.rpartition("while/")[2] if v1_loops else n.name: n for n in nodes}
    c_prev = by_name["lstm_cell/mul_1"].input[1]  # f · c_prev
    by_name["lstm_cell/concat"].input[1] = c_prev
    cell = cell_at(graph_from_graph_def(out.SerializeToString()), "lstm/lstm_cell", "lstm")
    assert cell.cls is None and "the step reads one loop variable, " in cell.problem
    assert cell.problem.endswith(", as c and h")


@pytest.mark.parametrize("value", ["mul_4", "Tanh", "Tanh_1", "Sigmoid_2"])
def test_a_value_of_the_step_read_by_another_op_is_refused(value):
    """The output gate's peephole product, act(j), act(c), the output gate: each read by one op
    of TF1's cell; one more reader (a Neg nothing uses) is refused, naming both."""
    graph = _with_node(_graph_def(_static_peephole_lstm), "second", "Neg", [f"{_C}/{value}"])
    cell = cell_at(graph, _C, "lstm")
    assert cell.cls is None and f"{_C}/{value} is read by [" in cell.problem
    assert "'second']; in TF1's cell by [" in cell.problem


@pytest.mark.parametrize(
    "op, inputs, message",
    [
        ("Neg", ["split"], f"{_G}/split is read by ['{_G}/mul', 'second']"),  # r
        ("Neg", ["split:1"], f"{_G}/split:1 is read by ['{_G}/mul_1', '{_G}/sub', 'second']"),
        ("Neg", ["Tanh"], f"{_G}/Tanh is read by ['{_G}/mul_2', 'second']"),  # the candidate
        ("Mul", ["Tanh", "Tanh"], f"expected one (1 − u)·c after {_G}/Tanh, found ["),
        ("AddV2", ["mul_2", "mul_2"], f"expected one new h after {_G}/mul_2, found ["),
    ],
)
def test_a_gru_step_s_value_read_by_another_op_is_refused(op, inputs, message):
    """r, u, the candidate, (1 − u)·c: each read by its ops of TF1's GRUCell alone."""
    names = [f"{_G}/{i}" for i in inputs]
    cell = cell_at(_with_node(_graph_def(_static_gru), "second", op, names), _G, "gru")
    assert cell.cls is None and message in cell.problem


def test_a_step_s_boundary_is_its_concat_s_x_and_h_and_its_new_c_and_h():
    """What verify runs a step between (test_verify runs it): the step's x and h (concat(x, h),
    also through an Identity), c_prev, the new c and h = o · act(c), with act tanh or linear
    (tf.identity). A kernel product of no concat is no TF1 cell: refused."""
    plain = _graph_def(_static_lstm)
    zeros = "rnn/LSTMCellZeroState/zeros"
    want = {
        "inputs": {"x": ("x0", 0), "h": (f"{zeros}_1", 0), "c": (zeros, 0)},
        "outputs": {"c": (f"{_C}/add_1", 0), "h": (f"{_C}/mul_2", 0)},
    }
    assert cell_at(graph_from_graph_def(plain.SerializeToString()), _C, "lstm").boundary == want
    through = type(plain)()
    through.CopyFrom(plain)
    ident = through.node.add(name="through", op="Identity", input=[f"{_C}/concat"])
    ident.attr["T"].type = tf.float32.as_datatype_enum
    next(n for n in through.node if n.name == f"{_C}/MatMul").input[0] = "through"
    cell = cell_at(graph_from_graph_def(through.SerializeToString()), _C, "lstm")
    assert cell.problem is None and cell.boundary == want

    def of_x(n):
        n.input[0] = "x0"

    cell = cell_at(_edited(plain, f"{_C}/MatMul", of_x), _C, "lstm")
    assert cell.cls is None
    assert f"{_C}/MatMul multiplies x0 (Placeholder), not concat([x, h], 1)" in cell.problem

    def linear():
        from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

        x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x0")
        tf.compat.v1.nn.static_rnn(rci.LSTMCell(H, activation=tf.identity), [x], dtype=tf.float32)

    g = graph_from_graph_def(_graph_def(linear).SerializeToString())
    cell = cell_at(g, _C, "lstm")
    assert cell.attrs["activation"] == "linear"
    (h,) = [n for n in g.nodes.values() if n.op == "Mul" and {g.resolve(r)[0] for r in n.inputs}
            == {f"{_C}/Sigmoid_2", f"{_C}/add_1"}]  # fmt: skip
    assert cell.boundary["outputs"] == {"c": (f"{_C}/add_1", 0), "h": (h.name, 0)}


@pytest.mark.parametrize(
    "op, inputs, message",
    [
        ("BiasAdd", ["MatMul", "MatMul"], f"one BiasAdd after {_G}/MatMul"),
        ("Tanh", ["BiasAdd"], f"one gate activation after {_G}/BiasAdd"),
        ("Split", ["split/split_dim", "Sigmoid"], f"one Split of r, u after {_G}/Sigmoid"),
        ("Mul", ["split", "split"], f"one r·h after {_G}/split:0"),
        ("ConcatV2", ["x0", "mul", "concat/axis"], f"one concat(x, r·h) after {_G}/mul"),
        (
            "MatMul",
            ["concat_1", "candidate/kernel/Read/Identity"],
            f"one MatMul of {_G}/candidate/kernel after {_G}/concat_1",
        ),
        ("BiasAdd", ["MatMul_1", "MatMul_1"], f"one candidate BiasAdd after {_G}/MatMul_1"),
        ("Sigmoid", ["BiasAdd_1"], f"one candidate activation after {_G}/BiasAdd_1"),
    ],
)
def test_a_gru_op_read_twice_is_refused_naming_both(op, inputs, message):
    names = [i if i == "x0" else f"{_G}/{i}" for i in inputs]
    cell = cell_at(_with_node(_graph_def(_static_gru), "second", op, names), _G, "gru")
    assert cell.cls is None and f"expected {message}, found [" in cell.problem
    assert f"'second ({op})'" in cell.problem


@pytest.mark.parametrize("activation", ["tanh", "linear"])
def test_a_gru_step_s_boundary_is_its_concat_s_x_and_h_and_its_new_h(activation):
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x0")
        act = tf.identity if activation == "linear" else tf.tanh
        tf.compat.v1.nn.static_rnn(rci.GRUCell(H, activation=act), [x], dtype=tf.float32)

    cell = cell_at(graph_from_graph_def(_graph_def(build).SerializeToString()), _G, "gru")
    assert (cell.cls, cell.attrs, cell.problem) == ("GRUCell", {"activation": activation}, None)
    assert cell.boundary == {
        "inputs": {"x": ("x0", 0), "h": ("rnn/GRUCellZeroState/zeros", 0)},
        "outputs": {"h": (f"{_G}/add", 0)},
    }


@pytest.mark.parametrize(
    "node, edit, imports, message",
    [
        ("BiasAdd", _input(1, f"{_G}/gates/bias/Initializer/Const"), True,
         f"{_G}/BiasAdd (BiasAdd) adds {_G}/MatMul, {_G}/gates/bias/Initializer/Const, not "
         f"{_G}/gates/bias to {_G}/MatMul"),
        ("mul", _input(1, f"{_G}/split"), True,
         f"{_G}/mul (Mul) reads {_G}/split, {_G}/split, not r · h ({_G}/split, "
         "rnn/GRUCellZeroState/zeros)"),
        ("concat_1", _input(0, "x1"), True,
         f"{_G}/concat_1 joins x1, {_G}/mul, not the step's x x0 and r · h {_G}/mul"),
        ("BiasAdd_1", _input(1, f"{_G}/candidate/bias/Initializer/zeros"), True,
         f"{_G}/BiasAdd_1 (BiasAdd) adds {_G}/MatMul_1, {_G}/candidate/bias/Initializer/zeros, "
         f"not {_G}/candidate/bias to {_G}/MatMul_1"),
        ("mul_2", _input(0, f"{_G}/split:1"), True,
         f"{_G}/mul_2 multiplies the candidate by another value than 1 − u"),
        ("sub", lambda n: n.input.reverse(), True,
         f"{_G}/mul_2 multiplies the candidate by another value than 1 − u"),
        ("mul_1", _input(1, f"{_G}/split:1"), True,
         f"{_G}/mul_1 (Mul) reads {_G}/split:1, {_G}/split:1, not u · h ({_G}/split:1, "
         "rnn/GRUCellZeroState/zeros)"),
        ("add", _input(0, f"{_G}/mul"), True,
         f"{_G}/mul (Mul) reads {_G}/split, rnn/GRUCellZeroState/zeros, not u · h"),
        ("add", _third_input, False, f"{_G}/add (AddV2) has 3 inputs, not 2"),
        # z·h + (2 − z)·c; h + (1 − z)·c
        ("sub/x", lambda n: n.attr["value"].tensor.float_val.__setitem__(slice(None), [2.0]),
         True, f"{_G}/mul_2 multiplies the candidate by another value than 1 − u"),
        ("add", _input(0, "rnn/GRUCellZeroState/zeros"), True,
         f"{_G}/add adds another value than u · h to (1 − u)·c"),
        ("split", lambda n: n.attr["num_split"].__setattr__("i", 4), False,
         f"{_G}/split splits {_G}/Sigmoid in 4 along axis 1.0, not {_G}/Sigmoid in 2 along "
         "axis 1"),
    ],
)  # fmt: skip
def test_each_op_of_a_gru_step_combines_the_cell_s_values(node, edit, imports, message):
    """TF1's GRUCell, first static_rnn step: r, u = split(σ(concat(x, h)·W + b)); c =
    tanh(concat(x, r·h)·W_c + b_c); h' = u·h + (1 − u)·c. One operand rewired: refused,
    naming it (before, ported as the GRU TF no longer computes)."""
    graph_def, ok = _rewired(_graph_def(_static_gru), f"{_G}/{node}", edit)
    assert ok is imports
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), _G, "gru")
    assert cell.cls is None and message in cell.problem
