"""Keras files: `.keras` archives, Keras 3 `.weights.h5`, legacy `.h5` (whole model or weights
only) and model configs given on their own (`--config`).

What each stores (read with h5py; nothing is imported from Keras):

* `.keras` (Keras 3): a zip of `config.json` (the model config: every layer's class and
  arguments), `metadata.json` (`keras_version`) and `model.weights.h5`.
* Keras 3 `.weights.h5`: groups `layers/<key>/[cell/]vars/<i>`; each `vars` group's `name`
  attribute is the layer's (or cell's) real name; a cell's vars 0, 1, 2 are `kernel`,
  `recurrent_kernel`, `bias`. No config, no version: only Keras 3 writes this layout.
* legacy `.h5` (Keras 1-2, tf.keras, and Keras 3's `model.save("x.h5")`): root attributes
  `keras_version`, `backend`, and with a whole model `model_config` (JSON) and the weights
  under `model_weights/`; each layer group lists its `weight_names` (`lstm/lstm_cell/kernel:0`,
  or Keras <= 2.2's `lstm_1/kernel:0`). `save_weights("x.h5")` writes the same without
  `model_config`: the layers' arguments are not stored, only the version that wrote them.

Variables come out as `<layer>/[<sublayer>/][<cell>/]<weight>`, the names Keras gives its
variables (and TF2 checkpoints record as `full_name`), so every format meets one describer.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from .source import KerasLayer, Source, Writer, keras_version_tuple

__all__ = ["is_keras_file", "layers_from_config", "read_keras", "read_keras_config"]

_CELL_WEIGHTS = ("kernel", "recurrent_kernel", "bias")
_MASK_PRODUCERS = {"Masking", "Embedding"}


def is_keras_file(path: str) -> bool:
    return os.path.isfile(path) and (
        path.endswith((".keras", ".h5", ".hdf5")) or zipfile.is_zipfile(path) or _is_h5(path)
    )


def _is_h5(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89HDF\r\n\x1a\n"


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _float_array(obj) -> np.ndarray | None:
    value = np.array(obj)
    return value if value.dtype.kind == "f" else None


# -- model configs ------------------------------------------------------------------------------


def _walk_config(cfg: dict, out: dict[str, KerasLayer], masks: list[str]) -> None:
    """Every layer of a (possibly nested) model config into `out`, by layer name."""
    inner = cfg.get("config", {})
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if isinstance(layers, list):  # a model: Sequential, Functional, Model
        for layer in layers:
            _walk_config(layer, out, masks)
        return
    name = inner.get("name") or cfg.get("name")
    cls = cfg.get("class_name", "")
    if not name:
        return
    if name in out:
        raise ValueError(
            f"model config: two layers named {name!r} (nested models): cannot tell which "
            "weights belong to which"
        )
    mask_from = None
    for node in cfg.get("inbound_nodes") or []:
        if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {"mask": tensor}}
            mask = (node.get("kwargs") or {}).get("mask")
            if isinstance(mask, dict):
                history = (mask.get("config") or {}).get("keras_history") or [None]
                mask_from = history[0] or "?"
    if cls in _MASK_PRODUCERS and (cls == "Masking" or inner.get("mask_zero")):
        masks.append(name)
    out[name] = KerasLayer(name, cls, inner, mask_from)
    if cls == "Bidirectional":  # the wrapped layers are configs of their own
        for key in ("layer", "backward_layer"):
            sub = inner.get(key)
            if isinstance(sub, dict) and sub.get("config", {}).get("name"):
                sub_name = sub["config"]["name"]
                out.setdefault(
                    f"{name}/{key}",
                    KerasLayer(sub_name, sub.get("class_name", ""), sub["config"], mask_from),
                )


def layers_from_config(cfg: dict) -> tuple[dict[str, KerasLayer], list[str]]:
    """`(layers by name, names of the layers that produce masks)` of a Keras model config.
    A Bidirectional's wrapped layer configs are also under `<name>/layer` and
    `<name>/backward_layer`."""
    out: dict[str, KerasLayer] = {}
    masks: list[str] = []
    if isinstance(cfg, str):
        cfg = json.loads(cfg)
    _walk_config(cfg, out, masks)
    return out, masks


# -- weights ------------------------------------------------------------------------------------


def _keras3_weights(h5) -> dict[str, np.ndarray]:
    """A Keras 3 weights file: `layers/.../vars/<i>`, named by the `name` attributes."""
    import h5py

    out: dict[str, np.ndarray] = {}

    def visit(path, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        parts = path.split("/")
        if len(parts) < 2 or parts[-2] != "vars" or parts[0] == "optimizer":
            return  # not a weight (the optimizer's state is in its own group)
        names = []
        for depth in range(1, len(parts) - 2):  # the groups between the root and "vars"
            group_path = "/".join(parts[:depth])
            if parts[depth - 1] == "layers":
                continue  # a container of layers, not a layer
            vars_group = h5.get(f"{group_path}/vars")
            name = _str(vars_group.attrs.get("name", parts[depth - 1])) if vars_group else None
            names.append(name or parts[depth - 1])
        owner = h5[f"{'/'.join(parts[:-2])}/vars"]
        owner_name = _str(owner.attrs.get("name", parts[-3]))
        if parts[-3] != "layers":
            names.append(owner_name)
        index = int(parts[-1])
        is_cell = parts[-3] == "cell" or owner_name.endswith("_cell")
        leaf = _CELL_WEIGHTS[index] if is_cell and index < 3 else str(index)
        value = _float_array(obj)
        if value is not None:
            out["/".join([*names, leaf])] = value

    h5.visititems(visit)
    return out


def _legacy_weights(group) -> dict[str, np.ndarray]:
    """A legacy layout: one group per layer listing its `weight_names`."""
    out: dict[str, np.ndarray] = {}
    for layer in group:
        names = group[layer].attrs.get("weight_names", [])
        for n in names:
            n = _str(n)
            value = _float_array(group[layer][n])
            if value is not None:
                out[n.removesuffix(":0")] = value
    return out


def _h5_source(path: str, h5, file_label: str) -> Source:
    """A Source from an open h5py File (a `.weights.h5`, a legacy `.h5`, or the weights inside
    a `.keras` archive)."""
    attrs = {k: _str(v) for k, v in h5.attrs.items() if k in ("keras_version", "backend")}
    if "layers" in h5 and "vars" in h5 and "keras_version" not in attrs:
        variables = _keras3_weights(h5)
        writer = Writer("keras", None, 3, "the Keras 3 weights layout; the version is not stored")
        return Source(path, f"Keras 3 weights ({file_label})", writer, variables)
    if "model_weights" in h5:
        weights = h5["model_weights"]
        attrs = attrs or {
            k: _str(v) for k, v in weights.attrs.items() if k in ("keras_version", "backend")
        }
    else:
        weights = h5
    if "keras_version" not in attrs and "layer_names" not in weights.attrs:
        raise ValueError(
            f"{path}: an HDF5 file, but neither Keras' legacy layout (layer_names, "
            "keras_version) nor Keras 3's (layers/.../vars)"
        )
    version = attrs.get("keras_version")
    major = keras_version_tuple(version)[0] if version else None
    backend = attrs.get("backend")
    how = "keras_version attribute" + (f", backend {backend}" if backend else "")
    writer = Writer("keras", version, major, how if version else "no keras_version attribute")
    source = Source(path, "", writer, _legacy_weights(weights))
    if "model_config" in h5.attrs:
        source.format = f"Keras legacy HDF5 model ({file_label}: model_config + weights)"
        source.layers, source.mask_layers = layers_from_config(_str(h5.attrs["model_config"]))
        source.config_origin = "the file's model_config"
    else:
        source.format = f"Keras legacy HDF5 weights ({file_label}: weights only, no config)"
    if backend and backend != "tensorflow":
        source.ignored["(backend)"] = f"written with backend {backend!r}"
    return source


def read_keras(path: str) -> Source:
    """A `.keras` archive, a Keras 3 `.weights.h5` or a legacy `.h5`."""
    import h5py

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "model.weights.h5" not in names:
                raise ValueError(f"{path}: a zip without model.weights.h5 (not a .keras file)")
            weights = z.read("model.weights.h5")
            config = json.loads(z.read("config.json")) if "config.json" in names else None
            meta = json.loads(z.read("metadata.json")) if "metadata.json" in names else {}
        with h5py.File(io.BytesIO(weights), "r") as h5:
            source = _h5_source(path, h5, "model.weights.h5")
        version = meta.get("keras_version")
        major = keras_version_tuple(version)[0] if version else 3
        source.writer = Writer(
            "keras",
            version,
            major,
            "metadata.json"
            if version
            else "the .keras format (Keras 3); metadata.json has no version",
        )
        source.format = "Keras .keras archive (config.json + model.weights.h5)"
        if config is not None:
            source.layers, source.mask_layers = layers_from_config(config)
            source.config_origin = "config.json"
        return source
    with h5py.File(path, "r") as h5:
        return _h5_source(path, h5, os.path.basename(path))


def read_keras_config(path: str) -> tuple[dict[str, KerasLayer], list[str], str | None]:
    """`(layers, mask producers, keras_version or None)` of a model config given on its own: a
    JSON file (`model.to_json()`, or a `.keras` archive's config.json), a `.keras` archive or a
    legacy `.h5` holding `model_config`."""
    import h5py

    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            cfg = json.loads(z.read("config.json"))
            meta = json.loads(z.read("metadata.json")) if "metadata.json" in z.namelist() else {}
        return (*layers_from_config(cfg), meta.get("keras_version"))
    if _is_h5(path):
        with h5py.File(path, "r") as h5:
            if "model_config" not in h5.attrs:
                raise ValueError(f"--config {path}: an HDF5 file without model_config")
            version = h5.attrs.get("keras_version")
            return (
                *layers_from_config(_str(h5.attrs["model_config"])),
                _str(version) if version is not None else None,
            )
    with open(path) as fh:
        cfg = json.load(fh)
    version = cfg.get("keras_version") if isinstance(cfg, dict) else None
    return (*layers_from_config(cfg), version)
