"""SavedModels whose saved loops compute something a little other than Keras' cell: a real
Keras 3 export and tf_keras' fixture (tests/data/keras2/saved_model), with one constant or op of
a gate's hard sigmoid rewritten by TF's own protobuf classes. The loop reader
(porting/graphs/keras_loops.py) must read the function exactly or refuse the layer naming the op: a
reader that accepted `relu6(x + 3) / 7` or `0.3·x + 0.5` as a hard sigmoid would port another
function in silence."""

import os
import shutil

import numpy as np
import pytest

from tests.helpers import (
    DATA,
    add_neg_of,
    keras_module,
    needs_tf,
    randomize,
    set_float_const,
    set_int_const,
    tf_module,
)
from torch_lstm_grad import porting

pytestmark = needs_tf
K2 = os.path.join(DATA, "keras2", "saved_model")


def _export(tmp_path_factory, layer, seed):
    """A Keras 3 export of Input((5, 3)) -> `layer(keras)`, weights drawn with `seed`."""
    keras = keras_module()
    x = keras.Input((5, 3), name="x")
    model = keras.Model(x, layer(keras)(x))
    randomize(model.trainable_weights, seed)
    path = tmp_path_factory.mktemp("tampered") / "export"
    model.export(str(path), verbose=False)
    return path


@pytest.fixture(scope="module")
def keras3_export(tmp_path_factory):
    """A Keras 3 export of an LSTM with Keras 3's hard sigmoid gates, relu6(x + 3) / 6."""
    return _export(
        tmp_path_factory,
        lambda keras: keras.layers.LSTM(
            4, recurrent_activation="hard_sigmoid", return_sequences=True, name="lstm"
        ),
        34,
    )


def _tampered(src, dst, edit):
    """A copy of the SavedModel `src` whose first gate activation in each loop body is changed
    by `edit(nodes, node_def)` (TF's FunctionDef protobuf, nodes by name)."""
    from tensorflow.core.protobuf import saved_model_pb2

    shutil.copytree(src, dst)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((dst / "saved_model.pb").read_bytes())
    bodies = [f for f in sm.meta_graphs[0].graph_def.library.function
              if "while_body" in f.signature.name]  # fmt: skip
    for f in bodies:
        edit({n.name: n for n in f.node_def}, f.node_def)
    (dst / "saved_model.pb").write_bytes(sm.SerializeToString())
    return dst


def _const_of(nodes, node):
    """The Const node among `node`'s inputs."""
    for ref in node.input:
        n = nodes.get(ref.split(":")[0])
        if n is not None and n.op == "Const":
            return n
    raise AssertionError(f"{node.name} reads no Const")


def _first(node_def, op, const_value=None, nodes=None):
    """The first `op` node (reading the Const `const_value`), or None (another layer's body)."""
    for n in node_def:
        if n.op == op and (const_value is None or _value(nodes, n) == np.float32(const_value)):
            return n
    return None


def _value(nodes, node):
    tf = tf_module()
    try:
        return tf.make_ndarray(_const_of(nodes, node).attr["value"].tensor)
    except AssertionError:
        return None


def _problem(path) -> list[str]:
    _, refusals = porting.describe(porting.read_source(path))
    return [str(r) for r in refusals]


# -- Keras 3: relu6(x + 3) / 6 ------------------------------------------------------------------


def _divisor(value, op=None):
    def edit(nodes, node_def):
        div = _first(node_def, "RealDiv")
        if div is None:
            return
        if op is not None:
            div.op = op
        set_float_const(_const_of(nodes, div), value)

    return edit


def _relu6_as(op):
    def edit(nodes, node_def):
        relu6 = _first(node_def, "Relu6")
        if relu6 is not None:
            relu6.op = op

    return edit


def _offset(value):
    def edit(nodes, node_def):
        relu6 = _first(node_def, "Relu6")
        if relu6 is None:
            return
        add = nodes[relu6.input[0].split(":")[0]]
        set_float_const(_const_of(nodes, add), value)

    return edit


@pytest.mark.parametrize(
    "edit, why",
    [
        (_divisor(7.0), "divides relu6(x + 3) by 7.0, not 6"),
        # the float32 after 6: 4.8e-7 away, a function that is not Keras'
        (
            _divisor(np.nextafter(np.float32(6), np.float32(7))),
            "divides relu6(x + 3) by 6.000000476837158, not 6",
        ),
        (_divisor(1 / 7, op="Mul"), "divides relu6(x + 3) by 0.1428571"),
        # relu6(x + 2) / 6: not read as a hard sigmoid, so gate i differs from f and o
        (_offset(2.0), "the gates i, f, o apply different functions"),
        # relu(x + 3) / 6: unbounded above
        (_relu6_as("Relu"), "expected one gate i: Relu6 of x + 3 (Relu6) after "),
    ],
    ids=["divisor_7", "divisor_next_float", "times_one_seventh", "offset_2", "relu"],
)
def test_keras3_hard_sigmoid_altered_is_refused(keras3_export, tmp_path, edit, why):
    path = _tampered(keras3_export, tmp_path / "sm", edit)
    refusals = _problem(path)
    assert len(refusals) == 1 and refusals[0].startswith("lstm: graph = 'LSTM': "), refusals
    assert why in refusals[0]


def test_keras3_hard_sigmoid_as_a_product_is_read(keras3_export, tmp_path):
    """`relu6(x + 3) * (1/6)` (a Mul where Keras writes RealDiv) is the same function up to
    rounding and read as Keras 3's hard sigmoid; the unaltered export too."""
    for path in (keras3_export, _tampered(keras3_export, tmp_path / "sm", _divisor(1 / 6, "Mul"))):
        descriptions, refusals = porting.describe(porting.read_source(path))
        assert refusals == []
        assert descriptions[0].value("gate_activation") == "hard_sigmoid_keras3"


# -- Keras 3's LSTM cell: the products and sums around the gates ---------------------------------


def _node(node_def, suffix):
    """The node whose name ends with `/suffix` (the cell's ops: `lstm_cell_1/mul`)."""
    found = [n for n in node_def if n.name.endswith("/" + suffix)]
    return found[0] if len(found) == 1 else None


def _rewire(suffix, op=None, input_index=None, to=None):
    """The cell's op `suffix` computing `op` instead, or reading `to`'s output in place of its
    input `input_index`."""

    def edit(nodes, node_def):
        n = _node(node_def, suffix)
        if n is None:
            return
        if op is not None:
            n.op = op
        if to is not None:
            n.input[input_index] = _node(node_def, to[0]).name + to[1]

    return edit


def _x_times_bias(nodes, node_def):
    """x·b + h·R: the input's product reads the bias, not the kernel."""
    mx, bias_add = _node(node_def, "MatMul"), _node(node_def, "BiasAdd")
    if mx is not None and bias_add is not None:
        mx.input[1] = bias_add.input[1]


def _bypass(suffix):
    """The cell's op `suffix` (a Tanh) removed, its readers reading its input: a linear
    function where Keras applies tanh."""

    def edit(nodes, node_def):
        n = _node(node_def, suffix)
        if n is None:
            return
        out = f"{n.name}:y:0"
        for m in node_def:
            for k, ref in enumerate(m.input):
                if ref == out:
                    m.input[k] = n.input[0]
        node_def.remove(n)

    return edit


def _identity_without_input(nodes, node_def):
    """f·c reading an Identity that has no input (a graph TF would not load)."""
    ident = next((n for n in node_def if n.op == "Identity"), None)
    mul = _node(node_def, "mul")
    if ident is not None and mul is not None:
        del ident.input[:]
        mul.input[1] = ident.name + ":output:0"


@pytest.mark.parametrize(
    "edit, why",
    [
        # x·K - h·R
        (_rewire("Add", op="Sub"), "no x·K + h·R after "),
        # f + c in place of f·c
        (_rewire("mul", op="AddV2"), "no f·c after "),
        # f·f in place of f·c: the product must read the carried state
        (_rewire("mul", input_index=1, to=("truediv_1", ":z:0")), "no f·c after "),
        # the gates' pre-activations plus h·R where the bias should be
        (_rewire("BiasAdd", input_index=1, to=("MatMul_1", ":product:0")),
         "no bias added to the gates"),
        (_identity_without_input, "no f·c after "),
        (_x_times_bias, "no x·K + h·R after "),
        # act(c) relu, or linear, where the candidate's is tanh; a linear candidate, act(c) tanh
        (_rewire("Tanh_1", op="Relu"), "act(z2) is tanh but act(c) is relu"),
        (_bypass("Tanh_1"), "act(z2) is tanh but act(c) is linear"),
        (_bypass("Tanh"), "act(z2) is linear but act(c) is tanh"),
    ],
    ids=["minus_hR", "f_plus_c", "f_times_f", "bias_is_hR", "identity_no_input", "x_times_b",
         "act_c_relu", "act_c_linear", "candidate_linear"],
)  # fmt: skip
def test_keras3_lstm_cell_altered_is_refused(keras3_export, tmp_path, edit, why):
    refusals = _problem(_tampered(keras3_export, tmp_path / "sm", edit))
    assert len(refusals) == 1 and refusals[0].startswith("lstm: graph = 'LSTM': "), refusals
    assert why in refusals[0], refusals[0]


# -- Keras 2 (tf_keras): clip(0.2·x + 0.5, 0, 1) ------------------------------------------------


def _keras2_layers(path):
    from torch_lstm_grad.porting.formats.saved_model import read_saved_model
    from torch_lstm_grad.porting.graphs.keras_loops import keras_layers_from_graph

    source = read_saved_model(str(path), reader="tensorbundle")
    layers, _ = keras_layers_from_graph(source.graph, source.variables)
    return layers


def _slope(value):
    def edit(nodes, node_def):
        mul = _first(node_def, "Mul", 0.2, nodes)
        if mul is not None:
            set_float_const(_const_of(nodes, mul), value)

    return edit


def _intercept(value):
    def edit(nodes, node_def):
        mul = _first(node_def, "Mul", 0.2, nodes)
        if mul is None:
            return
        add = next(n for n in node_def if n.op in ("Add", "AddV2")
                   and any(r.split(":")[0] == mul.name for r in n.input))  # fmt: skip
        set_float_const(_const_of(nodes, add), value)

    return edit


def _clip(op, value):
    def edit(nodes, node_def):
        node = _first(node_def, op)
        if node is not None:
            set_float_const(_const_of(nodes, node), value)

    return edit


@pytest.mark.parametrize(
    "edit, why",
    [
        # 0.3·x + 0.5 (or 0.2 + 3e-7): not read as a hard sigmoid, so gate i differs
        (_slope(0.3), "the gates i, f, o apply different functions"),
        (_slope(0.2 + 3e-7), "the gates i, f, o apply different functions"),
        (_intercept(0.6), "adds 0.6"),
        (_clip("Minimum", 2.0), "clip to [0.0, 2.0] after 0.2·x + 0.5, not [0, 1]"),
        (_clip("Maximum", -1.0), "clip to [-1.0, 1.0] after 0.2·x + 0.5, not [0, 1]"),
    ],
    ids=["slope_0.3", "slope_next", "intercept_0.6", "clip_hi", "clip_lo"],
)
def test_keras2_hard_sigmoid_altered_is_refused(tmp_path, edit, why):
    """tf_keras' LSTM loop with its hard sigmoid altered: the LSTM is not read (a problem naming
    the op), the GRU beside it still is."""
    problem = _keras2_problem(tmp_path, edit, altered="lstm", intact="gru")
    assert why in problem, problem
    assert _keras2_layers(K2)["lstm"].config["recurrent_activation"] == "hard_sigmoid_keras2"


def _keras2_problem(tmp_path, edit, altered, intact):
    """The problem tf_keras' fixture, altered by `edit`, gives the layer `altered`; the layer
    `intact` is still read."""
    tf_module()
    layers = _keras2_layers(_tampered(K2, tmp_path / "sm", edit))
    assert layers[intact].problem is None
    assert layers[altered].problem is not None
    return layers[altered].problem


def _gru_split(edit_split):
    """tf_keras' GRU(reset_after=False) splits h·R[:, :2U] by SplitV(·, [U, U, -1]): its split
    `edit_split(split, size_const, node_def)`."""

    def edit(nodes, node_def):
        split = _first(node_def, "SplitV")
        if split is not None:
            edit_split(split, nodes[split.input[1].split(":")[0]], node_def)

    return edit


@pytest.mark.parametrize(
    "edit, why",
    [
        # [U + 1, U − 1, −1]: z and r take other columns of h·R
        (_gru_split(lambda split, sizes, nd: set_int_const(sizes, [4, 2, -1])),
         "splits h·R[:, :2U] as [4, 2, -1], not [U, U]"),
        # the empty third block read (by a Neg)
        (_gru_split(lambda split, sizes, nd: add_neg_of(nd, split.name + ":output:2", split)),
         "split_1's empty third block is read"),
        # h·R[:, :2U] read by the split and by a Neg
        (_gru_split(lambda split, sizes, nd: add_neg_of(nd, split.input[0], split)),
         "h·R[:, :2U] is read by "),
    ],
    ids=["sizes_4_2", "third_block_read", "product_read_twice"],
)  # fmt: skip
def test_keras2_gru_split_altered_is_refused(tmp_path, edit, why):
    """tf_keras' GRU loop with its split of h·R altered: the GRU is not read (a problem naming
    the split), the LSTM beside it still is."""
    problem = _keras2_problem(tmp_path, edit, altered="gru", intact="lstm")
    assert why in problem, problem


def _as_clip_by_value(lo, hi):
    """Gate i's clip written as one ClipByValue(0.2·x + 0.5, lo, hi) (a TF op; tf.clip_by_value
    itself writes Minimum then Maximum)."""

    def edit(nodes, node_def):
        mul = _first(node_def, "Mul", 0.2, nodes)
        if mul is None:
            return

        def reader(of, ops):
            return next(n for n in node_def if n.op in ops
                        and any(r.split(":")[0] == of.name for r in n.input))  # fmt: skip

        add = reader(mul, ("Add", "AddV2"))
        first = reader(add, ("Minimum", "Maximum"))
        second = reader(first, ("Minimum", "Maximum"))
        low, high = (_const_of(nodes, n) for n in sorted((first, second), key=lambda n: n.op))
        set_float_const(low, lo)  # Maximum's bound, then Minimum's
        set_float_const(high, hi)
        x = next(r for r in first.input if r.split(":")[0] == add.name)
        first.op = "ClipByValue"
        del first.input[:]
        first.input.extend([x, low.name + ":output:0", high.name + ":output:0"])
        for m in node_def:
            for k, ref in enumerate(m.input):
                if ref.split(":")[0] == second.name:
                    m.input[k] = first.name + ":output:0"
        node_def.remove(second)

    return edit


def test_keras2_hard_sigmoid_as_clip_by_value(tmp_path):
    """clip(0.2·x + 0.5, 0, 1) as one ClipByValue op is Keras 2's hard sigmoid (read); clipped
    to [0, 2] it is not (refused naming the bounds)."""
    tf_module()
    layers = _keras2_layers(_tampered(K2, tmp_path / "sm", _as_clip_by_value(0.0, 1.0)))
    assert layers["lstm"].problem is None, layers["lstm"].problem
    assert layers["lstm"].config["recurrent_activation"] == "hard_sigmoid_keras2"
    layers = _keras2_layers(_tampered(K2, tmp_path / "sm2", _as_clip_by_value(0.0, 2.0)))
    assert "clip to [0.0, 2.0] after 0.2·x + 0.5, not [0, 1]" in layers["lstm"].problem


def test_an_input_the_graph_lacks_is_a_corrupt_file(keras3_export, tmp_path):
    """x·K reading a node the graph does not have: the file is refused as corrupt, naming the
    file, the GraphDef and the node, before any loop is read (so the loop reader never meets a
    dangling input)."""
    path = _tampered(
        keras3_export,
        tmp_path / "sm",
        _rewire("MatMul", input_index=1, to=("MatMul", "_gone:product:0")),
    )
    with pytest.raises(ValueError, match=r"/MatMul_gone', which is not in the graph") as err:
        porting.read_source(path)
    assert str(err.value).startswith(f"{path}/saved_model.pb: the meta graph's GraphDef: node ")


# -- the loop's other ops: arity, extra ops -----------------------------------------------------


def _extra_add(nodes, node_def):
    """A second x·K + h·R that nothing reads: an op of the body no cell explains."""
    add = _node(node_def, "Add")
    if add is not None:
        extra = node_def.add()
        extra.CopyFrom(add)
        extra.name = add.name + "_extra"


def _third_input(nodes, node_def):
    """x·K + h·R given a third input (AddV2 takes two: TF would not load it)."""
    add = _node(node_def, "Add")
    if add is not None:
        add.input.append(add.input[0])


def _step_input_from_a_constant(nodes, node_def):
    """The cell's input read from a constant list (the element shape), not the loop's."""
    get = next((n for n in node_def if n.op == "TensorListGetItem"), None)
    if get is not None:
        get.input[0] = get.input[2]


def _recurrent_kernel_read_twice(nodes, node_def):
    """A Neg of R beside h·R: the recurrent kernel read by two ops of the body."""
    m = _node(node_def, "MatMul_1")
    if m is not None:
        add_neg_of(node_def, m.input[1], m)


@pytest.mark.parametrize(
    "edit, why",
    [
        (_extra_add, "computes ops that are not a Keras LSTM cell's: "),
        (_step_input_from_a_constant, "is not a loop variable"),
        (_third_input, "(AddV2) has 3 inputs, not 2"),
        (_recurrent_kernel_read_twice, "_neg (Neg) read the recurrent kernel in the loop: not"),
    ],
    ids=["extra_add", "step_input_constant", "add_of_three", "kernel_read_twice"],
)
def test_keras3_lstm_body_with_other_ops_is_refused(keras3_export, tmp_path, edit, why):
    refusals = _problem(_tampered(keras3_export, tmp_path / "sm", edit))
    assert len(refusals) == 1 and refusals[0].startswith("lstm: graph = 'LSTM': "), refusals
    assert why in refusals[0], refusals[0]


# -- Keras 3's GRU cell (reset_after=True): the column blocks of h·R, the gates, 1 − z -----------


@pytest.fixture(scope="module")
def keras3_gru_export(tmp_path_factory):
    return _export(
        tmp_path_factory, lambda keras: keras.layers.GRU(3, return_sequences=True, name="gru"), 35
    )


def _slice_bound(suffix, bound, values):
    """The column slice `suffix` beginning (`bound` "stack") or ending ("stack_1") elsewhere."""

    def edit(nodes, node_def):
        const = _node(node_def, f"{suffix}/{bound}")
        if const is not None:
            set_int_const(const, values)

    return edit


def _empty_blocks(nodes, node_def):
    """h·R sliced as [:, 0:0], [:, 0:0], [:, 0:]: two empty blocks and the whole product."""
    for suffix in ("strided_slice/stack_1", "strided_slice_1/stack", "strided_slice_1/stack_1",
                   "strided_slice_2/stack"):  # fmt: skip
        const = _node(node_def, suffix)
        if const is not None:
            set_int_const(const, [0, 0])


def _begin_computed(suffix):
    """The column slice `suffix` begun at a value computed in the loop (the step counter), not
    a constant."""

    def edit(nodes, node_def):
        s, step = _node(node_def, suffix), _node(node_def, "while/add")
        if s is not None and step is not None:
            s.input[1] = step.name + ":z:0"

    return edit


def _fourth_reader(nodes, node_def):
    """A Neg of h·R beside its three column slices: h·R read by four ops."""
    first = _node(node_def, "strided_slice")
    if first is not None:
        add_neg_of(node_def, first.input[0], first)


def _one_minus_as(value):
    def edit(nodes, node_def):
        const = _node(node_def, "sub/x")
        if const is not None:
            set_float_const(const, value)

    return edit


def _bias_rows(first, second):
    """The GRU's [2, 3U] bias split in rows, `Squeeze` (added to x·K) reading row `first` and
    `Squeeze_1` (added to h·R) row `second` (Keras 3: 0 and 1)."""

    def edit(nodes, node_def):
        rows = [_node(node_def, "Squeeze"), _node(node_def, "Squeeze_1")]
        if None not in rows:
            split = rows[0].input[0].rpartition(":")[0]
            rows[0].input[0], rows[1].input[0] = f"{split}:{first}", f"{split}:{second}"

    return edit


def _bias_rows_taken_by(op, first, second, reversed_rows=False):
    """The GRU's bias rows taken by `op` (Unpack, StridedSlice `bias[k]` or GatherV2 of k; the
    forms `keras_loops._row_taken` reads besides Keras 3's Split and Squeeze), row `first` added
    to x·K and row `second` to h·R; the Split goes. Attributes at their defaults are left out,
    as TF's SavedModel writer strips them (Unpack's axis 0, StridedSlice's other masks).
    `reversed_rows`: StridedSlice `bias[k, ::-1]`, each row backwards."""

    def edit(nodes, node_def):
        tf = tf_module()
        rows = [_node(node_def, "Squeeze"), _node(node_def, "Squeeze_1")]
        if None in rows:
            return
        split = nodes[rows[0].input[0].split(":")[0]]
        bias, dim = split.input[1], split.input[0].split(":")[0]

        def const(name, value):
            c = node_def.add(name=f"{split.name}/{name}", op="Const")
            c.attr["dtype"].type = tf.int32.as_datatype_enum
            c.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.int32(value)))
            return f"{c.name}:output:0"

        for n, row in zip(rows, (first, second), strict=True):
            n.attr.clear()
            n.attr["T" if op != "GatherV2" else "Tparams"].type = tf.float32.as_datatype_enum
            n.op = op
            if op == "StridedSlice":
                n.attr["Index"].type = tf.int32.as_datatype_enum
                n.attr["shrink_axis_mask"].i = 1
                bounds = ([row], [row + 1], [1])
                if reversed_rows:  # the whole of axis 1 (begin and end masks), stride -1
                    n.attr["begin_mask"].i = n.attr["end_mask"].i = 2
                    bounds = ([row, 0], [row + 1, 0], [1, -1])
                names = (f"begin{row}", f"end{row}", f"strides{row}")
                n.input[:] = [bias] + [const(c, v) for c, v in zip(names, bounds, strict=True)]
            elif op == "GatherV2":
                for t in ("Tindices", "Taxis"):
                    n.attr[t].type = tf.int32.as_datatype_enum
                n.input[:] = [bias, const(f"row{row}", row), const(f"axis{row}", 0)]
            else:  # Unpack: the first row node unstacks both rows, the second goes
                n.attr["num"].i = 2
                n.input[:] = [bias]
        if op == "Unpack":
            unpack, gone = rows[0].name, rows[1].name
            row_of = {unpack: first, gone: second}
            for n in node_def:
                for k, ref in enumerate(n.input):
                    if ref.split(":")[0] in row_of and n.name != unpack:
                        n.input[k] = f"{unpack}:output:{row_of[ref.split(':')[0]]}"
            dropped = {gone}
        else:
            dropped = set()
        dropped |= {split.name, dim}
        keep = [n for n in node_def if n.name not in dropped]
        del node_def[:]
        node_def.extend(keep)

    return edit


def _bias_split_along(axis):
    """The GRU's [2, 3U] bias split along `axis` (Keras 3: 0, its rows)."""

    def edit(nodes, node_def):
        dim = _node(node_def, "split/split_dim")
        if dim is not None:
            dim.attr["value"].tensor.CopyFrom(tf_module().make_tensor_proto(np.int32(axis)))

    return edit


@pytest.mark.parametrize(
    "edit, why",
    [
        # the input bias added to h·R, the recurrent one to x·K (never ported as the GRU)
        (_bias_rows(1, 0), "no bias row 1 added to h·R at "),
        (_bias_rows(0, 0), "no bias row 1 added to h·R at "),
        (_bias_rows(1, 1), "no bias row 0 added to x·K at "),
        # bias[0, ::-1] and bias[1, ::-1]: each row backwards (TF runs it)
        (_bias_rows_taken_by("StridedSlice", 0, 1, reversed_rows=True),
         "no bias row 1 added to h·R at "),
        # columns, not rows (TF cannot run it: Squeeze of a dimension of 2)
        (_bias_split_along(1), "no bias row 1 added to h·R at "),
        # h·R[:, 0:4], [:, 3:6], [:, 6:]: overlapping blocks
        (_slice_bound("strided_slice", "stack_1", [0, 4]),
         "h·R is sliced at [(0, 4), (3, 6), (6, None)]"),
        (_empty_blocks, "h·R is sliced at [(0, 0), (0, 0), (0, None)]"),
        (_begin_computed("strided_slice_1"), "a slice of h·R whose bounds are not constants"),
        (_fourth_reader, "is not split in three (it feeds ["),
        # z·h + (2 − z)·hh
        (_one_minus_as(2.0), "no 1 − z after "),
        # r = tanh(..) where z = sigmoid(..)
        (_rewire("Sigmoid_1", op="Tanh"), "the gates z and r apply different functions"),
    ],
    ids=["bias_rows_swapped", "input_bias_twice", "recurrent_bias_twice", "bias_rows_reversed",
         "bias_columns",
         "overlapping_blocks",
         "empty_blocks", "computed_bound", "fourth_reader", "two_minus_z", "r_tanh"],
)  # fmt: skip
def test_keras3_gru_cell_altered_is_refused(keras3_gru_export, tmp_path, edit, why):
    refusals = _problem(_tampered(keras3_gru_export, tmp_path / "sm", edit))
    assert len(refusals) == 1 and refusals[0].startswith("gru: graph = 'GRU': "), refusals
    assert why in refusals[0], refusals[0]


@pytest.mark.parametrize("op", ["Unpack", "StridedSlice", "GatherV2"])
def test_keras3_gru_bias_rows_taken_by_other_ops(keras3_gru_export, tmp_path, op):
    """Rows 0 and 1 of the bias taken by another op than Split: read, ported, and equal to
    TF running the altered file (forward and gradients, `verify`); the rows the other way round
    refused as Keras 3's swapped Split outputs are."""
    from torch_lstm_grad.porting.convert import convert
    from torch_lstm_grad.porting.verify import verify

    path = _tampered(keras3_gru_export, tmp_path / "sm", _bias_rows_taken_by(op, 0, 1))
    assert _problem(path) == []
    convert(path, tmp_path / "port.pt", log=lambda *a: None, warn=lambda *a: None)
    report = verify(path, tmp_path / "port.pt", batches=(2,), lengths=(5,))
    assert report.errors and report.ok, str(report)
    swapped = _problem(_tampered(keras3_gru_export, tmp_path / "sw", _bias_rows_taken_by(op, 1, 0)))
    assert len(swapped) == 1 and "no bias row 1 added to h·R at " in swapped[0], swapped


def test_keras3_gru_body_in_another_node_order_is_read(keras3_gru_export, tmp_path):
    """A FunctionDef's nodes in any order and under any names: reversed, and the first column
    slice of h·R renamed to sort last, the slices are still read as the blocks z, r, h, by
    where they begin."""

    def reverse(nodes, node_def):
        first = _node(node_def, "strided_slice")
        if first is None:
            return
        old, new = first.name, first.name + "_9"
        for n in node_def:
            n.name = new if n.name == old else n.name
            for k, ref in enumerate(n.input):
                if ref.split(":")[0] == old:
                    n.input[k] = new + ref[len(old) :]
        order = [type(n)() for n in node_def]
        for copy, n in zip(order, reversed(node_def), strict=True):
            copy.CopyFrom(n)
        del node_def[:]
        node_def.extend(order)

    descriptions, refusals = porting.describe(
        porting.read_source(_tampered(keras3_gru_export, tmp_path / "sm", reverse))
    )
    assert refusals == []
    assert descriptions[0].value("reset_after") is True


# -- Keras 3's SimpleRNN cell: x·K + b + h·R -----------------------------------------------------


@pytest.fixture(scope="module")
def keras3_rnn_export(tmp_path_factory):
    return _export(
        tmp_path_factory,
        lambda keras: keras.layers.SimpleRNN(3, return_sequences=True, name="rnn"),
        36,
    )


@pytest.mark.parametrize(
    "edit",
    [
        # x·b + b + h·R: the input's product reads the bias, not the kernel
        _x_times_bias,
        # x·K + x·K + h·R: the bias add adds the product again
        _rewire("BiasAdd", input_index=1, to=("MatMul", ":product:0")),
        # (x·K)·b + h·R
        _rewire("BiasAdd", op="Mul"),
    ],
    ids=["x_times_b", "no_bias_read", "times_bias"],
)
def test_keras3_simple_rnn_cell_altered_is_refused(keras3_rnn_export, tmp_path, edit):
    refusals = _problem(_tampered(keras3_rnn_export, tmp_path / "sm", edit))
    assert len(refusals) == 1 and refusals[0].startswith("rnn: graph = 'SimpleRNN': "), refusals
    assert "no x·K (+ b) + h·R after " in refusals[0], refusals[0]


# -- Keras 3's GRU(reset_after=False): R's column blocks R[:, :2U], R[:, 2U:] --------------------


@pytest.fixture(scope="module")
def keras3_gru_before_export(tmp_path_factory):
    return _export(
        tmp_path_factory,
        lambda keras: keras.layers.GRU(3, return_sequences=True, reset_after=False, name="gru"),
        37,
    )


def _h_r_swapped(nodes, node_def):
    """R[:, :2U]·h in place of h·R[:, :2U]."""
    m = _node(node_def, "MatMul_1")
    if m is not None:
        m.input[0], m.input[1] = m.input[1], m.input[0]


@pytest.mark.parametrize(
    "edit, why",
    [
        # R[:, :6] and R[:, 7:]: a column of R left out
        (_slice_bound("strided_slice_4", "stack", [0, 7]),
         "the recurrent kernel is sliced at [(0, 6), (7, None)]"),
        # R[:, 2U:] begun at the step counter
        (_begin_computed("strided_slice_4"),
         "a slice of the recurrent kernel whose bounds are not constants"),
        (_h_r_swapped, "the recurrent kernel's blocks are not the right-hand factors"),
    ],
    ids=["column_left_out", "computed_bound", "r_times_h"],
)  # fmt: skip
def test_keras3_gru_reset_before_altered_is_refused(keras3_gru_before_export, tmp_path, edit, why):
    refusals = _problem(_tampered(keras3_gru_before_export, tmp_path / "sm", edit))
    assert len(refusals) == 1 and refusals[0].startswith("gru: graph = 'GRU': "), refusals
    assert why in refusals[0], refusals[0]


def test_variables_take_the_names_tf_loads_them_under(tmp_path):
    """A SavedModel names each variable twice: its SavedVariable in saved_model.pb (the name
    tf.saved_model.load gives it) and the checkpoint's object graph (its full_name). TF writes
    the same name in both; with the SavedVariables renamed (TF's protobuf classes), the
    variables are read under the names TF loads them under."""
    from tensorflow.core.protobuf import saved_model_pb2

    tf = tf_module()
    dst = tmp_path / "renamed"
    shutil.copytree(K2, dst)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((dst / "saved_model.pb").read_bytes())
    renamed = 0
    for node in sm.meta_graphs[0].object_graph_def.nodes:
        if node.WhichOneof("kind") == "variable":
            node.variable.name = "outer/" + node.variable.name
            renamed += 1
    (dst / "saved_model.pb").write_bytes(sm.SerializeToString())
    loaded = tf.saved_model.load(str(dst))
    by_tf = {v.name.removesuffix(":0") for v in loaded.variables}
    assert renamed == len(by_tf) == 6 and all(n.startswith("outer/") for n in by_tf)
    assert set(porting.read_source(dst, reader="tensorbundle").variables) == by_tf
