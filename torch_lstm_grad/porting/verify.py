"""`verify`: a converted file against TensorFlow running the original artifact, on random inputs
(`torch-lstm-grad convert SRC -o OUT --verify`, `torch_lstm_grad.verify(SRC, OUT)`).

For every ported layer and every case (batch sizes, lengths, a mask and initial states where
the layer takes them) both sides compute the outputs (final states included) and the gradients
of one loss `Σ_k Σ out_k · R_k` with respect to the input, the initial states and every weight;
the report holds, per layer and tensor, the largest scaled error `max |ours − TF| / max(1,
max |TF|)` over the cases.

What TF runs is the artifact itself, never a layer rebuilt from the port's description (which
could only agree with itself):

* Keras files (`.keras`, legacy `.h5` with its config; weights-only files and TF2 checkpoints
  with `--config`): the model loaded by the Keras that wrote it (Keras 3, or tf_keras for a
  Keras 2 file), and each recurrent layer called on its own;
* SavedModels: the layer's part of the chosen signature's loaded function, cut out by TF's
  `prune` between the layer's input (and its mask and initial-state tensors) and its outputs,
  the weights its captured variables (tf_keras' SavedModels through tf_keras where it imports);
  a TF1 cell or fused op found in the saved functions, as TF1 cells are;
* TF1 cells (checkpoints with a meta graph, frozen graphs, TF1 SavedModels): one step of the
  cell (a fused op's whole sequence), the graph's own NodeDefs between the step's inputs and its
  new h and c copied into a graph of their own, the variables' values as constants
  (`_TF1Cells`); LSTMBlockCell and GRUBlockCell, which TF 2 cannot differentiate, with the
  gradients TF1's tf.contrib registered for them (`_contrib_gradients`).

* cuDNN's op on an opaque buffer (a TF1 graph's CudnnRNN / V2 / V3), which TF runs on a GPU only:
  TF's composite cells on the buffer's canonical weights (composite_cells.py).

What cannot be run so (a file without a model config or without its graph, stacked or
bidirectional canonical cuDNN layers, cuDNN layers where TF has no kernel) is said per layer,
"not verified" with the reason.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass, field

import numpy as np
import torch

from .build import tf1_cells
from .composite_cells import CompositeCudnn
from .convert import load, read_source
from .graphs.cudnn_ops import cudnn_ops_on
from .graphs.graph_def import through_identities
from .graphs.tf1_cells import cell_at
from .source import keras_version_tuple

__all__ = ["VerifyReport", "VerifyUnavailable", "as_keras_2_2_meant", "verify"]


class VerifyUnavailable(RuntimeError):
    """TensorFlow (or the Keras that wrote the file) is not importable here."""


class _Unverifiable(Exception):
    pass


@dataclass
class VerifyReport:
    """`errors[layer][tensor]`: the largest scaled error over the cases; `not_verified[layer]`:
    why a layer could not be run by TF; `ok`: no error above `tol`."""

    source: str
    tol: float
    cases: list[str] = field(default_factory=list)
    errors: dict[str, dict[str, float]] = field(default_factory=dict)
    float64: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    not_verified: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)
    model_cases: list[str] = field(default_factory=list)  # the whole model's

    @property
    def ok(self) -> bool:
        return all(e <= self.tol for per in self.errors.values() for e in per.values())

    def failures(self) -> list[tuple[str, str, float]]:
        return [
            (layer, tensor, e)
            for layer, per in self.errors.items()
            for tensor, e in per.items()
            if not e <= self.tol
        ]

    def add(self, layer: str, tensor: str, error: float) -> None:
        per = self.errors.setdefault(layer, {})
        per[tensor] = max(per.get(tensor, 0.0), error)

    def __str__(self) -> str:
        lines = [
            f"verify {self.source}: max scaled error |ours - TF| / max(1, |TF|) over "
            f"{len(self.cases)} cases ({'; '.join(self.cases)}), tolerance {self.tol:g}"
        ]
        width = max([len(t) for per in self.errors.values() for t in per] + [6])
        for layer in sorted(set(self.errors) | set(self.not_verified)):
            lines.append(f"  {layer}:")
            if layer in self.not_verified:
                lines.append(f"    not verified: {self.not_verified[layer]}")
            for tensor, e in self.errors.get(layer, {}).items():
                mark = "ok" if e <= self.tol else "FAIL"
                extra = ""
                if layer in self.float64 and tensor in self.float64[layer]:
                    tf64, ours64 = self.float64[layer][tensor]
                    extra = f"   vs float64: TF {tf64:.2e}, ours {ours64:.2e}"
                lines.append(f"    {tensor.ljust(width)}  {e:.2e}  {mark}{extra}")
            for note in self.notes.get(layer, []):
                lines.append(f"    note: {note}")
        bad = self.failures()
        if bad:
            lines.append(
                f"FAILED: {len(bad)} tensors above the tolerance: "
                + ", ".join(f"{layer} {tensor} ({e:.2e})" for layer, tensor, e in bad)
            )
        elif not self.errors:
            lines.append("nothing verified (see why above)")
        else:
            done = sorted(set(self.errors) - set(self.not_verified) - {MODEL})
            skipped = sorted(set(self.not_verified) - {MODEL})
            if done or skipped:
                lines.append(
                    f"verified: every tensor of {', '.join(done)} within the tolerance"
                    + (f"; not verified: {', '.join(skipped)}" if skipped else "")
                )
            if MODEL in self.errors and MODEL not in self.not_verified:
                lines.append(
                    f"verified: the whole model, every output and gradient, over "
                    f"{len(self.model_cases)} cases ({'; '.join(self.model_cases)}), within the "
                    "tolerance"
                )
        return "\n".join(lines)


def _scaled(ours, theirs) -> float:
    ours = ours.detach().double().cpu().numpy() if torch.is_tensor(ours) else np.asarray(ours)
    theirs = np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape:
        return float("inf")
    if theirs.size == 0:
        return 0.0
    return float(np.abs(ours - theirs).max() / max(1.0, float(np.abs(theirs).max())))


def _flat(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


# -- what TF runs ------------------------------------------------------------------------------


@dataclass
class _Case:
    x: np.ndarray  # [B, T, I] (time-major layers: [T, B, I])
    mask: np.ndarray | None
    initial: list[np.ndarray] | None


@dataclass
class _TFResult:
    outputs: list[np.ndarray]
    d_input: np.ndarray
    d_initial: list[np.ndarray]
    d_weights: dict[str, np.ndarray]  # module parameter name -> gradient
    # Where the module packs the weights (cuDNN's opaque params): `(parameter, [(the packed
    # direction, TF's derivative along it)])`, random directions in TF's variables.
    directions: tuple | None = None


def _tf_loss(tf, outs, values, rng):
    """The loss `Σ_k Σ out_k · R_k` on TF's outputs `outs` (tensors, or a graph's symbols whose
    values are `values`), and the random R_k drawn for it (the module's loss reuses them)."""
    rs = [rng.standard_normal(np.shape(v)).astype(np.float32) for v in values]
    return tf.add_n([tf.reduce_sum(o * r) for o, r in zip(outs, rs, strict=True)]), rs


def _weight_params(layer, weights) -> list[str]:
    """The module parameter holding each of a Keras layer's `weights`: its own name's last part
    (`kernel`), under `forward_layer.` or `backward_layer.` in a Bidirectional, by the wrapped
    layer that holds it (a `backward_layer` the model gives keeps its own name, not Keras'
    `backward_<name>`)."""
    direction = {}
    for attr in ("forward_layer", "backward_layer"):
        for w in getattr(getattr(layer, attr, None), "trainable_weights", ()):
            direction[id(w)] = f"{attr}."
    return [
        direction.get(id(w), "")
        + (getattr(w, "path", None) or w.name).split("/")[-1].removesuffix(":0")
        for w in weights
    ]


def _run_keras_layer(tf, layer, case: _Case, rng, valid=None) -> tuple[_TFResult, list]:
    """A Keras layer on the case under TF's tape: its outputs and the gradients of the loss on
    them; `valid [B, T]`: a sequence output's steps outside it taken as zeros (so weighed by
    zero in the loss)."""
    xt = tf.constant(case.x)
    inits = [tf.constant(s) for s in case.initial] if case.initial is not None else []
    kwargs = {}
    if case.mask is not None:
        kwargs["mask"] = tf.constant(case.mask)
    if inits:
        kwargs["initial_state"] = inits
    with tf.GradientTape() as tape:
        tape.watch(xt)
        for s in inits:
            tape.watch(s)
        outs = _flat(layer(xt, training=False, **kwargs))
        if valid is not None:
            keep = tf.constant(valid[:, :, None].astype(np.float32))
            outs = [o * keep if len(o.shape) == 3 else o for o in outs]
        loss, rs = _tf_loss(tf, outs, outs, rng)
    weights = list(layer.trainable_weights)
    grads = tape.gradient(loss, [xt, *inits, *weights])
    names = _weight_params(layer, weights)
    n = len(inits)
    return (
        _TFResult(
            [o.numpy() for o in outs],
            grads[0].numpy(),
            [g.numpy() for g in grads[1 : 1 + n]],
            {p: g.numpy() for p, g in zip(names, grads[1 + n :], strict=True)},
        ),
        rs,
    )


class _KerasModel:
    """The Keras model of a file, loaded by the Keras that wrote it; each layer run alone."""

    def __init__(self, tf, model):
        self.tf, self.model = tf, model

    def time_steps(self, name: str) -> None:
        return None  # a Keras layer runs any length

    def batch_size(self, name: str) -> int:
        """A stateful layer's batch, which its state variables fix (Keras refuses another)."""
        rnn = _stateful(self.layer(name))
        if rnn is None or not getattr(rnn, "states", None):
            raise _Unverifiable(f"the loaded {name!r} is not a built stateful layer")
        return int(rnn.states[0].shape[0])

    def layer(self, name: str):
        todo = [self.model]
        while todo:
            m = todo.pop()
            for layer in getattr(m, "layers", []):
                if layer.name == name:
                    return layer
                todo.append(layer)
        raise _Unverifiable(f"the loaded model has no layer named {name!r}")

    def run(self, name: str, module, case: _Case, rng) -> _TFResult:
        tf = self.tf
        layer = self.layer(name)
        if _stateful(layer) is not None:
            layer.reset_states()
        return _run_keras_layer(tf, layer, case, rng)


class _SavedFunctions:
    """A SavedModel loaded by TF; a layer is the part of the signature's function between its
    input (its mask, its initial states) and its outputs, cut out by `prune`."""

    def __init__(self, tf, directory: str, source):
        from tensorflow.python.eager import wrap_function

        self.tf, self.source, self.wrap = tf, source, wrap_function
        self.loaded = tf.saved_model.load(directory)
        self.signature = self.loaded.signatures[source.signature]

    def time_steps(self, name: str) -> int | None:
        """The length the saved function was traced for (its loops run that many steps)."""
        io = self.source.layers[name].graph_io
        g = self._graph_with(io["outputs"][0].split(":")[0])
        shape = g.get_tensor_by_name(io["input"]).shape
        return shape[1] if shape.rank == 3 else None

    def _graph_with(self, op_name: str):
        todo, seen = [self.signature.graph], set()
        while todo:
            g = todo.pop()
            try:
                g.get_operation_by_name(op_name)
                return g
            except KeyError:
                pass
            for op in g.get_operations():
                if op.type in ("StatefulPartitionedCall", "PartitionedCall"):
                    fn = op.get_attr("f").name
                    if fn not in seen:
                        seen.add(fn)
                        todo.append(g._get_function(fn).graph)
        raise _Unverifiable(f"the loaded signature runs no op {op_name}")

    def run(self, name: str, module, case: _Case, rng):
        tf = self.tf
        cfg = self.source.layers.get(name)
        io = getattr(cfg, "graph_io", None) if cfg is not None else None
        if io is None:
            if module.port_description.kind.startswith("tf1."):
                # a TF1 cell or fused op the describer found in the saved functions' graph:
                # its own step, run as a TF1 file's is
                return _TF1Cells(tf, self.source).run(name, module, case, rng)
            raise _Unverifiable("the layer was not read from the saved functions")
        if io.get("cudnn"):  # TF has no CPU kernel for CudnnRNNV3: Keras' loop instead
            return _keras_loop_of(self.tf, self.source, module, case, rng)
        g = self._graph_with(io["outputs"][0].split(":")[0])
        t = g.get_tensor_by_name
        feeds = [t(io["input"])]
        values = [tf.constant(case.x)]
        if io["mask"] is not None:
            feeds.append(t(io["mask"]))
            values.append(tf.constant(case.mask))
        inits = [tf.constant(s) for s in case.initial] if case.initial is not None else []
        feeds += [t(n) for n in io["initial"]]
        fetches = [t(n) for n in io["outputs"]]
        pruned = self.wrap.WrappedFunction(g, variable_holder=None).prune(feeds, fetches)
        # The weights: the function's captured variables, named by the reader's graph.
        handles, names = [], []
        graph = self.source.graph
        owner = {k: n for n, keys in graph.aliases.items() for k in keys}
        d = module.port_description
        roles = {v: role for role, v in d.weights.items()}
        roles |= {v: f"{r}.{role}" for r, c in d.children.items() for role, v in c.weights.items()}
        for external, internal in g.captures:
            key = graph.resolve((f"{io['function']}::{internal.op.name}", 0))[0]
            var = owner.get(key)
            if var in roles:
                handles.append(external)
                names.append(_module_param(roles[var]))
        with tf.GradientTape() as tape:
            tape.watch(values[0])
            for h in handles:
                tape.watch(h)
            for s in inits:
                tape.watch(s)
            outs = _flat(pruned(*values, *inits))
            loss, rs = _tf_loss(tf, outs, outs, rng)
        grads = tape.gradient(loss, [values[0], *inits, *handles])
        n = len(inits)
        return (
            _TFResult(
                [o.numpy() for o in outs],
                grads[0].numpy(),
                [g_.numpy() for g_ in grads[1 : 1 + n]],
                {  # None: the pruned function does not read the weight (a zero gradient)
                    p: g_.numpy() if g_ is not None else None
                    for p, g_ in zip(names, grads[1 + n :], strict=True)
                },
            ),
            rs,
        )


_STEP_CELLS = {"tf1.LSTMCell", "tf1.BasicLSTMCell", "tf1.LSTMBlockCell", "tf1.GRUCell",
               "tf1.GRUBlockCell"}  # fmt: skip


def _keras_layer_of(keras, d, variables):
    """A Keras 3 layer as the file describes it (`d`, a keras.LSTM / keras.GRU description or
    a keras.Bidirectional of them) holding the file's weights (`variables`), not the port's:
    a wrong port is compared with what the file holds."""

    def rnn(c):
        kwargs = {k: bool(c.value(k)) for k in ("return_sequences", "return_state",
                                                "go_backwards")}  # fmt: skip
        units = int(np.shape(variables[c.weights["recurrent_kernel"]])[0])
        if c.kind == "keras.GRU":
            return keras.layers.GRU(units, reset_after=True, use_cudnn=False, **kwargs)
        return keras.layers.LSTM(units, use_cudnn=False, **kwargs)

    def weights(c):
        return [np.asarray(variables[c.weights[r]]) for r in ("kernel", "recurrent_kernel",
                                                              "bias")]  # fmt: skip

    if d.kind == "keras.Bidirectional":
        fw, bw = d.children["forward"], d.children["backward"]
        layer = keras.layers.Bidirectional(
            rnn(fw), backward_layer=rnn(bw), merge_mode=d.value("merge_mode")
        )
        layer.build((None, None, int(np.shape(variables[fw.weights["kernel"]])[0])))
        layer.forward_layer.set_weights(weights(fw))
        layer.backward_layer.set_weights(weights(bw))
    else:
        layer = rnn(d)
        layer.build((None, None, int(np.shape(variables[d.weights["kernel"]])[0])))
        layer.set_weights(weights(d))
    return layer


def _keras_loop_of(tf, source, module, case: _Case, rng) -> tuple[_TFResult, list]:
    """A layer saved on cuDNN's kernel (graphs/keras_cudnn.py), run as Keras' standard path on
    the same weights: the same function without a mask; with a right-padded one the same valid
    steps and states, where the loop repeats the last output at padded steps and cuDNN writes
    zeros (docs/cudnn.md §13). Those steps of Keras' sequence outputs are taken as zeros, and
    the loss weighs them by zero, so the port is held to cuDNN's zeros there."""
    import keras

    if keras.backend.backend() != "tensorflow":
        raise _Unverifiable("Keras' standard path is run on its TensorFlow backend")
    d = module.port_description
    layer = _keras_layer_of(keras, d, source.variables)
    # the valid steps of each sequence output: a go_backwards layer's in its reading order
    flips = d.kind != "keras.Bidirectional" and bool(d.value("go_backwards"))
    valid = None if case.mask is None else (case.mask[:, ::-1] if flips else case.mask)
    return _run_keras_layer(tf, layer, case, rng, valid)


class _TF1Cells:
    """TF1 cells: the graph's own ops of one step (a fused op's whole sequence), copied with
    their NodeDefs into a graph of their own, between the step's inputs (x, h, c: fed) and its
    new h and c, the variables' values as constants; TF runs that graph and differentiates it
    (no loop: TF can, whatever loop the cell ran in)."""

    def __init__(self, tf, source):
        if source.graph is None:
            raise _Unverifiable(
                "the file stores no graph of the computation (a checkpoint without its .meta)"
            )
        self.tf, self.source, self.g = tf, source, source.graph

    def time_steps(self, name: str) -> None:
        return None

    def _cell(self, d):
        if d.kind == "tf1.CudnnLSTM":  # canonical names: the describer requires cell_0_0/kernel
            if d.value("num_layers") != 1 or d.value("direction") != "unidirectional":
                raise _Unverifiable(
                    "stacked or bidirectional canonical cuDNN layers are not verified yet"
                )
            scope = d.weights["cell_0_0/kernel"].rpartition("/")[0]
            cell = cell_at(self.g, scope, "lstm")
            if cell is None or cell.cls not in ("BlockLSTM", "BlockLSTMV2"):
                raise _Unverifiable(f"the {self.g.label} runs no fused BlockLSTM on {scope}")
            return cell
        if d.kind.startswith("tf1.Cudnn"):
            raise _Unverifiable(f"a {d.kind[4:]} is not verified yet")
        if "gates/kernel" in d.weights:
            scope, kind = d.weights["gates/kernel"].rpartition("/")[0], "gru"
            if scope.endswith("/gates"):
                scope = scope[: -len("/gates")]
        elif "kernel" in d.weights:
            scope, kind = d.weights["kernel"].rpartition("/")[0], "lstm"
        else:
            raise _Unverifiable(f"a {d.kind} is not verified yet (one step of a cell is)")
        cell = cell_at(self.g, scope, kind)
        if cell is None or cell.boundary is None:
            raise _Unverifiable(f"the {self.g.label} does not run {scope}")
        return cell  # its boundary complete: tf1_cells refuses a step without its x, h (c)

    def _graph_def(self, cell, d):
        """The cell's ops as a GraphDef: placeholders `in_<role>`, constants `w_<k>`."""
        from tensorflow.core.framework import graph_pb2, node_def_pb2

        tf, g = self.tf, self.g
        b = cell.boundary

        entry = {}  # (a fused op's inputs are fed by position: "at")
        for role, r in b["inputs"].items() if "at" not in b else ():
            ref = through_identities(g.nodes, r)
            if ref in entry:  # one initial state for both, as static_rnn's first step may
                raise _Unverifiable(
                    f"the step's {entry[ref]} and {role} are one tensor, {ref[0]}: its copy "
                    "cannot be fed them apart"
                )
            entry[ref] = role
        at = {where: role for role, where in b.get("at", {}).items()}
        var_names = set(d.weights.values())
        nodes, names, weights = [], {}, {}

        def visit(ref) -> str:
            ref = through_identities(g.nodes, ref)
            if ref in entry:
                return f"in_{entry[ref]}:0"
            key = g.resolve(ref)[0]
            if key in var_names:
                if key not in weights:
                    const = node_def_pb2.NodeDef(name=f"w_{len(weights)}", op="Const")
                    value = np.asarray(self.source.variables[key])
                    const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
                    const.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
                    nodes.append(const)
                    weights[key] = const.name
                return f"{weights[key]}:0"
            node = g.nodes.get(ref[0])
            if node is None:
                raise _Unverifiable(f"the cell reads {ref[0]}, which the graph does not hold")
            # A value from outside the step that is not a weight (a TF2 loop captures the
            # zeros a fused cell without peepholes reads as its argument): its outer value,
            # copied in; a loop's own variables and placeholders have none there.
            if node.op in ("Enter", "RefEnter", "_Arg", "ReadVariableOp"):
                outer = g.resolve(ref)
                if outer != ref:
                    return visit(outer)
            if node.op in ("Merge", "Switch", "_Arg", "Enter", "RefEnter", "Placeholder"):
                raise _Unverifiable(
                    f"the step reads {ref[0]} ({node.op}) besides its inputs x, h, c"
                )
            if node.name not in names:
                nd = node_def_pb2.NodeDef.FromString(node.raw)
                nd.name = f"op_{len(names)}"
                names[node.name] = nd.name
                inputs = [
                    f"in_{at[(node.name, k)]}:0" if (node.name, k) in at else visit(r)
                    for k, r in enumerate(node.inputs)
                ]
                del nd.input[:]
                nd.input.extend(inputs)
                nd.ClearField("device")
                for private in [k for k in nd.attr if k.startswith("_")]:
                    # colocations with nodes not copied; `_output_shapes`, the saved graph's
                    # batch size, which TF would take as static shapes
                    del nd.attr[private]
                nodes.append(nd)
            return f"{names[node.name]}:{ref[1]}"

        outputs = {role: visit(r) for role, r in b["outputs"].items()}
        for role in sorted(set(entry.values()) | set(at.values())):
            ph = node_def_pb2.NodeDef(name=f"in_{role}", op="Placeholder")
            ph.attr["dtype"].type = (
                tf.int64 if role == "seq_len_max" else tf.float32
            ).as_datatype_enum
            nodes.append(ph)
        graph_def = graph_pb2.GraphDef()
        graph_def.node.extend(nodes)
        return graph_def, outputs, weights

    def run(self, name: str, module, case: _Case, rng):
        tf = self.tf
        d = module.port_description
        if d.kind == "tf1.CudnnRNN":  # TF runs the op on a GPU only: its composite cells
            buffer = d.weights["opaque_kernel"]
            ops = cudnn_ops_on(self.g, {buffer, *self.g.aliases.get(buffer, [])})
            if not ops:
                raise _Unverifiable(f"the {self.g.label} runs no cuDNN op on {buffer}")
            cells = CompositeCudnn(tf, self.source.variables[buffer], ops[0].attrs,
                                   d.value("num_layers"), d.value("units"),
                                   d.value("input_size"))  # fmt: skip
            return _run_composite(tf, cells, case, rng)
        cell = self._cell(d)
        graph_def, outputs, by_variable = self._graph_def(cell, d)
        owner = {v: role for role, v in d.weights.items()}
        cudnn = d.kind.startswith("tf1.Cudnn")
        weights = (
            by_variable
            if cudnn
            else {tf1_cells.PARAMS[owner[k]]: n for k, n in by_variable.items() if k in owner}
        )
        sequence = "seq_len_max" in cell.boundary["inputs"]
        gr = tf.Graph()
        with gr.as_default():
            with gr.gradient_override_map(_contrib_gradients(tf)):
                tf.import_graph_def(graph_def, name="")
            t = gr.get_tensor_by_name
            outs = [t(outputs["h"])]
            if "c" in outputs:
                outs.append(t(outputs["c"])[-1] if sequence else t(outputs["c"]))
            if sequence:  # the module returns the sequence h and the final (c, h)
                outs.append(outs[0][-1])
            feeds = {"x": case.x}
            roles = ["c", "h"] if "c" in cell.boundary["inputs"] else ["h"]
            for role, value in zip(roles, case.initial, strict=True):
                feeds[role] = value
            if sequence:
                feeds["seq_len_max"] = np.int64(case.x.shape[0])
            fed = {t(f"in_{r}:0"): v for r, v in feeds.items()}
            with tf.compat.v1.Session(graph=gr) as sess:
                values = sess.run(outs, fed)
                loss, rs = _tf_loss(tf, outs, values, rng)
                wrt = [t("in_x:0"), *(t(f"in_{r}:0") for r in roles)]
                wrt += [t(f"{n}:0") for n in weights.values()]
                grads = sess.run(tf.gradients(loss, wrt), fed)
        n = len(roles)
        d_weights = dict(zip(weights, grads[1 + n :], strict=True))
        directions = self._directions(d, d_weights, rng) if cudnn else None
        return (
            _TFResult(
                values,
                grads[0],
                list(grads[1 : 1 + n]),
                {} if cudnn else d_weights,
                directions,
            ),
            rs,
        )

    def _directions(self, d, d_weights, rng, count: int = 3):
        """cuDNN's packed params against TF's variables: along random directions V in the
        variables, TF's derivative Σ <dL/dvar, V> and the packed direction the converter's own
        (linear) packing makes of V, which the module's gradient must meet."""
        from types import SimpleNamespace

        out = []
        for _ in range(count):
            v = {
                k: rng.standard_normal(np.shape(g)).astype(np.float32) for k, g in d_weights.items()
            }
            entry = tf1_cells.cudnn_entry(SimpleNamespace(variables=v), d)
            packed = entry["state_dict"]["opaque_kernel"].numpy()
            out.append((packed, float(sum((d_weights[k] * v[k]).sum() for k in v))))
        return "opaque_kernel", out


def _run_composite(tf, cells: CompositeCudnn, case: _Case, rng) -> tuple[_TFResult, list]:
    """TF's composite cells holding a file's cuDNN buffer (composite_cells.py) on the case
    under TF's tape; the weights' gradient as the buffer's."""
    xt = tf.constant(case.x)
    inits = [tf.constant(s) for s in case.initial]
    with tf.GradientTape() as tape:
        tape.watch(xt)
        for s in inits:
            tape.watch(s)
        outs = cells(xt, inits)
        loss, rs = _tf_loss(tf, outs, outs, rng)
    grads = tape.gradient(loss, [xt, *inits, *cells.variables])
    n = len(inits)
    d_buffer = cells.packed_gradient([g.numpy() for g in grads[1 + n :]])
    return (
        _TFResult(
            [o.numpy() for o in outs],
            grads[0].numpy(),
            [g.numpy() for g in grads[1 : 1 + n]],
            {"opaque_kernel": d_buffer},
        ),
        rs,
    )


_CONTRIB = {"LSTMBlockCell": "TorchLstmGradContribLSTMBlockCell",
            "GRUBlockCell": "TorchLstmGradContribGRUBlockCell"}  # fmt: skip


@functools.cache  # registered once a process (each verify case asks)
def _contrib_gradients(tf) -> dict[str, str]:
    """The fused cells' gradients as TF1's tf.contrib.rnn registered them (TF 2 registers
    none): TF's LSTMBlockCellGrad / GRUBlockCellGrad kernel for the step, then the weights'
    gradients as products with the step's inputs. Registered under names of their own and
    applied to verify's graph alone (`gradient_override_map`), whatever the process holds."""
    from tensorflow.python.framework import ops

    def lstm(op, *grads):
        x, cs_prev, h_prev, w, wci, wcf, wco, b = op.inputs
        i, cs, f, o, ci, co, _ = op.outputs
        d_cs_prev, d_icfo, d_wci, d_wcf, d_wco = tf.raw_ops.LSTMBlockCellGrad(
            x=x, cs_prev=cs_prev, h_prev=h_prev, w=w, wci=wci, wcf=wcf, wco=wco, b=b, i=i,
            cs=cs, f=f, o=o, ci=ci, co=co, cs_grad=grads[1], h_grad=grads[6],
            use_peephole=op.get_attr("use_peephole"),
        )  # fmt: skip
        d_xh = tf.matmul(d_icfo, w, transpose_b=True)
        d_x, d_h_prev = tf.split(d_xh, [tf.shape(x)[1], tf.shape(h_prev)[1]], axis=1)
        d_w = tf.matmul(tf.concat([x, h_prev], 1), d_icfo, transpose_a=True)
        return d_x, d_cs_prev, d_h_prev, d_w, d_wci, d_wcf, d_wco, tf.reduce_sum(d_icfo, 0)

    def gru(op, *grads):
        x, h_prev, w_ru, w_c, b_ru, b_c = op.inputs
        r, u, c, _ = op.outputs
        d_x, d_h_prev, d_c_bar, d_ru_bar = tf.raw_ops.GRUBlockCellGrad(
            x=x, h_prev=h_prev, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c, r=r, u=u, c=c, d_h=grads[3]
        )
        d_w_ru = tf.matmul(tf.concat([x, h_prev], 1), d_ru_bar, transpose_a=True)
        d_w_c = tf.matmul(tf.concat([x, h_prev * r], 1), d_c_bar, transpose_a=True)
        return d_x, d_h_prev, d_w_ru, d_w_c, tf.reduce_sum(d_ru_bar, 0), tf.reduce_sum(d_c_bar, 0)

    for op, fn in (("LSTMBlockCell", lstm), ("GRUBlockCell", gru)):
        try:
            ops.RegisterGradient(_CONTRIB[op])(fn)
        except KeyError:  # registered by an earlier import of this module (a reload)
            pass
    return _CONTRIB


def _module_param(role: str) -> str:
    """A description's weight role as the module's parameter: `kernel`, or for a
    Bidirectional's child `forward.kernel` -> `forward_layer.kernel`."""
    head, _, leaf = role.rpartition(".")
    return f"{head}_layer.{leaf}" if head else leaf


def _before_keras_2_3(source) -> bool:
    version = source.writer.keras_version
    return bool(version) and keras_version_tuple(version)[:2] < (2, 3)


def as_keras_2_2_meant(model_config: dict) -> dict:
    """A Keras 2.0-2.2 model config (a copy) with what tf_keras 2.21 reads otherwise than those
    versions wrote it spelled out: a GRU without `reset_after` is the reset-before GRU (its bias
    shape says so, and the port reads it from there), and an Embedding's `dtype` "int32" was
    its input's, not its weights'. The weights are the file's, loaded by tf_keras."""
    config = copy.deepcopy(model_config)

    def edit(c):
        if isinstance(c, dict):
            inner = c.get("config")
            if isinstance(inner, dict):
                if c.get("class_name") == "GRU" and "reset_after" not in inner:
                    inner["reset_after"] = False
                if c.get("class_name") == "Embedding" and inner.get("dtype") == "int32":
                    del inner["dtype"]
            for v in c.values():
                edit(v)
        elif isinstance(c, list):
            for v in c:
                edit(v)

    edit(config)
    return config


def _keras_oracle(tf, path: str, source, config):
    """The Keras model of a Keras file, loaded by the Keras that wrote it."""
    major = source.writer.keras_major
    is_zip = path.endswith(".keras")
    has_config = bool(source.config_origin) and not source.config_origin.startswith("--config")
    if not has_config and config is None:  # (a SavedModel here has its keras_metadata.pb)
        raise _Unverifiable(
            "the file stores no model config for Keras to rebuild the layers from: give --config"
        )
    if major == 2:
        try:
            import tf_keras as keras
        except ImportError as err:
            raise _Unverifiable(
                "a Keras 2 file runs as Keras 2 in tf_keras, which is not installed "
                "(pip install tf_keras)"
            ) from err
    else:
        import keras
    try:
        legacy = _before_keras_2_3(source) and source.model_config is not None
        if has_config and legacy and path.endswith((".h5", ".hdf5")):
            meant = as_keras_2_2_meant(source.model_config)
            model = keras.models.model_from_json(json.dumps(meant))
            model.load_weights(path)
        elif has_config and (is_zip or path.endswith((".h5", ".hdf5"))):
            model = keras.models.load_model(path, compile=False)
        elif os.path.isdir(path) and major == 2:
            model = keras.models.load_model(path, compile=False)
        elif config is not None:
            with open(config) as fh:
                text = fh.read()
            model = keras.models.model_from_json(text)
            if os.path.isfile(path + ".index") and major == 3:  # a tf.train.Checkpoint
                tf.train.Checkpoint(model=model).read(path).expect_partial()
            else:  # a weights file, or tf.keras' TF-format save_weights
                model.load_weights(path)
        else:
            raise _Unverifiable(
                "the file stores no model config for Keras to rebuild the layers from: give "
                "--config"
            )
    except _Unverifiable:
        raise
    except Exception as err:  # Keras' own refusals: name them
        raise _Unverifiable(f"Keras could not load it ({type(err).__name__}: {err})") from err
    return _KerasModel(tf, model)


def _oracle(tf, path: str, source, config):
    if source.format.startswith("TF2 SavedModel"):
        if source.writer.keras_major == 2 and source.config_origin.endswith("metadata.pb"):
            try:
                return _keras_oracle(tf, path, source, None)
            except _Unverifiable:
                pass  # tf_keras is not installed: the saved functions
        return _SavedFunctions(tf, path, source)
    if source.writer.family == "keras" or source.layers:
        return _keras_oracle(tf, path, source, config)
    return _TF1Cells(tf, source)


# -- the comparison -------------------------------------------------------------------------------


def _shapes(module) -> tuple[int, list[int], str]:
    """`(input size, initial state widths, call)`: call "keras" (batch-major, or time-major
    with time_major), "step" (one [B, I] step of a TF1 cell), "sequence" ([T, B, I])."""
    from .. import keras_layers, modules

    if isinstance(module, keras_layers.KerasBidirectional):
        parts = [module.forward_layer, module.backward_layer]
        return parts[0].input_size, [m.units for m in parts for _ in range(m.num_states)], "keras"
    if isinstance(module, keras_layers.KerasRNN):
        return module.input_size, [module.units] * module.num_states, "keras"
    if isinstance(module, modules.GRUBlockCell):
        return module.input_size, [module.num_units], "step"
    if isinstance(module, (modules.LSTMBlockCell, modules.LSTMBlockFusedCell)):
        widths = [module.num_units, module.num_proj or module.num_units]
        call = "step" if isinstance(module, modules.LSTMBlockCell) else "sequence"
        return module.input_size, widths, call
    if getattr(module, "port_description", None) is not None and (
        module.port_description.kind == "tf1.CudnnRNN"
    ):  # a graph's buffer: the module's whole stack, states [L·D, B, n] (h, c)
        widths = [module.num_proj or module.num_units]
        if isinstance(module, modules.CudnnLSTM):
            widths.append(module.num_units)
        return module.input_size, widths, "opaque"
    if isinstance(module, modules.CudnnLSTM):
        return module.input_size, [module.num_units, module.num_units], "cudnn"
    raise _Unverifiable(f"a {type(module).__name__} is not verified yet")


def _stateful(layer):
    """The stateful RNN of a Keras layer or of its port: the layer itself or a Bidirectional's
    forward half (both halves are built from one config), else None."""
    for rnn in (layer, getattr(layer, "forward_layer", None)):
        if getattr(rnn, "stateful", False):
            return rnn
    return None


def _cases(module, batches, lengths, rng, fixed_T, takes_mask, takes_initial, keep_ends=False,
           right_padded=False):  # fmt: skip
    I, widths, call = _shapes(module)  # noqa: E741
    time_major = call in ("sequence", "cudnn", "opaque") or getattr(module, "time_major", False)
    stack = (module.num_layers * module.num_dirs,) if call == "opaque" else ()
    out = []
    for B in batches:
        for T in [1] if call == "step" else ([fixed_T] if fixed_T else lengths):
            shape = (B, I) if call == "step" else ((T, B, I) if time_major else (B, T, I))
            x = rng.standard_normal(shape).astype(np.float32)
            mask = None
            if takes_mask:
                mask = rng.random((B, T)) > 0.3
                if right_padded:  # each row's steps first, at least one; the first row full
                    ends = rng.integers(1, T + 1, B)
                    ends[0] = T
                    mask = np.arange(T)[None, :] < ends[:, None]
                if keep_ends:
                    mask[:, [0, -1]] = True
            initial = (
                [(0.5 * rng.standard_normal((*stack, B, u))).astype(np.float32) for u in widths]
                if takes_initial
                else None
            )
            label = f"B={B} " + ("one step" if call == "step" else f"T={T}")
            out.append((label + (", mask" if takes_mask else ""), _Case(x, mask, initial)))
    return out


def _call(module, x, mask, inits) -> list:
    """The module's outputs as TF's side lists them: a Keras layer's (output, states...), a
    TF1 step's (h, c) / (h,), a fused sequence's (outputs, c, h)."""
    _, _, call = _shapes(module)
    if call == "keras":
        return _flat(module(x, mask=mask, initial_state=inits or None))
    if call == "sequence":
        out, (c, h) = module(x, initial_state=tuple(inits) if inits else None)
        return [out, c, h]
    if call == "opaque":  # the module's own call: (output, (h, c)) / (output, (h,))
        # is_training (a backward needs it), without the dropout between layers that it draws
        dropout, module.dropout = module.dropout, 0.0
        try:
            out, states = module(x, initial_state=tuple(inits), training=True)
        finally:
            module.dropout = dropout
        return [out, *states]
    if call == "cudnn":  # [L·D, B, H] states, (h, c); TF1's cell orders them (c, h)
        out, (h, c) = module(x, initial_state=(inits[1][None], inits[0][None]))
        return [out, c[0], h[0]]
    if len(inits) == 2:  # an LSTM step: TF1 orders its state (c, h)
        _, (c, h) = module(x, (inits[0], inits[1]))
        return [h, c]
    _, h = module(x, inits[0] if inits else None)
    return [h]


def _ours(module, case: _Case, rs, dtype):
    x = torch.from_numpy(case.x).to(dtype).requires_grad_()
    inits = (
        [torch.from_numpy(s).to(dtype).requires_grad_() for s in case.initial]
        if case.initial is not None
        else []
    )
    mask = torch.from_numpy(case.mask) if case.mask is not None else None
    if hasattr(module, "reset_states"):
        module.reset_states()
    outs = _call(module, x, mask, inits)
    # (not strict: a count of outputs other than TF's is reported by _compare, not raised)
    loss = sum((o * torch.from_numpy(r).to(dtype)).sum() for o, r in zip(outs, rs, strict=False))
    params = dict(module.named_parameters())
    grads = torch.autograd.grad(loss, [x, *inits, *params.values()], allow_unused=True)
    n = len(inits)
    return outs, grads[0], list(grads[1 : 1 + n]), dict(zip(params, grads[1 + n :], strict=True))


def verify(
    src,
    converted,
    *,
    tol: float = 1e-5,
    float64: bool = False,
    signature: str | None = None,
    config=None,
    reader: str | None = None,
    batches=(1, 3),
    lengths=(1, 4, 7),
    seed: int = 0,
) -> VerifyReport:
    """The converted file `converted` against TF running `src` (see the module docstring).
    Raises VerifyUnavailable without TensorFlow."""
    # TF turns its oneDNN CPU kernels on by default only on CPUs with AVX-512 VNNI, BF16 or AMX;
    # without them its CPU Conv2D refuses channels_first (NCHW), so Keras could not run a model
    # with a channels_first convolution on an AVX2-only CPU. Unless TF_ENABLE_ONEDNN_OPTS is set,
    # TF runs here the kernels it runs on those CPUs (docs/porting.md); read at TF's import.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    try:
        import tensorflow as tf
    except ImportError as err:
        raise VerifyUnavailable("TensorFlow is needed for --verify") from err
    src = os.fspath(src)
    source = read_source(src, reader, config, signature)
    modules = load(converted)
    report = VerifyReport(src, tol)
    try:
        oracle = _oracle(tf, src, source, config)
    except _Unverifiable as err:
        for name in modules:
            report.not_verified[name] = str(err)
        return report
    rng = np.random.default_rng(seed)
    for name, module in sorted(modules.items()):
        d = module.port_description
        layer = d.name
        io = getattr(source.layers.get(layer), "graph_io", None)
        # A Keras RNN takes a mask (a Bidirectional: both halves do); the describer sets
        # zero_output_for_mask None where it takes none (cuDNN's layers)
        rnns = list(d.children.values()) or [d]
        takes_mask = (
            io["mask"] is not None
            if io is not None
            else all(r.value("zero_output_for_mask") is not None for r in rnns)
        )
        # Keras <= 2.2's masked steps (docs/porting.md, "Masked steps"), which no Keras that runs
        # today computes: they agree with today's from a row's first unmasked step on, so the
        # masks keep each row's first and last steps (a backward layer starts at the last); a
        # Bidirectional of then zeroed nothing where today's zeroes, and is fed no mask
        keep_ends = takes_mask and any(r.value("masked_outputs") == "previous_state" for r in rnns)
        if keep_ends and d.children:
            takes_mask = keep_ends = False
            report.notes.setdefault(name, []).append(
                "a Keras <= 2.2 Bidirectional zeroed no masked step, which no Keras running "
                "today reproduces: no mask fed"
            )
        elif keep_ends:
            report.notes.setdefault(name, []).append(
                "Keras <= 2.2's masked steps: each row's first and last steps unmasked, where "
                "today's Keras computes the same"
            )
        counts = {m.num_states for m in (getattr(module, "forward_layer", None),
                                        getattr(module, "backward_layer", None)) if m}  # fmt: skip
        # Keras' Bidirectional gives each direction half of the initial states: one that pairs
        # an LSTM (2 states) with a GRU (1) takes none it can split
        split = len(counts) > 1
        if split:
            report.notes.setdefault(name, []).append(
                "its directions keep 2 states and 1, which Keras' Bidirectional cannot take as "
                "initial states: none fed"
            )
        # a stateful layer (a Keras file's: SavedModels' are refused) starts from its own states
        stateful = _stateful(module) is not None
        # every other layer is fed initial states (a SavedModel's loop: graph_io holds them)
        takes_initial = not split and not stateful
        fixed_T = oracle.time_steps(layer) if io is not None else None
        try:
            sizes = (oracle.batch_size(layer),) if stateful else batches
            cudnn = io is not None and io.get("cudnn", False)
            if cudnn:
                report.notes.setdefault(name, []).append(
                    "saved on cuDNN's kernel, which TensorFlow cannot run on a CPU: compared "
                    "with Keras' standard path on the same weights, on right-padded masks; "
                    "padded steps compared as zeros (what cuDNN writes there)"
                )
            if d.kind == "tf1.CudnnRNN":
                report.notes.setdefault(name, []).append(
                    "cuDNN's op, which TensorFlow runs on a GPU only: compared with TF's "
                    "composite cells on the buffer's canonical weights (cuDNN's layout), called "
                    "time-major, full lengths, without dropout; the buffer's gradient element by "
                    "element"
                )
            cases = _cases(
                module, sizes, lengths, rng, fixed_T, takes_mask, takes_initial, keep_ends,
                right_padded=cudnn,
            )
            for label, case in cases:
                if label not in report.cases:
                    report.cases.append(label)
                try:
                    theirs, rs = oracle.run(layer, module, case, rng)
                except _Unverifiable:
                    raise
                except Exception as err:  # TF's own refusal to run it here
                    text = str(err).strip()
                    why = text.splitlines()[0] if text else ""
                    # tensorflow-cpu registers no cuDNN kernel at all; tensorflow (its GPU
                    # build) registers GPU ones and finds no GPU: each says so its own way.
                    if "no registered kernels" in text or "Could not find device for node" in text:
                        why = "no kernel here for one of its ops (cuDNN layers run on a GPU only)"
                    raise _Unverifiable(
                        f"TensorFlow could not run it here ({type(err).__name__}: {why})"
                    ) from err
                _compare(report, name, module, case, theirs, rs, float64)
        except _Unverifiable as err:
            report.not_verified[name] = str(err)
    if _has_model(converted):
        _verify_model(report, tf, oracle, converted, batches, lengths, rng)
    return report


MODEL = "(whole model)"


def _has_model(converted) -> bool:
    return isinstance(torch.load(converted, weights_only=True).get("model"), dict)


def model_inputs(model, spec: list[dict], B: int, T: int, rng, pad=True) -> list[np.ndarray]:
    """Random inputs of each of the model's inputs: token ids below an Embedding's
    `input_dim` (with `pad`, trailing zeros in the first row where it masks zeros, as
    padding), normal floats else; free axes take B (the batch) and T."""
    from .. import keras_layers

    consumers = {}
    for node in model.graph["nodes"]:
        args = node["args"]
        for ref in [args] if isinstance(args, list) and len(args) == 3 and isinstance(
            args[0], str
        ) else []:  # fmt: skip
            consumers.setdefault(ref[0], model.get_submodule(node["layer"]))
    out = []
    for ref, s in zip(model.graph["inputs"], spec, strict=True):
        shape = list(s["shape"] or [None, None])
        shape = [B if k == 0 else (T if d is None else int(d)) for k, d in enumerate(shape)]
        layer = consumers.get(ref[0])
        if isinstance(layer, keras_layers.KerasEmbedding) or "int" in str(s["dtype"]):
            high = layer.input_dim if isinstance(layer, keras_layers.KerasEmbedding) else 10
            x = rng.integers(1, high, shape).astype(np.int32)
            if pad and isinstance(layer, keras_layers.KerasEmbedding) and layer.mask_zero and len(
                shape
            ) > 1:  # fmt: skip
                x[0, shape[1] // 2 :] = 0
        else:
            x = rng.standard_normal(shape).astype(np.float32)
        out.append(x)
    return out


def _verify_model(report, tf, oracle, converted, batches, lengths, rng) -> None:
    """The whole model: Keras running the file's model against `load_model(converted)`, on
    random inputs of every input's kind; every output, the float inputs' gradients and every
    trainable weight's gradient (by position in Keras' `model.weights`)."""
    from .. import keras_layers
    from .convert import load_model

    keras_model = getattr(oracle, "model", None)
    if keras_model is None:
        report.not_verified[MODEL] = "the file's model is not loaded by Keras here"
        return
    ours = load_model(converted).eval()
    if any(getattr(m, "stateful", False) for m in ours.modules()):
        report.notes.setdefault(MODEL, []).append(
            "not run whole: a stateful layer fixes the batch and keeps its states from call "
            "to call; its layers are verified one by one"
        )
        return
    spec = torch.load(converted, weights_only=True)["model"]["spec"]["input_specs"]
    weights = list(ours.keras_weights().values())
    if len(weights) != len(keras_model.weights):
        report.not_verified[MODEL] = (
            f"Keras' model has {len(keras_model.weights)} weights, the port {len(weights)}"
        )
        return
    trainable = {id(w) for w in keras_model.trainable_weights}
    pairs = [(w, p) for w, p in zip(keras_model.weights, weights, strict=True)
             if id(w) in trainable]  # fmt: skip
    fixed = any(s["shape"] and len(s["shape"]) > 1 and s["shape"][1] is not None for s in spec)
    # a Keras <= 2.2 Bidirectional zeroed no masked step, which today's Keras does: no padding
    pad = not any(
        isinstance(m, keras_layers.KerasBidirectional)
        and m.forward_layer.masked_outputs == "previous_state"
        for m in ours.modules()
    )
    if not pad:
        report.notes.setdefault(MODEL, []).append(
            "a Keras <= 2.2 Bidirectional zeroed no masked step, which no Keras running today "
            "reproduces: no padding fed"
        )
    for B in batches:
        for T in lengths[-1:] if fixed else lengths:
            xs = model_inputs(ours, spec, B, T, rng, pad=pad)
            ins = [tf.constant(x) for x in xs]
            try:
                with tf.GradientTape() as tape:
                    for t in ins:
                        if t.dtype.is_floating:
                            tape.watch(t)
                    outs = _flat(keras_model(ins if len(ins) > 1 else ins[0], training=False))
                    loss, rs = _tf_loss(tf, outs, outs, rng)
                floats = [t for t in ins if t.dtype.is_floating]
                grads = tape.gradient(loss, floats + [w for w, _ in pairs])
            except Exception as err:  # TF's own refusal to run it here
                why = (str(err).strip().splitlines() or [""])[0]
                report.not_verified[MODEL] = f"Keras could not run it ({type(err).__name__}: {why})"
                return
            label = f"B={B} " + ", ".join(str(list(x.shape[1:])) for x in xs)
            if label not in report.model_cases:
                report.model_cases.append(label)
            tx = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in xs]
            mine = ours(*tx)
            mine = list(mine) if isinstance(mine, tuple) else [mine]
            loss_ours = sum((m * torch.as_tensor(r)).sum() for m, r in zip(mine, rs, strict=True))
            wanted = [t for t in tx if t.requires_grad] + [p for _, p in pairs]
            got = torch.autograd.grad(loss_ours, wanted, allow_unused=True)
            for k, (m, o) in enumerate(zip(mine, outs, strict=True)):
                report.add(MODEL, f"output {k}", _scaled(m.detach().numpy(), o.numpy()))
            for k, (g, t) in enumerate(zip(got, grads, strict=True)):
                what = f"d input {k}" if k < len(floats) else f"d {pairs[k - len(floats)][0].name}"
                theirs = np.zeros(1) if t is None else tf.convert_to_tensor(t).numpy()
                g = np.zeros_like(theirs) if g is None else g.numpy()
                report.add(MODEL, what, _scaled(g, theirs))


def _compare(report, name, module, case, theirs: _TFResult, rs, float64: bool) -> None:
    outs, dx, dinit, dparams = _ours(module, case, rs, torch.float32)
    if len(outs) != len(theirs.outputs):
        report.add(name, "number of outputs", float("inf"))
        return
    pairs = {
        f"output {k}": (o, t) for k, (o, t) in enumerate(zip(outs, theirs.outputs, strict=True))
    }
    pairs["d input"] = (dx, theirs.d_input)
    pairs |= {
        f"d initial_state {k}": (g, t)
        for k, (g, t) in enumerate(zip(dinit, theirs.d_initial, strict=True))
    }
    if theirs.directions is not None:
        param, along = theirs.directions
        g = dparams[param].double().numpy()  # (autograd.grad's: no graph to detach)
        for k, (packed, tf_value) in enumerate(along):
            ours = float((g * packed).sum())
            report.add(name, f"d weights along direction {k}", _scaled(np.float64(ours), tf_value))
    cudnn = module.port_description.kind.startswith("keras.CuDNN")
    if cudnn:  # the port converted cuDNN's layout: its weights are other numbers than TF's
        report.notes[name] = ["weight gradients not compared: the port converts cuDNN's layout"]
    for p, t in theirs.d_weights.items():
        if cudnn:
            break
        if p not in dparams:
            report.add(name, f"d {p} (no such parameter)", float("inf"))
            continue
        # TF's None: the loss does not depend on the weight, so its gradient is zero
        pairs[f"d {p}"] = (
            dparams[p],
            np.zeros(tuple(module.get_parameter(p).shape)) if t is None else t,
        )
    compared = set(theirs.d_weights) | ({theirs.directions[0]} if theirs.directions else set())
    missed = sorted(set(dparams) - compared)
    if missed and not cudnn:  # a parameter TF's side named no weight for: say so, never pass it
        report.not_verified[name] = (
            f"the gradient of {', '.join(missed)} was not compared: TF's side holds no "
            "weight for it (the other tensors are below)"
        )
    for tensor, (o, t) in pairs.items():
        report.add(name, tensor, _scaled(o if o is not None else torch.zeros(np.shape(t)), t))
    if float64:
        module64 = module.double()
        try:
            outs64, dx64, dinit64, dparams64 = _ours(module64, case, rs, torch.float64)
        finally:
            module.float()
        ref = {f"output {k}": o for k, o in enumerate(outs64)}
        ref["d input"] = dx64
        ref |= {f"d initial_state {k}": g for k, g in enumerate(dinit64)}
        ref |= {f"d {p}": g for p, g in dparams64.items()}
        per = report.float64.setdefault(name, {})
        for tensor, (o, t) in pairs.items():
            if tensor in ref and ref[tensor] is not None:
                tf64 = _scaled(
                    torch.from_numpy(np.asarray(t, np.float64)), ref[tensor].detach().numpy()
                )
                ours64 = _scaled(o.detach().double(), ref[tensor].detach().numpy())
                old = per.get(tensor, (0.0, 0.0))
                per[tensor] = (max(old[0], tf64), max(old[1], ours64))
