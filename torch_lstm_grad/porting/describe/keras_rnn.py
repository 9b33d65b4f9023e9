"""Keras layers -> layer descriptions (readers -> source -> **layer description** -> builders).

Which variables form a layer: the names Keras gives them, `<layer>/[<sub>/][<cell>/]<weight>`
with weights `kernel`, `recurrent_kernel`, `bias`; `<layer>` is the layer's name (the key of
its config), `<sub>` a Bidirectional's `forward_*` / `backward_*`.

What each attribute is, in this order: the layer's config (`.keras` config.json, a legacy
`.h5`'s model_config, or `--config`); else what the user stated (`--set`); else the default of
the Keras version that wrote the file, when the file names it (a weights-only legacy `.h5`'s
`keras_version`; Keras 3's formats) and that version's default is not ambiguous; else the file
is refused for that attribute. Shapes decide units, input size, the GRU's reset position and
whether a bias exists; a config that disagrees with them is refused.

Keras' defaults that changed, and matter here:

* `recurrent_activation` of LSTM and GRU: `hard_sigmoid` up to Keras 2.2.x and in TF 1.x's
  tf.keras, `sigmoid` from Keras 2.3.0 and TF 2.x's tf.keras. tf.keras reported "2.2.4-tf" both
  in TF 1.13-1.15 and in TF 2.0-2.1: that version alone does not tell.
* `hard_sigmoid` itself: Keras 2's is `clip(0.2·x + 0.5, 0, 1)`, Keras 3's `relu6(x + 3) / 6`.
  A config's "hard_sigmoid" means the function of the Keras major that wrote it.
* `reset_after` of GRU (False up to Keras 2.2, True after): decided by the bias shape.
* Masked steps' outputs: Keras >= 2.3 and Keras 3 give the previous step's output (zeros before
  the first unmasked step), or zeros with `zero_output_for_mask`; a Bidirectional forces
  `zero_output_for_mask = return_sequences` on both its layers. Keras <= 2.2 returned the
  previous *state* and is not verified here: its layers refuse calls with a mask.
"""

from __future__ import annotations

import itertools

from ..source import KerasLayer, Source, keras_rnn_scopes, keras_version_tuple, layer_and_rest
from .description import LayerDescription, Refusal
from .statements import Statements

__all__ = ["describe_keras"]

_CELL_CLASS = {"lstm_cell": "LSTM", "gru_cell": "GRU", "simple_rnn_cell": "SimpleRNN"}
_GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1, "CuDNNLSTM": 4, "CuDNNGRU": 3}
_CUDNN = ("CuDNNLSTM", "CuDNNGRU")
_CLASSES = {"LSTM", "GRU", "SimpleRNN", "Bidirectional", "CuDNNLSTM", "CuDNNGRU", "LSTMV1", "GRUV1"}

# Config keys, by what they do to the computation of an inference or a gradient step.
_CALL_KEYS = (
    "return_sequences",
    "return_state",
    "go_backwards",
    "stateful",
    "time_major",
    "zero_output_for_mask",
)
# Keys only a layer read from a saved graph has: Keras' cuDNN path (graphs/keras_cudnn.py).
_GRAPH_KEYS = {"cudnn_mask"}
_TRAINING_ONLY = {
    "dropout": "dropout masks are training-time noise; the module computes training=False",
    "recurrent_dropout": "dropout masks are training-time noise; the module computes "
    "training=False",
    "kernel_regularizer": "a loss term, not part of the layer's output",
    "recurrent_regularizer": "a loss term, not part of the layer's output",
    "bias_regularizer": "a loss term, not part of the layer's output",
    "activity_regularizer": "a loss term, not part of the layer's output",
    "kernel_constraint": "applied by Keras' optimizer after each update, not in the layer",
    "recurrent_constraint": "applied by Keras' optimizer after each update, not in the layer",
    "bias_constraint": "applied by Keras' optimizer after each update, not in the layer",
    "trainable": "freezing is the training loop's business (requires_grad)",
}
_NO_EFFECT = {
    "name",
    "unroll",
    "implementation",
    "use_cudnn",
    "seed",
    "kernel_initializer",
    "recurrent_initializer",
    "bias_initializer",
    "unit_forget_bias",
    "input_shape",
    "batch_input_shape",
    "batch_shape",
    "batch_size",
    "input_dim",
    "input_length",
    "units",
    "activation",
    "recurrent_activation",
    "use_bias",
    "reset_after",
    "dtype",
    "layer",
    "backward_layer",
    "merge_mode",
    "weights",
    "sparse",
    "ragged",
    "cell",
}


def _activation(raw, major: int | None) -> str | None:
    """A config's activation (a string, None, or Keras 3's serialized dict) as this package's
    name; "hard_sigmoid" by the Keras major that computes it; None where the major is unknown."""
    if isinstance(raw, dict):
        raw = raw.get("config") if isinstance(raw.get("config"), str) else raw.get("class_name")
    name = "linear" if raw is None else str(raw)
    if name == "hard_sigmoid":
        if major is None:
            return None
        return "hard_sigmoid_keras2" if major <= 2 else "hard_sigmoid_keras3"
    return name


def _dtype_policy(raw) -> str:
    if isinstance(raw, dict):
        cfg = raw.get("config") or {}
        if not isinstance(cfg, dict):  # a damaged config: the policy reads as its text
            return str(raw)
        return str(cfg.get("name", raw.get("class_name", raw)))
    return "float32" if raw is None else str(raw)


class _Writer:
    """The Keras that wrote the layer, and its defaults."""

    def __init__(self, source: Source, statements: Statements):
        w = source.writer
        self.version, self.major, self.how = w.keras_version, w.keras_major, w.label
        if statements.keras_version:
            if self.version and self.version != statements.keras_version:
                raise ValueError(
                    f"--keras-version {statements.keras_version}: the file says it was "
                    f"written by Keras {self.version}"
                )
            self.version = statements.keras_version
            self.major = keras_version_tuple(self.version)[0]
            self.how = f"Keras {self.version} (--keras-version)"

    def recurrent_activation_default(self) -> tuple[str | None, str]:
        """(default gate activation of LSTM/GRU, or None when the version does not tell; why)"""
        if self.version is None:
            if self.major == 3:
                return "sigmoid", f"default of {self.how}"
            return None, "the file does not say which Keras wrote it"
        major, minor, patch, tf = keras_version_tuple(self.version)
        if major >= 3 or (major, minor) >= (2, 3):
            return "sigmoid", f"default of Keras {self.version}"
        if major < 2:
            return None, f"Keras {self.version}: Keras 1 files are not read"
        if tf and (minor, patch) == (2, 4):
            return None, (
                "tf.keras 2.2.4-tf was TF 1.13-1.15's (default hard_sigmoid) and TF 2.0-2.1's "
                "(default sigmoid)"
            )
        return "hard_sigmoid_keras2", f"default of Keras {self.version} (hard_sigmoid)"

    def masks_verified(self) -> bool:
        if self.version is None:
            return self.major == 3
        major, minor, _, _ = keras_version_tuple(self.version)
        return (major, minor) >= (2, 3)

    def legacy_masks(self) -> bool:
        """Whether the writer is Keras 2.0-2.2 (masked steps: the previous state; a
        Bidirectional zeroes nothing)."""
        if self.version is None:
            return False
        major, minor, _, tf = keras_version_tuple(self.version)
        return major == 2 and minor <= 2 and not tf


def _infer_class(rest: list[str], weights: dict, variables: dict) -> str | None:
    for part in reversed(rest):
        if part in _CELL_CLASS:
            return _CELL_CLASS[part]
    rk = variables[weights["recurrent_kernel"]].shape
    if len(rk) != 2 or rk[0] == 0 or rk[1] % rk[0]:
        return None
    gates = rk[1] // rk[0]
    b = variables[weights["bias"]].shape if "bias" in weights else None
    if gates == 4:
        return "CuDNNLSTM" if b is not None and b == (8 * rk[0],) else "LSTM"
    if gates == 3:
        return "CuDNNGRU" if b is not None and b == (6 * rk[0],) else "GRU"
    return "SimpleRNN" if gates == 1 else None


class _Describer:
    def __init__(self, source: Source, statements: Statements):
        self.source, self.statements = source, statements
        self.writer = _Writer(source, statements)
        self.refusals: list[Refusal] = []
        self.origins: dict[str, str] = {}  # the layer being described: where its keys came from

    def refuse(self, layer, attr, value, reason, approximation=None):
        self.refusals.append(Refusal(layer, attr, value, reason, approximation))

    # -- one recurrent layer (or one direction of a Bidirectional) -------------------------------

    def _config_value(self, names, config: dict | None, key: str):
        """`(found, value, origin, stored)` of a config key: the config, else `--set`."""
        if config is not None and key in config:
            origin = self.origins.get(key) or self.source.config_origin or "the model config"
            return True, config[key], origin, True
        found, value = self.statements.take(names, key)
        return (True, value, "--set", False) if found else (False, None, "", False)

    def describe_rnn(
        self,
        name: str,
        cls: str,
        scope: str,
        weights: dict[str, str],
        config: dict | None,
        config_name: str | None,
        go_backwards_by_structure: bool | None = None,
    ) -> LayerDescription:
        v = self.source.variables
        where = (
            f"config of layer {config_name!r}"
            if config is not None
            else (
                f"variables {scope}/*"
                + (
                    " (no config in the file)"
                    if not self.source.layers
                    else " (no config for this layer)"
                )
            )
        )
        d = LayerDescription(name, f"keras.{cls}", where)
        d.weights = dict(weights)
        names = [n for n in (config_name, name) if n]
        if "kernel" not in weights:  # a damaged file can lose a weight's name
            self.refuse(
                name,
                "weights",
                f"{sorted(weights)} under {scope}",
                f"no kernel: a Keras {cls} has a kernel and a recurrent_kernel",
            )
            return d
        kernel, rk = v[weights["kernel"]], v[weights["recurrent_kernel"]]
        units, gates = rk.shape[0], _GATES[cls]
        if (
            kernel.ndim != 2
            or rk.shape != (units, gates * units)
            or kernel.shape[1] != gates * units
        ):
            self.refuse(
                name,
                "weights",
                f"kernel {list(kernel.shape)}, recurrent_kernel {list(rk.shape)}",
                f"not the shapes of a Keras {cls} ([I, {gates}U], [U, {gates}U])",
            )
            return d
        d.set("units", units, "recurrent_kernel's shape")
        d.set("input_size", kernel.shape[0], "kernel's shape")
        if config is not None and "units" in config and config["units"] != units:
            # a number equal to the weights' (3, 3.0) passes; any other value, of any type
            # (a damaged config's list or string too), is a refusal naming it
            self.refuse(name, "units", config["units"], f"the weights have {units} units")
        # bias and the GRU's reset position: by shape, checked against the config
        bias = v[weights["bias"]] if "bias" in weights else None
        d.set(
            "use_bias",
            bias is not None,
            "a bias variable is present" if bias is not None else "no bias variable",
        )
        found, use_bias, origin, _ = self._config_value(names, config, "use_bias")
        if found and bool(use_bias) != (bias is not None):
            self.refuse(
                name,
                "use_bias",
                use_bias,
                f"{origin} says so, but the file "
                f"{'has' if bias is not None else 'has no'} bias variable",
            )
        if cls in _CUDNN:
            if bias is None or bias.shape != (2 * gates * units,):
                self.refuse(
                    name,
                    "bias",
                    None if bias is None else list(bias.shape),
                    f"a {cls} has a bias [{2 * gates * units}] (cuDNN's bW, bR)",
                )
                return d
            d.set(
                "bias_layout",
                "cuDNN's: gate blocks as cuDNN reads them, bias [bW, bR]; "
                "converted as Keras' HDF5 loader converts them into LSTM / GRU(reset_after="
                "True)",
                "the class and the bias shape",
            )
            if cls == "CuDNNGRU":
                d.set("reset_after", True, "cuDNN's GRU applies the reset after the product")
        elif cls == "GRU" and bias is not None:
            reset_after = bias.shape == (2, 3 * units)
            if not reset_after and bias.shape != (3 * units,):
                self.refuse(
                    name,
                    "bias",
                    list(bias.shape),
                    f"neither [{3 * units}] "
                    f"(reset_after=False) nor [2, {3 * units}] (reset_after=True)",
                )
            d.set("reset_after", reset_after, "the bias shape")
            found, ra, origin, _ = self._config_value(names, config, "reset_after")
            if found and bool(ra) != reset_after:
                self.refuse(
                    name,
                    "reset_after",
                    ra,
                    f"{origin} says so, but the bias has shape {list(bias.shape)}",
                )
        elif cls == "GRU":
            found, ra, origin, stored = self._config_value(names, config, "reset_after")
            if found:
                d.set("reset_after", bool(ra), origin, stored)
            else:
                self.refuse(
                    name,
                    "reset_after",
                    "(not stored)",
                    "a GRU without bias does not "
                    "show its reset position: give --set reset_after=true/false",
                )
        elif bias is not None and bias.shape != (gates * units,):
            self.refuse(name, "bias", list(bias.shape), f"expected [{gates * units}]")
        # activations
        if cls in _CUDNN:
            d.set("gate_activation", "sigmoid", f"{cls} computes sigmoid gates only")
            d.set("activation", "tanh", f"{cls} computes tanh only")
        else:
            self._activations(d, names, config, cls)
        # call semantics
        for key in _CALL_KEYS:
            found, value, origin, stored = self._config_value(names, config, key)
            if key == "go_backwards" and go_backwards_by_structure is not None and not found:
                d.set(
                    key,
                    go_backwards_by_structure,
                    "the Bidirectional's "
                    + ("backward" if go_backwards_by_structure else "forward")
                    + " layer",
                )
            elif key == "time_major" and not found and self.writer.major == 3:
                d.set(key, False, "Keras 3's recurrent layers are batch-major")
            elif found:
                d.set(key, bool(value), origin, stored)
            else:
                d.set(key, False, f"default of {self.writer.how}", stored=False)
        if cls in _CUDNN:
            d.set("zero_output_for_mask", None, f"{cls} takes no mask (Keras refuses one)")
        elif self.writer.legacy_masks():
            d.set("zero_output_for_mask", False, f"{self.writer.how}: Keras <= 2.2 has none",
                  stored=False)  # fmt: skip
            d.set("masked_outputs", "previous_state",
                  f"{self.writer.how}: Keras <= 2.2's backends give a masked step the previous "
                  "state (the initial state before the first unmasked step)", stored=False)
        elif not self.writer.masks_verified():
            d.set(
                "zero_output_for_mask",
                None,
                f"{self.writer.how}: the Keras version is not known, and masked-step outputs "
                "differ between Keras <= 2.2 and later (calls with a mask raise)",
                stored=False,
            )
        found, cudnn_mask, origin, stored = self._config_value(names, config, "cudnn_mask")
        if found and cudnn_mask:  # read from a saved cuDNN op (graphs/keras_cudnn.py)
            d.set("cudnn_mask", True, origin, stored)
        found, dtype, origin, stored = self._config_value(names, config, "dtype")
        policy = _dtype_policy(dtype) if found else str(kernel.dtype)
        d.set("dtype", policy, origin if found else "the weights' dtype", stored or not found)
        if policy not in ("float32", "float64"):
            self.refuse(
                name,
                "dtype",
                policy,
                "the layer computes in a reduced precision; the "
                "module computes in the weights' dtype",
                "compute in float32",
            )
        self._notes(d, name, config)
        return d

    def _activations(self, d, names, config, cls):
        major = self.writer.major
        keys = (("recurrent_activation", "gate_activation"), ("activation", "activation"))
        for key, attr in keys:
            if cls == "SimpleRNN" and key == "recurrent_activation":
                continue
            found, raw, origin, stored = self._config_value(names, config, key)
            if found:
                value = _activation(raw, major)
                if value is None:
                    self.refuse(
                        d.name,
                        key,
                        raw,
                        "hard_sigmoid differs between Keras 2 "
                        "(0.2x + 0.5) and Keras 3 (relu6(x + 3) / 6) and the file does "
                        "not say which Keras wrote it: give --keras-version",
                    )
                    continue
                if raw == "hard_sigmoid":
                    origin += f" ({raw!r} of Keras {major})"
                d.set(attr, value, origin, stored)
            elif key == "activation":
                d.set(attr, "tanh", f"default of {self.writer.how}", stored=False)
            else:
                value, why = self.writer.recurrent_activation_default()
                if value is None:
                    self.refuse(
                        d.name,
                        key,
                        "(not stored in the file)",
                        f"{why}: give --set "
                        f"{key}=sigmoid|hard_sigmoid, --keras-version or --config",
                    )
                    continue
                d.set(attr, value, why, stored=False)

    def _notes(self, d: LayerDescription, name: str, config: dict | None) -> None:
        if config is None:
            return
        for key, value in config.items():
            if key in _TRAINING_ONLY:
                if value not in (None, 0, 0.0, True) or (key == "trainable" and value is False):
                    d.notes.append(f"not ported: {key}={value!r} ({_TRAINING_ONLY[key]})")
            elif key not in _NO_EFFECT and key not in _CALL_KEYS and key not in _GRAPH_KEYS:
                self.refuse(
                    name,
                    key,
                    value,
                    "a config key this converter does not know; it "
                    "may change what the layer computes",
                    "ignore it",
                )

    # -- the whole file ---------------------------------------------------------------------------

    def run(self) -> list[LayerDescription]:
        v, layers = self.source.variables, self.source.layers
        by_layer: dict[str, list[tuple[str, list[str], dict]]] = {}
        for scope, weights in sorted(keras_rnn_scopes(v).items()):
            layer, rest = layer_and_rest(scope)
            owner = self._backward_layer_owner(scope, layer)
            if owner is not None:
                layer, rest = owner, [layer, *rest]
            by_layer.setdefault(layer, []).append((scope, rest, weights))
        out = []
        for layer, scopes in by_layer.items():
            cfg = layers.get(layer)
            self.origins = cfg.origins if cfg is not None else {}
            if cfg is not None and cfg.problem:
                self.refuse(layer, "graph", cfg.class_name or "(unread)", cfg.problem)
                continue
            if layers and cfg is None:
                self.refuse(
                    layer,
                    "config",
                    "(missing)",
                    f"the file's config has no layer "
                    f"named {layer!r}, but the weights {scopes[0][0]}/* exist",
                )
                continue
            cls = cfg.class_name if cfg else None
            if cls == "Bidirectional" or (
                cls is None  # no config: a Bidirectional by its halves' names, even one alone
                and all(
                    rest and rest[0].startswith(("forward_", "backward_")) for _, rest, _ in scopes
                )
            ):
                d = self._bidirectional(layer, cfg, scopes)
            elif len(scopes) != 1:
                self.refuse(
                    layer,
                    "weights",
                    [s for s, _, _ in scopes],
                    "several recurrent "
                    "cells under one layer (e.g. a stacked RNN cell): not supported",
                )
                continue
            else:
                scope, rest, weights = scopes[0]
                d = self._single(layer, cfg, scope, rest, weights)
            if d is not None:
                self._mask_note(d, cfg)
                out.append(d)
        return out

    def _backward_layer_owner(self, scope: str, layer: str) -> str | None:
        """The Bidirectional whose `backward_layer` is `layer`, if the config has one: Keras
        names a Bidirectional's forward half `forward_<name>` but keeps the name of a backward
        layer the user passed (`bi/forward_fw/lstm_cell/...`, `bi/bw/lstm_cell/...`)."""
        parts = scope.split("/")
        for parent, child in itertools.pairwise(parts):
            if child != layer:
                continue
            cfg, sub = (
                self.source.layers.get(parent),
                self.source.layers.get(f"{parent}/backward_layer"),
            )
            if cfg is not None and cfg.class_name == "Bidirectional" and sub and sub.name == layer:
                return parent
        return None

    def _resolve_class(self, name, cfg: KerasLayer | None, rest, weights) -> str | None:
        inferred = _infer_class(rest, weights, self.source.variables)
        cls = cfg.class_name if cfg else inferred
        if cls in ("LSTMV1", "GRUV1"):  # tf.keras' TF1-era classes: the same math
            cls = cls[:-2]
        if cls not in _CLASSES:
            self.refuse(
                name,
                "class",
                cls or "(unknown)",
                "not a Keras recurrent layer this "
                "converter ports (LSTM, GRU, SimpleRNN, Bidirectional)",
            )
            return None
        if cfg and inferred and inferred != cls:
            self.refuse(
                name, "class", cls, f"the config says {cls}, the weights' shapes are a {inferred}'s"
            )
            return None
        return cls

    def _single(self, layer, cfg, scope, rest, weights):
        cls = self._resolve_class(layer, cfg, rest, weights)
        if cls is None:
            return None
        return self.describe_rnn(
            layer, cls, scope, weights, cfg.config if cfg else None, cfg.name if cfg else None
        )

    def _bidirectional(self, layer, cfg: KerasLayer | None, scopes):
        d = LayerDescription(
            layer,
            "keras.Bidirectional",
            f"config of layer {layer!r}" if cfg else f"variables {layer}/*",
        )
        if cfg is not None and cfg.class_name != "Bidirectional":
            self.refuse(
                layer,
                "class",
                cfg.class_name,
                "forward_/backward_ weights under a layer whose config is not a Bidirectional",
            )
            return None
        found, merge, origin, stored = self._config_value(
            [layer], cfg.config if cfg else None, "merge_mode"
        )
        d.set(
            "merge_mode",
            merge if found else "concat",
            origin if found else f"default of {self.writer.how}",
            stored,
        )
        sub_cfgs, backward_name = {}, None
        if cfg is not None:
            fw = self.source.layers.get(f"{layer}/layer")
            bw = self.source.layers.get(f"{layer}/backward_layer")
            sub_cfgs = {"forward": fw, "backward": bw or fw}
            backward_name = bw.name if bw else None
        for scope, rest, weights in scopes:
            if rest and rest[0].startswith("forward_"):
                role = "forward"
            elif rest and (rest[0].startswith("backward_") or rest[0] == backward_name):
                role = "backward"
            else:  # a damaged file: which half these weights are cannot be told
                self.refuse(
                    layer,
                    "weights",
                    scope,
                    "not under a forward_*/backward_* layer of the Bidirectional",
                )
                return None
            if role in d.children:
                self.refuse(layer, "weights", scope, f"two {role} layers")
                return None
            sub = sub_cfgs.get(role)
            cls = self._resolve_class(f"{layer}/{rest[0]}", sub, rest[1:], weights)
            if cls is None:
                return None
            sub_config = dict(sub.config) if sub else None
            outer_origins, self.origins = self.origins, (sub.origins if sub else {})
            if (
                sub_config is not None
                and role == "backward"
                and sub_cfgs["backward"] is sub_cfgs["forward"]
            ):
                sub_config["go_backwards"] = not sub_config.get("go_backwards", False)
            child = self.describe_rnn(
                f"{layer}/{rest[0]}",
                cls,
                scope,
                weights,
                sub_config,
                sub.name if sub else None,
                go_backwards_by_structure=(role == "backward"),
            )
            self.origins = outer_origins
            # Keras' Bidirectional forces zero_output_for_mask = return_sequences (from 2.3).
            if child.value("zero_output_for_mask", False) is not None and not (
                self.writer.legacy_masks()
            ):
                child.set(
                    "zero_output_for_mask",
                    child.value("return_sequences"),
                    "Bidirectional forces it to return_sequences",
                )
            d.children[role] = child
        if set(d.children) != {"forward", "backward"}:
            self.refuse(
                layer,
                "weights",
                sorted(d.children),
                "a Bidirectional needs a forward and a backward layer",
            )
            return None
        return d

    def _mask_note(self, d: LayerDescription, cfg: KerasLayer | None) -> None:
        if cfg is not None and cfg.mask_from:
            d.notes.append(
                f"called with a mask (from {cfg.mask_from!r}): pass the same mask= to the module"
            )
        elif self.source.mask_layers:
            d.notes.append(
                f"the model has mask-producing layers ({', '.join(self.source.mask_layers)}): "
                "if their mask reaches this layer, pass it as mask= to the module"
            )


def describe_keras(source: Source, statements: Statements):
    """`(descriptions, refusals)` of a Keras source's recurrent layers."""
    describer = _Describer(source, statements)
    out = describer.run()
    return out, describer.refusals
