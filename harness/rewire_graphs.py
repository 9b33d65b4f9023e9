"""Rewires the graphs the converter reads cells from, one operand at a time, and checks each
conversion against TensorFlow running the rewired file: a graph reader must refuse a step that
computes anything other than its cell, or port it exactly, never port the cell TF no longer
computes.

    python harness/rewire_graphs.py [--limit N] [--seed 0] [--artifacts a,b] [--only TEXT]
        [--plant NAME] [--json PATH]

Artifacts (written at the start by TF 2.21 and Keras 3): TF1 cells frozen by
`convert_variables_to_constants` (one static_rnn step: LSTMCell with peepholes and a cell clip,
LSTMCell with a projection and its clip, BasicLSTMCell, GRUCell; dynamic_rnn's loop body:
LSTMCell with peepholes and a clip, GRUCell) and Keras 3 exports (LSTM, LSTM without bias, GRU,
GRU reset_after=False, GRU go_backwards, SimpleRNN, a Bidirectional LSTM, an LSTM after a
Masking layer).

A rewire is one data input of one of the step's ops (the cell's scope in a frozen graph, a loop
body of a SavedModel) read from another tensor of the step's graph of the same dtype and static
shape that does not depend on the op (TF imports it: no cycle). Each is converted
(`convert`) and, where that succeeds, verified (`verify`: TF runs the rewired file):

* refused: the converter refused it (ValueError naming what it cannot read);
* agrees: converted, and every output and gradient within verify's tolerance of TF's (the
  rewire computes the same, e.g. one zeros tensor read for another);
* FAIL: converted, and TF computes something else: a silent wrong port;
* unverified: converted, verify could not run it (its reason listed);
* error: any other exception in convert or verify (a traceback).

Exit status 1 on a FAIL or an error. `--plant NAME` disables one of the readers' checks first
(`tf1_closed`: graphs/tf1_cells.py's closed-step rule; `keras_bias_rows`: graphs/keras_loops.py's
GRU bias rows), so that a run shows the harness finds what that check catches; `--only TEXT` keeps
the rewires of ops whose name contains TEXT.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
B, T, I, H = 2, 5, 3, 4


def _tf1_cells():
    """name -> (the cell's scope, the cell)"""
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl as rci

    lstm = "rnn/lstm_cell"
    return {
        "tf1_lstm_peephole_clip": (
            lstm,
            lambda: rci.LSTMCell(H, use_peepholes=True, cell_clip=1.0, forget_bias=0.5),
        ),
        "tf1_lstm_projection": (lstm, lambda: rci.LSTMCell(H, num_proj=2, proj_clip=0.3)),
        "tf1_basic_lstm": ("rnn/basic_lstm_cell", lambda: rci.BasicLSTMCell(H, forget_bias=0.25)),
        "tf1_gru": ("rnn/gru_cell", lambda: rci.GRUCell(H)),
        "tf1_dynamic_lstm": ("", lambda: rci.LSTMCell(H, use_peepholes=True, cell_clip=1.0)),
        "tf1_dynamic_gru": ("", lambda: rci.GRUCell(H)),
    }


def _keras_layers(keras):
    L = keras.layers
    return {
        "k3_lstm": lambda: L.LSTM(H, return_sequences=True),
        "k3_lstm_no_bias": lambda: L.LSTM(H, use_bias=False, unit_forget_bias=False),
        "k3_gru": lambda: L.GRU(H, return_sequences=True),
        "k3_gru_reset_before": lambda: L.GRU(H, reset_after=False),
        "k3_gru_backwards": lambda: L.GRU(H, go_backwards=True, return_sequences=True),
        "k3_simple_rnn": lambda: L.SimpleRNN(H, return_sequences=True),
        "k3_bidirectional_lstm": lambda: L.Bidirectional(L.LSTM(3, return_sequences=True)),
        "k3_masked_lstm": lambda: L.LSTM(H, return_sequences=True),
    }


ARTIFACTS = [
    "tf1_lstm_peephole_clip",
    "tf1_lstm_projection",
    "tf1_basic_lstm",
    "tf1_gru",
    "tf1_dynamic_lstm",
    "tf1_dynamic_gru",
    "k3_lstm",
    "k3_lstm_no_bias",
    "k3_gru",
    "k3_gru_reset_before",
    "k3_gru_backwards",
    "k3_simple_rnn",
    "k3_bidirectional_lstm",
    "k3_masked_lstm",
]


def _uniform(rng, shape):
    import numpy as np

    return rng.uniform(-0.6, 0.6, tuple(shape)).astype(np.float32)


def _frozen_tf1(name: str, path: str) -> str:
    """The cell run by static_rnn for one step (by dynamic_rnn for T: its step a While body),
    its variables drawn and frozen to Consts."""
    import numpy as np
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        cell = _tf1_cells()[name][1]()
        if "dynamic" in name:
            xs = tf.compat.v1.placeholder(tf.float32, [T, B, I], name="x")
            out, state = tf.compat.v1.nn.dynamic_rnn(cell, xs, time_major=True, dtype=tf.float32)
        else:
            x = tf.compat.v1.placeholder(tf.float32, [B, I], name="x0")
            outs, state = tf.compat.v1.nn.static_rnn(cell, [x], dtype=tf.float32)
            out = outs[0]
        fetch = sorted({t.op.name for t in [out, *tf.nest.flatten(state)]})
        rng = np.random.default_rng(0)
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for v in tf.compat.v1.trainable_variables():
                v.load(_uniform(rng, v.shape.as_list()), sess)
            gd = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, g.as_graph_def(), fetch
            )
    with open(path, "wb") as fh:
        fh.write(gd.SerializeToString())
    return path


def _keras_export(name: str, path: str) -> str:
    import keras
    import numpy as np

    masking = [keras.layers.Masking(0.0)] if "masked" in name else []
    model = keras.Sequential([keras.Input((T, I)), *masking, _keras_layers(keras)[name]()])
    rng = np.random.default_rng(0)
    for w in model.trainable_weights:
        w.assign(_uniform(rng, w.shape))
    with contextlib.redirect_stdout(io.StringIO()):
        model.export(path, verbose=False)
    return path


def _output_refs(op, args: set[str]) -> list[str]:
    """How a function body names `op`'s outputs, in flat order ("node:argument:k"; an argument
    by its name)."""
    if op.name in args:
        return [op.name]
    refs = []
    for a in op.op_def.output_arg:
        if a.number_attr:
            n = op.get_attr(a.number_attr)
        elif a.type_list_attr:
            n = len(op.get_attr(a.type_list_attr))
        else:
            n = 1
        refs += [f"{op.name}:{a.name}:{k}" for k in range(n)]
    return refs


def _rewires(graph, node_defs, targets, ref_of) -> list[tuple[str, int, str]]:
    """`(node, input index, new input)` for every target node's data input: another float32
    tensor of `graph` of the same static shape, not the node's own and not downstream of it."""
    import tensorflow as tf

    shapes, below = {}, {}
    for op in graph.get_operations():
        for ref, t in zip(ref_of(op), op.outputs, strict=False):
            if t.dtype == tf.float32 and t.shape.rank is not None:
                shapes[ref] = tuple(t.shape.as_list())

    def downstream(op):
        if op.name not in below:
            below[op.name] = set()
            for t in op.outputs:
                for c in t.consumers():
                    below[op.name] |= {c.name} | downstream(c)
        return below[op.name]

    out = []
    for n in node_defs:
        if n.name not in targets:
            continue
        later = downstream(graph.get_operation_by_name(n.name))
        for k, ref in enumerate(n.input):
            if ref.startswith("^") or ref not in shapes:
                continue
            for other, shape in shapes.items():
                src = other.split(":")[0]
                if shape == shapes[ref] and other != ref and src != n.name and src not in later:
                    out.append((n.name, k, other))
    return out


def _edits_of(graph_def, scope: str) -> list[tuple[str, int, str]]:
    """The rewires of the main graph's ops under `scope` (none: "") and of the loop bodies'
    ops (a body's op keyed "function::node")."""
    import tensorflow as tf
    from tensorflow.python.framework import function_def_to_graph

    edits = []
    if scope:
        g = tf.Graph()
        with g.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        targets = {
            n.name
            for n in graph_def.node
            if n.name.startswith(scope + "/") and n.op not in ("Const", "Identity")
        }
        main = lambda op: [t.name.removesuffix(":0") for t in op.outputs]  # noqa: E731
        edits += _rewires(g, graph_def.node, targets, main)
    for f in graph_def.library.function:
        if "while_body" not in f.signature.name:
            continue
        args = {a.name for a in f.signature.input_arg}
        body = function_def_to_graph.function_def_to_graph(f)
        targets = {n.name for n in f.node_def if n.op != "Const"}
        found = _rewires(body, f.node_def, targets, lambda op, a=args: _output_refs(op, a))
        edits += [(f"{f.signature.name}::{n}", k, new) for n, k, new in found]
    return edits


def _apply(graph_def, edit) -> None:
    key, k, new = edit
    fn, sep, node = key.rpartition("::")
    nodes = graph_def.node
    if sep:
        (f,) = [f for f in graph_def.library.function if f.signature.name == fn]
        nodes = f.node_def
    next(n for n in nodes if n.name == node).input[k] = new


class _Frozen:
    """A frozen TF1 GraphDef: rewires of the cell scope's ops (static_rnn) or of its loop body
    (dynamic_rnn)."""

    def __init__(self, name, workdir):
        import tensorflow as tf

        self.path = _frozen_tf1(name, os.path.join(workdir, f"{name}.pb"))
        self.gd = tf.compat.v1.GraphDef.FromString(open(self.path, "rb").read())
        self.edits = _edits_of(self.gd, _tf1_cells()[name][0])

    def write(self, edit, workdir) -> str:
        gd = type(self.gd)()
        gd.CopyFrom(self.gd)
        _apply(gd, edit)
        path = os.path.join(workdir, "rewired.pb")
        with open(path, "wb") as fh:
            fh.write(gd.SerializeToString())
        return path


class _SavedModel:
    """A Keras 3 export: rewires of its loop bodies' ops (each body a FunctionDef)."""

    def __init__(self, name, workdir):
        from tensorflow.core.protobuf import saved_model_pb2

        self.path = _keras_export(name, os.path.join(workdir, name))
        self.sm = saved_model_pb2.SavedModel.FromString(
            open(os.path.join(self.path, "saved_model.pb"), "rb").read()
        )
        self.edits = _edits_of(self.sm.meta_graphs[0].graph_def, "")

    def write(self, edit, workdir) -> str:
        from tensorflow.core.protobuf import saved_model_pb2

        sm = saved_model_pb2.SavedModel()
        sm.CopyFrom(self.sm)
        _apply(sm.meta_graphs[0].graph_def, edit)
        path = os.path.join(workdir, "rewired")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(self.path, path)
        with open(os.path.join(path, "saved_model.pb"), "wb") as fh:
            fh.write(sm.SerializeToString())
        return path


def _plant(name: str) -> None:
    """Disables one reader check (see the module docstring)."""
    from torch_lstm_grad.porting.graphs import keras_loops as keras_graph
    from torch_lstm_grad.porting.graphs import tf1_cells

    if name == "tf1_closed":
        tf1_cells._closed = lambda *args: None
    elif name == "keras_bias_rows":
        reads = keras_graph._reads_bias
        keras_graph._reads_bias = lambda b, ref, row=None: (
            reads(b, ref, None) or any(reads(b, ref, k) for k in (0, 1))
        )
    else:
        raise SystemExit(f"--plant: no check named {name!r} (tf1_closed, keras_bias_rows)")


def _outcome(src, workdir) -> tuple[str, str]:
    from torch_lstm_grad.porting.convert import convert
    from torch_lstm_grad.porting.verify import verify

    out = os.path.join(workdir, "port.pt")
    quiet = io.StringIO()
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            convert(src, out, log=lambda *a: None, warn=lambda *a: None)
    except ValueError as err:
        return "refused", str(err).splitlines()[0][:160]
    except Exception as err:  # noqa: BLE001 - any other is what the run reports
        return "error", f"convert: {type(err).__name__}: {err}"[:200]
    try:
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            report = verify(src, out)
    except Exception as err:  # noqa: BLE001
        return "error", f"verify: {type(err).__name__}: {err}"[:200]
    if report.failures():
        return "FAIL", ", ".join(f"{t} {e:.2e}" for _, t, e in report.failures()[:3])
    if not report.errors:
        return "unverified", "; ".join(report.not_verified.values())[:200]
    return "agrees", ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=0, help="rewires per artifact (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--artifacts", default=",".join(ARTIFACTS))
    ap.add_argument("--only", default="", help="rewires of ops whose name contains this")
    ap.add_argument("--plant", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    names = [a for a in args.artifacts.split(",") if a]
    unknown = sorted(set(names) - set(ARTIFACTS))
    if unknown:
        raise SystemExit(f"--artifacts: unknown {unknown}; known: {', '.join(ARTIFACTS)}")
    if args.plant:
        _plant(args.plant)
    started, results = time.time(), {}
    with tempfile.TemporaryDirectory(prefix="rewire-") as workdir:
        for name in names:
            art = (_Frozen if name.startswith("tf1_") else _SavedModel)(name, workdir)
            edits = [e for e in art.edits if args.only in e[0].rpartition("::")[2]]
            random.Random(f"{args.seed}:{name}").shuffle(edits)
            edits = edits[: args.limit] if args.limit else edits
            tally, notes = (
                dict.fromkeys(("refused", "agrees", "FAIL", "unverified", "error"), 0),
                [],
            )
            for edit in edits:
                kind, why = _outcome(art.write(edit, workdir), workdir)
                tally[kind] += 1
                if kind not in ("refused", "agrees"):
                    notes.append(f"{kind}: {edit[0]}[{edit[1]}] <- {edit[2]}: {why}")
            results[name] = {"rewires": len(art.edits), "run": len(edits), **tally, "notes": notes}
            print(f"{name}: {len(edits)} of {len(art.edits)} rewires: " + ", ".join(
                f"{k} {v}" for k, v in tally.items() if v), flush=True)  # fmt: skip
            for line in notes:
                print("  " + line, flush=True)
    bad = sum(r["FAIL"] + r["error"] for r in results.values())
    summary = {
        "seed": args.seed,
        "limit": args.limit,
        "plant": args.plant,
        "seconds": round(time.time() - started, 1),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "artifacts": results,
    }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=1)
    print(f"{sum(r['run'] for r in results.values())} rewires in {summary['seconds']} s: "
          f"{bad} FAIL or error", flush=True)  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
