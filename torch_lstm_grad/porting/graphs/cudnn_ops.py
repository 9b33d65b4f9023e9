"""TF graphs running TF's cuDNN RNN ops on an opaque params buffer: a TF1 contrib
`CudnnLSTM`/`CudnnGRU`/`CudnnRNNTanh`/`CudnnRNNRelu` layer (its `opaque_kernel` variable), or a
raw `CudnnRNN`/`CudnnRNNV2`/`CudnnRNNV3` on any variable (a frozen graph: its Const).

The op's attributes give the model but not its sizes (docs/cudnn.md §4; docs/tf-semantics.md
§7): `rnn_mode`, `input_mode`, `direction`, `num_proj` (V3), `time_major` (V3), and `dropout`
(between layers, in training only). The sizes are read from the graph where it holds them:

* the initial states: `input_h` `[L·D, B, P]` and `input_c` `[L·D, B, H]` (batch-major V3:
  `[B, L·D, ·]`), as `zeros`/`Fill` of constant dimensions or a constant tensor: L·D, H, P;
* a `CudnnRNNParamsSize` op of the same model (TF1's layer sizes its variable with one): its
  `num_layers`, `num_units`, `input_size` inputs.

The input size then follows from the buffer's length (the describer solves for it and checks
the length with this package's `CudnnRNNParamsSize`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .graph_def import Graph, Node, local_name

__all__ = ["CUDNN_DEFAULTS", "CudnnOp", "cudnn_ops_on"]

_OPS = {"CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"}
# The ops' attributes where the saver dropped them (tensorflow/core/ops/cudnn_rnn_ops.cc).
CUDNN_DEFAULTS = {
    "rnn_mode": "lstm",
    "input_mode": "linear_input",
    "direction": "unidirectional",
    "dropout": 0.0,
    "num_proj": 0,
    "time_major": True,
}


@dataclass
class CudnnOp:
    """One cuDNN RNN op reading a params buffer: `attrs` with the op's defaults filled in;
    `layers_dirs`, `units`, `proj` from the initial states where the graph fixes them (else
    None); `sizes`: (num_layers, num_units, input_size) of each CudnnRNNParamsSize of the same
    model in the graph; `lengths_from` (V3 only): the node feeding its `sequence_lengths`, and
    `lengths` their values where that node is a constant."""

    node: Node
    attrs: dict
    layers_dirs: int | None = None
    units: int | None = None
    proj: int | None = None
    sizes: list[tuple[int, int, int]] = field(default_factory=list)
    lengths_from: str | None = None
    lengths: list[int] | None = None

    @property
    def where(self) -> str:
        return f"{local_name(self.node.name)} ({self.node.op})"


def _dims(g: Graph, ref) -> list[int | None] | None:
    """The dimensions of a `zeros(shape)` / `Fill(shape, v)` / constant state, where constant."""
    n = g.nodes.get(g.resolve(ref)[0])
    if n is None:
        return None
    if n.op == "Const":
        value = n.attrs.get("value")
        return list(value.shape) if isinstance(value, np.ndarray) and value.ndim == 3 else None
    if n.op != "Fill":
        return None
    shape = g.ints(n.inputs[0])
    if shape is not None:
        return shape if len(shape) == 3 else None
    pack = g.nodes.get(g.resolve(n.inputs[0])[0])
    if pack is None or pack.op != "Pack" or len(pack.inputs) != 3:
        return None
    out = []
    for r in pack.inputs:
        v = g.ints(r)
        out.append(v[0] if v is not None and len(v) == 1 else None)
    return out


def cudnn_ops_on(g: Graph, keys: set[str]) -> list[CudnnOp]:
    """The cuDNN RNN ops whose params input is the variable held by any of `keys`."""
    found = {}
    for key in keys:
        for u in g.users(key):
            if u.op in _OPS and len(u.inputs) >= 4 and g.resolve(u.inputs[3])[0] in keys:
                found[u.name] = u
    out = []
    for name in sorted(found):
        n = found[name]
        attrs = {k: (n.attrs.get(k) if n.attrs.get(k) is not None else v)
                 for k, v in CUDNN_DEFAULTS.items()}  # fmt: skip
        if n.op != "CudnnRNNV3":  # V1/V2 take no projection and are time-major
            attrs["num_proj"], attrs["time_major"] = 0, True
        op = CudnnOp(n, attrs)
        if n.op == "CudnnRNNV3" and len(n.inputs) >= 5:
            op.lengths_from = local_name(g.resolve(n.inputs[4])[0])
            op.lengths = g.ints(n.inputs[4])
        lead = 0 if attrs["time_major"] else 1
        h = _dims(g, n.inputs[1])
        c = _dims(g, n.inputs[2]) if attrs["rnn_mode"] == "lstm" else None
        if h is not None:
            op.layers_dirs = h[lead]
            op.proj = h[2]
        if c is not None and c[2] is not None:
            op.units = c[2]
            if op.layers_dirs is None:
                op.layers_dirs = c[lead]
        elif not attrs["num_proj"]:
            op.units = op.proj
        for m in g.nodes.values():
            if m.op != "CudnnRNNParamsSize" or len(m.inputs) != 3:
                continue
            if any((m.attrs.get(k) or CUDNN_DEFAULTS[k]) != attrs[k]
                   for k in ("rnn_mode", "input_mode", "direction")):  # fmt: skip
                continue
            vals = [g.ints(r) for r in m.inputs]
            if all(v is not None and len(v) == 1 for v in vals):
                op.sizes.append(tuple(v[0] for v in vals))
        out.append(op)
    return out
