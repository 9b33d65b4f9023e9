"""Layer descriptions -> modules (readers -> source -> layer description -> **module builders**).

Each builder turns one description into a module of this package that computes the same
function and the same gradients, copies the file's weights into it, and returns an *entry*:
`{"class", "config", "state_dict", "description", "used"}`, what `convert` saves and `load`
rebuilds. Where a description asks for something the modules do not compute, the builder
raises `Refused` naming the layer, the attribute and the value (`approximate=True` builds the
nearest module instead where one exists, and returns the difference as a warning).

The modules decide what they compute: a builder passes the description's values to the
module's constructor, which raises NotImplementedError for a variant its kernels lack; that
becomes a refusal. So `load` refuses the same descriptions on a version whose kernels lack them.
"""

from __future__ import annotations

import numpy as np
import torch

from .. import keras_layers, layouts
from .description import LayerDescription, Refusal, Refused

__all__ = ["build", "module_from_entry"]

_KERAS = {
    "keras.LSTM": keras_layers.KerasLSTM,
    "keras.GRU": keras_layers.KerasGRU,
    "keras.SimpleRNN": keras_layers.KerasSimpleRNN,
    # Keras 2's CuDNN layers are the LSTM and GRU(reset_after=True) their weights convert to.
    "keras.CuDNNLSTM": keras_layers.KerasLSTM,
    "keras.CuDNNGRU": keras_layers.KerasGRU,
}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _tensor(v) -> torch.Tensor:
    return torch.from_numpy(np.array(v, copy=True))


class _Build:
    def __init__(self, variables, approximate: bool):
        self.variables, self.approximate = variables, approximate
        self.refusals: list[Refusal] = []
        self.warnings: list[str] = []

    def refuse(self, layer, attr, value, reason, approximation=None) -> bool:
        """Records a refusal; True when `--approximate` lets the build go on."""
        r = Refusal(layer, attr, value, reason, approximation)
        if self.approximate and approximation:
            self.warnings.append(f"approximate port: {r}")
            return True
        self.refusals.append(r)
        return False

    def keras_rnn(self, d: LayerDescription):
        cls = _KERAS[d.kind]
        dtype_name = d.value("dtype")
        dtype = _DTYPES.get(dtype_name)
        if dtype is None:  # a refusal was recorded by the describer; approximate in float32
            dtype = torch.float32
        config = {
            "units": d.value("units"),
            "input_size": d.value("input_size"),
            "activation": d.value("activation"),
            "use_bias": d.value("use_bias"),
            "return_sequences": d.value("return_sequences"),
            "return_state": d.value("return_state"),
            "go_backwards": d.value("go_backwards"),
            "stateful": d.value("stateful"),
            "time_major": d.value("time_major"),
            "zero_output_for_mask": d.value("zero_output_for_mask"),
        }
        if d.kind != "keras.SimpleRNN":
            config["recurrent_activation"] = d.value("gate_activation")
        if d.kind in ("keras.GRU", "keras.CuDNNGRU"):
            config["reset_after"] = d.value("reset_after")
        try:
            module = cls(**config, dtype=dtype)
        except NotImplementedError as err:
            key = next(
                (k for k in ("recurrent_activation", "activation") if f"{k}=" in str(err)), "layer"
            )
            self.refuse(d.name, key, config.get(key), str(err))
            return None
        except ValueError as err:
            self.refuse(d.name, "layer", d.kind, str(err))
            return None
        weights = {r: _tensor(self.variables[n]) for r, n in d.weights.items()}
        if d.kind in ("keras.CuDNNLSTM", "keras.CuDNNGRU"):
            weights = dict(
                zip(
                    ("kernel", "recurrent_kernel", "bias"),
                    layouts.keras_cudnn_to_keras(
                        weights["kernel"], weights["recurrent_kernel"], weights["bias"]
                    ),
                    strict=True,
                )
            )
        with torch.no_grad():
            for role, value in weights.items():
                getattr(module, role).copy_(value)
        return module, config

    def build(self, d: LayerDescription):
        if d.kind in _KERAS:
            made = self.keras_rnn(d)
            if made is None:
                return None
            module, config = made
            return _entry(module, d.kind, config, d, list(d.weights.values()))
        if d.kind == "keras.Bidirectional":
            parts = {role: self.keras_rnn(child) for role, child in d.children.items()}
            if any(p is None for p in parts.values()):
                return None
            module = keras_layers.KerasBidirectional(
                parts["forward"][0], parts["backward"][0], d.value("merge_mode")
            )
            config = {
                role: {"kind": d.children[role].kind, "config": parts[role][1]}
                for role in ("forward", "backward")
            }
            config["merge_mode"] = d.value("merge_mode")
            used = [n for c in d.children.values() for n in c.weights.values()]
            return _entry(module, d.kind, config, d, used)
        from . import build_tf1  # TF1 kinds

        return build_tf1.build(self, d)


def _entry(module, kind: str, config: dict, d: LayerDescription, used: list[str]) -> dict:
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return {
        "kind": kind,
        "class": type(module).__name__,
        "config": config,
        "state_dict": state,
        "description": d.to_dict(),
        "used": used,
    }


def build(descriptions, variables, approximate: bool = False):
    """`(entries by layer name, warnings)` for every description, or raises `Refused` listing
    every layer attribute that cannot be reproduced."""
    b = _Build(variables, approximate)
    entries = {}
    for d in descriptions:
        e = b.build(d)
        if e is not None:
            entries[d.name.replace("/", ".")] = e
    if b.refusals:
        raise Refused(b.refusals)
    return entries, b.warnings


def module_from_entry(entry: dict) -> torch.nn.Module:
    """The module an entry of a converted file describes (`load`); raises ValueError naming the
    layer when this version cannot build it (a variant its kernels lack)."""
    kind, config = entry["kind"], entry["config"]
    dtype = next(iter(entry["state_dict"].values())).dtype
    if kind in _KERAS:
        module = _KERAS[kind](**config, dtype=dtype)
    elif kind == "keras.Bidirectional":
        fw, bw = (
            _KERAS[config[r]["kind"]](**config[r]["config"], dtype=dtype)
            for r in ("forward", "backward")
        )
        module = keras_layers.KerasBidirectional(fw, bw, config["merge_mode"])
    else:
        from . import build_tf1

        module = build_tf1.module_from_entry(entry, dtype)
    module.load_state_dict(entry["state_dict"])
    return module
