"""The recurrent cells a GraphDef computes (`graph_def.Graph`), found by the variables they read.

`cell_at(graph, scope, kind)` finds how the variables under `scope` are used and reads the
cell's attributes from the ops around them:

* fused ops (`BlockLSTM`, `BlockLSTMV2`, `LSTMBlockCell`, `GRUBlockCell`) state them as
  attributes (`forget_bias`, `cell_clip`, `use_peephole`);
* TF1's Python cells (`LSTMCell`, `BasicLSTMCell`, `GRUCell`) are op patterns: `MatMul(concat(x,
  h), kernel)`, `BiasAdd`, `Split` into i, j, f, o; the forget bias is the constant added to f,
  the activation the op applied to j (and to c), a `clip_by_value` (`Minimum`, `Maximum` with
  constants) after the new c is the cell clip, a `MatMul` with `projection/kernel` the
  projection, a clip after it the projection clip. Any op on those paths that is not what the
  cell classes build, or that combines other values than theirs (each op's operands are
  checked: a graph computing anything else is no such cell), makes the cell unreadable, and
  the converter refuses it by name.

`cell_notes` lists what the graph does around a cell that the cell's module leaves to its caller
(a DropoutWrapper, `dynamic_rnn`'s `sequence_length`, a reversed direction).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph_def import INPUT_ARGS, OUTPUT_ARGS, Graph, Node

__all__ = ["GraphCell", "cell_at", "cell_notes"]

_ADDS = {"Add", "AddV2"}
_ACTIVATION_OPS = {"Tanh": "tanh", "Relu": "relu", "Identity": "linear", "Sigmoid": "sigmoid"}
_UNARY = {
    "Tanh",
    "Relu",
    "Relu6",
    "Elu",
    "Selu",
    "Softsign",
    "Softplus",
    "Sigmoid",
    "LeakyRelu",
    "Sin",
    "Exp",
}  # elementwise ops a cell's activation may be
# What a loop's state is read from in its body: TF 2's While body arguments, TF 1's loops'
# Merge/Switch (resolve stops there).
_LOOP_VARIABLES = {"_Arg", "Switch", "Merge"}
_FUSED_LSTM = {"BlockLSTM", "BlockLSTMV2", "LSTMBlockCell"}
_FUSED_GRU = {"GRUBlockCell"}
# The fused LSTM ops' attributes as TF's op registry defaults them (tensorflow/core/ops/
# rnn_ops.cc): a graph saved with strip_default_attrs=True (TF1's SavedModelBuilder,
# export_meta_graph) leaves out every attribute equal to its default, and TF runs the node with it.
_FUSED_DEFAULTS = {
    "BlockLSTM": {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": False},
    "LSTMBlockCell": {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": False},
    "BlockLSTMV2": {"cell_clip": 0.0, "use_peephole": False},
}


def _bookkeeping(op: str) -> bool:
    """Ops that initialise, save, restore or update a variable without computing with it."""
    return op in {
        "Assign",
        "AssignVariableOp",
        "VarIsInitializedOp",
        "IsVariableInitialized",
        "SaveV2",
        "RestoreV2",
        "Save",
        "Restore",
        "SaveSlices",
        "RestoreSlice",
        "DestroyResourceOp",
    } or op.startswith(("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply"))


@dataclass
class GraphCell:
    """What the graph says about the cell whose variables live under one scope: `cls` (the TF
    class or op: "LSTMCell", "BasicLSTMCell", "GRUCell", "BlockLSTM", "LSTMBlockCell",
    "BlockLSTMV2", "GRUBlockCell"), `attrs` (name -> value), `where` (the ops read), `problem`
    (why the pattern could not be read, else None)."""

    cls: str | None
    attrs: dict = field(default_factory=dict)
    where: str = ""
    problem: str | None = None
    anchor: str = ""  # the op that reads the kernel (a MatMul or the fused op)
    # One step's (a fused sequence op's) tensors: "inputs" {x, h, c[, seq_len_max]} and
    # "outputs" {h, c}, as refs in the graph; `verify` runs the ops between them.
    boundary: dict | None = None


def cell_at(g: Graph, scope: str, kind: str) -> GraphCell | None:
    """The cell using the variables `<scope>/kernel` (kind "lstm") or `<scope>/gates/kernel`
    (kind "gru", also contrib's `w_ru`), or None when the graph does not hold them."""
    var = None
    for leaf in ("kernel",) if kind == "lstm" else ("gates/kernel", "w_ru", "w_c"):
        var = g.variable(f"{scope}/{leaf}")
        if var is not None:
            break
    if var is None:
        return None
    users = [u for u in g.users(var.name) if not _bookkeeping(u.op)]
    if not users:  # initialised and saved, but no op computes with it
        return None
    fused = [u for u in users if u.op in _FUSED_LSTM or u.op in _FUSED_GRU]
    if fused:
        return _fused_cell(g, fused, var.name, scope)
    matmuls = [u for u in users if g.forward_matmul(u, var.name)]
    if not matmuls:
        return GraphCell(
            None,
            problem=f"{var.name} is read by "
            f"{sorted({u.op for u in users}) or 'no op'}, not by a MatMul or "
            "a fused RNN op",
        )
    cells = [(_python_lstm if kind == "lstm" else _python_gru)(g, m, scope) for m in matmuls]
    first = cells[0]
    for c in cells[1:]:  # static_rnn: one copy of the cell per step; they must agree
        if (
            c.problem is None
            and first.problem is None
            and (c.cls, c.attrs) != (first.cls, first.attrs)
        ):
            return GraphCell(
                None,
                problem=f"the {len(cells)} uses of {var.name} disagree: "
                f"{first.attrs} at {first.where}, {c.attrs} at {c.where}",
            )
    found = next((c for c in cells if c.problem), first)
    found.anchor = matmuls[0].name
    return found

def _outermost_name(g: Graph, key: str) -> str:
    """A node's name in the main graph: its own, or that of the node (a While loop, a call)
    running the function that holds it."""
    for _ in range(16):
        fn, sep, _ = key.rpartition("::")
        if not sep:
            return key
        args = g.functions.get(fn, [])
        caller = g.nodes[args[0]].caller if args else None
        if caller is None:
            return key.rpartition("::")[2]
        key = caller[0]
    return key

def cell_notes(g: Graph, scope: str, cell: GraphCell) -> list[str]:
    """What the graph does around the cell that a cell module leaves to its caller: a
    DropoutWrapper's dropout, dynamic_rnn's sequence_length, a fused op's constant
    seq_len_max."""
    notes = []
    parent = scope.rpartition("/")[0]
    dropout = sorted(
        n.name.rpartition("::")[2]
        for n in g.nodes.values()
        if n.op in ("RandomUniform", "StatelessRandomUniformV2")
        and parent
        and any(f"{parent}{mid}/dropout" in n.name for mid in ("", "/while"))
    )
    if dropout:
        notes.append(
            f"not ported: a DropoutWrapper around the cell ({dropout[0].rsplit('/', 1)[0]}):"
            " dropout is training-time noise; the module computes keep_prob = 1"
        )
    steps = (cell.boundary or {}).get("inputs", {}).get("seq_len_max")
    cap = g.const(steps) if steps is not None else None
    if cap is not None:  # BlockLSTM zeroes its outputs past seq_len_max
        notes.append(
            f"the graph's {cell.anchor} ({cell.cls}) runs at most seq_len_max = {int(cap)} "
            "steps, a constant: past it TF's outputs are zeros; give the module at most "
            f"{int(cap)} steps"
        )
    anchor = _outermost_name(g, cell.anchor)
    if "/while" in anchor:
        rnn = anchor.split("/while")[0]
        # dynamic_rnn names its sequence_length check `sequence_length` (TF >= 1.5) or
        # `CheckSeqLen`
        if {f"{rnn}/sequence_length", f"{rnn}/CheckSeqLen"} & g.nodes.keys():
            notes.append(
                f"the graph's dynamic_rnn ({rnn}) takes sequence_length: past a row's "
                "length it keeps the state and outputs zeros; step the module so"
            )
        # bidirectional_dynamic_rnn's backward direction: `<scope>/bw/ReverseSequence`
        # before its loop `<scope>/bw/bw`, and again on the outputs
        outer = rnn.rpartition("/")[0]
        flips = sorted(
            name
            for name, n in g.nodes.items()
            if n.op in ("ReverseSequence", "ReverseV2") and name.rpartition("/")[0] == outer
        )
        if outer and flips:
            notes.append(
                f"the graph runs it on the sequence reversed by {flips[0]} "
                "(bidirectional_dynamic_rnn's backward direction: each row's first "
                "sequence_length steps reversed) and reverses its outputs back"
            )
    return notes


def _fused_attrs(u: Node) -> dict:
    """The node's forget_bias, cell_clip, use_peephole: as stored, else the op's default."""
    stored = {k: u.attrs[k] for k in ("forget_bias", "cell_clip", "use_peephole") if k in u.attrs}
    return {**_FUSED_DEFAULTS.get(u.op, {}), **stored}


# The variables a fused LSTM op must read as its weight inputs: the converter takes each by
# its name, TF by the input it feeds (the peepholes, all [H], only the inputs tell apart); one
# fed in another's place is refused. The GRU op's four weights have four shapes, which TF
# checks.
_LSTM_LEAVES = {"w": "kernel", "b": "bias", "wci": "w_i_diag", "wcf": "w_f_diag", "wco": "w_o_diag"}


def _fused_cell(g: Graph, uses: list[Node], var: str, scope: str) -> GraphCell:
    ops = {(u.op, tuple(sorted(_fused_attrs(u).items()))) for u in uses}
    if len(ops) != 1:
        return GraphCell(None, problem=f"{var} feeds differently configured ops: {sorted(ops)}")
    u = uses[0]
    attrs = _fused_attrs(u)
    if u.op == "BlockLSTMV2":
        attrs["forget_bias"] = 0.0
    # The ops' inputs and outputs by argument (INPUT_ARGS, OUTPUT_ARGS). "at": the inputs
    # by position (c and h may be one tensor, the zeros both start from).
    args, names = INPUT_ARGS[u.op], OUTPUT_ARGS[u.op]
    for n in uses:  # each has len(args) inputs (graph_from_graph_def's _ARITY check)
        for arg, leaf in _LSTM_LEAVES.items() if n.op in _FUSED_LSTM else ():
            name, pos = f"{scope}/{leaf}", args.index(arg)
            if arg.startswith("wc") and not attrs["use_peephole"]:
                continue  # not read (variables present all the same: the describer refuses)
            fed = g.resolve(n.inputs[pos])[0]
            # Another variable in its place (a computed input, as canonical cuDNN names' summed
            # biases, is the describer's to read)
            if fed != name and g.variable(name) is not None and g.variable(fed) is not None:
                return GraphCell(
                    None, problem=f"{n.name} ({n.op}) reads {fed} as its {arg}, not {name}"
                )
    roles = {"x": "x", "c": "cs_prev", "h": "h_prev", "seq_len_max": "seq_len_max"}
    at = {role: args.index(arg) for role, arg in roles.items() if arg in args}
    outputs = {"h": (u.name, names.index("h"))}
    if u.op in _FUSED_LSTM:
        outputs["c"] = (u.name, names.index("cs"))
    boundary = {
        "inputs": {role: u.inputs[k] for role, k in at.items()},
        "at": {role: (u.name, k) for role, k in at.items()},
        "outputs": outputs,
    }
    # Said where the description prints the values' origin: an attribute the node does not
    # store is TF's registered default, not something the file says.
    defaulted = sorted(set(_FUSED_DEFAULTS.get(u.op, {})) - set(u.attrs))
    where = f"op {u.name} ({u.op})" + (
        f"; not stored: {', '.join(defaulted)} = {u.op}'s registered defaults" if defaulted else ""
    )
    return GraphCell(u.op, attrs, where=where, anchor=u.name, boundary=boundary)


def _single(g: Graph, users: list[Node], what: str, at: str) -> Node:
    if len(users) != 1:
        raise _Unreadable(
            f"expected one {what} after {at}, found "
            f"{[f'{u.name} ({u.op})' for u in users] or 'none'}"
        )
    return users[0]


class _Unreadable(Exception):
    pass


def _text(ref: tuple[str, int]) -> str:
    """A value as TF names it: `node` for output 0, else `node:k`."""
    return f"{ref[0]}:{ref[1]}" if ref[1] else ref[0]


def _operands(g: Graph, node: Node) -> list[tuple[str, int]]:
    """The two values a binary op of the cell combines, as `resolve` finds them. An Add of
    another number of inputs (TF's import refuses one; _ARITY leaves Add to the readers) is
    refused, not read as its first two."""
    if len(node.inputs) != 2:
        raise _Unreadable(f"{node.name} ({node.op}) has {len(node.inputs)} inputs, not 2")
    return [g.resolve(r) for r in node.inputs]


def _other(g: Graph, node: Node, ref, what: str) -> tuple[str, int]:
    """The input of the binary op `node` besides `ref` (as stored, for the step's boundary),
    refused where `node` does not read `ref` (`what`)."""
    ins, mine = _operands(g, node), g.resolve(ref)
    if mine not in ins:
        raise _Unreadable(
            f"{node.name} ({node.op}) reads {', '.join(map(_text, ins))}, not {what} {_text(mine)}"
        )
    return node.inputs[1] if ins[0] == mine else node.inputs[0]


def _combines(g: Graph, node: Node, want: list, what: str) -> None:
    """`node` (an Add or a Mul: either order) combines exactly the values `want`: another
    operand would be a value the module never reads."""
    got, want = _operands(g, node), [g.resolve(r) for r in want]
    if sorted(got) != sorted(want):
        raise _Unreadable(
            f"{node.name} ({node.op}) reads {', '.join(map(_text, got))}, not {what} "
            f"({', '.join(map(_text, want))})"
        )


def _step_inputs(g: Graph, matmul: Node) -> dict:
    """x and h of a TF1 Python cell's step: the kernel multiplies `concat([x, h], 1)` (stored
    as the concat reads them: verify feeds its copy of the step there)."""
    ref = g.resolve(matmul.inputs[0])
    concat = g.nodes[ref[0]]  # every input names a node: graph_from_graph_def checks it
    if (
        concat.op != "ConcatV2"
        or len(concat.inputs) != 3
        or g.const(concat.inputs[2]) not in (1.0, -1.0)
    ):
        raise _Unreadable(
            f"{matmul.name} multiplies {_text(ref)} ({concat.op}), not concat([x, h], 1)"
        )
    return {"x": concat.inputs[0], "h": concat.inputs[1]}


def _bias_add(g: Graph, matmul: Node, var: str, what: str = "BiasAdd") -> Node:
    """`bias_add(x · kernel, bias)` as TF1's cells compute it (an Add of the two either way
    round also): any other addend is a bias the module would not add."""
    add = _single(g, g.users(matmul.name, 0, {"BiasAdd"} | _ADDS), what, matmul.name)
    got, want = _operands(g, add), [(matmul.name, 0), (var, 0)]
    if got != want and (add.op == "BiasAdd" or got[::-1] != want):
        raise _Unreadable(
            f"{add.name} ({add.op}) adds {', '.join(map(_text, got))}, not {var} to {matmul.name}"
        )
    return add


def _split(g: Graph, value: Node, parts: int, what: str) -> Node:
    """`split(value, parts, axis=1)`: the gates side by side in TF1's cells."""
    split = _single(g, g.users(value.name, 0, {"Split"}), what, value.name)
    axis, num = g.const(split.inputs[0]), split.attrs.get("num_split")
    if g.resolve(split.inputs[1]) != (value.name, 0) or axis not in (1.0, -1.0) or num != parts:
        raise _Unreadable(
            f"{split.name} splits {_text(g.resolve(split.inputs[1]))} in {num} along axis "
            f"{axis}, not {value.name} in {parts} along axis 1"
        )
    return split


def _clip_after(g: Graph, name: str, what: str) -> tuple[float | None, str, list]:
    """`clip_by_value(x, -c, c)` applied to `name`'s output: `(c or None, op name, the step's
    values in it and their readers, for _closed)`."""
    mins = g.users(name, 0, {"Minimum"})
    if not mins:
        return None, name, []
    m = _single(g, mins, f"{what} clip", name)
    hi = g.const(m.inputs[1])
    mx = _single(g, g.users(m.name, 0, {"Maximum"}), f"{what} clip's Maximum", m.name)
    lo = g.const(mx.inputs[1])
    if hi is None or lo is None or lo != -hi:
        raise _Unreadable(f"{m.name}/{mx.name} clip to [{lo}, {hi}], not clip_by_value(x, -c, c)")
    return hi, mx.name, [((name, 0), [m]), ((m.name, 0), [mx])]


def _activation_of(g: Graph, node: Node | None, what: str) -> str:
    if node is None:
        raise _Unreadable(f"no op computes the {what}")
    return _ACTIVATION_OPS.get(node.op, node.op)


def _closed(g: Graph, inner: list, inputs: dict) -> None:
    """A step of TF1's cell is closed: each value inside it (`inner`: `(value, [its readers])`)
    is read by those ops of the cell alone (the training graph's aside), and x, h, c_prev come
    from outside it. A value of the step read elsewhere too, or a step input the step computes,
    is a cell TF1 does not build."""
    own = {ref[0] for ref, _ in inner} | {r.name for _, readers in inner for r in readers}
    for ref, readers in inner:
        got, want = (sorted({u.name for u in us}) for us in (g.users(*ref), readers))
        if got != want:
            raise _Unreadable(f"{_text(ref)} is read by {got}; in TF1's cell by {want} alone")
    for role, ref in inputs.items():
        if g.resolve(ref)[0] in own:
            raise _Unreadable(f"the step's {role} is {_text(g.resolve(ref))}, a value of the step")


def _gate(g: Graph, start: tuple[str, int], what: str) -> tuple[Node, list]:
    """Follows a gate's pre-activation through additions (bias, peephole) to its activation:
    `(activation node, [(Add node, the term it adds)])`. Each value on the way has one reader
    in TF1's cells (the training graph's aside); another, even one the outputs do not use, is
    refused rather than passed by."""
    adds, ref = [], start
    for _ in range(4):
        step = _single(g, g.users(*ref), f"{what} gate's addition or activation", _text(ref))
        if step.op not in _ADDS:
            return step, adds
        adds.append((step, _other(g, step, ref, f"the {what} gate")))
        ref = (step.name, 0)
    raise _Unreadable(f"the {what} gate at {start[0]}: too many additions")


def _python_lstm(g: Graph, matmul: Node, scope: str) -> GraphCell:
    """TF1 `LSTMCell` / `BasicLSTMCell` (rnn_cell_impl.py) around one `MatMul` of the kernel:
    every op's operands are the cell's (c = f·c_prev + i·act(j), h = o·act(c)), so that a
    graph computing anything else is refused, not ported as the cell."""
    try:
        inputs = _step_inputs(g, matmul)
        bias_add = _bias_add(g, matmul, f"{scope}/bias")
        split = _split(g, bias_add, 4, "Split")
        f_act, f_adds = _gate(g, (split.name, 2), "forget")
        i_act, i_adds = _gate(g, (split.name, 0), "input")
        o_act, o_adds = _gate(g, (split.name, 3), "output")
        for name, act in (("input", i_act), ("forget", f_act), ("output", o_act)):
            if act.op != "Sigmoid":
                raise _Unreadable(
                    f"the {name} gate's activation {act.name} is {act.op}, not the "
                    "Sigmoid TF1's LSTM cells apply"
                )
        forget_bias = g.const(f_adds[0][1]) if f_adds else None
        if forget_bias is None:
            raise _Unreadable(f"no constant forget bias added to {split.name}:2")
        j_node = _single(g, g.users(split.name, 1), "use of j", f"{split.name}:1")
        if j_node.op == "Mul":  # activation=tf.identity: j is multiplied as it is
            activation, i_mul, j_out = "linear", j_node, (split.name, 1)
        else:
            activation = _activation_of(g, j_node, "activation of j")
            i_mul = _single(g, g.users(j_node.name, 0, {"Mul"}), "i·act(j)", j_node.name)
            j_out = (j_node.name, 0)
        _combines(g, i_mul, [(i_act.name, 0), j_out], "i · act(j)")
        # c = f·c_prev + i·act(j), then the optional clip
        c_add = _single(g, g.users(i_mul.name, 0, _ADDS), "new c", i_mul.name)
        f_ref = g.resolve(_other(g, c_add, (i_mul.name, 0), "i · act(j)"))
        f_mul = g.nodes[f_ref[0]]
        if f_mul.op != "Mul":
            raise _Unreadable(f"{c_add.name} adds {_text(f_ref)} to i · act(j), not f · c_prev")
        inputs["c"] = _other(g, f_mul, (f_act.name, 0), "the forget gate")
        # One tensor for both is a caller's choice of initial state (static_rnn given
        # LSTMStateTuple(z, z)); one loop variable for both is no LSTM: c_prev read as h_prev.
        shared = g.resolve(inputs["c"])
        if shared == g.resolve(inputs["h"]) and g.nodes[shared[0]].op in _LOOP_VARIABLES:
            raise _Unreadable(f"the step reads one loop variable, {_text(shared)}, as c and h")
        cell_clip, c_name, inner = _clip_after(g, c_add.name, "cell")
        # Every other addition to a gate is a peephole: a term the module would otherwise drop
        for gate, adds, leaf, c in (("input", i_adds, "w_i_diag", inputs["c"]),
                                    ("forget", f_adds[1:], "w_f_diag", inputs["c"]),
                                    ("output", o_adds, "w_o_diag", (c_name, 0))):  # fmt: skip
            _peephole(g, adds, f"{scope}/{leaf}", gate, c)
        # h = o·act(c): act(c) must be the same function as act(j)
        c_acts = [u for u in g.users(c_name, 0) if u.op in _UNARY]
        if activation != "linear" and [_ACTIVATION_OPS.get(u.op, u.op) for u in c_acts] != [
            activation
        ]:
            raise _Unreadable(
                f"act(j) is {activation} but the new c at {c_name} feeds "
                f"{[f'{u.name} ({u.op})' for u in c_acts]}"
            )
        act_c = (c_acts[0].name, 0) if c_acts else (c_name, 0)
        want = sorted([act_c, (o_act.name, 0)])
        h = [u for u in g.users(*act_c, {"Mul"}) if sorted(_operands(g, u)) == want]
        h = _single(g, h, f"o · act(c) Mul of {o_act.name}", _text(act_c))
        boundary = {"inputs": inputs, "outputs": {"c": (c_name, 0), "h": (h.name, 0)}}
        attrs = {"forget_bias": forget_bias, "activation": activation, "cell_clip": cell_clip}
        proj = g.variable(f"{scope}/projection/kernel")
        cls = (
            "BasicLSTMCell"
            if scope.rsplit("/", 1)[-1].startswith("basic_lstm_cell")
            else ("LSTMCell")
        )
        if proj is not None:
            pm = [u for u in g.users(proj.name, 0, {"MatMul"}) if g.forward_matmul(u, proj.name)]
            if not pm:
                raise _Unreadable(f"{proj.name} is not multiplied by a MatMul")
            # The cell's own projection multiplies its h (static_rnn's copies share the kernel)
            mine = [u for u in pm if g.resolve(u.inputs[0]) == (h.name, 0)]
            m = _single(g, mine, f"MatMul of {proj.name}", f"the cell's h {h.name}:0")
            attrs["proj_clip"], h_name, clip = _clip_after(g, m.name, "projection")
            boundary["outputs"]["h"] = (h_name, 0)
            inner += [((h.name, 0), [m]), *clip]
        pairs = [(matmul, bias_add), (bias_add, split), (i_act, i_mul), (f_act, f_mul)]
        pairs += [(o_act, h), (i_mul, c_add), (f_mul, c_add)]
        inner += [((n.name, 0), [r]) for n, r in pairs]
        inner += [(g.resolve(term), [add]) for add, term in i_adds + f_adds[1:] + o_adds]
        if j_out != (split.name, 1):
            inner.append((j_out, [i_mul]))
        if c_acts:
            inner.append((act_c, [h]))
        _closed(g, inner, inputs)
        return GraphCell(cls, attrs, where=f"ops {matmul.name} .. {c_name}", boundary=boundary)
    except _Unreadable as err:
        return GraphCell(None, where=matmul.name, problem=str(err))


def _peephole(g: Graph, adds: list, var: str, gate: str, c) -> None:
    """A gate's additions besides the forget bias: TF1 LSTMCell's peephole `var · c` (c_prev
    for the input and forget gates, the new c for the output gate) where the graph holds `var`
    (use_peepholes, which the port takes from the variables), none where it does not. Anything
    else added is refused: the module would compute without it."""
    peephole = g.variable(var) is not None
    want = sorted([(var, 0), g.resolve(c)])
    for add, term in adds:
        t = g.nodes[g.resolve(term)[0]]
        if t.op != "Mul" or sorted(_operands(g, t)) != want:
            raise _Unreadable(
                f"the {gate} gate adds {add.name} ({add.op}), which is not the peephole {var} "
                f"· c ({_text(g.resolve(c))}) of TF1's LSTMCell"
            )
    if len(adds) != int(peephole):
        raise _Unreadable(
            f"the {gate} gate adds {len(adds)} peephole terms; the graph "
            f"{'holds' if peephole else 'holds no'} {var}"
        )


def _python_gru(g: Graph, matmul: Node, scope: str) -> GraphCell:
    """TF1 `GRUCell`: `sigmoid(concat(x, h)·gates/kernel + b)` split into r, u; the candidate
    `c = act(concat(x, r·h)·candidate/kernel + b)`; the new h `u·h + (1 − u)·c`, every op's
    operands checked as in `_python_lstm`."""
    try:
        inputs = _step_inputs(g, matmul)
        bias_add = _bias_add(g, matmul, f"{scope}/gates/bias")
        gate_act = _single(g, g.users(bias_add.name, 0), "gate activation", bias_add.name)
        if gate_act.op != "Sigmoid":
            raise _Unreadable(
                f"the gates' activation {gate_act.name} is {gate_act.op}, not Sigmoid"
            )
        cand = g.variable(f"{scope}/candidate/kernel")
        if cand is None:
            raise _Unreadable(f"no {scope}/candidate/kernel variable in the graph")
        cm = [u for u in g.users(cand.name, 0, {"MatMul"}) if g.forward_matmul(u, cand.name)]
        if not cm:
            raise _Unreadable(f"{cand.name} is not multiplied by a MatMul")
        # This step's candidate: concat(x, r·h)·candidate/kernel with r from this step's gates
        # (static_rnn's copies share the kernel; each copy is read, and must agree, on its own)
        split = _split(g, gate_act, 2, "Split of r, u")
        update = (split.name, 1)  # u
        rh = _single(g, g.users(split.name, 0, {"Mul"}), "r·h", f"{split.name}:0")
        _combines(g, rh, [(split.name, 0), inputs["h"]], "r · h")
        concat = _single(g, g.users(rh.name, 0, {"ConcatV2"}), "concat(x, r·h)", rh.name)
        mine = [u for u in cm if g.resolve(u.inputs[0]) == (concat.name, 0)]
        cmm = _single(g, mine, f"MatMul of {cand.name}", concat.name)
        joined = [g.resolve(r) for r in _step_inputs(g, cmm).values()]
        if joined != [g.resolve(inputs["x"]), (rh.name, 0)]:
            raise _Unreadable(
                f"{concat.name} joins {', '.join(map(_text, joined))}, not the step's x "
                f"{_text(g.resolve(inputs['x']))} and r · h {rh.name}"
            )
        cb = _bias_add(g, cmm, f"{scope}/candidate/bias", "candidate BiasAdd")
        act = _single(g, g.users(cb.name, 0), "candidate activation", cb.name)
        # new_h = u·h + (1 − u)·c
        c_out = (act.name, 0) if act.op in _UNARY else (cb.name, 0)
        keep = _single(g, g.users(*c_out, {"Mul"}), "(1 − u)·c", _text(c_out))
        sub = g.nodes[g.resolve(_other(g, keep, c_out, "the candidate"))[0]]
        if sub.op != "Sub" or _operands(g, sub)[1] != update or g.const(sub.inputs[0]) != 1.0:
            raise _Unreadable(f"{keep.name} multiplies the candidate by another value than 1 − u")
        new_h = _single(g, g.users(keep.name, 0, _ADDS), "new h", keep.name)
        carry = g.nodes[g.resolve(_other(g, new_h, (keep.name, 0), "(1 − u)·c"))[0]]
        if carry.op != "Mul":
            raise _Unreadable(f"{new_h.name} adds another value than u · h to (1 − u)·c")
        _combines(g, carry, [update, inputs["h"]], "u · h")
        pairs = [(matmul, bias_add), (bias_add, gate_act), (gate_act, split), (rh, concat)]
        pairs += [(concat, cmm), (cmm, cb), (sub, keep), (keep, new_h), (carry, new_h)]
        inner = [((n.name, 0), [r]) for n, r in pairs]
        inner += [((split.name, 0), [rh]), (update, [sub, carry]), (c_out, [keep])]
        if c_out != (cb.name, 0):
            inner.append(((cb.name, 0), [act]))
        _closed(g, inner, inputs)
        return GraphCell(
            "GRUCell",
            # activation=tf.identity: the candidate is multiplied by (1 − u) as it is
            {"activation": "linear" if act.op == "Mul" else _activation_of(g, act, "candidate")},
            where=f"ops {matmul.name}, {cmm.name}",
            boundary={"inputs": inputs, "outputs": {"h": (new_h.name, 0)}},
        )
    except _Unreadable as err:
        return GraphCell(None, where=matmul.name, problem=str(err))


