"""The GraphDef reader (`porting/graphs/graph_def.py`) against TensorFlow's own reading of the
same graphs: every node's inputs as TF resolves them (the main graph imported by
import_graph_def, each function body rebuilt by TF's function_def_to_graph, whose flat output
indices are what a body's "node:argument:k" means), every attribute as TF's `get_attr` returns
it, each function's arguments and outputs in order, the fused ops' arguments as TF's op registry
lists them, values traced through identities, calls and loops, an attribute's float of the wrong
wire type refused, and a meta graph read without TensorFlow. The cells read from such graphs:
test_tf1_cells.py."""

import numpy as np
import pytest

from tests.helpers import GRAPH_B as B
from tests.helpers import GRAPH_T as T
from tests.helpers import (
    counted_rand,
    dynamic_rnn_cells,
    dynamic_rnn_cells_v1,
    graph_rand,
    needs_tf,
    static_rnn_clipped_lstm,
    tf_graph_def,
    tf_module,
)
from torch_lstm_grad.porting.decoding import guard
from torch_lstm_grad.porting.graphs import graph_def as tf1_graph
from torch_lstm_grad.porting.graphs import tf1_cells
from torch_lstm_grad.porting.graphs.graph_def import (
    graph_from_graph_def,
    meta_graph_parts,
    read_meta_graph,
)
from torch_lstm_grad.porting.graphs.tf1_cells import cell_at

tf = pytest.importorskip("tensorflow", reason="TensorFlow (the oracle) is not installed")


_NUMERIC = (1, 2, 3, 9, 10)  # the tensor dtypes read: float, double, int32, int64, bool


def _fused():
    """The fused ops, their outputs read by name: in the main graph (flat indices, "op:k") and
    in a While body ("op:argument:k", counted within the argument)."""
    raw = tf.raw_ops
    x = tf.compat.v1.placeholder(tf.float32, [T, B, I], name="x")
    w = tf.constant(graph_rand(I + H, 4 * H), name="w")
    peep, b = tf.constant(graph_rand(H, seed=1)), tf.constant(graph_rand(4 * H, seed=2))
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
    w_ru = tf.constant(graph_rand(I + H, 2 * H, seed=3))
    w_c = tf.constant(graph_rand(I + H, H, seed=4))
    b_ru, b_c = tf.constant(graph_rand(2 * H, seed=5)), tf.constant(graph_rand(H, seed=6))

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
    w = tf.constant(graph_rand(4, 4), name="w")
    y = tf.matmul(x, w, transpose_b=True)
    y = tf.nn.bias_add(y, tf.constant(graph_rand(4), name="b"), data_format="NHWC")
    y = tf.nn.leaky_relu(y, alpha=0.125)
    parts = tf.split(y, 2, axis=1, name="split")
    tf.concat([parts[1], parts[0]], axis=1, name="swapped")
    tf.constant(["a", "bc"], name="strings")
    tf.constant([[1, -2]], tf.int64, name="ints")
    tf.constant(True, name="flag")
    tf.constant(-0.0, tf.float64, name="minus_zero")


GRAPHS = {
    "cells_v2": dynamic_rnn_cells,
    "cells_v1": dynamic_rnn_cells_v1,
    "fused": _fused,
    "attrs": _attributes,
}


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
    graph_def = tf_graph_def(GRAPHS[kind])
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
    graph_def = tf_graph_def(_fused)
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

    graph_def = tf_graph_def(dynamic_rnn_cells)
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


def test_output_indices_are_numbers_of_at_most_nine_digits():
    """`node:k`: k a decimal number of up to nine digits (below 2^31, TF's int32 index);
    anything else (other scripts' digits included, which TF does not read) is refused by
    name, not parsed."""
    assert tf1_graph._output_index("999999999") == 999999999
    for text in ("1234567890", "-1", "1e3", "", "١"):
        with pytest.raises(ValueError, match="is not a number"):
            tf1_graph._output_index(text)
    graph_def = tf_graph_def(lambda: tf.identity(tf.constant(1.0, name="x"), name="y"))
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


def _variables_and_products():
    x = tf.compat.v1.placeholder(tf.float32, [H, H], name="x")
    k = tf.compat.v1.Variable(graph_rand(H, H), name="s/kernel")
    tf.matmul(x, k, name="x_k")
    tf.matmul(k, x, transpose_b=True, name="k_x")
    tf.matmul(x, k, transpose_b=True, name="x_kt")
    tf.matmul(x, k, transpose_a=True, name="xt_k")
    tf.constant(graph_rand(H, H), name="f/kernel")
    tf.constant(np.ones((H, H), np.int32), name="i/kernel")
    tf.constant(1.5, name="scalar/kernel")


def test_variables_and_the_forward_product_with_them():
    """A variable is a variable op, or in a frozen graph a float Const of rank 1 or more
    (never an int or a scalar Const); a cell's forward product is `x · kernel` as TF's
    MatMul computes it: the kernel its second input, neither transposed."""
    graph_def = tf_graph_def(_variables_and_products)
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
    clipped = tf_graph_def(static_rnn_clipped_lstm)
    products = tf_graph_def(_variables_and_products)
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

    graph_def = tf_graph_def(build)
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
    graph_def = tf_graph_def(_loop_reading_a_constant)
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
    meta = tf.compat.v1.MetaGraphDef(graph_def=tf_graph_def(_loop_reading_a_constant))
    data = meta.SerializeToString()
    path = tmp_path / "m.meta"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(guard.CorruptFile) as err:
        tf1_graph.read_meta_graph(str(path))
    assert str(err.value).startswith(f"{path}: TF1 meta graph (MetaGraphDef): "), err.value


I, H = 3, 4  # noqa: E741


@needs_tf
def test_meta_graph_read_without_tensorflow(tmp_path):
    """Our MetaGraphDef decoding against TF's: every node of the main graph and of the function
    bodies (TF 2's While loops), with op types, inputs and the Const values the cell readers
    use."""
    tf = tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [5, 2, I])
        tf.compat.v1.nn.dynamic_rnn(
            rci.LSTMCell(H, forget_bias=0.25, cell_clip=1.5), x, time_major=True, dtype=tf.float32
        )
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(sess, str(tmp_path / "m"))
    meta = tf.compat.v1.MetaGraphDef()
    meta.ParseFromString((tmp_path / "m.meta").read_bytes())
    ours = read_meta_graph(str(tmp_path / "m.meta"))
    want = {n.name: n for n in meta.graph_def.node}
    for f in meta.graph_def.library.function:
        want.update({f"{f.signature.name}::{n.name}": n for n in f.node_def})
    got = {k: n for k, n in ours.nodes.items() if n.op != "_Arg"}
    assert set(got) == set(want)
    consts = 0
    for k, n in want.items():
        assert got[k].op == n.op
        assert len(got[k].inputs) == len([i for i in n.input if not i.startswith("^")])
        if n.op == "Const" and n.attr["value"].tensor.dtype == tf.float32.as_datatype_enum:
            np.testing.assert_array_equal(
                got[k].attrs["value"], tf.make_ndarray(n.attr["value"].tensor)
            )
            consts += 1
    assert consts > 5 and meta_graph_parts((tmp_path / "m.meta").read_bytes())[1] == tf.__version__
    cell = cell_at(ours, "rnn/lstm_cell", "lstm")
    assert cell.cls == "LSTMCell" and cell.attrs["forget_bias"] == 0.25
    assert cell.attrs["cell_clip"] == 1.5 and cell.attrs["activation"] == "tanh"


@needs_tf
def test_loop_variables_the_body_changes_are_not_traced_out_of_the_loop():
    """A While loop's body argument is traced to the loop's input only when the body returns it
    unchanged (TF passes a captured kernel so); one the body computes anew each step holds the
    input only at step 0, so reading it as the input (a kernel scaled by the loop, say) would
    port another computation. On the graph TF builds for such a loop."""
    tf = tf_module()
    from torch_lstm_grad.porting.graphs.graph_def import graph_from_graph_def

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, I], name="x")
        k = tf.constant(counted_rand(I, I), name="kernel")
        tf.while_loop(
            lambda i, a, changed, kept: i < 3,
            lambda i, a, changed, kept: (i + 1, a @ changed @ kept, changed * 0.5, kept),
            (0, x, k, tf.identity(k)),
            name="loop",
        )
    made = g.as_graph_def()
    (body,) = [f for f in made.library.function if "body" in f.signature.name]
    graph = graph_from_graph_def(made.SerializeToString(), label="graph")
    args = [f"{body.signature.name}::{a.name}" for a in body.signature.input_arg]
    # TF 2's While: the loop counter, maximum_iterations, then i, a, changed, kept
    assert len(args) == 6
    assert graph.resolve((args[5], 0)) == ("kernel", 0)  # kept: returned as it came
    assert graph.resolve((args[4], 0)) == (args[4], 0)  # changed * 0.5 each step
    assert graph.resolve((args[0], 0)) == (args[0], 0)  # the loop counter
    assert graph.resolve((args[1], 0))[0].startswith("loop/")  # maximum_iterations: outside


@needs_tf
def test_a_float_attr_of_the_wrong_wire_type_is_refused():
    """A node attribute's float (AttrValue.f, fixed32) written length-delimited or as a
    varint: protobuf skips it (the attribute holds no value), the meta graph reader refuses
    it; as protobuf writes it, it reads protobuf's value."""
    import struct

    attr_value_pb2 = pytest.importorskip("tensorflow.core.framework.attr_value_pb2")
    from torch_lstm_grad.porting.graphs import graph_def as tf1_graph

    data = attr_value_pb2.AttrValue(f=1.5).SerializeToString()
    assert tf1_graph._attr_value(data) == 1.5
    for data, wire in ((b"\x22\x04" + struct.pack("<f", 2.5), "bytes"), (b"\x20\x05", "a varint")):
        assert attr_value_pb2.AttrValue.FromString(data).WhichOneof("value") is None
        with pytest.raises(ValueError, match=f"^field 4: {wire} where a float belongs"):
            tf1_graph._attr_value(data)
