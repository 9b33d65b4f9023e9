"""Frozen GraphDefs read without TensorFlow (`porting/formats/frozen_graph.py`) against TF's parse
of the same files: the weights, the source's format and writer, nodes without a name or an op,
a node reading a missing one, and a TF 2 function frozen by convert_variables_to_constants_v2
refused saying why."""

import pytest

from tests.helpers import CUTKUM, counted_rand, needs_tf, pb_field, same_bits, tf_module
from torch_lstm_grad.tools import cli

I, H = 3, 4  # noqa: E741


def _tf_frozen_weights(tf, graph_def) -> dict:
    """TF's reading of a frozen graph's weights: the main graph's floating-point Const nodes of
    rank >= 1 (scalars are an op's constants; a function body's constants are its ops')."""
    out = {}
    for n in graph_def.node:
        if n.op == "Const":
            value = tf.make_ndarray(n.attr["value"].tensor)
            if value.dtype.kind == "f" and value.ndim:
                out[n.name] = value
    return out


@needs_tf
def test_a_tf2_frozen_function_is_refused_saying_why(tmp_path, capsys):
    """TF 2's convert_variables_to_constants_v2 (a Keras 3 LSTM's function, frozen) names each
    weight after the placeholder that held the captured variable, as TF's own freezing shows
    here: no layer can be told by its weights' names, and the refusal says so and what to
    convert instead."""
    tf = tf_module()
    keras = pytest.importorskip("keras")
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4)])
    fn = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec([2, 5, 3]))
    graph_def = convert_variables_to_constants_v2(fn).graph.as_graph_def()
    names = [
        n.name for n in graph_def.node if n.op == "Const" and n.attr["value"].tensor.dtype == 1
    ]
    assert any(n.endswith("/ReadVariableOp/resource") for n in names)
    assert not any(n.endswith(("/kernel", "/bias")) for n in names)
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph_def.SerializeToString())
    assert cli.main(["convert", str(path), "-o", str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: a TF 2 function frozen by convert_variables_to_constants_v2" in err
    assert "convert the SavedModel, Keras file or checkpoint the function came from" in err


@needs_tf
def test_frozen_graph_read_without_tensorflow(tmp_path):
    """Our frozen-GraphDef reading against TF's parse of the same files: the published cutkum
    graph (TF1 loops) and a TF2 graph whose While body holds float constants of its own. The
    weights are exactly the main graph's float Const nodes of rank >= 1, bit for bit; the file,
    its form and node count, and the producer version TF reads are what the source reports."""
    tf = tf_module()
    from tensorflow.core.framework import graph_pb2

    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def
    from torch_lstm_grad.porting.source import Writer

    g = tf.Graph()  # graph mode, TF 2's While (its body a library function)
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, I])
        w = tf.constant(counted_rand(I, I), name="w")

        def body(i, a):
            return i + 1, tf.tanh(a @ w + tf.constant(counted_rand(I), name="body_bias"))

        tf.identity(0.5 * tf.while_loop(lambda i, a: i < 3, body, (0, x))[1], name="out")
    made = g.as_graph_def()
    (tmp_path / "loop.pb").write_bytes(made.SerializeToString())
    for path in (str(tmp_path / "loop.pb"), CUTKUM):
        graph_def = graph_pb2.GraphDef()
        with open(path, "rb") as fh:
            graph_def.ParseFromString(fh.read())
        want = _tf_frozen_weights(tf, graph_def)
        scalars = [
            n.name
            for n in graph_def.node
            if n.op == "Const" and n.attr["value"].tensor.dtype == tf.float32.as_datatype_enum
            and not n.attr["value"].tensor.tensor_shape.dim
        ]  # fmt: skip
        assert want and scalars  # both kinds are in each file: the reading tells them apart
        source = read_graph_def(path)
        assert sorted(source.variables) == sorted(want)
        for name, value in want.items():
            same_bits(source.variables[name], value)
        assert source.keys == {n: n for n in want}
        assert source.path == path
        assert source.format == (
            f"frozen GraphDef (binary, {len(graph_def.node)} nodes; weights from Const nodes)"
        )
        producer = graph_def.versions.producer  # cutkum's writer left it unset (0)
        assert producer > 0 or path == CUTKUM
        version = f" (graph version {producer})" if producer else ""
        assert source.writer == Writer("tf1", how=f"a frozen GraphDef{version}")
    body_consts = [n for f in made.library.function for n in f.node_def if n.op == "Const"]
    assert any(len(n.attr["value"].tensor.tensor_shape.dim) == 1 for n in body_consts)


def _node(name: bytes, op: bytes, *attrs: bytes) -> bytes:
    """A GraphDef's `node` field (NodeDef: name = 1, op = 2, attr = 5), by hand."""

    return pb_field(1, 2, pb_field(1, 2, name) + pb_field(2, 2, op) + b"".join(attrs))


@needs_tf
@pytest.mark.parametrize(
    "nodes, found",
    [
        ([(b"x y", b"Const")], "a node named 'x y' with op 'Const'"),
        ([(b"x", b"1Const")], "a node named 'x' with op '1Const'"),
        ([(b"ok", b"Const"), (b"", b"Const")], "a node named '' with op 'Const'"),
        ([], "no nodes"),
    ],
)
def test_frozen_graph_nodes_need_a_name_and_an_op(tmp_path, nodes, found):
    """A `.pb` whose nodes are not all named as TF names nodes and ops is no GraphDef: one line
    naming the file and the first bad node."""
    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def

    path = tmp_path / "g.pb"
    path.write_bytes(b"".join(_node(n, op) for n, op in nodes))
    with pytest.raises(ValueError) as err:
        read_graph_def(str(path))
    assert str(err.value) == f"{path}: not a GraphDef ({found})"


@needs_tf
def test_frozen_graph_reading_a_missing_node_is_refused(tmp_path):
    """A GraphDef whose node reads a node it does not hold: the file and the format first."""

    from torch_lstm_grad.porting.formats.frozen_graph import read_graph_def

    path = tmp_path / "g.pb"
    path.write_bytes(_node(b"a", b"Identity", pb_field(3, 2, b"missing")))
    with pytest.raises(ValueError) as err:
        read_graph_def(str(path))
    assert str(err.value) == (
        f"{path}: frozen GraphDef: node 'a' reads 'missing', which is not in the graph"
    )
