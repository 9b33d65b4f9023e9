"""Keras recurrent layers read back from a SavedModel's saved functions, for SavedModels that
store no Keras config (Keras 3's `export()`, `tf.saved_model.save` of a Keras model).

A Keras RNN layer runs its cell in a `While` loop (Keras 3's TF backend `rnn`, tf.keras'
`backend.rnn`); the loop body is a function of the graph's library. For each layer's variables
(`kernel`, `recurrent_kernel`, `bias`), the body that multiplies by the recurrent kernel, in the
functions the chosen signature runs, is matched op by op against the cell Keras builds:

* LSTM: `z = x·K + h·R (+ b)`, `Split` in 4; `i, f, o = ra(z0), ra(z1), ra(z3)`,
  `c' = f·c + i·act(z2)`, `h' = o·act(c')`;
* GRU (reset_after=True): `x·K (+ b0)` split in 3, `h·R (+ b1)` sliced in 3; `z, r = ra(..)`,
  `hh = act(x_h + r·r_h)`, `h' = z·h + (1 − z)·hh`;
* SimpleRNN: `h' = act(x·K (+ b) + h·R)`.

`ra` and `act` are read from the ops applied: `Sigmoid`; Keras 3's hard sigmoid `relu6(x + 3) /
6`; Keras 2's `clip(0.2·x + 0.5, 0, 1)`; `Tanh`, `Relu` and the other unary ops by name; none
(linear). Every op of the body must be part of the cell or of the loop's bookkeeping (reading
step t, writing the output, counting); any other op makes the layer unreadable and is named.
Around the loop: `ReverseV2` of the time-major input is `go_backwards`; the output written at
step t (not at 0) is `return_sequences`; the final states used after the loop (or returned) is
`return_state`; a loop that selects between new and old values reads a mask. A layer saved on
cuDNN's kernel (a `CudnnRNNV3` op in place of the loop) is read by graphs/keras_cudnn.py.
"""

from __future__ import annotations

import numpy as np

from ..source import KerasLayer, keras_rnn_scopes, layer_and_rest
from .graph_def import Graph, Node, through_identities
from .graph_def import function_of as _fn
from .graph_def import local_name as _short
from .keras_cudnn import NotKerasCudnn, cudnn_nodes, read_cudnn_layer

__all__ = ["keras_layers_from_graph"]

_ADDS = {"Add", "AddV2"}
_UNARY = {
    "Tanh": "tanh",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Elu": "elu",
    "Selu": "selu",
    "Softsign": "softsign",
    "Softplus": "softplus",
    "Exp": "exponential",
}
_WHILE = {"While", "StatelessWhile"}
# The loop's own ops: reading step t, writing the output, counting steps, passing values on.
_BOOKKEEPING = {"TensorListGetItem", "TensorListSetItem", "Identity", "NoOp", "Const", "_Arg"}
_VARIABLE_READS = {"ReadVariableOp", "Cast"}


class _Unreadable(Exception):
    pass


class _NotRun(Exception):
    """The layer's variables are read by no function the chosen signature runs."""


class _Body:
    """One loop body: its ops, whose of them the matcher has explained, and the variables'
    reads in it."""

    def __init__(self, g: Graph, fn: str, variables: dict[str, set[str]]):
        self.g, self.fn, self.seen = g, fn, set()
        self.variables = variables  # role -> the nodes that hold that variable

    def local(self, ref) -> tuple[str, int]:
        """`ref` through the body's identities, stopping at its arguments (`Graph.resolve`
        would follow them out to the loop's inputs)."""
        return through_identities(self.g.nodes, ref)

    def node(self, ref) -> Node:
        return self.g.nodes[self.local(ref)[0]]

    def users(self, ref) -> list[Node]:
        return [u for u in self.g.users(*ref) if _fn(u.name) == self.fn]

    def is_var(self, ref, role: str) -> bool:
        """`ref` reads the variable `role` (`Graph.resolve` follows the ReadVariableOp to
        it). A read through a Cast is not: a mixed-precision layer multiplies in float16 or
        bfloat16, which the modules do not compute (_read_layer refuses it by name)."""
        return self.g.resolve(ref)[0] in self.variables.get(role, ())

    def one(self, ref, ops: set[str], what: str) -> Node:
        found = [u for u in self.users(ref) if u.op in ops]
        if len(found) != 1:
            raise _Unreadable(
                f"expected one {what} ({'/'.join(sorted(ops))}) after {ref[0]}, found "
                f"{[f'{u.name} ({u.op})' for u in self.users(ref)] or 'none'}"
            )
        self.seen.add(found[0].name)
        return found[0]

    def other_input(self, node: Node, ref) -> tuple[str, int]:
        """The input of the binary op `node` that is not `ref`."""
        ins = [self.local(r) for r in node.inputs]
        if len(ins) != 2:  # a file TF would not load (Add, Mul, BiasAdd take two)
            raise _Unreadable(f"{node.name} ({node.op}) has {len(ins)} inputs, not 2")
        mine = self.local(ref)
        if mine not in ins:
            raise _Unreadable(f"{node.name} ({node.op}) does not read {ref[0]}")
        return ins[1] if ins[0] == mine else ins[0]

    def const(self, ref) -> float | None:
        """The value of a scalar constant of the body (not an argument's caller's)."""
        n = self.g.nodes.get(self.local(ref)[0])
        value = n.attrs.get("value") if n is not None and n.op == "Const" else None
        return float(value) if isinstance(value, np.ndarray) and value.size == 1 else None

    def const_input(self, node: Node) -> float | None:
        for r in node.inputs:
            c = self.const(r)
            if c is not None:
                return c
        return None

    def activation(self, ref, what: str) -> tuple[str, tuple[str, int]]:
        """`(name, output)` of the activation applied to `ref`: the function's ops are
        followed and marked; "linear" (no op) leaves `ref` as the output."""
        # A mask's select and the loop's output write read the value too: not the function.
        users = [
            u
            for u in self.users(ref)
            if u.op not in ("SelectV2", "Select", "TensorListSetItem", "Identity")
        ]
        if len(users) != 1:
            return "linear", ref
        u = users[0]
        c = self.const_input(u)
        if u.op in _UNARY:
            self.seen.add(u.name)
            return _UNARY[u.op], (u.name, 0)
        if u.op in _ADDS and c == 3.0:  # Keras 3: relu6(x + 3) / 6
            r6 = self.one((u.name, 0), {"Relu6"}, f"{what}: Relu6 of x + 3")
            div = self.one((r6.name, 0), {"RealDiv", "Mul", "Div"}, f"{what}: relu6(x + 3) / 6")
            k = self.const_input(div)
            if k is None or not np.isclose(k, 6.0 if div.op != "Mul" else 1 / 6, rtol=0, atol=1e-7):
                raise _Unreadable(f"{what}: {div.name} divides relu6(x + 3) by {k}, not 6")
            self.seen.add(u.name)
            return "hard_sigmoid_keras3", (div.name, 0)
        if u.op == "Mul" and c is not None and np.isclose(c, 0.2, rtol=0, atol=1e-7):
            add = self.one((u.name, 0), _ADDS, f"{what}: 0.2·x + 0.5")
            if self.const_input(add) != 0.5:
                raise _Unreadable(f"{what}: {add.name} adds {self.const_input(add)}, not 0.5")
            first = self.one((add.name, 0), {"Minimum", "Maximum", "ClipByValue"}, f"{what}: clip")
            self.seen.add(u.name)
            if first.op == "ClipByValue":
                lo, hi = (self.const(first.inputs[k]) for k in (1, 2))
                out = first
            else:
                other = "Maximum" if first.op == "Minimum" else "Minimum"
                second = self.one((first.name, 0), {other}, f"{what}: clip")
                bounds = {first.op: self.const_input(first), other: self.const_input(second)}
                lo, hi, out = bounds["Maximum"], bounds["Minimum"], second
            if (lo, hi) != (0.0, 1.0):
                raise _Unreadable(f"{what}: clip to [{lo}, {hi}] after 0.2·x + 0.5, not [0, 1]")
            return "hard_sigmoid_keras2", (out.name, 0)
        return "linear", ref

    def unexplained(self) -> list[str]:
        """The body's ops that neither the cell nor the loop's bookkeeping explains."""
        out = []
        for key, n in self.g.nodes.items():
            if _fn(key) != self.fn or key in self.seen or n.op in _BOOKKEEPING:
                continue
            if n.op in _ADDS and self.const_input(n) == 1.0:  # step and iteration counters
                continue
            if n.op in _VARIABLE_READS:
                continue
            out.append(f"{key.partition('::')[2]} ({n.op})")
        return out


def _add_of(b: _Body, left: tuple[str, int], right_check, what: str) -> Node:
    """The Add of `left` and another value that `right_check(ref)` accepts."""
    for u in b.users(left):
        if u.op in _ADDS and right_check(b.other_input(u, left)):
            b.seen.add(u.name)
            return u
    raise _Unreadable(
        f"no {what} after {left[0]} (it feeds {[f'{u.name} ({u.op})' for u in b.users(left)]})"
    )


def _bias_after(b: _Body, ref, has_bias: bool, what: str, row: int | None = None):
    """The BiasAdd/Add of the bias (of its row `row`: _reads_bias) after `ref` (the output
    after it), or `ref` without one."""
    if not has_bias:
        return ref
    for u in b.users(ref):
        if u.op in _ADDS | {"BiasAdd"} and _reads_bias(b, b.other_input(u, ref), row):
            b.seen.add(u.name)
            return (u.name, 0)
    raise _Unreadable(f"no bias{'' if row is None else f' row {row}'} added to {what} at {ref[0]}")


def _reads_bias(b: _Body, ref, row: int | None = None) -> bool:
    """The bias (`row` None), or its row `row` of a GRU's [2, 3U] bias (reset_after: row 0 is
    added to x·K, row 1 to h·R; the other row in its place is another GRU): Keras 3 splits it
    along axis 0 and squeezes (Split, Squeeze), a row may also be taken by Unpack, a
    StridedSlice [k] or a GatherV2 of k."""
    taken = None
    for _ in range(4):
        if b.is_var(ref, "bias"):
            return taken == row
        n = b.node(ref)
        if n.op != "Squeeze":  # a Squeeze passes its row on; any other op takes one, once
            k = _row_taken(b, n, b.local(ref)[1])
            if k is None or taken is not None:
                return False
            taken = k
        b.seen.add(n.name)
        ref = n.inputs[1] if n.op == "Split" else n.inputs[0]
    return False


def _row_taken(b: _Body, n: Node, output: int) -> int | None:
    """The row of its input (along axis 0) that `n`'s output `output` is, or None."""
    if n.op == "Split" and b.const(n.inputs[0]) == 0.0:
        return output
    if n.op == "Unpack" and n.attrs.get("axis", 0) == 0:
        return output
    if n.op == "GatherV2" and b.const(n.inputs[2]) == 0.0 and b.const(n.inputs[1]) is not None:
        return int(b.const(n.inputs[1]))
    if n.op == "StridedSlice" and n.attrs.get("shrink_axis_mask", 0) & 1:
        begin, end, strides = (b.g.ints(r) for r in n.inputs[1:4])
        if begin and end and strides and len(begin) == 1 and strides == [1]:
            return begin[0] if end[0] == begin[0] + 1 else None
    return None


def _mul(b: _Body, a, other_check, what: str) -> Node:
    for u in b.users(a):
        if u.op == "Mul" and other_check(b.other_input(u, a)):
            b.seen.add(u.name)
            return u
    raise _Unreadable(f"no {what} after {a[0]}")


def _arg(b: _Body, ref) -> str | None:
    n = b.node(ref)
    return n.name if n.op == "_Arg" and _fn(n.name) == b.fn else None


def _lstm(b: _Body, mh: Node, has_bias: bool):
    h_prev = b.local(mh.inputs[0])
    add = _add_of(
        b,
        (mh.name, 0),
        lambda r: b.node(r).op == "MatMul" and b.is_var(b.node(r).inputs[1], "kernel"),
        "x·K + h·R",
    )
    mx = b.node(b.other_input(add, (mh.name, 0)))
    b.seen.add(mx.name)
    pre = _bias_after(b, (add.name, 0), has_bias, "the gates")
    split = b.one(pre, {"Split"}, "Split of the gates")
    if split.attrs.get("num_split") != 4:
        raise _Unreadable(f"{split.name} splits the gates in {split.attrs.get('num_split')}, not 4")
    acts = {}
    for k, gate in enumerate(("i", "f", "c", "o")):
        acts[gate] = b.activation((split.name, k), f"gate {gate}")
    ra = {acts[g][0] for g in "ifo"}
    if len(ra) != 1:
        raise _Unreadable(f"the gates i, f, o apply different functions: {sorted(ra)}")
    f_mul = _mul(b, acts["f"][1], lambda r: _arg(b, r) is not None, "f·c")
    c_prev = b.local(b.other_input(f_mul, acts["f"][1]))
    i_mul = _mul(b, acts["i"][1], lambda r: b.local(r) == b.local(acts["c"][1]), "i·act(z2)")
    c_new = _add_of(b, (f_mul.name, 0), lambda r: b.local(r) == (i_mul.name, 0), "f·c + i·act(z2)")
    act_c, act_c_out = b.activation((c_new.name, 0), "act(c)")
    if act_c != acts["c"][0]:
        raise _Unreadable(f"act(z2) is {acts['c'][0]} but act(c) is {act_c}")
    h_new = _mul(b, acts["o"][1], lambda r: b.local(r) == b.local(act_c_out), "o·act(c)")
    return {
        "class": "LSTM",
        "activation": acts["c"][0],
        "recurrent_activation": ra.pop(),
        "states_prev": [h_prev, c_prev],
        "h_new": (h_new.name, 0),
        "states_new": [(h_new.name, 0), (c_new.name, 0)],
        "x_read": b.local(mx.inputs[0]),
    }


def _slice_bounds(b: _Body, s: Node, what: str) -> tuple[int, int | None]:
    """`(start, end or None)` of a 2-D StridedSlice's columns; None where `end_mask` leaves
    the end open (Keras writes `[:, 2U:]` so)."""
    begin, end = (b.g.nodes.get(b.local(s.inputs[k])[0]) for k in (1, 2))
    begin, end = (n.attrs.get("value") if n is not None else None for n in (begin, end))
    if not all(isinstance(v, np.ndarray) and v.size == 2 for v in (begin, end)):
        raise _Unreadable(f"{_short(s.name)}: a slice of {what} whose bounds are not constants")
    open_end = bool(int(s.attrs.get("end_mask") or 0) & 2)
    return int(begin[-1]), None if open_end else int(end[-1])


def _slices(b: _Body, ref, what: str) -> list[tuple[str, int]]:
    """The three column blocks of `ref`: a Split/SplitV's outputs or three StridedSlices
    (ordered by where they begin)."""
    users = b.users(ref)
    split = [u for u in users if u.op in ("Split", "SplitV")]
    if len(split) == 1 and split[0].attrs.get("num_split") == 3:
        b.seen.add(split[0].name)
        return [(split[0].name, k) for k in range(3)]
    slices = [u for u in users if u.op == "StridedSlice"]
    if len(slices) == 3 and len(users) == 3:
        bounds = []
        for s in slices:
            bounds.append((*_slice_bounds(b, s, what), s))
            b.seen.add(s.name)
        bounds.sort(key=lambda t: t[0])
        a = bounds[1][0]
        if [(lo, hi) for lo, hi, _ in bounds] != [(0, a), (a, 2 * a), (2 * a, None)] or a <= 0:
            raise _Unreadable(
                f"{what} is sliced at {[(lo, hi) for lo, hi, _ in bounds]}, not in three blocks"
            )
        return [(s.name, 0) for _, _, s in bounds]
    feeds = [f"{u.name} ({u.op})" for u in users]
    raise _Unreadable(f"{what} at {ref[0]} is not split in three (it feeds {feeds})")


def _gru(b: _Body, mh: Node, has_bias: bool):
    h_prev = b.local(mh.inputs[0])
    inner = _bias_after(b, (mh.name, 0), has_bias, "h·R", row=1)
    r_z, r_r, r_h = _slices(b, inner, "h·R")
    mx = _x_product(b)  # the input side: x·K (+ b0), split in three
    x_z, x_r, x_h = _slices(b, _bias_after(b, (mx.name, 0), has_bias, "x·K", row=0), "x·K")
    ra, z, r = _gru_gates(b, x_z, x_r, b.local(r_z), b.local(r_r))
    rh = _mul(b, r, lambda q: b.local(q) == b.local(r_h), "r·r_h")
    hh_pre = _add_of(b, x_h, lambda q: b.local(q) == (rh.name, 0), "x_h + r·r_h")
    return _gru_cell(b, ra, True, hh_pre, z, h_prev, mx)


def _gru_gates(b: _Body, x_z, x_r, r_z, r_r):
    """`(function, z, r)`: `z = ra(x_z + r_z)`, `r = ra(x_r + r_r)`, one function for both."""
    z_add = _add_of(b, x_z, lambda q: b.local(q) == r_z, "x_z + r_z")
    r_add = _add_of(b, x_r, lambda q: b.local(q) == r_r, "x_r + r_r")
    ra_z, z = b.activation((z_add.name, 0), "gate z")
    ra_r, r = b.activation((r_add.name, 0), "gate r")
    if ra_z != ra_r:
        raise _Unreadable(f"the gates z and r apply different functions: {ra_z}, {ra_r}")
    return ra_z, z, r


def _gru_cell(b: _Body, ra: str, reset_after: bool, hh_pre: Node, z, h_prev, mx: Node):
    """The GRU from the candidate's pre-activation on: `hh = act(...)`, `h' = z·h + (1 −
    z)·hh`, as the matchers describe a cell."""
    act, hh = b.activation((hh_pre.name, 0), "candidate")
    h_new = _gru_update(b, z, h_prev, hh)
    return {
        "class": "GRU",
        "activation": act,
        "recurrent_activation": ra,
        "reset_after": reset_after,
        "states_prev": [h_prev],
        "h_new": h_new,
        "states_new": [h_new],
        "x_read": b.local(mx.inputs[0]),
    }


def _column_blocks(b: _Body, slices: list[Node], what: str) -> list[tuple[int, int | None, Node]]:
    """The live ones of column slices: `(start, end or None, node)` by start; a slice nothing
    reads (Keras 3 computes an empty third block of h·R[:, :2U]) is left out."""
    out = []
    for s in slices:
        if s.op != "StridedSlice":
            raise _Unreadable(f"{what} is read by {_short(s.name)} ({s.op}), not a column slice")
        start, end = _slice_bounds(b, s, what)
        if not b.users((s.name, 0)):
            b.seen.add(s.name)
            continue
        out.append((start, end, s))
    return sorted(out, key=lambda t: t[0])


def _gru_reset_before(b: _Body, uses: list[Node], has_bias: bool):
    """Keras' GRU(reset_after=False): `h·R[:, :2U]` sliced into r_z, r_r;
    `hh = act(x_h + (r·h)·R[:, 2U:])`; the rest as reset_after=True."""
    rk_slices = _column_blocks(b, uses, "the recurrent kernel")
    bounds = [(lo, hi) for lo, hi, _ in rk_slices]
    if len(bounds) != 2 or bounds[0][0] != 0 or bounds[1] != (bounds[0][1], None):
        raise _Unreadable(
            f"the recurrent kernel is sliced at {bounds}, not into R[:, :2U] and R[:, 2U:]"
        )
    (_, two_u, s1), (_, _, s2) = rk_slices
    b.seen |= {s1.name, s2.name}
    m1 = b.one((s1.name, 0), {"MatMul"}, "h·R[:, :2U]")
    m2 = b.one((s2.name, 0), {"MatMul"}, "(r·h)·R[:, 2U:]")
    if b.local(m1.inputs[1]) != (s1.name, 0) or b.local(m2.inputs[1]) != (s2.name, 0):
        raise _Unreadable("the recurrent kernel's blocks are not the right-hand factors")
    h_prev = b.local(m1.inputs[0])
    units = two_u // 2
    users = b.users((m1.name, 0))
    if len(users) == 1 and users[0].op == "SplitV":  # tf.keras: split(·, [U, U, -1])
        split = users[0]
        sizes = b.g.ints(split.inputs[1])
        if sizes is None or sizes[:2] != [units, units]:
            raise _Unreadable(f"{_short(split.name)} splits h·R[:, :2U] as {sizes}, not [U, U]")
        if b.users((split.name, 2)):
            raise _Unreadable(f"{_short(split.name)}'s empty third block is read")
        b.seen.add(split.name)
        r_z, r_r = (split.name, 0), (split.name, 1)
    else:  # Keras 3: matrix_inner[:, :U], [:, U:2U] (and an empty, unread [:, 2U:])
        blocks = _column_blocks(b, users, "h·R[:, :2U]")
        if [(lo, hi) for lo, hi, _ in blocks] != [(0, units), (units, two_u)]:
            raise _Unreadable(f"h·R[:, :2U] is sliced at {[(lo, hi) for lo, hi, _ in blocks]}")
        b.seen |= {blocks[0][2].name, blocks[1][2].name}
        r_z, r_r = (blocks[0][2].name, 0), (blocks[1][2].name, 0)
    mx = _x_product(b)
    x_z, x_r, x_h = _slices(b, _bias_after(b, (mx.name, 0), has_bias, "x·K"), "x·K")
    ra, z, r = _gru_gates(b, x_z, x_r, r_z, r_r)
    rh = _mul(b, r, lambda q: b.local(q) == h_prev, "r·h")
    if b.local(m2.inputs[0]) != (rh.name, 0):
        raise _Unreadable(f"{_short(m2.name)} does not multiply r·h")
    hh_pre = _add_of(b, x_h, lambda q: b.local(q) == (m2.name, 0), "x_h + (r·h)·R_h")
    return _gru_cell(b, ra, False, hh_pre, z, h_prev, mx)


def _x_product(b: _Body) -> Node:
    """The body's one product x·K."""
    mx = None
    for key, n in b.g.nodes.items():
        if _fn(key) == b.fn and n.op == "MatMul" and b.is_var(n.inputs[1], "kernel"):
            if mx is not None:
                raise _Unreadable(f"two products with the kernel: {mx.name}, {n.name}")
            mx = n
    if mx is None:
        raise _Unreadable("no product x·K in the loop body")
    b.seen.add(mx.name)
    return mx


def _gru_update(b: _Body, z, h_prev, hh) -> tuple[str, int]:
    """`h' = z·h + (1 − z)·hh`."""
    zh = _mul(b, z, lambda q: b.local(q) == h_prev, "z·h")
    one_minus = [u for u in b.users(z) if u.op == "Sub" and b.const(u.inputs[0]) == 1.0]
    if len(one_minus) != 1:
        raise _Unreadable(f"no 1 − z after {z[0]}")
    b.seen.add(one_minus[0].name)
    zhh = _mul(b, (one_minus[0].name, 0), lambda q: b.local(q) == b.local(hh), "(1 − z)·hh")
    h_new = _add_of(b, (zh.name, 0), lambda q: b.local(q) == (zhh.name, 0), "z·h + (1 − z)·hh")
    return (h_new.name, 0)


def _simple_rnn(b: _Body, mh: Node, has_bias: bool):
    h_prev = b.local(mh.inputs[0])

    def x_product(r) -> Node | None:
        n = b.node(r)
        return n if n.op == "MatMul" and b.is_var(n.inputs[1], "kernel") else None

    def x_side(r) -> Node | None:
        """The MatMul of `x·K` or, with a bias, of `x·K + b` (BiasAdd or Add, in the order
        Keras writes it), or None."""
        if not has_bias:
            return x_product(r)
        n = b.node(r)
        if n.op not in _ADDS | {"BiasAdd"} or len(n.inputs) != 2:
            return None
        return x_product(n.inputs[0]) if _reads_bias(b, n.inputs[1]) else None

    add = _add_of(b, (mh.name, 0), lambda r: x_side(r) is not None, "x·K (+ b) + h·R")
    xs = b.other_input(add, (mh.name, 0))
    mx = x_side(xs)
    b.seen |= {b.node(xs).name, mx.name}
    act, h_new = b.activation((add.name, 0), "activation")
    return {
        "class": "SimpleRNN",
        "activation": act,
        "states_prev": [h_prev],
        "h_new": h_new,
        "states_new": [h_new],
        "x_read": b.local(mx.inputs[0]),
    }


def _reachable_functions(g: Graph) -> set[str] | None:
    """The functions the signature's outputs are computed by (calls, loops, branches), or None
    where the graph names no signature outputs (then every function counts)."""
    if not g.signature_outputs:
        return None
    seen: set[str] = set()
    todo = [o.split(":")[0] for o in g.signature_outputs]
    visited_nodes: set[str] = set()
    while todo:
        key = todo.pop()
        if key in visited_nodes or key not in g.nodes:
            continue
        visited_nodes.add(key)
        n = g.nodes[key]
        for ref in n.inputs:
            todo.append(ref[0])
        for attr in ("f", "body", "cond", "then_branch", "else_branch"):
            fn = n.attrs.get(attr)
            if isinstance(fn, dict) and fn.get("func") in g.functions and fn["func"] not in seen:
                seen.add(fn["func"])
                todo += [k for k in g.nodes if _fn(k) == fn["func"]]
    return seen


def _loops(g: Graph) -> dict[str, Node]:
    """Loop body function -> the While node that runs it."""
    out = {}
    for n in g.nodes.values():
        body = n.attrs.get("body")
        if n.op in _WHILE and isinstance(body, dict):
            out[body.get("func")] = n
    return out


def _index(b: _Body, loop: Node, ref) -> int | None:
    """The position of the loop variable `ref` (an argument of the body) among the loop's."""
    args = b.g.functions.get(b.fn, [])
    return args.index(ref[0]) if ref[0] in args and ref[1] == 0 else None


def _around(g: Graph, b: _Body, loop: Node, cell: dict) -> dict:
    """go_backwards, return_sequences, return_state and the initial state, from the loop's
    inputs, its output writes and what reads its outputs."""
    out = {}
    # the step input: TensorListGetItem(list, t) of a list made from the (reversed) input
    get = b.node(cell["x_read"])
    if get.op != "TensorListGetItem":
        raise _Unreadable(f"the step input {get.name} is a {get.op}, not a TensorListGetItem")
    k = _index(b, loop, b.local(get.inputs[0]))
    t_arg = b.local(get.inputs[1])
    if k is None or k >= len(loop.inputs):
        raise _Unreadable(f"the step input's list {get.inputs[0][0]} is not a loop variable")
    made = g.nodes.get(g.resolve(loop.inputs[k])[0])
    if made is None or made.op != "TensorListFromTensor":
        raise _Unreadable(
            f"the loop's input list comes from {getattr(made, 'op', '?')}, not TensorListFromTensor"
        )
    src = g.nodes.get(g.resolve(made.inputs[0])[0])
    if src is not None and src.op == "ReverseV2":
        axes = g.ints(src.inputs[1])
        if axes != [0]:
            raise _Unreadable(f"{src.name} reverses axes {axes}, not time (0)")
        out["go_backwards"] = (True, f"{_short(src.name)} (ReverseV2 of the time-major input)")
        src = g.nodes.get(g.resolve(src.inputs[0])[0])
    else:
        out["go_backwards"] = (False, f"the loop reads {_short(made.name)}'s steps in order")
    if src is None or src.op != "Transpose":
        raise _Unreadable(
            f"the loop's input is {getattr(src, 'name', '?')} ({getattr(src, 'op', '?')}), "
            "not the batch-major input transposed"
        )
    perm = g.ints(src.inputs[1]) if len(src.inputs) == 2 else None
    if perm != [1, 0, 2]:  # time-major [T, B, features]: another permutation loops over batch
        raise _Unreadable(f"{src.name} permutes the input's axes by {perm}, not [1, 0, 2]")
    out["time_major"] = (False, f"{_short(src.name)} transposes the batch-major input")
    # the output: written at step t (every step) or at 0 (the last one only); with a mask,
    # Keras writes select(mask_t, h', previous output or zeros)
    writes = [n for k, n in g.nodes.items() if _fn(k) == b.fn and n.op == "TensorListSetItem"]
    if len(writes) != 1:
        raise _Unreadable(f"the loop body writes {len(writes)} output lists, not one")
    w = writes[0]
    out["output_list"] = _index(b, loop, b.local(w.inputs[0]))
    out["loop"] = loop
    where = b.local(w.inputs[1])
    if where == t_arg:
        out["return_sequences"] = (True, f"{_short(w.name)} writes the output of every step")
    elif b.const(w.inputs[1]) == 0.0:
        out["return_sequences"] = (False, f"{_short(w.name)} keeps the last step's output only")
    else:
        raise _Unreadable(f"{_short(w.name)} writes the output at {w.inputs[1][0]}, not t or 0")
    returns = g.function_returns.get(b.fn, [])
    written = b.local(w.inputs[2])
    masks = []  # the mask reads (Tile / TensorListGetItem) of each select
    if written == cell["h_new"]:
        out["zero_output_for_mask"] = (False, "the loop takes no mask")
    else:
        other, mask_ref = _select(b, written, cell["h_new"], "the written output")
        masks.append(mask_ref)
        k = _index(b, loop, other)
        if k is not None and k < len(returns) and b.local(returns[k]) == written:
            out["zero_output_for_mask"] = (False, "a masked step repeats the previous output")
        elif k is not None and b.local(returns[k]) == other:  # a loop constant
            init = g.nodes.get(g.resolve(loop.inputs[k])[0])
            if init is None or init.op not in ("ZerosLike", "Fill", "Const"):
                raise _Unreadable(f"a masked step outputs {getattr(init, 'name', '?')}, not zeros")
            out["zero_output_for_mask"] = (True, "a masked step outputs zeros")
        else:
            raise _Unreadable(
                f"a masked step outputs {other[0]}: neither zeros nor the last output"
            )
    # the states: each carried as the new value, or with a mask select(mask_t, new, previous)
    used = []
    for prev, new in zip(cell["states_prev"], cell["states_new"], strict=True):
        k = _index(b, loop, prev)
        if k is None or k >= len(returns):
            raise _Unreadable(f"the state {prev[0]} is not a loop variable")
        carried = b.local(returns[k])
        if carried != new:
            if not masks:
                raise _Unreadable(f"the loop carries {carried[0]} as a state, not {new[0]}")
            other, mask_ref = _select(b, carried, new, "a state")
            if other != prev:
                raise _Unreadable(f"a masked step keeps {other[0]}, not the state {prev[0]}")
            masks.append(mask_ref)
        elif masks:
            raise _Unreadable(f"the output is masked but the state {new[0]} is not")
        if g.users(loop.name, k) or (loop.name, k) in g.returns:
            used.append(k)
    out["return_state"] = (
        bool(used),
        f"the loop's final states (outputs {used}) are read after it"
        if used
        else "the loop's final states are not read after it",
    )
    if masks:
        out["mask_from"], out["mask_ref"] = _mask_source(g, b, loop, masks, t_arg)
    # What `verify` feeds and fetches, as tensors of the function running the loop: the
    # layer's input (what the Transpose reads), its mask, its initial states, its final states.
    out["input_ref"] = _Body(g, _fn(loop.name), {}).local(src.inputs[0])
    out["initial_refs"] = [loop.inputs[_index(b, loop, p)] for p in cell["states_prev"]]
    out["state_refs"] = [(loop.name, _index(b, loop, p)) for p in cell["states_prev"]]
    # the initial states: zeros (Fill / zeros) or given by the model, not a variable
    for ref in out["initial_refs"]:
        init = g.nodes.get(g.resolve(ref)[0])
        if init is not None and init.op == "VarHandleOp":  # resolve() reads through its reads
            raise _Unreadable(
                f"the initial state comes from a variable ({init.name}): a stateful layer"
            )
    return out


def _select(b: _Body, sel_ref, new, what: str):
    """`(the other value, the mask read)` of `select(mask_t, new, other)` at `sel_ref`."""
    sel = b.node(sel_ref)
    if sel.op not in ("SelectV2", "Select") or b.local(sel.inputs[1]) != new:
        raise _Unreadable(f"{what} is {_short(sel.name)} ({sel.op}), not select(mask, new, old)")
    b.seen.add(sel.name)
    cond = b.node(sel.inputs[0])
    if cond.op == "Tile":
        b.seen.add(cond.name)
        cond = b.node(cond.inputs[0])
    if cond.op != "TensorListGetItem":
        raise _Unreadable(
            f"{_short(sel.name)} selects by {_short(cond.name)} ({cond.op}), not a mask"
        )
    return b.local(sel.inputs[2]), (cond.name, 0)


def _mask_source(g: Graph, b: _Body, loop: Node, masks, t_arg) -> str:
    """Where the mask the loop reads at step t comes from (one list for every select): the
    function's input or the op computing it (a Masking layer's `NotEqual`/`Any`)."""
    lists = {b.local(b.node(m).inputs[0]) for m in masks}
    steps = {b.local(b.node(m).inputs[1]) for m in masks}
    if len(lists) != 1 or steps != {t_arg}:
        raise _Unreadable("the selects read different masks, or not the mask of step t")
    k = _index(b, loop, lists.pop())
    made = g.nodes.get(g.resolve(loop.inputs[k])[0]) if k is not None else None
    if made is None or made.op != "TensorListFromTensor":
        raise _Unreadable("the mask is not a loop list of the time-major mask")
    outer = _Body(g, _fn(loop.name), {})  # the function running the loop
    ref = outer.local(made.inputs[0])
    for op in ("ReverseV2", "Transpose", "ExpandDims", "Cast"):
        if outer.node(ref).op == op:
            ref = outer.local(outer.node(ref).inputs[0])
    src = outer.node(ref)
    text = (
        f"the signature's input {_short(src.name)}"
        if src.op in ("_Arg", "Placeholder")
        else (f"{_short(src.name)} ({src.op})")
    )
    return text, ref


def _read_layer(g: Graph, cls: str, weights: dict[str, str], shapes: dict, reachable, loops):
    """`(config, origins)` of the layer whose variables are `weights` (role -> name, of
    shapes `shapes`: role -> shape), from its saved loop or its cuDNN op."""
    variables = {role: set(g.aliases.get(name, [])) for role, name in weights.items()}
    if not variables.get("recurrent_kernel"):
        raise _Unreadable(f"the saved functions do not capture {weights['recurrent_kernel']}")
    uses = []
    for key in variables["recurrent_kernel"]:
        for u in g.users(key):
            if reachable is not None and _fn(u.name) not in reachable:
                continue
            uses.append(u)
    if not uses and reachable is not None:
        raise _NotRun()
    in_loops = [u for u in uses if _fn(u.name) in loops]
    cudnn = cudnn_nodes(g, uses)
    if cudnn:
        if len(cudnn) != 1:
            raise _Unreadable(
                f"its weights feed {len(cudnn)} cuDNN ops "
                f"({', '.join(_short(n.name) for n in cudnn[:4])}), not one"
            )
        try:
            return read_cudnn_layer(g, cls, variables, shapes, cudnn[0])
        except NotKerasCudnn as err:
            raise _Unreadable(str(err)) from err
    if not in_loops:
        where = sorted({f"{u.name} ({u.op})" for u in uses})[:4]
        raise _Unreadable(
            f"no While loop of the signature's functions reads {weights['recurrent_kernel']} "
            f"(read by {where or 'nothing'}): an unrolled layer (unroll=True) or not a Keras RNN"
        )
    results = []
    by_loop: dict[str, list[Node]] = {}
    for u in in_loops:
        by_loop.setdefault(_fn(u.name), []).append(u)
    for fn, loop_uses in by_loop.items():
        b = _Body(g, fn, variables)
        has_bias = "bias" in weights
        mh = loop_uses[0]
        if cls == "GRU" and all(u.op == "StridedSlice" for u in loop_uses):
            cell = _gru_reset_before(b, loop_uses, has_bias)
        elif casts := [u for u in loop_uses if u.op == "Cast"]:
            raise _Unreadable(
                f"{_short(casts[0].name)} (Cast) reads the recurrent kernel in the loop: the "
                "layer multiplies in a reduced precision (a mixed-precision dtype policy), "
                "which the modules do not compute"
            )
        elif (
            len(loop_uses) != 1
            or mh.op != "MatMul"
            or not b.is_var(mh.inputs[1], "recurrent_kernel")
        ):
            raise _Unreadable(
                f"{', '.join(f'{_short(u.name)} ({u.op})' for u in loop_uses)} read the "
                "recurrent kernel in the loop: not the product h·R a Keras cell computes"
            )
        else:
            b.seen.add(mh.name)
            matcher = {"LSTM": _lstm, "GRU": _gru, "SimpleRNN": _simple_rnn}[cls]
            cell = matcher(b, mh, has_bias)
        try:
            around = _around(g, b, loops[fn], cell)
        except _Unreadable as err:
            extra = b.unexplained()
            if extra:  # the cell computes more than the matcher read: the likely reason
                raise _Unreadable(
                    f"the loop body {fn} computes ops that are not a Keras {cell['class']} "
                    "cell's: "
                    + ", ".join(extra[:8])
                    + (" ..." if len(extra) > 8 else "")
                    + f" (and {err})"
                ) from err
            raise
        extra = b.unexplained()
        if extra:
            raise _Unreadable(
                f"the loop body {fn} computes ops that are not a Keras {cell['class']} cell's: "
                + ", ".join(extra[:8])
                + (" ..." if len(extra) > 8 else "")
            )
        results.append((fn, cell, around))
    fn, cell, around = results[0]
    for other_fn, other, other_around in results[1:]:
        keys = ("class", "activation", "recurrent_activation")
        semantics = ("go_backwards", "return_sequences", "return_state", "zero_output_for_mask")
        if [cell.get(k) for k in keys] != [other.get(k) for k in keys] or [
            around[k][0] for k in semantics
        ] != [other_around[k][0] for k in semantics]:
            raise _Unreadable(f"the loops {fn} and {other_fn} run the layer differently")
    where = f"the SavedModel's loop {fn}"
    config = {
        "activation": cell["activation"],
        "go_backwards": around["go_backwards"][0],
        "return_sequences": around["return_sequences"][0],
        "return_state": around["return_state"][0],
        "time_major": around["time_major"][0],
        "stateful": False,
        "zero_output_for_mask": around["zero_output_for_mask"][0],
    }
    origins = {
        "activation": f"{where}: the candidate's function",
        "go_backwards": f"{where}: {around['go_backwards'][1]}",
        "return_sequences": f"{where}: {around['return_sequences'][1]}",
        "return_state": f"{where}: {around['return_state'][1]}",
        "time_major": f"{where}: {around['time_major'][1]}",
        "stateful": f"{where}: the initial state is not a variable",
        "zero_output_for_mask": f"{where}: {around['zero_output_for_mask'][1]}",
    }
    if "recurrent_activation" in cell:
        config["recurrent_activation"] = cell["recurrent_activation"]
        origins["recurrent_activation"] = f"{where}: the gates' function"
    if cell.get("reset_after") is not None:
        config["reset_after"] = cell["reset_after"]
        origins["reset_after"] = f"{where}: " + (
            "the reset gate multiplies h·R's block"
            if cell["reset_after"]
            else "the reset gate multiplies h before R's block"
        )
    config["_class"] = cell["class"]
    config["_mask_from"] = around.get("mask_from")
    config["_outputs"] = [(r[2]["loop"], r[2]["output_list"]) for r in results]
    loop = around["loop"]
    output = _direction_output(g, loop, around["output_list"], config["return_sequences"])
    config["_io"] = {
        "function": _fn(loop.name),
        "input": _tensor(around["input_ref"]),
        "mask": _tensor(around["mask_ref"]) if "mask_ref" in around else None,
        "initial": [_tensor(r) for r in around["initial_refs"]],
        "outputs": [_tensor(output)]
        + ([_tensor(r) for r in around["state_refs"]] if config["return_state"] else []),
        "states": [_tensor(r) for r in around["state_refs"]],
    }
    return config, origins


def _tensor(ref: tuple[str, int]) -> str:
    """A value as the tensor name TF gives it inside its function (`node:k`)."""
    return f"{_short(ref[0])}:{ref[1]}"


_GATES_BY_SHAPE = {4: "LSTM", 3: "GRU", 1: "SimpleRNN"}


def keras_layers_from_graph(g: Graph, variables: dict):
    """`(layers, not_run)`: a KerasLayer per recurrent layer whose variables `variables` holds,
    its config read from the saved loop that computes it (a layer that cannot be read carries
    `problem`); and the layers the chosen signature does not run, with their variables."""
    not_run: dict[str, list[str]] = {}
    reachable = _reachable_functions(g)
    loops = _loops(g)
    if reachable is not None:
        loops = {fn: n for fn, n in loops.items() if fn in reachable}
    out: dict[str, KerasLayer] = {}
    bidirectional: dict[str, dict[str, dict[str, str]]] = {}
    for scope, weights in sorted(keras_rnn_scopes(variables).items()):
        layer, rest = layer_and_rest(scope)
        if rest and rest[0].startswith(("forward_", "backward_")):
            bidirectional.setdefault(layer, {})[rest[0]] = weights
            continue
        rk = np.shape(variables[weights["recurrent_kernel"]])
        gates = rk[1] // rk[0] if len(rk) == 2 and rk[0] and rk[1] % rk[0] == 0 else None
        if gates not in _GATES_BY_SHAPE:
            out[layer] = KerasLayer(
                layer, "", {}, problem=f"a recurrent kernel of shape {list(rk)}"
            )
            continue
        try:
            shapes = {r: np.shape(variables[n]) for r, n in weights.items()}
            config, origins = _read_layer(
                g, _GATES_BY_SHAPE[gates], weights, shapes, reachable, loops
            )
        except _NotRun:
            not_run[layer] = list(weights.values())
            continue
        except _Unreadable as err:
            out[layer] = KerasLayer(
                layer,
                _GATES_BY_SHAPE[gates],
                {},
                problem=f"its saved loop is not a Keras {_GATES_BY_SHAPE[gates]} this converter "
                f"reads: {err}",
            )
            continue
        out[layer] = _keras_layer(layer, config, origins)
    for layer, directions in bidirectional.items():
        try:
            out |= _bidirectional(g, layer, directions, variables, reachable, loops)
        except _NotRun:
            not_run[layer] = [n for w in directions.values() for n in w.values()]
        except _Unreadable as err:
            out[layer] = KerasLayer(
                layer,
                "Bidirectional",
                {},
                problem="its saved loops are not a Keras Bidirectional this converter reads: "
                f"{err}",
            )
    return out, not_run


def _keras_layer(name: str, config: dict, origins: dict) -> KerasLayer:
    config = dict(config)
    cls = config.pop("_class")
    mask_from = config.pop("_mask_from")
    config.pop("_outputs")
    config.pop("_end", None)
    io = config.pop("_io")
    layer = KerasLayer(name, cls, config, mask_from=mask_from, origins=origins)
    layer.graph_io = io
    return layer


def _direction_output(g: Graph, loop: Node, k: int, return_sequences: bool) -> tuple[str, int]:
    """A direction's output after its loop: the stacked steps transposed to batch-major, or the
    last step (Keras 3's `outputs[-1]`)."""
    stacks = [u for u in g.users(loop.name, k) if u.op == "TensorListStack"]
    if len(stacks) != 1:
        raise _Unreadable(f"{_short(loop.name)}'s outputs are not stacked once")
    want = "Transpose" if return_sequences else "StridedSlice"
    after = [u for u in g.users(stacks[0].name, 0) if u.op == want]
    if len(after) != 1:
        raise _Unreadable(f"{_short(stacks[0].name)} is not followed by one {want}")
    return (after[0].name, 0)


def _bidirectional(g, layer, directions, variables, reachable, loops) -> dict[str, KerasLayer]:
    """A Bidirectional: each direction read from its loop (the backward one runs backwards),
    and the merge from the op that combines their outputs (the backward sequence flipped back
    in time first): ConcatV2 (concat), AddV2 (sum), AddV2 then / 2 (ave), Mul (mul), none
    (None: the two outputs returned apart)."""
    if sorted(k.split("_")[0] for k in directions) != ["backward", "forward"]:
        raise _Unreadable(f"directions {sorted(directions)}, not one forward and one backward")
    read = {}
    for sub, weights in directions.items():
        rk = np.shape(variables[weights["recurrent_kernel"]])
        gates = rk[1] // rk[0] if len(rk) == 2 and rk[0] and rk[1] % rk[0] == 0 else None
        if gates not in _GATES_BY_SHAPE:
            raise _Unreadable(f"{sub}: a recurrent kernel of shape {list(rk)}")
        shapes = {r: np.shape(variables[n]) for r, n in weights.items()}
        config, origins = _read_layer(g, _GATES_BY_SHAPE[gates], weights, shapes, reachable, loops)
        role = "forward" if sub.startswith("forward_") else "backward"
        if config["go_backwards"] != (role == "backward"):
            raise _Unreadable(f"the {role} layer {sub} runs go_backwards={config['go_backwards']}")
        if len(config["_outputs"]) != 1:
            raise _Unreadable(f"{sub} runs in {len(config['_outputs'])} loops")
        read[role] = (sub, config, origins)
    ends = {}
    for role, (_, config, _) in read.items():
        if "_end" in config:  # a cuDNN op's output, read with it (graphs/keras_cudnn.py)
            ref = config["_end"]
        else:
            ((loop, k),) = config["_outputs"]
            ref = _direction_output(g, loop, k, config["return_sequences"])
        if role == "backward" and config["return_sequences"]:
            flips = [u for u in g.users(*ref) if u.op == "ReverseV2"]
            if len(flips) != 1:
                raise _Unreadable(f"the backward sequence {_short(ref[0])} is not flipped back")
            ref = (flips[0].name, 0)
        ends[role] = ref
    # The merge is the Bidirectional's own op: in the name scope its forward layer's ops are
    # under (an op of a later layer that combines the two outputs is not the merge).
    fw_scope = _short(ends["forward"][0]).rpartition("/forward_")[0]
    fw_users = {u.name: u for u in g.users(*ends["forward"])}
    merged = [
        u
        for u in g.users(*ends["backward"])
        if u.name in fw_users and _short(u.name).rpartition("/")[0] == fw_scope
    ]
    merged_out = None
    if not merged:
        mode, how = None, "the two directions' outputs are not combined (merge_mode None)"
    elif len(merged) != 1:
        raise _Unreadable(f"both directions feed {[_short(u.name) for u in merged]}")
    else:
        m = merged[0]
        where = f"{_short(m.name)} ({m.op})"
        if m.op == "ConcatV2":
            axis = g.const(m.inputs[2]) if len(m.inputs) == 3 else None
            if [g.resolve(r) for r in m.inputs[:2]] != [
                g.resolve(ends["forward"]),
                g.resolve(ends["backward"]),
            ] or axis not in (-1.0, 2.0 if read["forward"][1]["return_sequences"] else 1.0):
                raise _Unreadable(
                    f"{where} does not concatenate [forward, backward] on the last axis"
                )
            mode, merged_out = "concat", (m.name, 0)
        elif m.op == "Mul":
            mode, merged_out = "mul", (m.name, 0)
        elif m.op in _ADDS:
            halves = [
                u
                for u in g.users(m.name, 0)
                if u.op in ("RealDiv", "Mul") and _short(u.name).rpartition("/")[0] == fw_scope
            ]
            consts = [c for u in halves for c in [g.const(u.inputs[1])] if c is not None]
            if (
                len(halves) == 1
                and consts
                and consts[0] == (2.0 if halves[0].op == "RealDiv" else 0.5)
            ):
                mode, where = "ave", f"{where} then {_short(halves[0].name)} ({halves[0].op})"
                merged_out = (halves[0].name, 0)
            else:
                mode, merged_out = "sum", (m.name, 0)
        else:
            raise _Unreadable(f"the directions are combined by {where}, not a Keras merge")
        how = f"{where} combines the two directions"
    out = {
        layer: KerasLayer(
            layer,
            "Bidirectional",
            {"merge_mode": mode},
            mask_from=read["forward"][1]["_mask_from"],
            origins={"merge_mode": f"the SavedModel's graph: {how}"},
        )
    }
    for role, key in (("forward", "layer"), ("backward", "backward_layer")):
        sub, config, origins = read[role]
        out[f"{layer}/{key}"] = _keras_layer(sub, config, origins)
    fw_io, bw_io = (read[r][1]["_io"] for r in ("forward", "backward"))
    states = fw_io["states"] + bw_io["states"] if read["forward"][1]["return_state"] else []
    out[layer].graph_io = {
        **fw_io,
        "initial": fw_io["initial"] + bw_io["initial"],
        "outputs": (
            [_tensor(merged_out)]
            if merged_out
            else [_tensor(ends["forward"]), _tensor(ends["backward"])]
        )
        + states,
    }
    return out
