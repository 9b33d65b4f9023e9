"""Keras recurrent layers saved on cuDNN's kernel: a Keras 3 model traced where a GPU was
visible (`model.export`, `tf.saved_model.save`) runs each LSTM/GRU direction as one
`CudnnRNNV3` op in place of the `While` loop graphs/keras_loops.py reads (docs/cudnn.md,
"Keras' cuDNN path"). Read from the saved function, for one layer direction:

* the op's attributes, with the op's defaults where the saver dropped them: `rnn_mode` lstm or
  gru, `linear_input`, `unidirectional`, no projection, batch-major (`time_major=False`);
* the params buffer: the ops building it from the layer's variables (reads, `Split`,
  `Transpose`, `Reshape`, `ConcatV2`, constants) are evaluated on variables filled with
  distinct numbers and the result compared with the buffer cuDNN needs to compute Keras'
  cell on Keras' weights (the LSTM's zero input-bias half; the GRU's z and r blocks swapped
  into cuDNN's r, z order). Any other buffer is refused: the cell it computes is not Keras';
* the sequence lengths: the full length (`Fill` of the input's time dimension), or each row's
  count of a mask (`Sum(Cast(mask))`); with a mask the graph asserts that it is right-padded
  and that no row is empty, so the port takes such masks only (`cudnn_mask`);
* `go_backwards`: the input in `ReverseSequence` by the lengths, the output reversed back the
  same way and then flipped in time (Keras' processing order);
* the initial states (zeros or the model's inputs; a variable is a stateful layer, refused),
  and which outputs the graph uses: the sequence, the final states (`Squeeze` of
  output_h / output_c).

The cuDNN path gives zeros at padded steps of the sequence output and the state at each row's
length as the last output: Keras' standard path with `zero_output_for_mask =
return_sequences`, which is how the layer is described.
"""

from __future__ import annotations

import numpy as np

from .cudnn_ops import CUDNN_DEFAULTS
from .graph_def import Graph, Node, through_identities
from .graph_def import function_of as _fn
from .graph_def import local_name as _short

__all__ = ["NotKerasCudnn", "cudnn_nodes", "read_cudnn_layer"]

_CUDNN_OPS = {"CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"}
_MODES = {"LSTM": "lstm", "GRU": "gru"}


class NotKerasCudnn(Exception):
    """The op and what surrounds it are not a Keras layer on cuDNN's kernel; says why."""


def cudnn_nodes(g: Graph, uses: list[Node]) -> list[Node]:
    """The cuDNN RNN ops the weights' reads reach within a few ops (Keras packs the weights
    with splits, transposes and concats into the op's params)."""
    found, frontier, seen = {}, list(uses), set()
    for _ in range(8):
        nxt = []
        for n in frontier:
            if n.name in seen:
                continue
            seen.add(n.name)
            if n.op in _CUDNN_OPS:
                found[n.name] = n
                continue
            for k in range(max(1, int(n.attrs.get("num_split") or 1))):
                nxt += g.users(n.name, k)
        frontier = nxt
    return [found[k] for k in sorted(found)]


def _attr(n: Node, key: str):
    value = n.attrs.get(key)
    return CUDNN_DEFAULTS[key] if value is None else value


class _Params:
    """Evaluates the ops that build a params buffer from the layer's variables."""

    _OPS = {"Split", "SplitV", "Transpose", "Reshape", "ConcatV2", "Const", "Squeeze"}

    def __init__(self, g: Graph, values: dict[str, np.ndarray], variables: dict[str, set[str]]):
        self.g, self.values, self.variables = g, values, variables
        self.cache: dict[tuple[str, int], np.ndarray] = {}

    def const_ints(self, ref) -> list[int]:
        v = self.eval(ref)
        return [int(x) for x in np.asarray(v).reshape(-1)]

    def eval(self, ref) -> np.ndarray:
        ref = self.g.resolve(ref)
        if ref in self.cache:
            return self.cache[ref]
        for role, keys in self.variables.items():
            if ref[0] in keys:
                return self.values[role]
        n = self.g.nodes.get(ref[0])
        if n is None or n.op not in self._OPS:
            what = "?" if n is None else f"{_short(n.name)} ({n.op})"
            raise NotKerasCudnn(f"the params are built with {what}, not from the layer's weights")
        if n.op == "Const":
            value = n.attrs.get("value")
            if not isinstance(value, np.ndarray):
                raise NotKerasCudnn(f"{_short(n.name)}: a constant this reader cannot decode")
            out = value.astype(np.float64) if value.dtype.kind == "f" else value
        elif n.op == "Split":
            axis = self.const_ints(n.inputs[0])[0]
            parts = int(n.attrs.get("num_split") or 1)
            out = np.split(self.eval(n.inputs[1]), parts, axis=axis)[ref[1]]
        elif n.op == "SplitV":
            x, sizes = self.eval(n.inputs[0]), self.const_ints(n.inputs[1])
            axis = self.const_ints(n.inputs[2])[0]
            out = np.split(x, np.cumsum(sizes)[:-1], axis=axis)[ref[1]]
        elif n.op == "Transpose":
            out = np.transpose(self.eval(n.inputs[0]), self.const_ints(n.inputs[1]))
        elif n.op == "Reshape":
            out = self.eval(n.inputs[0]).reshape(self.const_ints(n.inputs[1]))
        elif n.op == "Squeeze":
            dims = n.attrs.get("squeeze_dims")
            out = np.squeeze(self.eval(n.inputs[0]), axis=tuple(np.atleast_1d(dims)) or None)
        else:  # ConcatV2
            axis = self.const_ints(n.inputs[-1])[0]
            out = np.concatenate([self.eval(r) for r in n.inputs[:-1]], axis=axis)
        self.cache[ref] = out
        return out


def _expected_params(cls: str, k, rk, b, swap: bool = True) -> np.ndarray:
    """The buffer on which cuDNN computes Keras' cell with Keras' weights (canonical order:
    every gate's input matrix [H, I], then its recurrent one [H, H], then the input biases,
    then the recurrent ones; docs/cudnn.md); `swap=False`: a GRU's blocks in Keras' order."""
    if cls == "LSTM":  # cuDNN's i, f, c, o is Keras' order; Keras' one bias as the recurrent
        ws = np.split(k, 4, axis=1) + np.split(rk, 4, axis=1)
        biases = [np.zeros_like(b)] + [b]
    else:  # cuDNN's GRU gates are r, z, h; Keras' z, r, h; bias [2, 3H]: input row, recurrent
        order = [1, 0, 2] if swap else [0, 1, 2]
        kz, rz = np.split(k, 3, axis=1), np.split(rk, 3, axis=1)
        ws = [kz[i] for i in order] + [rz[i] for i in order]
        bi, br = np.split(b[0], 3), np.split(b[1], 3)
        biases = [bi[i] for i in order] + [br[i] for i in order]
    return np.concatenate([w.T.reshape(-1) for w in ws] + [x.reshape(-1) for x in biases])


def _live(g: Graph, fn: str) -> set[str]:
    """The nodes of function `fn` its returned values depend on."""
    out: set[str] = set()
    stack = [r[0] for r in g.function_returns.get(fn, [])]
    while stack:
        name = stack.pop()
        if name in out or _fn(name) != fn:
            continue
        out.add(name)
        stack += [r[0] for r in g.nodes[name].inputs]
    return out


def read_cudnn_layer(g: Graph, cls: str, variables: dict[str, set[str]], shapes: dict,
                     node: Node) -> tuple[dict, dict]:  # fmt: skip
    """`(config, origins)` of the layer direction that `node` (a cuDNN RNN op) computes, in
    the form graphs/keras_loops.py gives a loop's; `variables`: role -> the nodes holding that
    variable; `shapes`: role -> the variable's shape."""
    where = f"the SavedModel's {_short(node.name)} ({node.op})"
    if node.op != "CudnnRNNV3":
        raise NotKerasCudnn(f"{where}: Keras 3 saves CudnnRNNV3, this is {node.op}")
    if cls not in _MODES:
        raise NotKerasCudnn(f"{where}: Keras runs a {cls} on cuDNN never")
    want = {"rnn_mode": _MODES[cls], "input_mode": "linear_input",
            "direction": "unidirectional", "num_proj": 0, "time_major": False}  # fmt: skip
    for key, value in want.items():
        if _attr(node, key) != value:
            raise NotKerasCudnn(f"{where}: {key}={_attr(node, key)!r}, Keras' layer has {value!r}")
    if float(_attr(node, "dropout")) != 0.0:
        raise NotKerasCudnn(f"{where}: dropout={_attr(node, 'dropout')}, Keras passes none")
    if len(node.inputs) != 5:
        raise NotKerasCudnn(f"{where}: {len(node.inputs)} inputs, CudnnRNNV3 takes 5")
    x_ref, h_ref, c_ref, params_ref, len_ref = node.inputs
    # The params: evaluated on distinct numbers in place of the weights.
    if "bias" not in variables or not variables["bias"]:
        raise NotKerasCudnn(f"{where}: no bias (Keras runs a layer without one in its loop)")
    values, start = {}, 1.0
    for role in ("kernel", "recurrent_kernel", "bias"):
        shape = tuple(shapes[role])
        size = int(np.prod(shape))
        values[role] = np.arange(start, start + size, dtype=np.float64).reshape(shape)
        start += size
    try:
        got = _Params(g, values, variables).eval(params_ref)
    except (ValueError, IndexError) as err:
        raise NotKerasCudnn(f"{where}: its params cannot be evaluated ({err})") from err
    expected = _expected_params(cls, values["kernel"], values["recurrent_kernel"], values["bias"])
    if got.shape != expected.shape or not np.array_equal(got, expected):
        swapped = ""
        if cls == "GRU":
            plain = _expected_params("GRU", values["kernel"], values["recurrent_kernel"],
                                     values["bias"], swap=False)  # fmt: skip
            if got.shape == plain.shape and np.array_equal(got, plain):
                swapped = (" (the z and r blocks are not swapped into cuDNN's r, z order, as "
                           "Keras swaps them on a CUDA build of TensorFlow)")  # fmt: skip
        raise NotKerasCudnn(
            f"{where}: its params buffer is not Keras' {cls} weights in cuDNN's layout"
            f"{swapped}: the cell it computes is not the layer's"
        )
    fn = _fn(node.name)
    live = _live(g, fn)

    def node_at(ref) -> Node | None:
        return g.nodes.get(g.resolve(ref)[0])

    def uses(ref) -> int:
        """How often the function returns the value, and how many of its live ops read it."""
        ref = g.resolve(ref)
        returned = sum(g.resolve(r) == ref for r in g.function_returns.get(fn, []))
        return returned + sum(u.name in live for u in g.users(*ref))

    def used(ref) -> bool:
        return uses(ref) > 0

    # The input, and go_backwards' ReverseSequence by the lengths.
    first = node_at(x_ref)
    go_backwards = first is not None and first.op == "ReverseSequence"
    if go_backwards:
        if int(first.attrs.get("seq_dim") or 0) != 1 or int(first.attrs.get("batch_dim") or 0):
            raise NotKerasCudnn(f"{_short(first.name)} reverses other axes than time in rows")
        if g.resolve(first.inputs[1]) != g.resolve(len_ref):
            raise NotKerasCudnn(f"{_short(first.name)} reverses by other lengths than the op's")
        input_ref = first.inputs[0]
    else:
        input_ref = x_ref
    # The lengths: the full length, or a mask's count per row.
    lens = node_at(len_ref)
    mask_ref = None
    if lens is not None and lens.op == "Fill":
        t = node_at(lens.inputs[1])
        shape_of = node_at(t.inputs[0]) if t is not None and t.op == "StridedSlice" else None
        if (
            shape_of is None
            or shape_of.op != "Shape"
            or g.resolve(shape_of.inputs[0]) != g.resolve(input_ref)
            or [g.ints(r) for r in t.inputs[1:4]] != [[1], [2], [1]]
        ):
            raise NotKerasCudnn(f"{_short(lens.name)}: the lengths are not the input's length")
        lengths = "the full length (Fill of the input's time dimension)"
    elif lens is not None and lens.op == "Sum":
        cast = node_at(lens.inputs[0])
        axis = g.ints(lens.inputs[1])
        if cast is None or cast.op != "Cast" or axis != [1] or lens.attrs.get("keep_dims"):
            raise NotKerasCudnn(f"{_short(lens.name)}: the lengths are not a mask's row counts")
        mask_ref = through_identities(g.nodes, cast.inputs[0])
        lengths = f"each row's count of the mask {_short(mask_ref[0])}"
    else:
        what = "?" if lens is None else f"{_short(lens.name)} ({lens.op})"
        raise NotKerasCudnn(f"{where}: the sequence lengths come from {what}")
    # The initial states: [B, 1, H] ExpandDims of zeros or of the model's inputs.
    initial = []
    for label, ref in (("h", h_ref), ("c", c_ref)) if cls == "LSTM" else (("h", h_ref),):
        e = node_at(ref)
        if e is None or e.op != "ExpandDims" or g.ints(e.inputs[1]) != [1]:
            raise NotKerasCudnn(f"{where}: the initial {label} is not a [B, 1, H] ExpandDims")
        held = g.resolve(e.inputs[0])[0]
        src = g.nodes.get(held)
        if (src is not None and src.op in ("VarHandleOp", "VariableV2")) or any(
            held in keys for keys in g.aliases.values()
        ):
            raise NotKerasCudnn(f"the initial {label} comes from a variable: a stateful layer")
        initial.append(e.inputs[0])
    # The outputs: the sequence (reversed back, then flipped, with go_backwards) and the final
    # states.
    seq = (node.name, 0)
    if go_backwards:
        back = [u for u in g.users(*seq) if u.op == "ReverseSequence"]
        flips = [u for b in back for u in g.users(b.name, 0) if u.op == "ReverseV2"]
        if len(back) != 1 or len(flips) != 1:
            raise NotKerasCudnn(f"{where}: the output is not reversed back and flipped once")
        if g.resolve(back[0].inputs[1]) != g.resolve(len_ref) or g.ints(
            flips[0].inputs[1]
        ) != [1]:
            raise NotKerasCudnn(f"{_short(back[0].name)}: not the input's reversal undone")
        seq = (flips[0].name, 0)
    squeezes = {}
    for k in (1, 2) if cls == "LSTM" else (1,):
        sq = [u for u in g.users(node.name, k) if u.op == "Squeeze"]
        if len(sq) != 1 or list(np.atleast_1d(sq[0].attrs.get("squeeze_dims"))) != [1]:
            raise NotKerasCudnn(f"{where}: final state {k} is not squeezed once on axis 1")
        squeezes[k] = (sq[0].name, 0)
    return_sequences = used(seq)
    states = [squeezes[k] for k in sorted(squeezes)]
    if return_sequences:
        return_state = any(used(s) for s in states)
        outputs = [seq]
    else:
        if not used(states[0]):
            raise NotKerasCudnn(f"{where}: neither its sequence nor its last output is used")
        outputs = [states[0]]
        if cls == "LSTM":
            return_state = used(states[1])
        else:  # the last output is the state: returned as both, or used besides as the state
            return_state = uses(states[0]) > 1
    state_how = (
        "the final states (Squeeze of output_h/output_c) are used"
        if return_state
        else "no final state is used apart from the last output"
    )
    if cls == "GRU" and not return_sequences:
        state_how += " (the last output is the state: told by the number of its uses)"
    config = {
        "activation": "tanh",
        "recurrent_activation": "sigmoid",
        "go_backwards": go_backwards,
        "return_sequences": return_sequences,
        "return_state": return_state,
        "time_major": False,
        "stateful": False,
        "zero_output_for_mask": return_sequences,
        "cudnn_mask": True,
    }
    origins = {
        "activation": f"{where}: cuDNN's {cls} computes tanh",
        "recurrent_activation": f"{where}: cuDNN's {cls} computes sigmoid gates",
        "go_backwards": f"{where}: "
        + ("its input in ReverseSequence by the lengths" if go_backwards else "its input in order"),
        "return_sequences": f"{where}: its sequence output is "
        + ("used" if return_sequences else "not used"),
        "return_state": f"{where}: {state_how}",
        "time_major": f"{where}: time_major=False",
        "stateful": f"{where}: the initial state is not a variable",
        "zero_output_for_mask": f"{where}: cuDNN outputs zeros at a row's padded steps, and the "
        "state at its length as the last output",
        "cudnn_mask": f"{where}: the sequence lengths are {lengths}; the graph asserts a mask "
        "right-padded with no empty row",
    }
    if cls == "GRU":
        config["reset_after"] = True
        origins["reset_after"] = f"{where}: cuDNN's GRU resets after the recurrent product"
    config["_class"] = cls
    config["_mask_from"] = None
    if mask_ref is not None:
        src = g.nodes[mask_ref[0]]
        config["_mask_from"] = (
            f"the signature's input {_short(src.name)}"
            if src.op in ("_Arg", "Placeholder")
            else f"{_short(src.name)} ({src.op})"
        )
    config["_outputs"] = [node.name]
    config["_end"] = outputs[0]
    config["_io"] = {
        "function": fn,
        "input": _tensor(g, input_ref),
        "mask": _tensor(g, mask_ref) if mask_ref is not None else None,
        "initial": [_tensor(g, r) for r in initial],
        "outputs": [_tensor(g, r) for r in outputs]
        + ([_tensor(g, s) for s in states] if return_state else []),
        "states": [_tensor(g, s) for s in states],
        "cudnn": True,
    }
    return config, origins


def _tensor(g: Graph, ref) -> str:
    """A value as the tensor name TF gives it inside its function (`node:k`)."""
    ref = through_identities(g.nodes, ref)
    return f"{_short(ref[0])}:{ref[1]}"
