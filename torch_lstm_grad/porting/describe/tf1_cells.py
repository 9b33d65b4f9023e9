"""TF1 checkpoints' recurrent cells -> layer descriptions (readers -> source -> **layer
description** -> builders).

Which variables form a cell: by scope and leaf name.

* `<scope>/kernel [I + P, 4H]`, `<scope>/bias [4H]`, optionally `w_i_diag, w_f_diag, w_o_diag
  [H]` and `projection/kernel [H, P]` (P = H without it): an LSTM cell (TF1 `LSTMCell`,
  `BasicLSTMCell`, contrib `LSTMBlockCell`; `lstm_fused_cell`: `LSTMBlockFusedCell`;
  `cudnn_compatible_lstm_cell`: `CudnnCompatibleLSTMCell`).
* `gates/kernel`, `gates/bias`, `candidate/kernel`, `candidate/bias`: TF1 `GRUCell` /
  `GRUBlockCellV2`; contrib v1's `w_ru`, `w_c`, `b_ru`, `b_c` (kernels told apart by shape).
* TF1 contrib `CudnnLSTM`/`CudnnGRU` canonical names (docs/tf-semantics.md §7.5), uni- and
  bidirectional, summed biases split in halves as TF1's restore does, or the old separate
  `bias_cudnn_0/1`. An `opaque_kernel` alone is refused: its model is not stored.
* A params buffer a cuDNN RNN op of the graph reads (`graphs/cudnn_ops.py`): its model from the
  op's attributes, its sizes from the graph's states or `CudnnRNNParamsSize`, the input size
  solved from the buffer's length.

What each cell computed: a checkpoint stores weights only. The meta graph saved next to it
(`<prefix>.meta`, `graphs/tf1_cells.py`) names the op or the op pattern that used the variables, and
with it the class and `forget_bias`, `cell_clip`, `activation`, `proj_clip`. Without a graph
(or for a cell the graph does not hold), these come from `--set`, or with `--assume-defaults`
from the TF1 class defaults (forget_bias 1.0, no clip, tanh); otherwise the cell is refused,
naming what is missing. What the class itself fixes (the gates' sigmoid; a fused op's
straight-through clip gradient, `clip_by_value`'s zero gradient in `LSTMCell`; the forget bias 0
of `cudnn_compatible_lstm_cell`) comes with the class.
"""

from __future__ import annotations

import re

import numpy as np
import torch

from ... import raw_ops
from ..graphs.cudnn_ops import cudnn_ops_on
from ..graphs.graph_def import Graph
from ..graphs.tf1_cells import cell_at, cell_notes
from ..source import Source
from .description import LayerDescription, Refusal
from .statements import Statements

__all__ = ["describe_tf1"]

_PEEPHOLES = ("w_i_diag", "w_f_diag", "w_o_diag")
_CUDNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_LSTM_LEAVES = {"kernel", "bias", *_PEEPHOLES, "projection/kernel"}
_GRU_LEAVES = {"gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"}
_GRU_V1_LEAVES = {"w_ru", "w_c", "b_ru", "b_c"}
_TF1_DEFAULTS = {"forget_bias": 1.0, "cell_clip": None, "activation": "tanh", "proj_clip": None}
_FUSED_CLASS = {
    "BlockLSTM": "LSTMBlockFusedCell",
    "BlockLSTMV2": "LSTMBlockFusedCell",
    "LSTMBlockCell": "LSTMBlockCell",
    "GRUBlockCell": "GRUBlockCell",
}
# The graph ops (and TF1 Python cells) whose kernel blocks are i, c, f, o: what a canonical
# cuDNN LSTM's names promise. BlockLSTMV2 reads Keras' i, f, c, o (and a GRU op no LSTM).
_ICFO_LSTM = {"BlockLSTM", "LSTMBlockCell", "LSTMCell", "BasicLSTMCell"}

# TF1 contrib CudnnLSTM / CudnnGRU canonical names (docs/tf-semantics.md §7.5): `<outer>/` then
# `[rnn/]multi_rnn_cell/cell_<l>/` or `stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/<fw|bw>/`
# then the cell scope and a leaf.
_CUDNN_NAME = re.compile(
    r"(?:(?P<outer>.*?)/)??(?:(?:rnn/)?multi_rnn_cell/cell_(?P<ul>\d+)"
    r"|stack_bidirectional_rnn/cell_(?P<bl>\d+)/bidirectional_rnn/(?P<dir>fw|bw))"
    r"/cudnn_compatible_(?P<kind>lstm|gru)_cell/(?P<leaf>.+)"
)
_CUDNN_LEAVES = {
    "lstm": {"kernel", "bias", "bias_cudnn_0", "bias_cudnn_1"},
    "gru": {
        "gates/kernel",
        "gates/bias",
        "candidate/input_projection/kernel",
        "candidate/input_projection/bias",
        "candidate/hidden_projection/kernel",
        "candidate/hidden_projection/bias",
        "bias_cudnn_0",
        "bias_cudnn_1",
    },
}
_CUDNN_NEED = {
    "lstm": {"kernel", "bias"},
    "gru": _CUDNN_LEAVES["gru"] - {"bias_cudnn_0", "bias_cudnn_1"},
}


def _cudnn_groups(names) -> dict[tuple[str, str, bool], dict[tuple[int, int], dict[str, str]]]:
    """(outer, kind, bidirectional) -> (layer, direction) -> leaf -> variable name. The old
    separate biases (`bias_cudnn_0`; GRU's `bias_cudnn 0`, with a space) become `bias_cudnn_<j>`."""
    groups: dict = {}
    for name in names:
        m = _CUDNN_NAME.fullmatch(name)
        if not m:
            continue
        leaf = re.sub(r"^bias_cudnn[ _]([01])$", r"bias_cudnn_\1", m["leaf"])
        if leaf not in _CUDNN_LEAVES[m["kind"]]:
            continue
        bidi = m["dir"] is not None
        layer = int(m["bl"] if bidi else m["ul"])
        cell = (layer, int(m["dir"] == "bw"))
        groups.setdefault((m["outer"] or "", m["kind"], bidi), {}).setdefault(cell, {})[leaf] = name
    return groups


class _Describer:
    def __init__(self, source: Source, statements: Statements, exclude: set[str]):
        self.v = {n: a for n, a in source.variables.items() if n not in exclude}
        self.graph, self.statements = source.graph, statements
        self.no_graph = (
            "no meta graph next to the checkpoint"
            if source.writer.family == "tf1"
            else f"a {source.format} holds no graph of the computation"
        )
        self.refusals: list[Refusal] = []
        self.used_names: set[str] = set()

    def refuse(self, layer, attr, value, reason, approximation=None):
        self.refusals.append(Refusal(layer, attr, value, reason, approximation))

    def _unread_cell(self, d: LayerDescription, scope: str, cell) -> bool:
        """Refuses the layer when the meta graph's ops around it are no cell this converter
        reads; True when refused."""
        if cell.problem:
            self.refuse(
                d.name,
                "graph",
                cell.where,
                f"the {self.graph.label}'s ops around {scope} are not a cell this converter reads: "
                f"{cell.problem}",
            )
        return bool(cell.problem)

    def _unstored(self, d: LayerDescription, names, keys, why: str) -> None:
        """Attributes the file does not store: `--set`, else `--assume-defaults`, else one
        refusal naming them all."""
        missing = []
        for key in keys:
            found, value = self.statements.take(names, key)
            if found:
                d.set(key, value, "--set", stored=False)
            elif self.statements.assume_defaults:
                d.set(
                    key, _TF1_DEFAULTS[key], "TF1 class default (--assume-defaults)", stored=False
                )
            else:
                missing.append(key)
        if missing:
            self.refuse(
                d.name,
                ", ".join(missing),
                "(not stored)",
                f"{why}: give "
                + " ".join(f"--set {k}=..." for k in missing)
                + " or --assume-defaults "
                "for TF1's class defaults " + str({k: _TF1_DEFAULTS[k] for k in missing}),
            )

    # -- LSTM cells ----------------------------------------------------------------------------

    def lstm(self, scope: str, names: dict[str, str]) -> LayerDescription | None:
        v = self.v
        kernel = v[names["kernel"]]
        leaf = scope.rsplit("/", 1)[-1]
        d = LayerDescription(scope.replace("/", "."), "tf1.LSTMCell", f"variables {scope}/*")
        d.weights = dict(names)
        H = kernel.shape[1] // 4
        proj = v.get(names.get("projection/kernel", ""), None)
        P = proj.shape[1] if proj is not None else H
        d.set("units", H, "kernel's shape")
        d.set("input_size", kernel.shape[0] - P, "kernel's shape")
        if proj is not None:
            if proj.shape[0] != H:
                self.refuse(d.name, "projection/kernel", list(proj.shape), f"expected [{H}, P]")
                return None
            d.set("num_proj", P, "projection/kernel's shape")
        peep = all(k in names for k in _PEEPHOLES)
        d.set("use_peepholes", peep, "w_*_diag variables" + (" present" if peep else " absent"))
        for k in _PEEPHOLES:
            if k in names and v[names[k]].shape != (H,):
                self.refuse(d.name, k, list(v[names[k]].shape), f"expected [{H}]")
        d.set("gate_activation", "sigmoid", "TF1's LSTM cells always use sigmoid gates")
        cell = cell_at(self.graph, scope, "lstm") if self.graph is not None else None
        unstored = ["forget_bias", "cell_clip", "activation"] + (
            ["proj_clip"] if proj is not None else []
        )
        if leaf == "cudnn_compatible_lstm_cell":
            d.kind = "tf1.CudnnCompatibleLSTMCell"
            d.set("forget_bias", 0.0, "CudnnCompatibleLSTMCell adds none")
            d.set("cell_clip", None, "CudnnCompatibleLSTMCell does not clip")
            d.set("activation", "tanh", "CudnnCompatibleLSTMCell")
            return d
        if cell is None:
            if leaf == "lstm_fused_cell":
                d.kind = "tf1.LSTMBlockFusedCell"
            elif leaf.startswith("basic_lstm_cell"):
                d.kind = "tf1.BasicLSTMCell"
            why = (
                self.no_graph
                if self.graph is None
                else (f"the {self.graph.label} does not use {scope}/kernel")
            )
            self._unstored(
                d,
                [d.name, scope],
                unstored,
                f"{why}: checkpoints store weights, not the cell's arguments",
            )
            if d.value("cell_clip") is not None:
                found, rule = self.statements.take([d.name, scope], "clip_gradient")
                if found:
                    d.set("clip_gradient", rule, "--set", stored=False)
                elif d.kind == "tf1.LSTMBlockFusedCell":
                    d.set("clip_gradient", "straight_through", "LSTMBlockFusedCell's kernel")
                else:
                    self.refuse(
                        d.name,
                        "clip_gradient",
                        "(not stored)",
                        "LSTMCell's "
                        "clip_by_value has a zero gradient where it clips, LSTMBlockCell's "
                        "kernel passes it through; the checkpoint does not say which "
                        "class wrote it: give --set clip_gradient=zero (LSTMCell) or "
                        "straight_through (LSTMBlockCell)",
                    )
            return d
        if self._unread_cell(d, scope, cell):
            return None
        d.notes += cell_notes(self.graph, scope, cell)
        where = f"{self.graph.label}, {cell.where}"
        d.where = f"variables {scope}/* and the {self.graph.label} ({cell.where})"
        if cell.cls in _FUSED_CLASS:
            d.kind = f"tf1.{_FUSED_CLASS[cell.cls]}"
            clip = cell.attrs.get("cell_clip", -1.0)
            d.set("forget_bias", float(cell.attrs.get("forget_bias", 0.0)), where)
            d.set("cell_clip", float(clip) if clip > 0 else None, where + f" (cell_clip={clip})")
            d.set("activation", "tanh", f"{cell.cls} computes tanh")
            if clip > 0:
                d.set("clip_gradient", "straight_through", f"{cell.cls}'s gradient kernel")
            if bool(cell.attrs.get("use_peephole", False)) != peep:
                self.refuse(
                    d.name,
                    "use_peepholes",
                    cell.attrs.get("use_peephole"),
                    f"the graph's {cell.cls} and the variables disagree",
                )
            if cell.cls == "BlockLSTMV2":
                d.set("gate_order", "ifco", "BlockLSTMV2's weights are in Keras' i, f, c, o order")
            if proj is not None:
                self.refuse(
                    d.name,
                    "projection/kernel",
                    list(proj.shape),
                    f"{cell.cls} has no projection, yet the scope holds one",
                )
            return d
        d.kind = f"tf1.{cell.cls}"
        for key in unstored:
            d.set(key, cell.attrs.get(key), where)
        if d.value("cell_clip") is not None:
            d.set(
                "clip_gradient",
                "zero",
                f"{cell.cls}'s clip_by_value (zero gradient where it clips)",
            )
        return d

    # -- GRU cells -----------------------------------------------------------------------------

    def gru(self, scope: str, names: dict[str, str], v1: bool) -> LayerDescription | None:
        v = self.v
        if v1:  # contrib v1's GRUBlockCell: names swapped, told apart by shape (§5.4)
            a, b = v[names["w_ru"]], v[names["w_c"]]
            gk, ck = (
                (names["w_ru"], names["w_c"])
                if a.shape[1] == 2 * b.shape[1]
                else (names["w_c"], names["w_ru"])
            )
            ga = v[names["b_ru"]]
            gbias, cbias = (
                (names["b_ru"], names["b_c"])
                if ga.shape[0] == v[gk].shape[1]
                else (names["b_c"], names["b_ru"])
            )
            weights = {
                "gates/kernel": gk,
                "gates/bias": gbias,
                "candidate/kernel": ck,
                "candidate/bias": cbias,
            }
        else:
            weights = dict(names)
        ck_shape = v[weights["candidate/kernel"]].shape
        H = ck_shape[1]
        d = LayerDescription(
            scope.replace("/", "."), "tf1.GRUCell", f"variables {scope}/*", weights=weights
        )
        for n, shape in (
            ("gates/kernel", (ck_shape[0], 2 * H)),
            ("gates/bias", (2 * H,)),
            ("candidate/bias", (H,)),
        ):
            if v[weights[n]].shape != shape:
                self.refuse(d.name, n, list(v[weights[n]].shape), f"expected {list(shape)}")
                return None
        d.set("units", H, "candidate/kernel's shape")
        d.set("input_size", ck_shape[0] - H, "candidate/kernel's shape")
        d.set("gate_activation", "sigmoid", "TF1's GRU cells always use sigmoid gates")
        if v1:
            d.kind = "tf1.GRUBlockCell"
            d.set("activation", "tanh", "contrib GRUBlockCell computes tanh")
            return d
        cell = cell_at(self.graph, scope, "gru") if self.graph is not None else None
        if cell is None:
            why = (
                self.no_graph
                if self.graph is None
                else f"the {self.graph.label} does not use {scope}/gates/kernel"
            )
            self._unstored(
                d,
                [d.name, scope],
                ["activation"],
                f"{why}: checkpoints store weights, not the cell's arguments",
            )
            return d
        if self._unread_cell(d, scope, cell):
            return None
        d.notes += cell_notes(self.graph, scope, cell)
        d.where = f"variables {scope}/* and the {self.graph.label} ({cell.where})"
        if cell.cls == "GRUBlockCell":
            d.kind = "tf1.GRUBlockCell"
            d.set("activation", "tanh", "GRUBlockCell computes tanh")
        else:
            d.set("activation", cell.attrs["activation"], f"{self.graph.label}, {cell.where}")
        return d

    # -- TF1 contrib CudnnLSTM / CudnnGRU canonical names ----------------------------------------

    def cudnn(self, outer, kind, bidi, cells) -> LayerDescription | None:
        v = self.v
        D = 2 if bidi else 1
        name = outer.replace("/", ".") or f"cudnn_{kind}"
        layers = sorted({layer for layer, _ in cells})
        want = [(layer, d) for layer in range(len(layers)) for d in range(D)]
        where = f"{outer or '(root)'} (TF1 Cudnn{kind.upper()} canonical names)"
        d = LayerDescription(name, f"tf1.Cudnn{kind.upper()}", where)
        if sorted(cells) != want:
            have = ", ".join(
                f"cell_{lay}" + ("/" + "fb"[dd] + "w" if bidi else "") for lay, dd in sorted(cells)
            )
            self.refuse(
                name,
                "cells",
                have,
                "expected cell_0..cell_<L-1>" + (" each fw and bw" if bidi else ""),
            )
            return None
        holes = [
            f"cell_{lay}{'/' + 'fb'[dd] + 'w' if bidi else ''} missing {sorted(miss)}"
            for (lay, dd), leaves in sorted(cells.items())
            if (miss := _CUDNN_NEED[kind] - leaves.keys())
        ]
        if holes:
            self.refuse(name, "variables", "; ".join(holes), "incomplete canonical variables")
            return None
        first = cells[(0, 0)]
        if kind == "lstm":
            H = v[first["kernel"]].shape[1] // 4
            input_size = v[first["kernel"]].shape[0] - H
        else:
            H = v[first["candidate/hidden_projection/kernel"]].shape[0]
            input_size = v[first["candidate/input_projection/kernel"]].shape[0]
        d.set("num_layers", len(layers), "cell_<l> names")
        d.set("units", H, "kernel shapes")
        d.set("input_size", input_size, "kernel shapes")
        d.set(
            "direction",
            "bidirectional" if bidi else "unidirectional",
            "stack_bidirectional_rnn names" if bidi else "multi_rnn_cell names",
        )
        separate = all({"bias_cudnn_0", "bias_cudnn_1"} <= c.keys() for c in cells.values())
        d.set(
            "bias_layout",
            "separate bW, bR (bias_cudnn_0/1)"
            if separate
            else "summed bW + bR, split in halves as TF1's restore does",
            "variable names",
        )
        d.set("input_mode", "linear_input", "the layer-0 kernel has input rows")
        d.set("activation", "tanh", f"cuDNN's {kind.upper()}")
        if kind == "lstm" and self.graph is not None and not self._cudnn_lstm_graph(d, cells):
            return None
        d.weights = {
            f"cell_{lay}_{dd}/{leaf}": n
            for (lay, dd), leaves in sorted(cells.items())
            for leaf, n in sorted(leaves.items())
        }
        return d

    def _cudnn_lstm_graph(self, d: LayerDescription, cells) -> bool:
        """The graph's op for each canonical LSTM cell, where the graph uses it, must compute
        what a CudnnCompatibleLSTMCell does: forget bias 0, no clip, no peepholes (DeepSpeech's
        LSTMBlockFusedCell(forget_bias=0) under these names does). False after a refusal."""
        for leaves in cells.values():
            scope = leaves["kernel"].rpartition("/")[0]
            cell = cell_at(self.graph, scope, "lstm")
            if cell is None:
                continue
            if self._unread_cell(d, scope, cell):
                return False
            clip = cell.attrs.get("cell_clip")
            got = {
                "forget_bias": float(cell.attrs.get("forget_bias", 0.0)),
                "cell_clip": None if clip is None or clip <= 0 else clip,
                "peepholes": bool(cell.attrs.get("use_peephole", False)),
                "activation": cell.attrs.get("activation", "tanh"),
            }
            want = {"forget_bias": 0.0, "cell_clip": None, "peepholes": False}
            if cell.cls not in _ICFO_LSTM or got != {**want, "activation": "tanh"}:
                self.refuse(
                    d.name,
                    "graph",
                    f"{cell.cls} at {cell.where}",
                    f"the {self.graph.label} computes {scope} with {cell.cls} {got}: not the "
                    "canonical cuDNN LSTM (i, c, f, o blocks, forget bias 0, no clip, no "
                    "peepholes) its names promise",
                )
                return False
            d.where = f"{d.where}; the {self.graph.label} runs {cell.cls} ({cell.where})"
        return True

    # -- a params buffer a cuDNN RNN op reads --------------------------------------------------

    def opaque(self, name: str, ops) -> LayerDescription | None:
        """The layer of the buffer `name` that the graph's cuDNN ops `ops` read."""
        layer = name.rpartition("/")[0].replace("/", ".") or name.replace("/", ".")
        op = ops[0]
        where = f"variable {name}, read by the {self.graph.label}'s {op.where}"
        d = LayerDescription(layer, "tf1.CudnnRNN", where)
        for other in ops[1:]:
            if other.attrs != op.attrs:
                self.refuse(layer, "graph", f"{op.where}, {other.where}",
                            f"two ops read {name} with other attributes: {op.attrs} and "
                            f"{other.attrs}")  # fmt: skip
                return None
        a = op.attrs
        if a["rnn_mode"] not in _CUDNN_MODES:
            self.refuse(layer, "rnn_mode", a["rnn_mode"], "not one of cuDNN's RNN modes")
            return None
        for key in ("rnn_mode", "input_mode", "direction"):
            d.set(key, a[key], f"{op.where}'s attribute")
        D = 2 if a["direction"] == "bidirectional" else 1
        size = int(np.size(self.v[name]))
        P = int(a["num_proj"] or 0)

        def params_size(L, H, I):  # noqa: E741
            return int(raw_ops.CudnnRNNParamsSize(
                num_layers=L, num_units=H, input_size=I, rnn_mode=a["rnn_mode"],
                input_mode=a["input_mode"], direction=a["direction"], num_proj=P,
                T=torch.float32, S=torch.int64,
            )[0])  # fmt: skip

        fits = sorted({s for s in op.sizes if params_size(*s) == size})
        if len(fits) == 1:
            L, H, I = fits[0]  # noqa: E741
            how = "the graph's CudnnRNNParamsSize"
            d.set("num_layers", L, how)
            d.set("units", H, how)
            d.set("input_size", I, how)
        else:
            if not op.layers_dirs or not op.units or op.layers_dirs % D:
                self.refuse(layer, "sizes", "(not in the graph)",
                            f"{op.where}'s initial states are not of constant shape and no "
                            "CudnnRNNParamsSize of the graph sizes the buffer: its layers and "
                            "units are not stored")  # fmt: skip
                return None
            L, H = op.layers_dirs // D, op.units
            d.set("num_layers", L, f"{op.where}'s initial state: [L·D, B, H] of constant shape")
            d.set("units", H, f"{op.where}'s initial state: [L·D, B, H] of constant shape")
            if a["input_mode"] == "skip_input":
                I = H  # noqa: E741
            else:
                first = params_size(L, H, 1)  # the length is linear in the input size
                slope = params_size(L, H, 2) - first
                I = 1 + (size - first) // slope if slope > 0 else 0  # noqa: E741
            if I < 1 or params_size(L, H, I) != size:
                model = f"{a['rnn_mode']}, {a['direction']}, {a['input_mode']}"
                self.refuse(layer, "opaque_kernel", [size],
                            f"no input size gives a buffer of {size} for {L} layer(s) of {H} "
                            f"units ({model})")  # fmt: skip
                return None
            d.set("input_size", I, f"the buffer's length {size}")
        if P:
            d.set("num_proj", P, f"{op.where}'s attribute")
        d.set("dropout", float(a["dropout"]), f"{op.where}'s attribute (between layers, in "
              "training only)")  # fmt: skip
        d.set("time_major", bool(a["time_major"]), f"{op.where}'s attribute (the module's call: "
              "time_major=)")  # fmt: skip
        if op.lengths_from is not None:
            # The module takes the lengths at its call, not from the file (docs/porting.md,
            # "cuDNN ops on an opaque buffer"): say what the graph fed, so that a caller who
            # does not pass them knows the port runs every row all T steps.
            if op.lengths is not None:
                d.set("sequence_lengths", op.lengths,
                      f"{op.where}'s input {op.lengths_from}, a constant: the module does not "
                      "keep it; call it with sequence_lengths= these to compute what the graph "
                      "computed")  # fmt: skip
            else:
                d.set("sequence_lengths", "at the call",
                      f"{op.where}'s input {op.lengths_from}: pass the same lengths to the "
                      "module's sequence_lengths= (without them every row runs all T steps)",
                      stored=False)  # fmt: skip
        d.weights = {"opaque_kernel": name}
        return d

    # -- the whole checkpoint ----------------------------------------------------------------------

    def run(self) -> list[LayerDescription]:
        v, out = self.v, []
        for (outer, kind, bidi), cells in _cudnn_groups(v).items():
            d = self.cudnn(outer, kind, bidi, cells)
            self.used_names |= {n for leaves in cells.values() for n in leaves.values()}
            if f"{outer}/opaque_kernel" in v:  # superseded by the canonical copies
                self.used_names.add(f"{outer}/opaque_kernel")
            if d is not None:
                out.append(d)
        if isinstance(self.graph, Graph):
            for name in sorted(v):
                if name in self.used_names or np.ndim(v[name]) != 1:
                    continue
                ops = cudnn_ops_on(self.graph, {name, *self.graph.aliases.get(name, [])})
                if ops:
                    self.used_names.add(name)
                    if (d := self.opaque(name, ops)) is not None:
                        out.append(d)
        scopes: dict[str, dict[str, str]] = {}
        for name in v:
            if name in self.used_names:
                continue
            scope, _, leaf = name.rpartition("/")
            if scope.rsplit("/", 1)[-1] in ("gates", "candidate", "projection"):
                scope, sub = scope.rsplit("/", 1)
                leaf = f"{sub}/{leaf}"
            scopes.setdefault(scope, {})[leaf] = name
        for scope, names in sorted(scopes.items()):
            keys = set(names)
            d = None
            if keys == {"opaque_kernel"}:
                self.refuse(
                    scope or "(root)",
                    "opaque_kernel",
                    list(v[names["opaque_kernel"]].shape),
                    "an opaque cuDNN buffer alone does not store its model (mode, "
                    "layers, units); convert the checkpoint that holds its canonical "
                    "variables (TF1 CudnnLSTM saves both)",
                )
                continue
            if keys & _GRU_LEAVES:
                if missing := _GRU_LEAVES - keys:
                    self._incomplete(scope, keys, missing)
                    continue
                d = self.gru(scope, {k: names[k] for k in _GRU_LEAVES}, v1=False)
            elif keys & _GRU_V1_LEAVES:
                if missing := _GRU_V1_LEAVES - keys:
                    self._incomplete(scope, keys, missing)
                    continue
                d = self.gru(scope, {k: names[k] for k in _GRU_V1_LEAVES}, v1=True)
            elif keys & _LSTM_LEAVES:
                lstm_keys = keys & _LSTM_LEAVES
                if {"kernel", "bias"} <= keys and not self._lstm_shaped(names):
                    continue  # a kernel/bias pair of another layer (e.g. dense): not ours
                need = {"kernel", "bias"} | (
                    set(_PEEPHOLES) if lstm_keys & set(_PEEPHOLES) else set()
                )
                if missing := need - keys:
                    self._incomplete(scope, keys, missing)
                    continue
                d = self.lstm(scope, {k: names[k] for k in lstm_keys})
            else:
                continue
            if d is not None:
                out.append(d)
        return out

    def _lstm_shaped(self, names) -> bool:
        """kernel [I + P, 4H] and bias [4H], I >= 1: an LSTM cell's pair (P = H, or the
        projection's). A Dense(4H) on an H-wide output (kernel [H, 4H]) is not one."""
        k, b = np.shape(self.v[names["kernel"]]), np.shape(self.v[names["bias"]])
        if len(k) != 2 or len(b) != 1 or k[1] % 4 or k[1] == 0 or b[0] != k[1]:
            return False
        proj = names.get("projection/kernel")
        P = np.shape(self.v[proj])[1] if proj else k[1] // 4
        return k[0] > P

    def _incomplete(self, scope, keys, missing):
        self.refuse(
            scope or "(root)",
            "variables",
            sorted(keys),
            f"an incomplete recurrent cell: missing {sorted(missing)}",
        )


def describe_tf1(source: Source, statements: Statements, exclude: set[str] = frozenset()):
    """`(descriptions, refusals)` of a TF1 checkpoint's recurrent cells."""
    describer = _Describer(source, statements, set(exclude))
    out = describer.run()
    return out, describer.refusals
