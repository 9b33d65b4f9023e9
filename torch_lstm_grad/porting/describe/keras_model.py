"""A Keras model config -> a model description: the graph of layer calls and a description of
every layer, for the model configs of every Keras that writes them (docs/porting.md, "Whole
models").

The config forms read:

* Keras 2.0-2.1 `Sequential`: `{"class_name": "Sequential", "config": [layer, ...]}`, the input
  shape on the first layer (`batch_input_shape`, or an Embedding's `input_length`);
* Keras 2.2-2.15 / tf.keras / tf_keras: `Sequential` `{"layers": [...]}` (an `InputLayer` first
  where it was built with one), `Model` / `Functional` with each layer's `inbound_nodes` as lists
  of `[layer, node_index, tensor_index, kwargs]` (an RNN's initial states are further inputs of
  its call), `input_layers` / `output_layers`;
* Keras 3: `inbound_nodes` as `{"args": [...], "kwargs": {...}}` whose tensors are
  `__keras_tensor__` objects naming their `keras_history`, `module` / `registered_name` on
  every object, dtype policies.

Keras 1 configs (other argument names) are refused, naming the version. Node indices: a model
nested in another counts the call that built it as its node 0 where it was built on inputs
(every Functional model, and a Keras 2 Sequential that starts with an InputLayer), so the
config's calls of it are its nodes 1, 2, ...; every other layer's calls are 0, 1, ...

Each layer is described by what its config says, key by key: a key that changes what the
layer computes and that the port does not compute is refused naming the layer and the value; a
training-time key (an initializer, a regularizer, a constraint, a dropout's seed) is noted as
not ported. Recurrent layers are described by `keras_rnn.py`, as a file's recurrent layers
always were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...keras_layers.operations import OPS
from ..source import Source, keras_version_tuple
from .description import LayerDescription, Refusal

__all__ = [
    "LAYER_KEYS",
    "ModelDescription",
    "describe_model",
    "is_graph_config",
    "model_config_major",
]

_MODELS = {"Sequential", "Functional", "Model"}
_RECURRENT = {"LSTM", "GRU", "SimpleRNN", "Bidirectional", "CuDNNLSTM", "CuDNNGRU"}
# Keys every layer config may hold that do not change what the layer computes at inference.
_COMMON = {"name", "trainable", "dtype", "batch_input_shape", "batch_shape", "input_shape",
           "input_dtype", "build_config", "autocast", "sparse", "ragged", "batch_size"}  # fmt: skip
_TRAINING = ("_initializer", "_regularizer", "_constraint")
# What each class computes, by config key, with the value the port computes when the key is
# absent (Keras' default); a key not listed and not common is refused.
LAYER_KEYS: dict[str, dict] = {
    "Dense": {"units": None, "activation": None, "use_bias": True, "lora_rank": None,
              "lora_alpha": None, "quantization_config": None},  # fmt: skip
    "Embedding": {"input_dim": None, "output_dim": None, "mask_zero": False, "input_length": None,
                  "lora_rank": None, "lora_alpha": None, "quantization_config": None},  # fmt: skip
    "Activation": {"activation": None},
    "Masking": {"mask_value": 0.0},
    "Dropout": {"rate": None, "noise_shape": None, "seed": None},
    "SpatialDropout1D": {"rate": None, "noise_shape": None, "seed": None},
    "GaussianNoise": {"stddev": None, "seed": None},
    "GaussianDropout": {"rate": None, "seed": None},
    "AlphaDropout": {"rate": None, "noise_shape": None, "seed": None},
    "BatchNormalization": {"axis": -1, "momentum": 0.99, "epsilon": 1e-3, "center": True,
                           "scale": True, "synchronized": False, "renorm": False,
                           "renorm_clipping": None, "renorm_momentum": 0.99, "fused": None,
                           "virtual_batch_size": None, "adjustment": None},  # fmt: skip
    "LayerNormalization": {"axis": -1, "epsilon": 1e-3, "center": True, "scale": True,
                           "rms_scaling": False},  # fmt: skip
    "UnitNormalization": {"axis": -1},
    "Conv1D": {"filters": None, "kernel_size": None, "strides": 1, "padding": "valid",
               "data_format": "channels_last", "dilation_rate": 1, "groups": 1,
               "activation": None, "use_bias": True, "lora_rank": None, "lora_alpha": None},
    "MaxPooling1D": {"pool_size": 2, "strides": None, "padding": "valid",
                     "data_format": "channels_last"},  # fmt: skip
    "AveragePooling1D": {"pool_size": 2, "strides": None, "padding": "valid",
                         "data_format": "channels_last"},  # fmt: skip
    "GlobalMaxPooling1D": {"data_format": "channels_last", "keepdims": False},
    "GlobalAveragePooling1D": {"data_format": "channels_last", "keepdims": False},
    "Flatten": {"data_format": "channels_last"},
    "Reshape": {"target_shape": None},
    "Permute": {"dims": None},
    "RepeatVector": {"n": None},
    "ZeroPadding1D": {"padding": 1, "data_format": "channels_last"},
    "Cropping1D": {"cropping": (1, 1), "data_format": "channels_last"},
    "UpSampling1D": {"size": 2},
    "Concatenate": {"axis": -1},
    "ActivityRegularization": {"l1": 0.0, "l2": 0.0},
    "Add": {},
    "Subtract": {},
    "Multiply": {},
    "Average": {},
    "Maximum": {},
    "Minimum": {},
    "TimeDistributed": {"layer": None},
}
# Keys whose value must be the default: the port computes that value only.
_ONLY_DEFAULT = {
    ("Dense", "lora_rank"), ("Embedding", "lora_rank"), ("Conv1D", "lora_rank"),
    ("Dense", "quantization_config"), ("Embedding", "quantization_config"),
    ("BatchNormalization", "renorm"), ("BatchNormalization", "virtual_batch_size"),
    ("BatchNormalization", "adjustment"), ("BatchNormalization", "synchronized"),
}  # fmt: skip
# Training-time noise: noted, not applied at training=False.
_NOTES = {"noise_shape", "seed", "fused", "renorm_clipping", "renorm_momentum", "lora_alpha",
          "l1", "l2"}  # fmt: skip
# The classes of Keras' own layers that the port does not compute (refused by name).


def is_graph_config(cfg) -> bool:
    """Whether a model config is a graph of layers that a whole port can run: a Sequential, or a
    Functional model with its inputs and outputs (a subclassed model's config is neither)."""
    if not isinstance(cfg, dict):
        return False
    inner = cfg.get("config")
    if cfg.get("class_name") == "Sequential":
        return isinstance(inner, list) or isinstance(inner, dict) and "layers" in inner
    return (cfg.get("class_name") in ("Functional", "Model") and isinstance(inner, dict)
            and "input_layers" in inner and "output_layers" in inner)  # fmt: skip


def model_config_major(cfg: dict, version: str | None) -> int | None:
    """The Keras major that wrote a model config: its keras_version, else Keras 3's marks
    (`module` on the config), else 2 for a config without them."""
    if version:
        return keras_version_tuple(version)[0]
    return 3 if isinstance(cfg, dict) and "module" in cfg else None


@dataclass
class LayerCall:
    """One call of a layer in the graph: its inputs (`args`: a tensor name, or a list of them),
    its keyword arguments (tensor names where they are tensors) and its node index."""

    layer: str
    node: int
    args: object
    kwargs: dict = field(default_factory=dict)


@dataclass
class ModelDescription:
    """A Keras model: `inputs` (tensor names, in Keras' order) with their shapes and dtypes,
    `outputs` (tensor names), `calls` in an order where each follows the calls it reads,
    `layers` by name (a LayerDescription each; a nested model a ModelDescription), and the
    Keras major whose semantics the layers follow."""

    name: str
    class_name: str
    keras_major: int
    inputs: list = field(default_factory=list)
    input_specs: list = field(default_factory=list)  # [{"shape": [...], "dtype": "..."}]
    outputs: list = field(default_factory=list)
    calls: list[LayerCall] = field(default_factory=list)
    layers: dict = field(default_factory=dict)
    trainable: dict = field(default_factory=dict)  # layer name -> Keras' trainable flag

    def graph(self) -> dict:
        """The graph as `keras_layers.KerasModel` takes it."""
        return {
            "inputs": [list(r) for r in self.inputs],
            "outputs": [list(r) for r in self.outputs],
            "nodes": [
                {"layer": c.layer, "node": c.node, "args": c.args, "kwargs": c.kwargs}
                for c in self.calls
            ],
        }


class _Unreadable(ValueError):
    pass


def _ref(history) -> list:
    if (not isinstance(history, (list, tuple)) or len(history) < 3
            or not isinstance(history[0], str)):  # fmt: skip
        raise _Unreadable(f"a tensor reference {str(history)[:80]} is not [layer, node, index]")
    node, index = history[1], history[2]
    if not isinstance(node, int) or not isinstance(index, int) or node < 0 or index < 0:
        raise _Unreadable(f"a tensor reference {str(history)[:80]} has no valid indices")
    return [history[0], node, index]


def _keras3_value(v, depth: int = 0):
    """A Keras 3 node argument with every `__keras_tensor__` replaced by its tensor name."""
    if depth > 16:
        raise _Unreadable("node arguments nested more than 16 deep")
    if isinstance(v, dict):
        if v.get("class_name") == "__keras_tensor__":
            cfg = v.get("config") or {}
            return _ref(cfg.get("keras_history") if isinstance(cfg, dict) else None)
        if "class_name" in v and "config" in v:  # another serialized object: kept as is
            return v
        return {k: _keras3_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_keras3_value(x, depth + 1) for x in v]
    return v


def _is_ref(v) -> bool:
    return (isinstance(v, list) and len(v) == 3 and isinstance(v[0], str)
            and isinstance(v[1], int) and isinstance(v[2], int))  # fmt: skip


def _refs(v):
    if _is_ref(v):
        yield tuple(v)
    elif isinstance(v, list):
        for x in v:
            yield from _refs(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _refs(x)


class _Model:
    """Reads one model config (a Sequential's layer list or a Functional graph)."""

    def __init__(self, describer, cfg: dict, depth: int):
        self.d, self.depth = describer, depth
        self.class_name = cfg.get("class_name")
        inner = cfg.get("config")
        if isinstance(inner, list):  # Keras 2.0-2.1 Sequential
            inner = {"layers": inner, "name": cfg.get("name") or "sequential"}
        if not isinstance(inner, dict) or not isinstance(inner.get("layers"), list):
            raise _Unreadable(f"a {self.class_name} config without a layer list")
        self.inner = inner
        self.name = inner.get("name") or cfg.get("name") or self.class_name.lower()
        self.m = ModelDescription(self.name, self.class_name, describer.major)
        self.input_specs: dict[str, dict] = {}  # InputLayer name -> its shape and dtype

    # -- the graph ---------------------------------------------------------------------------

    def read(self) -> ModelDescription:
        if self.class_name == "Sequential":
            self._sequential()
        else:
            self._functional()
        return self.m

    def _entry_name(self, entry: dict) -> str:
        cfg = entry.get("config") if isinstance(entry.get("config"), dict) else {}
        name = entry.get("name") or cfg.get("name")
        if not isinstance(name, str) or not name:
            raise _Unreadable(f"a {entry.get('class_name')!r} layer without a name")
        return name

    def _sequential(self):
        entries = [e for e in self.inner["layers"] if isinstance(e, dict)]
        if len(entries) != len(self.inner["layers"]):
            raise _Unreadable("a Sequential's layer list holds an entry that is not a layer")
        if entries and entries[0].get("class_name") == "InputLayer":
            first = entries.pop(0)
            name = self._entry_name(first)
            self._input(name, first.get("config") or {})
        else:
            name = f"{self.name}_input"
            spec = self._sequential_input_spec(entries[0] if entries else {})
            self.m.inputs.append([name, 0, 0])
            self.m.input_specs.append(spec)
        prev = [name, 0, 0]
        for e in entries:
            layer = self._layer(e)
            offset = self._first_node(e)
            self.m.calls.append(LayerCall(layer, offset, prev))
            prev = [layer, offset, 0]
        self.m.outputs.append(prev)

    def _sequential_input_spec(self, first: dict) -> dict:
        cfg = first.get("config") if isinstance(first.get("config"), dict) else {}
        shape = _plain_value(cfg.get("batch_input_shape") or cfg.get("batch_shape"))
        if shape is None and cfg.get("input_length") is not None:  # Keras 2.0-2.2 Embedding
            shape = [None, cfg["input_length"]]
        dtype = cfg.get("dtype") if isinstance(cfg.get("dtype"), str) else "float32"
        if first.get("class_name") == "Embedding":
            dtype = "int32"
        return {"shape": shape, "dtype": dtype}

    def _input(self, name: str, cfg: dict):
        self.m.inputs.append([name, 0, 0])
        self.m.input_specs.append(_input_spec(cfg))

    def _first_node(self, entry: dict) -> int:
        """The node index of the config's first call of this layer: 1 for a model built on
        inputs (its own construction is node 0), else 0."""
        cls = entry.get("class_name")
        if cls in ("Functional", "Model"):
            return 1
        if cls == "Sequential" and self.d.major == 2:
            inner = entry.get("config")
            layers = inner if isinstance(inner, list) else (inner or {}).get("layers") or []
            first = layers[0] if layers and isinstance(layers[0], dict) else {}
            cfg = first.get("config") if isinstance(first.get("config"), dict) else {}
            return int(first.get("class_name") == "InputLayer" or "batch_input_shape" in cfg)
        return 0

    def _functional(self):
        entries = self.inner["layers"]
        pending: list[LayerCall] = []
        for e in entries:
            if not isinstance(e, dict):
                raise _Unreadable("a model's layer list holds an entry that is not a layer")
            name = self._entry_name(e)
            if e.get("class_name") == "InputLayer":
                self._input_layer_named(name, e)
                continue
            layer = self._layer(e)
            offset = self._first_node(e)
            nodes = e.get("inbound_nodes") or []
            if not isinstance(nodes, list):
                raise _Unreadable(f"layer {name!r}: inbound_nodes is not a list")
            is_op = _is_op(e)
            for k, node in enumerate(nodes):
                args, kwargs = self._node(name, node, is_op)
                if e.get("class_name") in _RECURRENT and isinstance(args, list) and (
                    isinstance(args[0], list)
                ):  # Keras 2: an RNN's initial states are further inputs of its call
                    args, kwargs = args[0], {**kwargs, "initial_state": args[1:]}
                pending.append(LayerCall(layer, offset + k, args, kwargs))
        known = {tuple(r) for r in self._declared_inputs()}
        self.m.inputs = [list(r) for r in self._declared_inputs()]
        self.m.input_specs = [
            self.input_specs.get(r[0], {"shape": None, "dtype": "float32"}) for r in self.m.inputs
        ]
        # Keras 3 records ops applied to tensors (a mask's `not_equal`) as calls of layers the
        # config does not list; a keyword naming such a tensor is the mask propagated here.
        produced = {(c.layer, c.node, i) for c in pending for i in range(64)}
        for c in pending:
            for key in list(c.kwargs):
                if key == "mask" and any(r not in produced and r not in known
                                         for r in _refs(c.kwargs[key])):  # fmt: skip
                    del c.kwargs[key]
        self.m.calls = _ordered(pending, known, self.name)
        out = self.inner.get("output_layers")
        self.m.outputs = [list(r) for r in _ref_list(out, "output_layers")]

    def _input_layer_named(self, name, e):
        self.input_specs[name] = _input_spec(e.get("config"))

    def _declared_inputs(self):
        return _ref_list(self.inner.get("input_layers"), "input_layers")

    def _node(self, name: str, node, is_op: bool = False):
        if isinstance(node, dict):  # Keras 3
            args = _keras3_value(node.get("args") or [])
            kwargs = _keras3_value(node.get("kwargs") or {})
            if not isinstance(args, list) or not isinstance(kwargs, dict):
                raise _Unreadable(f"layer {name!r}: a call's args / kwargs are malformed")
            if is_op:  # an operation's positional arguments, tensors and constants
                return args, kwargs
            if len(args) != 1:
                raise _Unreadable(
                    f"layer {name!r} is called with {len(args)} positional arguments "
                    "(a call of a Keras op or a custom layer)"
                )
            kwargs.pop("training", None)  # the module's train()/eval() decides, as model(x,
            return args[0], kwargs  # training=...) decides for every layer in Keras
        if not isinstance(node, list) or not node:
            raise _Unreadable(f"layer {name!r}: a call without inputs")
        refs, kwargs = [], {}
        for entry in node:
            if not isinstance(entry, list) or len(entry) not in (3, 4):
                raise _Unreadable(f"layer {name!r}: an inbound entry {str(entry)[:60]}")
            refs.append(_ref(entry[:3]))
            if len(entry) == 4 and isinstance(entry[3], dict):
                kwargs.update({k: v for k, v in entry[3].items() if v is not None})
        kwargs.pop("training", None)
        return (refs[0] if len(refs) == 1 else refs), kwargs

    # -- layers -------------------------------------------------------------------------------

    def _layer(self, e: dict) -> str:
        name = self._entry_name(e)
        cls = e.get("class_name")
        cfg = e.get("config") if isinstance(e.get("config"), dict) else {}
        if name in self.m.layers:
            raise _Unreadable(f"two layers named {name!r} in one model")
        self.m.trainable[name] = bool(cfg.get("trainable", True))
        if cls in _MODELS:
            if self.depth >= 16:
                raise _Unreadable("models nested more than 16 deep")
            self.m.layers[name] = _Model(self.d, e, self.depth + 1).read()
        else:
            self.m.layers[name] = self.d.describe_layer(name, e)
        return name


def _input_spec(cfg) -> dict:
    """An InputLayer config's shape (batch axis included) and dtype."""
    cfg = cfg if isinstance(cfg, dict) else {}
    dtype = cfg.get("dtype")
    if isinstance(dtype, dict):  # a Keras 3 dtype policy
        dtype = (dtype.get("config") or {}).get("name")
    shape = _plain_value(cfg.get("batch_shape") or cfg.get("batch_input_shape"))
    return {"shape": shape, "dtype": dtype or "float32"}


def _is_op(entry: dict) -> bool:
    """Whether a config entry is a Keras 3 operation rather than a layer: its module says so,
    or (Keras 3's legacy `.h5`, which stores no module) its class is an op's and its config
    lacks what every layer's holds (`trainable`)."""
    module = entry.get("module")
    if module is not None:
        return str(module).startswith("keras.src.ops")
    cfg = entry.get("config")
    return entry.get("class_name") in OPS and isinstance(cfg, dict) and "trainable" not in cfg


def _ref_list(v, what: str) -> list:
    if isinstance(v, list) and len(v) == 3 and isinstance(v[0], str):
        return [_ref(v)]  # Keras 3 writes a single input or output as one reference
    if not isinstance(v, list) or not v:
        raise _Unreadable(f"{what} is missing or empty")
    return [_ref(r) for r in v]


def _ordered(calls: list[LayerCall], known: set, model: str) -> list[LayerCall]:
    """The calls in an order where each follows the calls producing what it reads."""
    produced = set(known)
    out, left = [], list(calls)
    while left:
        ready = [c for c in left if all(_producer_done(r, produced) for r in _refs(c.args))
                 and all(_producer_done(r, produced) for r in _refs(c.kwargs))]  # fmt: skip
        if not ready:
            missing = sorted({r for c in left for r in _refs(c.args)
                              if not _producer_done(r, produced)})[:3]  # fmt: skip
            raise _Unreadable(f"model {model!r}: calls read tensors no call produces: {missing}")
        for c in ready:
            out.append(c)
            left.remove(c)
            produced.add((c.layer, c.node))
    return out


def _producer_done(ref: tuple, produced: set) -> bool:
    return ref in produced or (ref[0], ref[1]) in produced


def _plain_value(v, depth: int = 0):
    """A config value with tf_keras' serialized tuples (`{"class_name": "__tuple__", "items":
    [...]}`, as a SavedModel's metadata writes them) as lists."""
    if depth > 32:
        raise _Unreadable("a layer config nested more than 32 deep")
    if isinstance(v, dict):
        if v.get("class_name") == "__tuple__" and isinstance(v.get("items"), list):
            return [_plain_value(x, depth + 1) for x in v["items"]]
        return {k: _plain_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain_value(x, depth + 1) for x in v]
    return v


def _jsonable(v, depth: int = 0):
    """A config value as plain JSON data (what a converted file may hold)."""
    if depth > 32:
        raise _Unreadable("a layer config nested more than 32 deep")
    if isinstance(v, dict):
        return {str(k): _jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x, depth + 1) for x in v]
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


class _Describer:
    def __init__(self, source: Source, rnn: dict[str, LayerDescription], major: int,
                 custom=frozenset()):  # fmt: skip
        self.source, self.rnn, self.major = source, rnn, major
        self.custom = set(custom)
        self.refusals: list[Refusal] = []
        self.origin = source.config_origin or "the model config"

    def refuse(self, layer, attr, value, reason):
        self.refusals.append(Refusal(layer, attr, value, reason))

    def describe_layer(self, name: str, e: dict):
        cls = e.get("class_name")
        cfg = e.get("config") if isinstance(e.get("config"), dict) else {}
        if cls in _RECURRENT:
            d = self.rnn.get(name)
            if d is None:
                self.refuse(name, "class", cls, "its recurrent layer could not be described")
            return d
        if cls == "TimeDistributed":
            inner = cfg.get("layer")
            if not isinstance(inner, dict):
                self.refuse(name, "layer", inner, "TimeDistributed without a layer config")
                return None
            inner_name = self._entry_name(inner, f"{name}_layer")
            if inner.get("class_name") in _RECURRENT | _MODELS:
                self.refuse(name, "layer", inner.get("class_name"),
                            "TimeDistributed of a recurrent layer or a model")  # fmt: skip
                return None
            d = self._plain(name, cls, {"layer": None}, {})
            child = self.describe_layer(inner_name, inner)
            if child is not None:
                d.children["layer"] = child
            return d
        if _is_op(e):
            if cls not in OPS:
                self.refuse(name, "class", cls, "a Keras op this version does not port")
                return None
            d = LayerDescription(name, f"keras.op.{cls}", self.origin)
            d.set("params", {k: _plain_value(v) for k, v in cfg.items() if k != "name"},
                  self.origin)  # fmt: skip
            return d
        if cls in self.custom:
            d = LayerDescription(name, "keras.custom", self.origin)
            d.set("class_name", cls, self.origin)
            d.set("config", _jsonable(cfg), self.origin)
            d.notes.append(f"a class of the user's own, declared with --custom {cls}: "
                           "load_model(custom_layers=...) supplies its module")  # fmt: skip
            return d
        keys = LAYER_KEYS.get(cls)
        if keys is None:
            if cls == "Lambda":
                why = "a Lambda layer runs Python code the file stores as bytecode: not ported"
            else:
                module = e.get("module")
                own = module is None or str(module).startswith("keras")
                why = ("not a layer class this version ports" if own else
                       "not a class of Keras' own") + f"; a class of your own: --custom {cls}"
            self.refuse(name, "class", cls, why)
            return None
        return self._plain(name, cls, keys, cfg)

    @staticmethod
    def _entry_name(e, default):
        cfg = e.get("config") if isinstance(e.get("config"), dict) else {}
        return e.get("name") or cfg.get("name") or default

    def _plain(self, name: str, cls: str, keys: dict, cfg: dict) -> LayerDescription:
        cfg = _plain_value(cfg)
        d = LayerDescription(name, f"keras.{cls}", self.origin)
        for key, default in keys.items():
            if key == "layer":
                continue
            if key in cfg:
                value = cfg[key]
                if key in _NOTES:
                    if value not in (None, False):
                        d.notes.append(f"not ported: {key} = {value!r} (training-time only)")
                    continue
                if (cls, key) in _ONLY_DEFAULT and value not in (None, False, default):
                    self.refuse(name, key, value, f"{cls} with {key}={value!r} is not computed")
                d.set(key, value, self.origin)
            elif default is not None or key in ("strides", "activation"):
                d.set(key, default, f"Keras {self.major}'s default", stored=False)
        for key, value in cfg.items():
            if key in keys or key in _COMMON:
                continue
            if key.endswith(_TRAINING) or key == "activity_regularizer":
                if value is not None:
                    d.notes.append(f"not ported: {key} (training-time only)")
                continue
            self.refuse(name, key, value, f"a {cls} config key this version does not port")
        policy = cfg.get("dtype")
        if isinstance(policy, dict):
            policy = (policy.get("config") or {}).get("name")
        if cls == "Embedding" and policy in ("int32", "int64"):
            policy = None  # Keras 2.0-2.1 stored the Embedding's input dtype here
        if policy not in (None, "float32", "float64"):
            self.refuse(name, "dtype", policy, "a mixed-precision or non-float policy")
        if policy is not None:
            d.set("dtype", policy, self.origin)
        return d


def describe_model(source: Source, rnn: list[LayerDescription], custom=()):
    """`(ModelDescription, refusals)` of the source's Keras model config; `rnn`: the recurrent
    layers' descriptions (`describe_keras`); `custom`: class names of the user's own layers,
    whose modules `load_model` takes from the user (`--custom`)."""
    cfg, version = source.model_config, source.writer.keras_version
    major = model_config_major(cfg, version) or source.writer.keras_major or 2
    if major == 1:
        return None, [Refusal("(model)", "keras_version", version,
                              "a Keras 1 model config (other argument names): not ported")]
    if major not in (2, 3):
        return None, [Refusal("(model)", "keras_version", version, "not a Keras 2 or 3 config")]
    d = _Describer(source, {x.name: x for x in rnn}, major, custom)
    if not isinstance(cfg, dict) or cfg.get("class_name") not in _MODELS:
        cls = cfg.get("class_name") if isinstance(cfg, dict) else type(cfg).__name__
        return None, [Refusal("(model)", "class_name", cls, "not a Sequential or Functional "
                              "model config (a subclassed model's layers are ported alone)")]
    try:
        model = _Model(d, cfg, 0).read()
    except _Unreadable as err:
        return None, [Refusal("(model)", "config", "(unreadable)", str(err))]
    return model, d.refusals
