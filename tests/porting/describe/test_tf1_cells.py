"""The TF1 describer (`porting/describe/tf1_cells.py`): TF1 checkpoints written here by TF 2.21
(Saver, with the meta graph, or re-saved by SaveV2 with a variable dropped, added or reshaped),
their descriptions, refusals and modules; and, on checkpoints without a meta graph (or with a
graph cell given), the arguments a checkpoint does not store (`--assume-defaults`, `--set`),
projections and peepholes of the wrong shape, the clip gradient's rule, the fused ops'
attributes, GRU cells and CudnnLSTM canonical names. Every expectation is TF's numbers (or TF's
own defaults), the file's names and shapes, or a refusal naming the variable and what it
found."""

import numpy as np
import pytest
import torch

from tests.helpers import TF1_B as B
from tests.helpers import TF1_I as I
from tests.helpers import TF1_PARAMS as _LSTM_PARAMS
from tests.helpers import TF1_T as T
from tests.helpers import (
    TF1Run,
    assert_close,
    needs_tf,
    rnn_cell_impl,
    step_cell,
    tf1_cudnn_graph,
    tf1_params,
    tf1_save,
    tf_module,
)
from torch_lstm_grad import modules, porting

pytestmark = needs_tf
H = 3  # _cudnn_graph's units
CELL = "cudnn/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell"


def _describe(path):
    """`(descriptions, refusals as (layer, attribute, value, reason))` of a file."""
    descriptions, refusals = porting.describe(porting.read_source(str(path)))
    return descriptions, [(r.layer, r.attribute, r.value, r.reason) for r in refusals]


def _convert(path, out):
    porting.convert(str(path), str(out), log=lambda line: None)
    return porting.load(str(out))


def _resave(prefix, new, drop=(), put=None):
    """The checkpoint's tensors saved again by TF's SaveV2 (no meta graph), without the names
    in `drop` (a name, or a prefix ending in "/"), with `put` (name -> array) added or
    replacing."""
    tf = tf_module()
    reader = tf.train.load_checkpoint(prefix)
    values = {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}
    values = {
        n: a for n, a in values.items() if not any(n == d or n.startswith(d + "/") for d in drop)
    }
    values.update(put or {})
    names = sorted(values)
    tf.raw_ops.SaveV2(
        prefix=str(new),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[values[n] for n in names],
    )
    return str(new)


# -- TF1 CudnnGRU canonical names under a nested scope ------------------------------------------

GRU = "net/cudnn/rnn/multi_rnn_cell/cell_{}/cudnn_compatible_gru_cell"


@pytest.fixture(scope="module")
def gru_canonical(tmp_path_factory):
    """Two stacked canonical GRU cells under `net/cudnn`, summed biases, run by TF."""
    tmp = tmp_path_factory.mktemp("gru_canonical")
    run = TF1Run(
        tmp / "m", None, driver=tf1_cudnn_graph("gru", 2, False, False, outer="net/cudnn"),
        lengths=False, seed=31,
    )  # fmt: skip
    return tmp, run


def _same_as_tf(m, run):
    x_t = torch.from_numpy(run.x)
    out, (h,) = m(x_t)
    finals = {f"h {k}": (h[k], run.values[1 + k]) for k in range(len(run.values) - 1)}
    assert_close({"output": (out, run.values[0]), **finals})


def test_cudnn_gru_description_and_numbers(gru_canonical):
    """The layer is named by its outer scope with dots; every attribute and its origin as the
    names and shapes say (multi_rnn_cell: unidirectional; no bias_cudnn_0/1: summed biases);
    the module computes TF's outputs."""
    tmp, run = gru_canonical
    (d,), refusals = _describe(run.prefix)
    assert not refusals and (d.name, d.kind) == ("net.cudnn", "tf1.CudnnGRU")
    assert {k: (a.value, a.origin, a.stored) for k, a in d.attrs.items()} == {
        "num_layers": (2, "cell_<l> names", True),
        "units": (H, "kernel shapes", True),
        "input_size": (I, "kernel shapes", True),
        "direction": ("unidirectional", "multi_rnn_cell names", True),
        "bias_layout": ("summed bW + bR, split in halves as TF1's restore does",
                        "variable names", True),
        "input_mode": ("linear_input", "the layer-0 kernel has input rows", True),
        "activation": ("tanh", "cuDNN's GRU", True),
    }  # fmt: skip
    mods = _convert(run.prefix, tmp / "whole.pt")
    assert list(mods) == ["net.cudnn"] and mods["net.cudnn"].port_description.name == "net.cudnn"
    _same_as_tf(mods["net.cudnn"], run)


def test_cudnn_gru_with_its_opaque_kernel(gru_canonical):
    """TF1 CudnnGRU saves its opaque buffer next to the canonical copies: the buffer is set
    aside, the layer converted from the canonical names (TF's outputs)."""
    tmp, run = gru_canonical
    p = _resave(
        run.prefix, tmp / "opaque", put={"net/cudnn/opaque_kernel": np.ones(150, np.float32)}
    )
    descriptions, refusals = _describe(p)
    assert not refusals and [d.name for d in descriptions] == ["net.cudnn"]
    _same_as_tf(_convert(p, tmp / "opaque.pt")["net.cudnn"], run)


def test_cudnn_gru_missing_layer_or_variable_refused(gru_canonical):
    """Without cell_0: refused, naming the cells found and those expected; without cell_1's
    gates/bias: refused naming that cell and leaf."""
    tmp, run = gru_canonical
    no_cell0 = _resave(run.prefix, tmp / "no_cell0", drop=[GRU.format(0)])
    assert _describe(no_cell0) == (
        [], [("net.cudnn", "cells", "cell_1", "expected cell_0..cell_<L-1>")])  # fmt: skip
    hole = _resave(run.prefix, tmp / "hole", drop=[GRU.format(1) + "/gates/bias"])
    assert _describe(hole) == (
        [], [("net.cudnn", "variables", "cell_1 missing ['gates/bias']",
              "incomplete canonical variables")])  # fmt: skip


def test_cudnn_gru_misshapen_hidden_projection_refused(gru_canonical):
    """cell_0's hidden_projection/kernel re-saved [H, H + 1]: the conversion fails naming that
    variable, its shape and the [H, H] expected (units read from its rows)."""
    tmp, run = gru_canonical
    name = GRU.format(0) + "/candidate/hidden_projection/kernel"
    reader = tf_module().train.load_checkpoint(run.prefix)
    wide = np.concatenate([reader.get_tensor(name), np.ones((H, 1), np.float32)], 1)
    p = _resave(run.prefix, tmp / "wide", put={name: wide})
    with pytest.raises(ValueError) as err:
        _convert(p, tmp / "wide.pt")
    assert f"{name}: shape [{H}, {H + 1}], expected [{H}, {H}]" in str(err.value)


# -- canonical LSTM names and the graph's op -----------------------------------------------------


def _block_lstm_graph(*configs):
    """Canonical LSTM variables (cell_0) run by one fused op per config (op name, attrs) on the
    same sequence; the outputs summed."""

    def graph(tf, xs):
        with tf.compat.v1.variable_scope(CELL):
            k = tf.compat.v1.get_variable("kernel", [I + H, 4 * H])
            b = tf.compat.v1.get_variable("bias", [4 * H])
        z, zh = tf.zeros([B, H]), tf.zeros([H])
        hs = [
            getattr(tf.raw_ops, op)(
                seq_len_max=tf.constant(T, tf.int64), x=xs, cs_prev=z, h_prev=z, w=k,
                wci=zh, wcf=zh, wco=zh, b=b, use_peephole=False, **attrs,
            ).h
            for op, attrs in configs
        ]  # fmt: skip
        y = tf.add_n(hs)
        return y, (y[-1],)

    return graph


def _lstm_cell_graph(tf, xs):
    """TF1's LSTMCell(forget_bias=0) named as CudnnCompatibleLSTMCell's variables are."""
    rci = rnn_cell_impl()
    cell = rci.MultiRNNCell([rci.LSTMCell(H, forget_bias=0.0, name="cudnn_compatible_lstm_cell")])
    with tf.compat.v1.variable_scope("cudnn"):
        outs, ((c, h),) = tf.compat.v1.nn.dynamic_rnn(cell, xs, time_major=True, dtype=tf.float32)
    return outs, (h,)


_GRAPHS = {
    "no_clip": _block_lstm_graph(("BlockLSTM", {"forget_bias": 0.0, "cell_clip": 0.0})),
    "clip": _block_lstm_graph(("BlockLSTM", {"forget_bias": 0.0, "cell_clip": 0.5})),
    "two_configs": _block_lstm_graph(("BlockLSTM", {"forget_bias": 0.0, "cell_clip": -1.0}),
                                     ("BlockLSTM", {"forget_bias": 0.5, "cell_clip": -1.0})),
    "lstm_cell": _lstm_cell_graph,
}  # fmt: skip


@pytest.fixture(scope="module")
def lstm_graphs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lstm_graphs")
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = TF1Run(tmp / name, None, driver=_GRAPHS[name], lengths=False, seed=32)
        return cache[name]

    return tmp, get


@pytest.mark.parametrize("name,op", [("no_clip", "BlockLSTM"), ("lstm_cell", "LSTMCell")])
def test_canonical_lstm_run_by_a_cudnn_compatible_op(lstm_graphs, name, op):
    """Canonical LSTM names the meta graph runs as a CudnnCompatibleLSTMCell computes: a
    BlockLSTM whose cell_clip 0 clips nothing, or TF1's LSTMCell(forget_bias=0) (its graph
    stores no use_peephole: it has none without w_*_diag); a CudnnLSTM with TF's outputs."""
    tmp, get = lstm_graphs
    run = get(name)
    (d,), refusals = _describe(run.prefix)
    assert not refusals and f"the meta graph runs {op} (" in d.where
    m = _convert(run.prefix, tmp / f"{name}.pt")["cudnn"]
    assert isinstance(m, modules.CudnnLSTM)
    out, (h, _) = m(torch.from_numpy(run.x))
    assert_close({"output": (out, run.values[0]), "h": (h[0], run.values[1])})


def test_canonical_lstm_with_a_clip_refused(lstm_graphs):
    """A BlockLSTM with cell_clip 0.5 on canonical names is not the cuDNN LSTM the names
    promise: refused, naming the op and the clip; no description is given for the layer."""
    descriptions, refusals = _describe(lstm_graphs[1]("clip").prefix)
    assert descriptions == []
    ((layer, attr, value, reason),) = refusals
    assert (layer, attr) == ("cudnn", "graph") and value.startswith("BlockLSTM at op")
    assert "'cell_clip': 0.5" in reason and reason.startswith(f"the meta graph computes {CELL}")


def test_canonical_lstm_run_by_two_configurations_refused(lstm_graphs):
    """The canonical kernel fed to two differently configured BlockLSTM ops: the graph is not
    a cell the converter reads; refused by name, no description."""
    descriptions, refusals = _describe(lstm_graphs[1]("two_configs").prefix)
    assert descriptions == []
    ((layer, attr, _, reason),) = refusals
    assert (layer, attr) == ("cudnn", "graph")
    assert reason.startswith(f"the meta graph's ops around {CELL} are not a cell this converter")
    assert "feeds differently configured ops" in reason


# -- incomplete TF1 GRU cells ---------------------------------------------------------------------


def test_gru_cell_without_candidate_bias_refused(tmp_path):
    """TF1 GRUCell's checkpoint re-saved without candidate/bias: refused, naming the scope, the
    variables found and the one missing."""
    run = TF1Run(tmp_path / "m", lambda: rnn_cell_impl().GRUCell(H), seed=33)
    p = _resave(run.prefix, tmp_path / "r", drop=["rnn/gru_cell/candidate/bias"])
    assert _describe(p) == ([], [(
        "rnn/gru_cell", "variables", ["candidate/kernel", "gates/bias", "gates/kernel"],
        "an incomplete recurrent cell: missing ['candidate/bias']")])  # fmt: skip


def test_gru_block_cell_v1_without_b_c_refused(tmp_path):
    """contrib v1 GRUBlockCell's names (w_ru, w_c, b_ru, b_c) re-saved without b_c: refused,
    naming the scope, the variables found and the one missing."""
    r = np.random.default_rng(34)
    u = lambda *s: r.uniform(-0.6, 0.6, s).astype(np.float32)  # noqa: E731
    p = tf1_save(tmp_path / "m", {"rnn/gru_cell/w_ru": u(I + H, 2 * H),
                                           "rnn/gru_cell/w_c": u(I + H, H),
                                           "rnn/gru_cell/b_ru": u(2 * H),
                                           "rnn/gru_cell/b_c": u(H)})  # fmt: skip
    assert len(_describe(p)[0]) == 1  # whole, it is a cell
    p = _resave(p, tmp_path / "r", drop=["rnn/gru_cell/b_c"])
    assert _describe(p) == ([], [(
        "rnn/gru_cell", "variables", ["b_ru", "w_c", "w_ru"],
        "an incomplete recurrent cell: missing ['b_c']")])  # fmt: skip


# -- kernel/bias pairs that are no LSTM cell; an LSTMP cell with few rows ------------------------


def _dense_heads(shapes):
    """BasicLSTMCell(3) under dynamic_rnn, then a Dense head per `(name, input, kernel shape)`
    (input "h": the cell's outputs, "xh": the inputs and the outputs concatenated)."""
    rci = rnn_cell_impl()

    def graph(tf, xs):
        outs, state = tf.compat.v1.nn.dynamic_rnn(
            rci.BasicLSTMCell(H), xs, time_major=True, dtype=tf.float32
        )
        ys = []
        for name, inp, shape in shapes:
            with tf.compat.v1.variable_scope(name):
                k = tf.compat.v1.get_variable("kernel", shape)
                b = tf.compat.v1.get_variable("bias", shape[1:])
            src = outs if inp == "h" else tf.concat([xs, outs], -1)
            ys.append(tf.tensordot(src, k, 1) + b)
        return tf.concat(ys, -1), state

    return graph


def test_dense_heads_are_no_lstm_cells(tmp_path):
    """Dense heads whose kernel/bias pair is no LSTM cell's (kernel [I + H, 4H] needs more rows
    than H): [7, 32] (I + H rows, fewer than 8 = 32 / 4) and an empty [3, 0] are left out, the
    cell converted."""
    shapes = [("dense_a", "xh", [I + H, 32]), ("dense_b", "h", [H, 0])]
    run = TF1Run(tmp_path / "m", None, driver=_dense_heads(shapes), lengths=False, seed=35)
    descriptions, refusals = _describe(run.prefix)
    assert not refusals and [d.name for d in descriptions] == ["rnn.basic_lstm_cell"]


def test_lstmp_cell_with_fewer_kernel_rows_than_units(tmp_path):
    """LSTMCell(8, num_proj=2) on 4 inputs: kernel [4 + 2, 32], fewer rows than units (the
    projection's width P, not H, is the kernel's recurrent part); exact against TF."""
    run = TF1Run(tmp_path / "m", lambda: rnn_cell_impl().LSTMCell(8, num_proj=2), seed=36)
    mods = _convert(run.prefix, tmp_path / "o.pt")
    cell = mods["rnn.lstm_cell"]
    assert (cell.num_units, cell.num_proj) == (8, 2)
    x_t = torch.from_numpy(run.x).requires_grad_()
    outs, state = step_cell(cell, x_t, run.lengths)
    run.compare(outs, state, x_t, tf1_params(run, cell, "rnn/lstm_cell", _LSTM_PARAMS))


# -- a graph op that reads canonical names otherwise; a Dense(4H) head ----------------------------


def test_canonical_lstm_run_by_block_lstm_v2_refused(tmp_path):
    """BlockLSTMV2 on canonical LSTM names reads the kernel's blocks as Keras' i, f, c, o, not
    the i, c, f, o of the names' CudnnCompatibleLSTMCell: a CudnnLSTM built from them would not
    compute TF's outputs, so it is refused, naming the op (converted, it would be 0.83 off)."""
    graph = _block_lstm_graph(("BlockLSTMV2", {"cell_clip": 0.0}))
    run = TF1Run(tmp_path / "m", None, driver=graph, lengths=False, seed=37)
    descriptions, refusals = _describe(run.prefix)
    assert descriptions == []
    ((layer, attr, value, reason),) = refusals
    assert (layer, attr) == ("cudnn", "graph") and value.startswith("BlockLSTMV2 at op")
    assert reason.startswith(f"the meta graph computes {CELL} with BlockLSTMV2 {{")
    assert "i, c, f, o blocks" in reason


def test_dense_head_of_4h_units_is_no_lstm_cell(tmp_path):
    """A Dense(4H) head on the cell's H outputs (kernel [H, 4H], bias [4H]) is no LSTM cell
    (one of 0 inputs): left out, the cell converted (not taken for a cell whose conversion is
    refused: "the meta graph's ops around dense are not a cell")."""
    shapes = [("dense", "h", [H, 4 * H])]
    run = TF1Run(tmp_path / "m", None, driver=_dense_heads(shapes), lengths=False, seed=38)
    descriptions, refusals = _describe(run.prefix)
    assert not refusals and [d.name for d in descriptions] == ["rnn.basic_lstm_cell"]


# -- without a meta graph, or with a graph cell given ------------------------------------------


def _describe_tf1(variables, **statements):
    from torch_lstm_grad.porting.describe.statements import Statements
    from torch_lstm_grad.porting.describe.tf1_cells import describe_tf1
    from torch_lstm_grad.porting.source import Source, Writer

    source = Source("ckpt", "TF1 checkpoint", Writer("tf1"), variables)
    return describe_tf1(source, Statements.from_args(**statements))


def _lstm_variables(scope, I=2, H=3):  # noqa: E741
    return {f"{scope}/kernel": np.zeros((I + H, 4 * H), np.float32),
            f"{scope}/bias": np.zeros(4 * H, np.float32)}  # fmt: skip


@needs_tf
def test_describe_tf1_assume_defaults_are_tf1s():
    """A checkpoint without a meta graph stores no cell arguments: `--assume-defaults` takes
    TF1's LSTMCell's own defaults (forget_bias 1.0, no cell_clip, tanh; read from TF's
    signature), marked as not stored in the file; a nested scope's leaf names the class
    (basic_lstm_cell: BasicLSTMCell; cudnn_compatible_lstm_cell: forget bias 0, as TF1 contrib's
    CudnnCompatibleLSTMCell, an LSTMBlockCell with forget_bias=0)."""
    import inspect


    tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl  # TF1's cells

    sig = inspect.signature(rnn_cell_impl.LSTMCell.__init__).parameters
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), assume_defaults=True)
    assert not refusals
    assert d.kind == "tf1.LSTMCell" and d.value("gate_activation") == "sigmoid"
    assert d.value("forget_bias") == sig["forget_bias"].default == 1.0
    assert d.value("cell_clip") is sig["cell_clip"].default is None
    assert d.value("activation") == "tanh" and sig["activation"].default is None  # None: tanh
    assert not any(d.attrs[k].stored for k in ("forget_bias", "cell_clip", "activation"))
    (d,), _ = _describe_tf1(_lstm_variables("rnn/basic_lstm_cell"), assume_defaults=True)
    assert d.kind == "tf1.BasicLSTMCell"
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/cudnn_compatible_lstm_cell"))
    assert d.kind == "tf1.CudnnCompatibleLSTMCell" and not refusals
    assert {k: d.attrs[k].value for k in ("forget_bias", "cell_clip", "activation")} == {
        "forget_bias": 0.0, "cell_clip": None, "activation": "tanh"}  # fmt: skip


def test_describe_tf1_refuses_unstored_arguments_without_approximation():
    """Without a graph, `--set` or `--assume-defaults`, the cell is refused naming what is
    missing and why; the refusal offers no approximation (so `--approximate` cannot let it
    through)."""
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"))
    (r,) = refusals
    assert r.attribute == "forget_bias, cell_clip, activation" and r.approximation is None
    assert r.reason.startswith("no meta graph next to the checkpoint: checkpoints store weights")
    assert "--assume-defaults" in r.reason


def test_describe_tf1_refuses_misshapen_projection_and_peepholes():
    """An LSTM scope whose projection/kernel is not [H, P], or whose w_*_diag is not [H], is
    refused naming the layer, the variable and its shape."""
    v = _lstm_variables("rnn/lstm_cell", I=2, H=3)
    v["rnn/lstm_cell/kernel"] = np.zeros((2 + 2, 12), np.float32)  # I + P rows, P = 2
    v["rnn/lstm_cell/projection/kernel"] = np.zeros((4, 2), np.float32)  # [4, P]: H is 3
    descriptions, refusals = _describe_tf1(v, assume_defaults=True)
    assert not descriptions
    assert [(r.layer, r.attribute, r.value, r.reason) for r in refusals] == [
        ("rnn.lstm_cell", "projection/kernel", [4, 2], "expected [3, P]")]  # fmt: skip
    v = _lstm_variables("rnn/lstm_cell", I=2, H=3)
    v |= {f"rnn/lstm_cell/w_{g}_diag": np.zeros(3, np.float32) for g in "ifo"}
    v["rnn/lstm_cell/w_f_diag"] = np.zeros(4, np.float32)
    _, refusals = _describe_tf1(v, assume_defaults=True)
    assert [(r.layer, r.attribute, r.value, r.reason) for r in refusals] == [
        ("rnn.lstm_cell", "w_f_diag", [4], "expected [3]")]  # fmt: skip


def test_describe_tf1_clip_gradient_without_a_graph():
    """Without a graph, a clipping cell's gradient rule comes from `--set clip_gradient` (the
    layer named either way: its module name or its scope), from the class when the scope names
    it (lstm_fused_cell: LSTMBlockFusedCell's kernel passes the gradient through), else the cell
    is refused: LSTMCell's clip_by_value and LSTMBlockCell's kernel differ, and the checkpoint
    does not say which wrote it."""
    sets = ["rnn.lstm_cell:cell_clip=3.0", "rnn.lstm_cell:clip_gradient=zero"]
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), sets=sets,
                                   assume_defaults=True)  # fmt: skip
    assert not refusals and d.value("cell_clip") == 3.0
    assert d.value("clip_gradient") == "zero" and not d.attrs["clip_gradient"].stored
    (d,), refusals = _describe_tf1(_lstm_variables("lstm_fused_cell"), sets=["cell_clip=3.0"],
                                   assume_defaults=True)  # fmt: skip
    assert not refusals and d.kind == "tf1.LSTMBlockFusedCell"
    assert d.value("clip_gradient") == "straight_through"
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), sets=["cell_clip=3.0"],
                                   assume_defaults=True)  # fmt: skip
    (r,) = refusals
    assert (r.layer, r.attribute, r.value) == ("rnn.lstm_cell", "clip_gradient", "(not stored)")
    assert "give --set clip_gradient=zero (LSTMCell) or straight_through" in r.reason
    assert r.approximation is None


def _describe_with_graph_cell(variables, cell):
    """describe_tf1 with a meta graph whose op at every scope is `cell` (tf1_cells.GraphCell)."""
    from types import SimpleNamespace
    from unittest import mock

    from torch_lstm_grad.porting.describe import tf1_cells as describe
    from torch_lstm_grad.porting.describe.statements import Statements
    from torch_lstm_grad.porting.source import Source, Writer

    graph = SimpleNamespace(label="meta graph")
    source = Source("ckpt", "TF1 checkpoint", Writer("tf1"), variables, graph=graph)
    with mock.patch.multiple(
        describe, cell_at=lambda g, scope, kind: cell, cell_notes=lambda g, scope, c: []
    ):
        return describe.describe_tf1(source, Statements())


def test_describe_tf1_fused_ops_attributes():
    """A fused LSTM op read from the graph: its forget_bias and cell_clip as stored (a clip
    <= 0 clips nothing), TF's straight-through clip gradient (BlockLSTMGrad) when it clips,
    BlockLSTMV2's Keras gate order; refused when the op's use_peephole and the w_*_diag
    variables disagree, or when the scope holds a projection the op cannot apply."""
    from torch_lstm_grad.porting.graphs.tf1_cells import GraphCell

    v = _lstm_variables("rnn/lstm_fused_cell")
    attrs = {"forget_bias": 0.7, "cell_clip": 0.5, "use_peephole": False}
    (d,), refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTM", attrs, "op x"))
    assert not refusals and d.kind == "tf1.LSTMBlockFusedCell"
    got = {k: d.value(k) for k in ("forget_bias", "cell_clip", "clip_gradient", "gate_order")}
    assert got == {"forget_bias": 0.7, "cell_clip": 0.5, "clip_gradient": "straight_through",
                   "gate_order": None}  # fmt: skip
    attrs = {"forget_bias": 0.0, "cell_clip": 0.0, "use_peephole": False}
    (d,), refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTMV2", attrs, "op x"))
    assert not refusals and d.value("cell_clip") is None and d.value("gate_order") == "ifco"
    assert "clip_gradient" not in d.attrs
    attrs = {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": True}  # no w_*_diag
    _, refusals = _describe_with_graph_cell(v, GraphCell("LSTMBlockCell", attrs, "op x"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [
        ("rnn.lstm_fused_cell", "use_peepholes", True)]  # fmt: skip
    v = _lstm_variables("rnn/lstm_fused_cell", I=2, H=3)
    v["rnn/lstm_fused_cell/kernel"] = np.zeros((2 + 2, 12), np.float32)
    v["rnn/lstm_fused_cell/projection/kernel"] = np.zeros((3, 2), np.float32)
    attrs = {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": False}
    _, refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTM", attrs, "op x"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [
        ("rnn.lstm_fused_cell", "projection/kernel", [3, 2])]  # fmt: skip


def test_describe_tf1_gru_cells():
    """GRU scopes: TF1 GRUCell's names (layer named with dots; sigmoid gates; refused when a
    weight's shape is wrong, or without a graph when its activation is not stated, saying
    why); contrib v1 GRUBlockCell's w_ru, w_c, b_ru, b_c told apart by shape whichever name
    holds which (§5.4); a graph op the converter cannot read refused."""
    I, H = 2, 3  # noqa: E741
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    gru = {
        "rnn/gru_cell/gates/kernel": z(I + H, 2 * H),
        "rnn/gru_cell/gates/bias": z(2 * H),
        "rnn/gru_cell/candidate/kernel": z(I + H, H),
        "rnn/gru_cell/candidate/bias": z(H),
    }
    (d,), refusals = _describe_tf1(gru, sets=["activation=tanh"])
    assert not refusals and d.name == "rnn.gru_cell" and d.value("gate_activation") == "sigmoid"
    _, (r,) = _describe_tf1(gru)
    assert (r.layer, r.attribute) == ("rnn.gru_cell", "activation")
    assert r.reason.startswith("no meta graph next to the checkpoint")
    _, refusals = _describe_tf1({**gru, "rnn/gru_cell/gates/bias": z(H)}, sets=["activation=tanh"])
    assert [(r.attribute, r.value, r.reason) for r in refusals] == [
        ("gates/bias", [H], f"expected [{2 * H}]")]  # fmt: skip
    for swapped in (False, True):
        a, b = (z(I + H, H), z(I + H, 2 * H)) if swapped else (z(I + H, 2 * H), z(I + H, H))
        ba, bb = (z(H), z(2 * H)) if swapped else (z(2 * H), z(H))
        v1 = {"g/w_ru": a, "g/w_c": b, "g/b_ru": ba, "g/b_c": bb}
        (d,), refusals = _describe_tf1(v1)
        assert not refusals and d.kind == "tf1.GRUBlockCell" and d.value("activation") == "tanh"
        gates, cand = ("g/w_c", "g/w_ru") if swapped else ("g/w_ru", "g/w_c")
        gb, cb = ("g/b_c", "g/b_ru") if swapped else ("g/b_ru", "g/b_c")
        assert d.weights == {"gates/kernel": gates, "gates/bias": gb, "candidate/kernel": cand,
                             "candidate/bias": cb}  # fmt: skip
        assert (d.value("units"), d.value("input_size")) == (H, I)
    from torch_lstm_grad.porting.graphs.tf1_cells import GraphCell

    _, refusals = _describe_with_graph_cell(gru, GraphCell(None, problem="no pattern", where="w"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [("rnn.gru_cell", "graph", "w")]


def test_describe_tf1_cudnn_names_refusals():
    """TF1 CudnnLSTM canonical names: layers with a gap (cell_1 without cell_0) or a cell
    missing a canonical variable are refused, naming what was found or is missing; an
    opaque_kernel alone is refused (its model is not stored), its shape named."""
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    pre = "cudnn_lstm/rnn/multi_rnn_cell/cell_{}/cudnn_compatible_lstm_cell/"
    _, (r,) = _describe_tf1({pre.format(1) + "kernel": z(5, 12), pre.format(1) + "bias": z(12)})
    assert (r.layer, r.attribute, r.value) == ("cudnn_lstm", "cells", "cell_1")
    _, (r,) = _describe_tf1({pre.format(0) + "kernel": z(5, 12)})
    assert (r.layer, r.attribute, r.value) == ("cudnn_lstm", "variables",
                                               "cell_0 missing ['bias']")  # fmt: skip
    _, (r,) = _describe_tf1({"m/opaque_kernel": z(40)})
    assert (r.layer, r.attribute, r.value) == ("m", "opaque_kernel", [40])
