"""SavedModels altered around the loop rather than in its cell: how the loop reads its input
(the ReverseV2 of go_backwards, the Transpose to time-major, the TensorList it steps through),
what a masked step outputs and keeps, which mask each select reads, which functions the
signature runs, and how a cuDNN-traced layer reaches its op. A real Keras 3 export, one field
changed by TF's own protobuf classes: porting/graphs/keras_loops.py (`_around`, `_select`,
`_mask_source`, `_cudnn_ops`, `_reachable_functions`) must read the layer as Keras wrote it or
refuse it naming what it found, never read another computation as Keras'."""

import importlib

import pytest

from tests.helpers import (
    add_neg_of,
    edited_saved_model,
    keras_module,
    needs_tf,
    randomize,
    set_float_const,
    set_int_const,
)
from torch_lstm_grad import porting

pytestmark = needs_tf


def _export(path, build, seed):
    keras = keras_module()
    x = keras.Input((5, 3), name="x")
    model = keras.Model(x, build(keras, x))
    randomize(model.trainable_weights, seed)
    model.export(str(path), verbose=False)
    return path


@pytest.fixture(scope="module")
def masked_back(tmp_path_factory):
    """Masking -> SimpleRNN(go_backwards, zero_output_for_mask): the input reversed and
    transposed before the loop, the mask too, a select on the output and on the state."""

    def build(keras, x):
        m = keras.layers.Masking(0.0, name="masking")(x)
        return keras.layers.SimpleRNN(
            4, return_sequences=True, zero_output_for_mask=True, go_backwards=True, name="rnn"
        )(m)

    return _export(tmp_path_factory.mktemp("context") / "export", build, 35)


def _one(mg, suffix, body=False):
    """The one node of the functions (the loop bodies) whose name ends with `/suffix`."""
    found = [
        n
        for f in mg.graph_def.library.function
        if not body or "while_body" in f.signature.name
        for n in f.node_def
        if n.name.endswith("/" + suffix)
    ]
    assert len(found) == 1, (suffix, [n.name for n in found])
    return found[0]


def _const(suffix, values):
    def edit(mg):
        set_int_const(_one(mg, suffix), values)

    return edit


def _op(suffix, op):
    def edit(mg):
        _one(mg, suffix).op = op

    return edit


def _input(suffix, k, to, body=False):
    """The node `suffix` reading output `to` = (suffix, ":out:i") in place of its input k."""

    def edit(mg):
        _one(mg, suffix, body).input[k] = _one(mg, to[0]).name + to[1]

    return edit


def _reader(of, output):
    """A Neg of `of`'s (a suffix) output `output` (":z:0") beside it, in its scope and function,
    read by nothing."""

    def edit(mg):
        node = _one(mg, of)
        (fn,) = [f for f in mg.graph_def.library.function if node in f.node_def]
        add_neg_of(fn.node_def, node.name + output, node)

    return edit


_X_READ = "while/TensorArrayV2Read/TensorListGetItem"
_MASK_READ = "while/TensorArrayV2Read_1/TensorListGetItem"
_T_PLUS_1 = ("while/add", ":z:0")  # a value of the body that is not a loop variable


@pytest.mark.parametrize(
    "edit, why",
    [
        # go_backwards over the batch axis: not Keras' reversal in time
        (_const("ReverseV2/axis", [1]), "ReverseV2 reverses axes [1], not time (0)"),
        # the loop stepping through the batch-major input: a loop over the batch
        (_const("transpose/perm", [0, 1, 2]), "permutes the input's axes by [0, 1, 2], not"),
        (_op("transpose", "Relu"), "(Relu), not the batch-major input transposed"),
        (
            _op("TensorArrayUnstack/TensorListFromTensor", "TensorListReserve"),
            "the loop's input list comes from TensorListReserve, not TensorListFromTensor",
        ),
        (_input(_X_READ, 0, _T_PLUS_1), "while/add is not a loop variable"),
        # a masked step outputs ones, or a value of its own: neither Keras' zeros nor the last
        (_op("zeros_like", "OnesLike"), "zeros_like, not zeros"),
        (_input("while/SelectV2", 2, _T_PLUS_1), "neither zeros nor the last output"),
        # the state's select reads the input's list, or the mask is read at step t + 1
        (_input("while/Tile_1", 0, (_X_READ, ":item:0")), "the selects read different masks"),
        (_input(_MASK_READ, 1, _T_PLUS_1), "or not the mask of step t"),
        (
            _op("TensorArrayUnstack_1/TensorListFromTensor", "TensorListReserve"),
            "the mask is not a loop list of the time-major mask",
        ),
        # the output chosen by a three-input op that is not a select
        (_op("while/SelectV2", "ClipByValue"), "(ClipByValue), not select(mask, new, old)"),
        # the cell's h·R reads a value of the body, not the state the loop carries
        (_input("MatMul_1", 0, _T_PLUS_1, body=True), "while/add is not a loop variable"),
        # the loop op renamed For (TF1's functional for-loop also names its body `body`)
        (_op("while", "For"), "no While loop of the signature's functions reads"),
    ],
    ids=["reverse_batch", "perm_identity", "not_transposed", "list_reserved",
         "step_list_local", "masked_ones", "masked_local", "state_mask_other",
         "mask_step_next", "mask_list_reserved", "select_as_clip", "state_not_carried",
         "for_loop"],
)  # fmt: skip
def test_loop_context_altered_is_refused(masked_back, tmp_path, edit, why):
    path = edited_saved_model(masked_back, tmp_path / "sm", edit)
    _, refusals = porting.describe(porting.read_source(path))
    assert len(refusals) == 1, refusals
    assert str(refusals[0]).startswith("rnn: graph = 'SimpleRNN': "), refusals
    assert why in str(refusals[0]), refusals


def test_loop_context_as_keras_wrote_it(masked_back):
    """The unaltered export: go_backwards and zero_output_for_mask read from the loop, the mask
    traced back through its reversal, transpose and expansion to the Masking layer's Any."""
    source = porting.read_source(masked_back)
    layer = source.layers["rnn"]
    assert layer.mask_from.endswith("masking_1/Any (Any)") or layer.mask_from.endswith(
        "/Any (Any)"
    ), layer.mask_from
    assert layer.config["zero_output_for_mask"] is True
    assert layer.config["go_backwards"] is True
    assert layer.origins["zero_output_for_mask"].endswith(": a masked step outputs zeros")
    descriptions, refusals = porting.describe(source)
    assert refusals == [] and [d.name for d in descriptions] == ["rnn"]


def test_signature_output_after_the_call_is_followed(masked_back, tmp_path):
    """The signature's output an op of the top graph reading the call (not the call itself):
    the functions it runs are found through that op's inputs, so the layer is read, not
    reported as run by no signature."""

    def edit(mg):
        node = mg.graph_def.node.add()
        node.name, node.op = "after_call", "Identity"
        sig = mg.signature_def["serving_default"]
        (key,) = sig.outputs
        node.input.append(sig.outputs[key].name)
        node.attr["T"].type = sig.outputs[key].dtype
        sig.outputs[key].name = "after_call:0"

    source = porting.read_source(edited_saved_model(masked_back, tmp_path / "sm", edit))
    descriptions, refusals = porting.describe(source)
    assert refusals == [] and [d.name for d in descriptions] == ["rnn"]


@pytest.fixture(scope="module")
def cudnn_exports(tmp_path_factory):
    """Keras 3 LSTM and GRU exported as if a GPU were visible: each runs CudnnRNNV3, its
    weights split per gate, transposed, reshaped and concatenated into the op's params."""
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    saved = rnn._is_gpu_available
    rnn._is_gpu_available = lambda: True
    try:
        root = tmp_path_factory.mktemp("cudnn")
        layer = {"LSTM": lambda k, x: k.layers.LSTM(3, name="l")(x),
                 "GRU": lambda k, x: k.layers.GRU(3, name="l")(x)}  # fmt: skip
        return {kind: _export(root / kind, build, 36) for kind, build in layer.items()}
    finally:
        rnn._is_gpu_available = saved


def _recurrent_split_reads_only_its_second_block(mg):
    """Every reader of the recurrent kernel's Split output 0 reads output 1: the walk from the
    kernel to the op must follow the Split's other outputs."""
    nodes = [n for f in mg.graph_def.library.function for n in f.node_def]
    (split,) = [
        n for n in nodes
        if n.op == "Split" and "recurrent" not in n.name
        and any(i.startswith(n.name + "/ReadVariableOp") for i in n.input)
        and n.name.endswith("split_1")
    ]  # fmt: skip
    readers = [n for n in nodes for i, ref in enumerate(n.input) if ref == split.name + ":output:0"]
    assert readers
    for n in readers:
        n.input[:] = [split.name + ":output:1" if r == split.name + ":output:0" else r
                      for r in n.input]  # fmt: skip


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("altered", [False, True], ids=["as_written", "split_block_1"])
def test_cudnn_traced_layer_is_read_and_an_altered_buffer_refused(
    cudnn_exports, tmp_path, kind, altered
):
    """As written, the layer's CudnnRNNV3 is read (graphs/keras_cudnn.py); with one Split's
    readers moved to another block, the buffer is no longer the layer's weights: refused,
    naming the op."""
    src = cudnn_exports[kind]
    if altered:
        src = edited_saved_model(src, tmp_path / "sm", _recurrent_split_reads_only_its_second_block)
    descriptions, refusals = porting.describe(porting.read_source(src))
    if not altered:
        assert not refusals and [d.kind for d in descriptions] == [f"keras.{kind}"]
        assert descriptions[0].value("cudnn_mask") is True
        return
    assert len(refusals) == 1, refusals
    assert f"(CudnnRNNV3): its params buffer is not Keras' {kind} weights" in str(refusals[0])


@pytest.fixture(scope="module")
def merges(tmp_path_factory):
    """Bidirectional(ave) -> GRU masked by a float input `m` (cast, expanded and transposed
    before its loop), beside a Bidirectional(concat) and a Bidirectional(merge_mode=None) of
    the input."""
    keras = keras_module()
    x, m = keras.Input((5, 3), name="x"), keras.Input((5,), name="m")
    ave = keras.layers.Bidirectional(
        keras.layers.LSTM(3, return_sequences=True), merge_mode="ave", name="bi"
    )(x)
    gru = keras.layers.GRU(2, return_sequences=True, name="gru")(ave, mask=m)
    cat = keras.layers.Bidirectional(keras.layers.GRU(2, return_sequences=True), name="cat")(x)
    apart = keras.layers.Bidirectional(
        keras.layers.SimpleRNN(2, return_sequences=True), merge_mode=None, name="apart"
    )(x)
    model = keras.Model([x, m], [gru, cat, *apart])
    randomize(model.trainable_weights, 37)
    path = tmp_path_factory.mktemp("merges") / "export"
    model.export(str(path), verbose=False)
    return path


def test_merges_and_a_mask_input_as_keras_wrote_them(merges):
    layers = porting.read_source(merges).layers
    assert layers["gru"].mask_from == "the signature's input m"
    assert layers["bi"].config["merge_mode"] == "ave"
    assert layers["cat"].config["merge_mode"] == "concat"
    assert layers["apart"].config["merge_mode"] is None
    assert layers["apart"].origins["merge_mode"] == (
        "the SavedModel's graph: the two directions' outputs are not combined (merge_mode None)"
    )


def _half(mg):
    """(a + b) / 2 written (a + b) · 0.5."""
    _one(mg, "bi_1/truediv").op = "Mul"
    set_float_const(_one(mg, "bi_1/truediv/y"), 0.5)


def _third(mg):
    set_float_const(_one(mg, "bi_1/truediv/y"), 3.0)


@pytest.mark.parametrize(
    "edit, mode",
    [
        (_half, "ave"),
        # (a + b) / 3: the layer's output is the sum; the division is an op after it
        (_third, "sum"),
        # a Neg of the sum beside the division, in the layer's scope: still its average
        (_reader("bi_1/add", ":z:0"), "ave"),
        # a Neg of the backward sequence in the layer's scope: not a second merge
        (_reader("bi_1/ReverseV2", ":output:0"), "ave"),
    ],
    ids=["times_half", "over_three", "sum_read_twice", "backward_read_twice"],
)
def test_ave_merge_variants_are_read_as_computed(merges, tmp_path, edit, mode):
    layers = porting.read_source(edited_saved_model(merges, tmp_path / "sm", edit)).layers
    assert layers["bi"].problem is None and layers["bi"].config["merge_mode"] == mode


def _concat_axis(value):
    return _const("cat_1/concat/axis", value)


def _concat_swapped(mg):
    cat = _one(mg, "cat_1/concat")
    cat.input[0], cat.input[1] = cat.input[1], cat.input[0]


@pytest.mark.parametrize(
    "edit", [_concat_axis(1), _concat_swapped], ids=["time_axis", "backward_first"]
)
def test_concat_merge_altered_is_refused(merges, tmp_path, edit):
    layers = porting.read_source(edited_saved_model(merges, tmp_path / "sm", edit)).layers
    assert "does not concatenate [forward, backward] on the last axis" in layers["cat"].problem
