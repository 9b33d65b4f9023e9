"""A model description -> one `keras_layers.KerasModel` holding every layer with the file's
weights, and the spec `load_model` rebuilds it from (docs/porting.md, "Whole models").

A layer's module is built from its description (recurrent layers by `keras_rnn.py`); sizes the
config does not state come from the weights' shapes (a Dense's input size is its kernel's first
axis). A layer's weights are found by position in the file's list for that layer (a legacy
`.h5` layer group's `weight_names`, a `.keras` layer's `vars`), so names a writer changed (a
model loaded twice in one process saves `dense_7_1/kernel:0` under layer `dense_7`) still
find their layer. Frozen layers (`trainable: false`) get Parameters without gradients.

The spec is data: per layer the module class and its keyword arguments (a recurrent layer's
entry, a nested model's spec), the graph, and each weight's Keras name with the module
attribute holding it, in the order of Keras' `model.weights` (layer by layer, each layer's in
the order it stores them).
"""

from __future__ import annotations

import re

import torch

from ... import keras_layers as K
from ..describe.description import LayerDescription
from ..describe.keras_model import ModelDescription
from . import keras_rnn
from .context import BuildContext, tensor

__all__ = ["attach_custom", "build_model", "module_from_spec"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, None: torch.float32}

# class -> (module class, weight attributes in the file's order given the description)
_PLAIN = {
    "keras.Dense": K.KerasDense,
    "keras.Embedding": K.KerasEmbedding,
    "keras.Activation": K.KerasActivation,
    "keras.ActivityRegularization": K.KerasActivityRegularization,
    "keras.Masking": K.KerasMasking,
    "keras.Dropout": K.KerasDropout,
    "keras.SpatialDropout1D": K.KerasSpatialDropout1D,
    "keras.GaussianNoise": K.KerasGaussianNoise,
    "keras.GaussianDropout": K.KerasGaussianDropout,
    "keras.AlphaDropout": K.KerasAlphaDropout,
    "keras.BatchNormalization": K.KerasBatchNormalization,
    "keras.LayerNormalization": K.KerasLayerNormalization,
    "keras.UnitNormalization": K.KerasUnitNormalization,
    "keras.Conv1D": K.KerasConv1D,
    "keras.MaxPooling1D": K.KerasMaxPooling1D,
    "keras.AveragePooling1D": K.KerasAveragePooling1D,
    "keras.GlobalMaxPooling1D": K.KerasGlobalMaxPooling1D,
    "keras.GlobalAveragePooling1D": K.KerasGlobalAveragePooling1D,
    "keras.Flatten": K.KerasFlatten,
    "keras.Reshape": K.KerasReshape,
    "keras.Permute": K.KerasPermute,
    "keras.RepeatVector": K.KerasRepeatVector,
    "keras.ZeroPadding1D": K.KerasZeroPadding1D,
    "keras.Cropping1D": K.KerasCropping1D,
    "keras.UpSampling1D": K.KerasUpSampling1D,
    "keras.Concatenate": K.KerasConcatenate,
    "keras.Add": K.KerasAdd,
    "keras.Subtract": K.KerasSubtract,
    "keras.Multiply": K.KerasMultiply,
    "keras.Average": K.KerasAverage,
    "keras.Maximum": K.KerasMaximum,
    "keras.Minimum": K.KerasMinimum,
}
_CLASSES = {cls.__name__: cls for cls in _PLAIN.values()} | {
    "KerasTimeDistributed": K.KerasTimeDistributed,
    "KerasOp": K.KerasOp,
    "KerasCustomLayer": K.KerasCustomLayer,
}
# A weight's trainability in Keras: these are statistics, never trained.
_NON_TRAINABLE = {"moving_mean", "moving_variance"}


def _weight_attrs(d: LayerDescription) -> list[str]:
    v = d.value
    kind = d.kind
    if kind in ("keras.Dense", "keras.Conv1D"):
        return ["kernel", "bias"] if v("use_bias", True) else ["kernel"]
    if kind == "keras.Embedding":
        return ["embeddings"]
    if kind == "keras.BatchNormalization":
        return ([*(["gamma"] if v("scale", True) else []), *(["beta"] if v("center", True) else []),
                 "moving_mean", "moving_variance"])  # fmt: skip
    if kind == "keras.LayerNormalization":
        if v("rms_scaling", False):
            return ["gamma"]
        return [*(["gamma"] if v("scale", True) else []), *(["beta"] if v("center", True) else [])]
    return []


def _kwargs(d: LayerDescription, shapes: list, major: int) -> dict:
    """The module's constructor arguments: the description's values, sizes from the weights."""
    v = d.value
    kind = d.kind[len("keras."):]
    kw = {"keras_major": major}
    if kind == "Dense":
        kw |= {"input_dim": shapes[0][0], "units": v("units"), "activation": v("activation"),
               "use_bias": v("use_bias", True)}  # fmt: skip
    elif kind == "Embedding":
        kw |= {"input_dim": shapes[0][0], "output_dim": shapes[0][1],
               "mask_zero": bool(v("mask_zero", False))}  # fmt: skip
    elif kind == "Activation":
        kw["activation"] = v("activation")
    elif kind == "Masking":
        kw["mask_value"] = v("mask_value", 0.0)
    elif kind in ("Dropout", "SpatialDropout1D", "GaussianDropout", "AlphaDropout"):
        kw["rate"] = v("rate")
    elif kind == "GaussianNoise":
        kw["rate"] = v("stddev")
    elif kind == "BatchNormalization":
        axis = v("axis", -1)
        axis = axis[0] if isinstance(axis, list) and len(axis) == 1 else axis
        kw |= {"num_features": shapes[-1][0], "axis": axis, "momentum": v("momentum", 0.99),
               "epsilon": v("epsilon", 1e-3), "center": v("center", True),
               "scale": v("scale", True)}  # fmt: skip
    elif kind == "LayerNormalization":
        kw |= {"normalized_shape": list(shapes[0]) if shapes else 1, "axis": v("axis", -1),
               "epsilon": v("epsilon", 1e-3), "center": v("center", True),
               "scale": v("scale", True), "rms_scaling": v("rms_scaling", False)}  # fmt: skip
    elif kind == "Conv1D":
        groups = v("groups", 1)
        kw |= {"in_channels": shapes[0][1] * groups, "filters": v("filters"),
               "kernel_size": v("kernel_size"), "strides": v("strides", 1),
               "padding": v("padding", "valid"), "data_format": v("data_format", "channels_last"),
               "dilation_rate": v("dilation_rate", 1), "groups": groups,
               "activation": v("activation"), "use_bias": v("use_bias", True)}  # fmt: skip
    elif kind in ("MaxPooling1D", "AveragePooling1D"):
        kw |= {"pool_size": v("pool_size", 2), "strides": v("strides"),
               "padding": v("padding", "valid"),
               "data_format": v("data_format", "channels_last")}  # fmt: skip
    elif kind in ("GlobalMaxPooling1D", "GlobalAveragePooling1D"):
        kw |= {"data_format": v("data_format", "channels_last"), "keepdims": v("keepdims", False)}
    elif kind == "Flatten":
        kw["data_format"] = v("data_format", "channels_last")
    elif kind == "Reshape":
        kw["target_shape"] = list(v("target_shape"))
    elif kind == "Permute":
        kw["dims"] = list(v("dims"))
    elif kind == "RepeatVector":
        kw["n"] = v("n")
    elif kind == "ZeroPadding1D":
        kw["padding"] = v("padding", 1)
    elif kind == "Cropping1D":
        kw["cropping"] = v("cropping", (1, 1))
    elif kind == "UpSampling1D":
        kw["size"] = v("size", 2)
    elif kind in ("Concatenate", "UnitNormalization"):
        kw["axis"] = v("axis", -1)
    if "dtype" in d.attrs and kind in ("Dense", "Embedding", "BatchNormalization",
                                       "LayerNormalization", "Conv1D"):  # fmt: skip
        kw["dtype"] = v("dtype")
    return kw


def _module_name(name: str) -> str:
    """A Keras layer name as a submodule name (torch refuses '.' in one)."""
    return re.sub(r"[.]", "_", name)


class _ModelBuilder:
    def __init__(self, ctx: BuildContext, source, major: int):
        self.ctx, self.source, self.major = ctx, source, major
        self.used: list[str] = []

    def _names(self, keys: list[str], d: LayerDescription, attrs: list[str]) -> list[str] | None:
        """The file's variables of a layer's weights, in the file's order: the first of its
        lists found under `keys` (its path of layer names in the model, as a `.keras` file
        keeps nested layers, then its name); in a file without such lists (a SavedModel, a TF2
        checkpoint), the variables named `<key>/<weight>`."""
        lists = self.source.layer_weights
        for key in keys:
            names = lists.get(key)
            if names is not None:
                if len(names) != len(attrs):
                    self.ctx.refuse(d.name, "weights", names, f"{len(attrs)} weights expected")
                    return None
                return names
        if not attrs:
            return []
        for key in keys:
            names = [f"{key}/{a}" for a in attrs]
            if all(n in self.source.variables for n in names):
                return names
        self.ctx.refuse(d.name, "weights", "(missing)", "no weights of this layer in the file")
        return None

    def _keras_name(self, path: list[str], attr: str, variable: str) -> str:
        """A weight's Keras name: as the file stores it where it stores names (a legacy `.h5`'s
        `weight_names`: `dense/kernel:0`, Keras 3's `head/dense/kernel`), else (a `.keras`
        file) the path of layer names the file keeps it under (`head/dense/kernel`,
        `bidirectional/forward_lstm/lstm_cell/kernel`): the names the model had when saved."""
        if variable in self.source.stored_names:
            return self.source.stored_names[variable]
        return "/".join([*path, attr]) if attr else variable

    def plain(self, path: list[str], d: LayerDescription, keys: list[str] | None = None):
        """`(module, spec, [(Keras name, attribute)])` of a layer that is not recurrent; `keys`:
        where its weights are listed (default: its path, then its name)."""
        if d.kind == "keras.custom":
            return self._custom(path, d)
        if d.kind.startswith("keras.op."):
            kwargs = {"op": d.kind[len("keras.op."):], "params": d.value("params"),
                      "keras_major": self.major}  # fmt: skip
            try:
                return K.KerasOp(**kwargs), {"module": "KerasOp", "kwargs": kwargs}, []
            except NotImplementedError as err:
                self.ctx.refuse(d.name, "op", d.kind, str(err))
                return None
        cls = _PLAIN.get(d.kind)
        if cls is None:
            self.ctx.refuse(d.name, "class", d.kind, "no module for this layer class")
            return None
        attrs = _weight_attrs(d)
        names = self._names(keys or ["/".join(path), path[-1]], d, attrs)
        if names is None:
            return None
        values = [tensor(self.source.variables[n]) for n in names]
        kwargs = _kwargs(d, [list(t.shape) for t in values], self.major)
        dtype = kwargs.pop("dtype", None)
        takes_dtype = "dtype" in cls.__init__.__code__.co_varnames
        try:
            module = cls(**kwargs, **({"dtype": _DTYPES.get(dtype)} if takes_dtype else {}))
        except (NotImplementedError, ValueError, TypeError) as err:
            self.ctx.refuse(d.name, "layer", d.kind, str(err))
            return None
        with torch.no_grad():
            for attr, value in zip(attrs, values, strict=True):
                target = getattr(module, attr)
                if tuple(target.shape) != tuple(value.shape):
                    self.ctx.refuse(d.name, attr, list(value.shape),
                                    f"expected shape {list(target.shape)}")  # fmt: skip
                    return None
                target.copy_(value)
        self.used += names
        spec = {"module": cls.__name__, "kwargs": {**kwargs, "dtype": dtype}}
        weights = [(self._keras_name(path, a, n), a) for a, n in zip(attrs, names, strict=True)]
        return module, spec, weights

    def _custom(self, path: list[str], d: LayerDescription):
        """The user's layer: its config and every weight the file lists for it."""
        names = self.source.layer_weights.get("/".join(path)) or self.source.layer_weights.get(
            path[-1], []
        )
        values = [tensor(self.source.variables[n]) for n in names]
        keras_names = [self._keras_name(path, "", n) for n in names]
        kwargs = {"class_name": d.value("class_name"), "config": d.value("config"),
                  "weight_names": keras_names, "shapes": [list(v.shape) for v in values],
                  "keras_major": self.major}  # fmt: skip
        module = K.KerasCustomLayer(**kwargs, dtype=values[0].dtype if values else None)
        with torch.no_grad():
            for k, v in enumerate(values):
                module.weights[f"w{k}"].copy_(v)
        self.used += names
        spec = {"module": "KerasCustomLayer", "kwargs": {**kwargs, "dtype": None}}
        return module, spec, [(n, f"weights.w{k}") for k, n in enumerate(keras_names)]

    def layer(self, path: list[str], d, trainable: bool):
        """`(module, spec, [(Keras name, attribute, trainable)])` of one layer, or None."""
        if isinstance(d, ModelDescription):
            built = self.model(path, d)
            if built is None:
                return None
            module, spec, weights = built
            return module, {"model": spec}, [(n, a, t and trainable) for n, a, t in weights]
        if d.kind in keras_rnn.KINDS:
            entry = keras_rnn.build(self.ctx, d)
            if entry is None:
                return None
            dtype = next(iter(entry["state_dict"].values())).dtype
            module = keras_rnn.module_from_entry(entry, dtype)
            module.load_state_dict(entry["state_dict"])
            self.used += entry["used"]
            weights = [(self._keras_name(path, "", n), attr, trainable)
                       for attr, n in _rnn_weights(d)]  # fmt: skip
            return module, {"rnn": {"kind": entry["kind"], "config": entry["config"]}}, weights
        if d.kind == "keras.TimeDistributed":
            inner = d.children.get("layer")
            # Keras 3 keeps the inner layer's weights as its own (`time_distributed/dense`),
            # Keras 2 as the wrapper's (`time_distributed/kernel:0`)
            keys = ["/".join([*path, inner.name]), "/".join(path), path[-1]]
            built = None if inner is None else self.plain([*path, inner.name], inner, keys)
            if built is None:
                return None
            module, spec, weights = built
            wrapper = K.KerasTimeDistributed(module, keras_major=self.major)
            return wrapper, {"time_distributed": spec}, [
                (n, f"layer.{a}", trainable and a not in _NON_TRAINABLE) for n, a in weights
            ]  # fmt: skip
        built = self.plain(path, d)
        if built is None:
            return None
        module, spec, weights = built
        return module, spec, [(n, a, trainable and a not in _NON_TRAINABLE) for n, a in weights]

    def model(self, path: list[str], m: ModelDescription):
        layers, specs, weights = {}, {}, []
        complete = True
        for name, d in m.layers.items():
            built = None if d is None else self.layer([*path, name], d, m.trainable.get(name, True))
            if built is None:
                complete = False
                continue
            module, spec, w = built
            if not m.trainable.get(name, True):
                for p in module.parameters():
                    p.requires_grad_(False)
            key = _module_name(name)
            layers[key], specs[key] = module, spec
            weights += [(n, f"{key}.{a}", t) for n, a, t in w]
        if not complete:
            return None
        graph = _renamed(m.graph(), {n: _module_name(n) for n in m.layers})
        order = [(n, a) for n, a, _ in weights]  # Keras' model.weights: layer by layer
        frozen = [_module_name(n) for n, t in m.trainable.items() if not t and n in m.layers]
        module = K.KerasModel(m.name, layers, graph, [(n, *a.split(".", 1)) for n, a in order],
                              frozen)  # fmt: skip
        spec = {"name": m.name, "graph": graph, "layers": specs, "frozen": frozen,
                "weights": [[n, a] for n, a in order], "keras_major": self.major,
                "input_specs": m.input_specs}  # fmt: skip
        return module, spec, weights


def _rnn_weights(d: LayerDescription) -> list[tuple[str, str]]:
    """`(module attribute, file variable)` of a recurrent layer's weights, in Keras' order."""
    if d.kind == "keras.Bidirectional":
        out = []
        for role, attr in (("forward", "forward_layer"), ("backward", "backward_layer")):
            child = d.children[role]
            out += [(f"{attr}.{w}", child.weights[w])
                    for w in ("kernel", "recurrent_kernel", "bias") if w in child.weights]
        return out
    return [(w, d.weights[w]) for w in ("kernel", "recurrent_kernel", "bias") if w in d.weights]


def _renamed(graph: dict, names: dict) -> dict:
    def ref(v):
        if isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and isinstance(v[1], int):
            return [names.get(v[0], v[0]), v[1], v[2]]
        if isinstance(v, list):
            return [ref(x) for x in v]
        if isinstance(v, dict):
            return {k: ref(x) for k, x in v.items()}
        return v

    return {
        "inputs": graph["inputs"],
        "outputs": ref(graph["outputs"]),
        "nodes": [
            {**n, "layer": names.get(n["layer"], n["layer"]), "args": ref(n["args"]),
             "kwargs": ref(n["kwargs"])}
            for n in graph["nodes"]
        ],
    }  # fmt: skip


def build_model(ctx: BuildContext, source, m: ModelDescription):
    """`(KerasModel, spec, the file variables it holds)`, or None after refusals."""
    b = _ModelBuilder(ctx, source, m.keras_major)
    built = b.model([], m)
    if built is None:
        return None
    module, spec, _ = built
    return module, spec, list(b.used)


def attach_custom(model, custom_layers: dict | None) -> None:
    """Gives every layer of the user's own class its module: `custom_layers[class](config,
    weights)`; raises ValueError naming a class `custom_layers` lacks."""
    custom_layers = custom_layers or {}
    for name, m in model.named_modules():
        if isinstance(m, K.KerasCustomLayer):
            factory = custom_layers.get(m.class_name)
            if factory is None:
                raise ValueError(
                    f"layer {name!r} is of the user's class {m.class_name!r}: give its module "
                    f"with load_model(..., custom_layers={{{m.class_name!r}: factory}})"
                )
            m.attach(factory)


def module_from_spec(spec: dict, dtype=None) -> K.KerasModel:
    """The (unloaded) KerasModel a converted file's spec describes."""
    major = spec["keras_major"]
    layers = {name: _module_from_layer_spec(s, major) for name, s in spec["layers"].items()}
    for name in spec.get("frozen", []):
        for p in layers[name].parameters():
            p.requires_grad_(False)
    order = [(n, *a.split(".", 1)) for n, a in spec["weights"]]
    return K.KerasModel(spec["name"], layers, spec["graph"], order, spec.get("frozen", []))


def _module_from_layer_spec(s: dict, major: int):
    if "model" in s:
        return module_from_spec(s["model"])
    if "rnn" in s:
        entry = {"kind": s["rnn"]["kind"], "config": s["rnn"]["config"]}
        return keras_rnn.module_from_entry(entry, torch.float32)
    if "time_distributed" in s:
        return K.KerasTimeDistributed(_module_from_layer_spec(s["time_distributed"], major),
                                      keras_major=major)  # fmt: skip
    cls = _CLASSES[s["module"]]
    kwargs = dict(s["kwargs"])
    dtype = kwargs.pop("dtype", None)
    if "dtype" in cls.__init__.__code__.co_varnames:
        kwargs["dtype"] = _DTYPES.get(dtype)
    return cls(**kwargs)
