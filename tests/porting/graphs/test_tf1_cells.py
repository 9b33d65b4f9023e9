"""The TF1 cell matcher (`porting/graphs/tf1_cells.py`) on graphs TensorFlow built and then
rewired by hand with TF's node names: static_rnn copies that must agree, cell clips, gates,
peepholes, projections and GRU steps read as TF1's cells compute them, and every operand of a
step rewired refused naming the op and what it reads, never ported as the cell TF no longer
computes; fused ops without stored attributes take TF's registered defaults. The graph
reader under it: test_graph_def.py."""

import pytest

from tests.helpers import GRAPH_B as B
from tests.helpers import GRAPH_H as H
from tests.helpers import GRAPH_I as I
from tests.helpers import GRAPH_T as T
from tests.helpers import (
    dynamic_rnn_cells,
    dynamic_rnn_cells_v1,
    needs_tf,
    static_rnn_clipped_lstm,
    tf_graph_def,
    tf_module,
)
from torch_lstm_grad.porting.graphs import tf1_cells
from torch_lstm_grad.porting.graphs.graph_def import graph_from_graph_def
from torch_lstm_grad.porting.graphs.tf1_cells import cell_at

tf = pytest.importorskip("tensorflow", reason="TensorFlow (the oracle) is not installed")


def test_every_training_op_is_bookkeeping():
    """TF's optimizers update a variable with Apply*, ResourceApply*, SparseApply* and
    ResourceSparseApply* ops (every one TF registers): none computes a cell."""
    import re

    ops = [n for n in dir(tf.raw_ops) if re.fullmatch(r"(Resource)?(Sparse)?Apply[A-Z]\w*", n)]
    kinds = {re.match(r"(Resource)?(Sparse)?Apply", n).group(0) for n in ops}
    assert kinds == {"Apply", "ResourceApply", "SparseApply", "ResourceSparseApply"}
    assert all(tf1_cells._bookkeeping(n) for n in ops)
    assert not any(tf1_cells._bookkeeping(n) for n in ("MatMul", "BlockLSTM", "Sparse"))


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
    graph_def = tf_graph_def(_static_lstm)
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
    graph_def = tf_graph_def(_nested_functions)
    (call,) = [n.name for n in graph_def.node if n.op.endswith("PartitionedCall")]
    g = graph_from_graph_def(graph_def.SerializeToString())
    (mul,) = [k for k, n in g.nodes.items() if n.op == "Mul"]
    (sine,) = [k for k, n in g.nodes.items() if n.op == "Sin"]
    assert mul.count("::") == 1 and sine.endswith("::sine")
    assert tf1_cells._outermost_name(g, mul) == call
    assert tf1_cells._outermost_name(g, sine) == "sine"
    assert tf1_cells._outermost_name(g, "x") == "x"


def _static_clipped_lstm():
    """The helper under the name the parametrize ids below show."""
    static_rnn_clipped_lstm()


def test_a_cell_clip_is_clip_by_value_from_minus_c_to_c():
    """LSTMCell's cell_clip is clip_by_value(c, -cell_clip, cell_clip): read from TF's graph;
    a clip to another interval (here [-1, 1.5] in every copy) is no cell_clip and refused."""
    graph_def = tf_graph_def(_static_clipped_lstm)
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
    peep = tf_graph_def(_static_peephole_lstm)
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
    plain = tf_graph_def(_static_lstm)
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
    cell = cell_at(_with_node(tf_graph_def(build), "second", op, inputs), _C, "lstm")
    assert cell.cls is None and f"expected {message}, found [" in cell.problem
    assert f"'second ({op})'" in cell.problem


def test_a_forget_bias_is_a_scalar_constant_added_to_the_gate():
    """The forget gate's first Add with one input (TF's import refuses it: refused as such) or
    adding no scalar constant (no forget bias to read): refused."""
    plain = tf_graph_def(_static_lstm)
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
    plain = tf_graph_def(_static_lstm)
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
    plain = tf_graph_def(_static_lstm)

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
    plain = tf_graph_def(_static_lstmp)
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
    that disagree (each copy reads its own candidate: read from the first copy, a relu in the
    second step would be ported as tanh)."""
    plain = tf_graph_def(_static_gru)
    cell = cell_at(graph_from_graph_def(plain.SerializeToString()), "rnn/gru_cell", "gru")
    assert (cell.cls, cell.attrs, cell.problem) == ("GRUCell", {"activation": "tanh"}, None)

    def relu(n):
        n.op = "Relu"

    cell = cell_at(_edited(plain, f"rnn/gru_cell/{node}", relu), "rnn/gru_cell", "gru")
    assert cell.cls is None and "the 2 uses of rnn/gru_cell/gates/kernel disagree" in cell.problem
    assert "{'activation': 'relu'} at ops rnn/gru_cell/MatMul" in cell.problem


def test_a_peephole_is_read_with_its_operands_either_way_round():
    """`c · w_*_diag` is the peephole `w_*_diag · c` (Mul commutes): read as TF's own order."""
    peep = tf_graph_def(_static_peephole_lstm)
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
    rewired (TF's node names), the cell is refused naming the op and what it reads, never ported as
    the cell the graph no longer computes."""
    graph_def, ok = _rewired(tf_graph_def(_static_peephole_lstm), f"{_C}/{node}", edit)
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
    (never ported as the cell) are refused, naming the value and its readers."""
    graph_def, ok = _rewired(tf_graph_def(build), f"{scope}/{node}", edit)
    assert ok
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), scope, kind)
    assert cell.cls is None and message in cell.problem


@pytest.mark.parametrize("v1_loops", [False, True])
def test_one_loop_variable_read_as_c_and_h_is_refused(v1_loops):
    """dynamic_rnn's step reading its c loop variable where LSTMCell reads h (concat(x, c)):
    no LSTM, refused (the same zeros tensor read as both by static_rnn's first step is the
    caller's initial state: test_each_op_of_an_lstm_step_combines_the_cell_s_values)."""
    graph_def = tf_graph_def(dynamic_rnn_cells_v1 if v1_loops else dynamic_rnn_cells)
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
    graph = _with_node(tf_graph_def(_static_peephole_lstm), "second", "Neg", [f"{_C}/{value}"])
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
    cell = cell_at(_with_node(tf_graph_def(_static_gru), "second", op, names), _G, "gru")
    assert cell.cls is None and message in cell.problem


def test_a_step_s_boundary_is_its_concat_s_x_and_h_and_its_new_c_and_h():
    """What verify runs a step between (test_verify runs it): the step's x and h (concat(x, h),
    also through an Identity), c_prev, the new c and h = o · act(c), with act tanh or linear
    (tf.identity). A kernel product of no concat is no TF1 cell: refused."""
    plain = tf_graph_def(_static_lstm)
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

    g = graph_from_graph_def(tf_graph_def(linear).SerializeToString())
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
    cell = cell_at(_with_node(tf_graph_def(_static_gru), "second", op, names), _G, "gru")
    assert cell.cls is None and f"expected {message}, found [" in cell.problem
    assert f"'second ({op})'" in cell.problem


@pytest.mark.parametrize("activation", ["tanh", "linear"])
def test_a_gru_step_s_boundary_is_its_concat_s_x_and_h_and_its_new_h(activation):
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    def build():
        x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x0")
        act = tf.identity if activation == "linear" else tf.tanh
        tf.compat.v1.nn.static_rnn(rci.GRUCell(H, activation=act), [x], dtype=tf.float32)

    cell = cell_at(graph_from_graph_def(tf_graph_def(build).SerializeToString()), _G, "gru")
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
    naming it, never ported as the GRU the graph no longer computes."""
    graph_def, ok = _rewired(tf_graph_def(_static_gru), f"{_G}/{node}", edit)
    assert ok is imports
    cell = cell_at(graph_from_graph_def(graph_def.SerializeToString()), _G, "gru")
    assert cell.cls is None and message in cell.problem


@needs_tf
def test_tf1_graph_fused_ops_without_stored_attributes_take_tfs_defaults():
    """A fused LSTM node without forget_bias / cell_clip / use_peephole (a graph saved with
    strip_default_attrs=True, as TF1's SavedModelBuilder can write it) computes with the op's
    registered defaults, as TF runs it: the cell read from it carries TF's op registry's
    defaults (BlockLSTM, LSTMBlockCell: forget bias 1, clip 3; BlockLSTMV2: clip 0), and such a
    node and one storing the same values are one configuration."""

    tf_module()
    from tensorflow.python.framework import op_def_registry

    from torch_lstm_grad.porting.graphs import graph_def as tf1_graph
    from torch_lstm_grad.porting.graphs import tf1_cells

    for op in ("BlockLSTM", "LSTMBlockCell", "BlockLSTMV2"):
        want = {a.name: a.default_value.f if a.type == "float" else a.default_value.b
                for a in op_def_registry.get(op).attr
                if a.name in ("forget_bias", "cell_clip", "use_peephole")}  # fmt: skip
        n_in = 9 if op != "LSTMBlockCell" else 8
        stripped = tf1_graph.Node("a", op, [("in", k) for k in range(n_in)], {})
        stored = tf1_graph.Node("b", op, [("in", k) for k in range(n_in)], dict(want))
        graph = tf1_graph.Graph({})  # the inputs' producers: not in it, taken as named
        cell = tf1_cells._fused_cell(graph, [stripped, stored], "w", "rnn/cell")
        assert cell.problem is None and cell.cls == op
        if op == "BlockLSTMV2":
            want["forget_bias"] = 0.0  # it has no forget bias (Keras' LSTM math)
        assert cell.attrs == want
        # and the description's origin says they were not stored (the first use is read)
        names = (
            "cell_clip, use_peephole"
            if op == "BlockLSTMV2"
            else "cell_clip, forget_bias, use_peephole"
        )
        assert cell.where.endswith(f"not stored: {names} = {op}'s registered defaults")
        assert "not stored" not in tf1_cells._fused_cell(graph, [stored], "w", "rnn/cell").where
