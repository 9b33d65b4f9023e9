"""Keras recurrent layer descriptions -> `keras_layers` modules holding Keras' own weights.

`keras.LSTM`, `keras.GRU`, `keras.SimpleRNN` -> `KerasLSTM`, `KerasGRU`, `KerasSimpleRNN`
(Keras 2's `CuDNNLSTM` / `CuDNNGRU`: the LSTM and the reset-after GRU their weights convert
to, as Keras' own loader converts them); `keras.Bidirectional` -> `KerasBidirectional` of two.
"""

from __future__ import annotations

import torch

from ... import keras_layers, layouts
from ..describe.description import LayerDescription
from .context import BuildContext, make_entry, tensor

__all__ = ["KINDS", "build", "module_from_entry"]

_KERAS = {
    "keras.LSTM": keras_layers.KerasLSTM,
    "keras.GRU": keras_layers.KerasGRU,
    "keras.SimpleRNN": keras_layers.KerasSimpleRNN,
    # Keras 2's CuDNN layers are the LSTM and GRU(reset_after=True) their weights convert to.
    "keras.CuDNNLSTM": keras_layers.KerasLSTM,
    "keras.CuDNNGRU": keras_layers.KerasGRU,
}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


KINDS = {*_KERAS, "keras.Bidirectional"}


def recurrent_module(ctx: BuildContext, d: LayerDescription):
    """`(module, config)` of a Keras LSTM/GRU/SimpleRNN description, or None after a refusal."""
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
    if d.value("masked_outputs", "previous_output") != "previous_output":
        config["masked_outputs"] = d.value("masked_outputs")
    if d.value("cudnn_mask", False):
        config["cudnn_mask"] = True
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
        ctx.refuse(d.name, key, config.get(key), str(err))
        return None
    except ValueError as err:
        ctx.refuse(d.name, "layer", d.kind, str(err))
        return None
    weights = {r: tensor(ctx.variables[n]) for r, n in d.weights.items()}
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


def build(ctx: BuildContext, d: LayerDescription) -> dict | None:
    """The entry of a `keras.*` description, or None after a refusal."""
    if d.kind in _KERAS:
        made = recurrent_module(ctx, d)
        if made is None:
            return None
        module, config = made
        return make_entry(module, d.kind, config, d, list(d.weights.values()))
    if d.kind == "keras.Bidirectional":
        parts = {role: recurrent_module(ctx, child) for role, child in d.children.items()}
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
        return make_entry(module, d.kind, config, d, used)
    ctx.refuse(d.name, "kind", d.kind, "no module builder for this kind")
    return None


def module_from_entry(entry: dict, dtype) -> torch.nn.Module:
    """The (unloaded) module of a `keras.*` entry."""
    kind, config = entry["kind"], entry["config"]
    if kind == "keras.Bidirectional":
        fw, bw = (
            _KERAS[config[r]["kind"]](**config[r]["config"], dtype=dtype)
            for r in ("forward", "backward")
        )
        return keras_layers.KerasBidirectional(fw, bw, config["merge_mode"])
    return _KERAS[kind](**config, dtype=dtype)
