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

Corrupt or hostile files (`guard.py`): a zip member's sizes are checked against the archive's
before it is read and its CRC-32 is verified (zipfile); an HDF5 file's structure is walked
before HDF5 reads it (`hdf5_check.py`: HDF5 allocates what a length field says before checking
it against the file, and loops for ever on a global heap object of size 0); only the
attributes used are read, a dataset only when its shape takes no more bytes than the file
holds, a model config only to a bounded nesting depth; what h5py, zipfile or json raise becomes
one error naming the file.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import zipfile

import numpy as np

from ..decoding import guard
from ..source import KerasLayer, Source, Writer, keras_version_tuple
from .hdf5_check import check_hdf5

__all__ = [
    "is_keras_file",
    "layers_from_config",
    "read_keras",
    "read_keras_config",
    "read_config_file",
]

_CELL_WEIGHTS = ("kernel", "recurrent_kernel", "bias")
_MASK_PRODUCERS = {"Masking", "Embedding"}
_MODEL_CLASSES = ("Sequential", "Functional", "Model")
_LIBRARIES = ("h5py", "zipfile", "json", "zlib")
_MAX_NESTING = 64  # models inside models in a config (Keras files nest a few)
_DEFLATE_RATIO = 1032  # the most deflate expands (zlib's technical limit)


def is_keras_file(path: str) -> bool:
    return os.path.isfile(path) and (
        path.endswith((".keras", ".h5", ".hdf5")) or zipfile.is_zipfile(path) or _is_h5(path)
    )


def _is_h5(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8) == b"\x89HDF\r\n\x1a\n"


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _float_array(obj, limit: int) -> np.ndarray | None:
    """A floating-point dataset's values, None for other dtypes; its shape must not take more
    than `limit` bytes (the file's size) before anything is allocated."""
    import h5py

    if not isinstance(obj, h5py.Dataset):
        raise ValueError(f"{obj.name}: a {type(obj).__name__} where a weight's dataset belongs")
    if obj.dtype.kind != "f":
        return None
    if obj.shape is None:  # a null dataspace (h5py.Empty): no values at all
        raise ValueError(f"dataset {obj.name}: a null dataspace (no values) where a weight belongs")
    nbytes = int(np.prod(obj.shape, dtype=object)) * obj.dtype.itemsize
    filtered = obj.id.get_create_plist().get_nfilters() > 0
    if nbytes > limit * (_DEFLATE_RATIO if filtered else 1):
        raise ValueError(
            f"dataset {obj.name}: shape {obj.shape} of {obj.dtype} takes {nbytes} bytes, more "
            f"than the file holds ({limit} bytes)"
        )
    return np.array(obj)


def _attr(obj, name: str, limit: int):
    """Attribute `name` of an HDF5 object, or None; its shape is checked before it is read."""
    if name not in obj.attrs:
        return None
    aid = obj.attrs.get_id(name)
    count = int(np.prod(aid.shape, dtype=object)) if aid.shape else 1  # () scalar, None empty
    # (HDF5 refuses a datatype of size 0 as the attribute is looked up: itemsize is at least 1)
    if count * aid.dtype.itemsize > limit:
        raise ValueError(f"attribute {name!r} of {obj.name}: shape {aid.shape} exceeds the file")
    return obj.attrs[name]


def _open_h5(path: str, data: bytes | None = None):
    """An h5py File on `path` (or on `data`, a zip member's bytes) after the checks HDF5 does
    not make itself; `limit` for `_float_array` and `_attr` is the file's size."""
    import h5py

    if data is None:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
                    check_hdf5(view)
        return h5py.File(path, "r"), size
    check_hdf5(data)
    return h5py.File(io.BytesIO(data), "r"), len(data)


def _zip_member(z: zipfile.ZipFile, name: str, archive_size: int) -> bytes:
    """A member's bytes, its sizes checked against the archive's before anything is read (the
    CRC-32 is checked by zipfile as it reads)."""
    info = z.getinfo(name)
    stored = info.compress_type == zipfile.ZIP_STORED
    if (
        info.header_offset + info.compress_size > archive_size
        or (stored and info.file_size != info.compress_size)
        or info.file_size > _DEFLATE_RATIO * info.compress_size  # nothing inflates to bytes
    ):
        raise ValueError(
            f"zip member {name}: {info.compress_size} bytes at {info.header_offset} "
            f"({info.file_size} uncompressed) do not fit the archive ({archive_size} bytes)"
        )
    return z.read(name)


def _json(raw: bytes, what: str):
    """A JSON document that must be an object (a model config, metadata.json)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as err:  # RecursionError: the decoder's nesting limit
        raise ValueError(f"{what}: not JSON ({type(err).__name__}: {err})") from err
    if not isinstance(value, dict):
        raise ValueError(f"{what}: a JSON {type(value).__name__}, not an object")
    return value


# -- model configs ------------------------------------------------------------------------------


def _walk_config(cfg: dict, out: dict[str, KerasLayer], masks: list[str], depth: int = 0) -> None:
    """Every layer of a (possibly nested) model config into `out`, by layer name."""
    if not isinstance(cfg, dict):
        raise ValueError(f"model config: a layer entry is a {type(cfg).__name__}, not an object")
    if depth > _MAX_NESTING:
        raise ValueError(f"model config: models nested more than {_MAX_NESTING} deep")
    inner = cfg.get("config", {})
    if isinstance(inner, list) and cfg.get("class_name") == "Sequential":
        inner = {"layers": inner}  # Keras 2.0-2.1: a Sequential's config is its layer list
    if not isinstance(inner, dict):
        raise ValueError(f"model config: a layer's config is a {type(inner).__name__}")
    layers = inner.get("layers")
    if isinstance(layers, list):  # a model: Sequential, Functional, Model
        for layer in layers:
            _walk_config(layer, out, masks, depth + 1)
        return
    name = inner.get("name") or cfg.get("name")
    cls = cfg.get("class_name", "")
    if not name and depth > 0:
        # Keras names every layer of a model: an entry without a name cannot be matched to its
        # weights, and skipped, a config of such entries would read as no config at all
        raise ValueError(f"model config: a {cls!r} layer without a name")
    if not name:
        return  # a model config that is not a layer list (a subclassed model's get_config())
    if not isinstance(name, str) or not isinstance(cls, str):
        raise ValueError(f"model config: a layer named {name!r} of class {cls!r}")
    if name in out:
        raise ValueError(
            f"model config: two layers named {name!r} (nested models): cannot tell which "
            "weights belong to which"
        )
    mask_from = None
    nodes = cfg.get("inbound_nodes") or []
    for node in nodes if isinstance(nodes, list) else []:
        if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {"mask": tensor}}
            kwargs = node.get("kwargs") or {}
            mask = kwargs.get("mask") if isinstance(kwargs, dict) else None
            if isinstance(mask, dict):
                mcfg = mask.get("config") or {}
                history = (mcfg.get("keras_history") if isinstance(mcfg, dict) else None) or [None]
                mask_from = str(history[0]) if isinstance(history, list) and history[0] else "?"
    if cls in _MASK_PRODUCERS and (cls == "Masking" or inner.get("mask_zero")):
        masks.append(name)
    out[name] = KerasLayer(name, cls, inner, mask_from)
    if cls == "Bidirectional":  # the wrapped layers are configs of their own
        for key in ("layer", "backward_layer"):
            sub = inner.get(key)
            if (
                isinstance(sub, dict)
                and isinstance(sub.get("config"), dict)
                and isinstance(sub["config"].get("name"), str)
            ):
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
    inner = cfg.get("config")
    if not out and isinstance(inner, dict) and isinstance(inner.get("layers"), list):
        # read as no config, the file's weights would take Keras' defaults
        raise ValueError("model config: a model whose config lists no layers")
    return out, masks


# -- weights ------------------------------------------------------------------------------------


def _keras3_weights(h5, limit: int, by_layer: dict | None = None) -> dict[str, np.ndarray]:
    """A Keras 3 weights file: `layers/.../vars/<i>`, named by the `name` attributes.
    `by_layer` gets each vars group's variable names in index order, under the path of layer
    names that owns it (`dense`, `lstm/lstm_cell`, `head/dense`)."""
    import h5py

    out: dict[str, np.ndarray] = {}
    by_layer = {} if by_layer is None else by_layer

    def visit(path, obj):
        if not isinstance(obj, h5py.Dataset):
            return
        if not isinstance(path, str):  # h5py passes a name that is not UTF-8 as bytes
            raise ValueError(f"an object named {path[:60]!r}, not UTF-8")
        parts = path.split("/")
        if len(parts) < 2 or parts[-2] != "vars" or parts[0] == "optimizer":
            return  # not a weight (the optimizer's state is in its own group)
        if not parts[-1].isdecimal():
            raise ValueError(f"dataset {path}: a variable that is not numbered")
        names = []
        for depth in range(1, len(parts) - 2):  # the groups between the root and "vars"
            group_path = "/".join(parts[:depth])
            if parts[depth - 1] == "layers":
                continue  # a container of layers, not a layer
            vars_group = h5.get(f"{group_path}/vars")
            name = _name(vars_group, parts[depth - 1], limit) if vars_group else None
            names.append(name or parts[depth - 1])
        owner = h5[f"{'/'.join(parts[:-2])}/vars"]
        # the group holding "vars"; none for the model's own (a subclassed model's add_weight)
        above = parts[-3] if len(parts) > 2 else ""
        owner_name = _name(owner, above or "model", limit)
        if above != "layers":
            names.append(owner_name)
        index = int(parts[-1])
        is_cell = above == "cell" or owner_name.endswith("_cell")
        leaf = _CELL_WEIGHTS[index] if is_cell and index < 3 else str(index)
        value = _float_array(obj, limit)
        if value is not None:
            out["/".join([*names, leaf])] = value
            by_layer.setdefault("/".join(names), []).append((index, "/".join([*names, leaf])))

    h5.visititems(visit)
    for path, entries in by_layer.items():
        by_layer[path] = [name for _, name in sorted(entries)]
    return out


def _name(obj, default: str, limit: int) -> str:
    """A Keras 3 `vars` group's `name` attribute (a string), else `default`."""
    value = _attr(obj, "name", limit)
    if value is None:
        return default
    if not isinstance(value, (str, bytes)):
        raise ValueError(f"{obj.name}: its name attribute is a {type(value).__name__}")
    return _str(value) or default


def _legacy_weights(group, limit: int, models=frozenset(), by_layer: dict | None = None,
                    stored: dict | None = None, layers=frozenset()) -> dict[str, np.ndarray]:
    """A legacy layout: one group per layer listing its `weight_names`. A weight belongs to the
    group's layer where the model config names it (`layers`; Keras names variables after other names
    at times: a model loaded twice in one process saves `dense_7_1/kernel:0` under layer `dense_7`),
    else to the layer its name's first part names, but where that is the group's name with a number
    added (in the group of a nested model, `models`: its layers'). `by_layer` gets each layer's
    variable names in the file's order, `stored` each variable's name as the file writes it."""
    out: dict[str, np.ndarray] = {}
    by_layer = {} if by_layer is None else by_layer
    stored = {} if stored is None else stored
    for layer in group:
        names = _attr(group[layer], "weight_names", limit)
        if names is None:
            continue
        if not isinstance(names, np.ndarray) or names.ndim != 1:
            raise ValueError(f"layer {layer!r}: weight_names is not a list of names")
        for n in names:
            n = _str(n)
            value = _float_array(group[layer][n], limit)
            if value is None:
                continue
            first, _, rest = n.removesuffix(":0").partition("/")
            renamed = rest and first.startswith(f"{layer}_") and first[len(layer) + 1 :].isdecimal()
            plain = layer in layers and layer not in models  # the config names the group's layer
            owner = layer if plain or (renamed and layer not in models) else first
            key = f"{layer}/{rest}" if renamed and layer not in models else n.removesuffix(":0")
            if layer in models and first == layer and "/" in rest:  # Keras 3: `head/dense/kernel`
                owner = f"{first}/{rest.partition('/')[0]}"
            out[key] = value
            by_layer.setdefault(owner, []).append(key)
            stored[key] = n
    return out


def _nested_models(cfg) -> tuple[frozenset[str], frozenset[str]]:
    """The names of the models nested in a model config (their h5 groups hold their layers'
    weights), and of the config's top-level layers."""
    models: set[str] = set()

    def names(c) -> list:
        inner = c.get("config") if isinstance(c, dict) else None
        layers = inner if isinstance(inner, list) else (
            inner.get("layers") if isinstance(inner, dict) else None)  # fmt: skip
        return layers if isinstance(layers, list) else []

    def name_of(layer) -> str | None:
        cfg = layer.get("config")
        name = layer.get("name") or (cfg.get("name") if isinstance(cfg, dict) else None)
        return name if isinstance(name, str) else None

    def walk(c, depth=0):
        if depth > _MAX_NESTING:
            return
        for layer in names(c):
            if isinstance(layer, dict) and layer.get("class_name") in _MODEL_CLASSES:
                if name_of(layer):
                    models.add(name_of(layer))
                walk(layer, depth + 1)

    walk(cfg)
    top = {name_of(x) for x in names(cfg) if isinstance(x, dict)} - {None}
    return frozenset(models), frozenset(top)


def _h5_source(path: str, h5, file_label: str, limit: int) -> Source:
    """A Source from an open h5py File (a `.weights.h5`, a legacy `.h5`, or the weights inside
    a `.keras` archive); `limit`: the file's size in bytes."""

    def keras_attrs(obj) -> dict[str, str]:
        values = {k: _attr(obj, k, limit) for k in ("keras_version", "backend")}
        return {k: _str(v) for k, v in values.items() if v is not None}

    attrs = keras_attrs(h5)
    if "layers" in h5 and "vars" in h5 and "keras_version" not in attrs:
        by_layer: dict[str, list[str]] = {}
        variables = _keras3_weights(h5, limit, by_layer)
        writer = Writer("keras", None, 3, "the Keras 3 weights layout; the version is not stored")
        source = Source(path, f"Keras 3 weights ({file_label})", writer, variables)
        source.layer_weights = by_layer
        return source
    if "model_weights" in h5:
        weights = h5["model_weights"]
        attrs = attrs or keras_attrs(weights)
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
    config = _attr(h5, "model_config", limit)
    model_config = _json(_str(config), "model_config") if config is not None else None
    by_layer: dict[str, list[str]] = {}
    stored: dict[str, str] = {}
    models, layers = _nested_models(model_config)
    variables = _legacy_weights(weights, limit, models, by_layer, stored, layers)
    source = Source(path, "", writer, variables)
    source.layer_weights, source.stored_names = by_layer, stored
    if model_config is not None:
        source.format = f"Keras legacy HDF5 model ({file_label}: model_config + weights)"
        source.model_config = model_config
        source.layers, source.mask_layers = layers_from_config(source.model_config)
        source.config_origin = "the file's model_config"
    else:
        source.format = f"Keras legacy HDF5 weights ({file_label}: weights only, no config)"
    if backend and backend != "tensorflow":
        source.ignored["(backend)"] = f"written with backend {backend!r}"
    return source


def read_keras(path: str) -> Source:
    """A `.keras` archive, a Keras 3 `.weights.h5` or a legacy `.h5`."""
    with guard.reading(path, "Keras file", _LIBRARIES):
        return _read_keras(path)


def _read_keras(path: str) -> Source:
    if zipfile.is_zipfile(path):
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            if "model.weights.h5" not in names:
                raise ValueError(f"{path}: a zip without model.weights.h5 (not a .keras file)")
            weights = _zip_member(z, "model.weights.h5", size)
            config = _json(_zip_member(z, "config.json", size), "config.json") if (
                "config.json" in names) else None  # fmt: skip
            meta = _json(_zip_member(z, "metadata.json", size), "metadata.json") if (
                "metadata.json" in names) else {}  # fmt: skip
        h5, limit = _open_h5(f"{path} (model.weights.h5)", weights)
        with h5:
            source = _h5_source(path, h5, "model.weights.h5", limit)
        version = meta.get("keras_version")
        if version is not None and not isinstance(version, str):
            raise ValueError(f"metadata.json: keras_version {version!r} is not a string")
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
            source.model_config = config
            source.layers, source.mask_layers = layers_from_config(config)
            source.config_origin = "config.json"
        return source
    h5, limit = _open_h5(path)
    with h5:
        return _h5_source(path, h5, os.path.basename(path), limit)


def read_keras_config(path: str) -> tuple[dict[str, KerasLayer], list[str], str | None]:
    """`(layers, mask producers, keras_version or None)` of a model config given on its own: a
    JSON file (`model.to_json()`, or a `.keras` archive's config.json), a `.keras` archive or a
    legacy `.h5` holding `model_config`."""
    return read_config_file(path)[:3]


def read_config_file(path: str):
    """`read_keras_config`'s three, and the model config itself."""
    with guard.reading(path, "Keras model config", _LIBRARIES):
        cfg, version = _read_keras_config(path)
        if isinstance(cfg, str):  # json.dump(model.to_json(), f): the JSON text, as a string
            cfg = json.loads(cfg)
        layers, masks = layers_from_config(cfg)
    if version is not None and not isinstance(version, str):
        raise guard.CorruptFile(f"{path}: keras_version {version!r} is not a string")
    return layers, masks, version, cfg


def _read_keras_config(path: str):
    if zipfile.is_zipfile(path):
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as z:
            cfg = _json(_zip_member(z, "config.json", size), "config.json")
            meta = _json(_zip_member(z, "metadata.json", size), "metadata.json") if (
                "metadata.json" in z.namelist()) else {}  # fmt: skip
        return cfg, meta.get("keras_version")
    if _is_h5(path):
        h5, limit = _open_h5(path)
        with h5:
            config = _attr(h5, "model_config", limit)
            if config is None:
                raise ValueError(f"--config {path}: an HDF5 file without model_config")
            version = _attr(h5, "keras_version", limit)
            version = _str(version) if version is not None else None
            return _json(_str(config), "model_config"), version
    with open(path, "rb") as fh:
        cfg = json.loads(fh.read())
    version = cfg.get("keras_version") if isinstance(cfg, dict) else None
    return cfg, version
