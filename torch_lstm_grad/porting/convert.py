"""`convert` and `load`: the whole flow, readers -> layer descriptions -> module builders -> a
file, and back.

`convert` reads the file (`formats/`), describes every recurrent layer it holds (`describe/`),
builds the modules (`build/`) and writes them with their descriptions; the log shows each
description attribute with its origin and what it became.
Whatever the modules cannot reproduce exactly raises `Refused` (the CLI exits 2) and nothing is
written, unless `approximate=True`, which builds the nearest module where one exists and
returns the difference among the warnings. `load` rebuilds the modules and refuses a file
whose descriptions this version cannot honour.

The file records the SHA-256 of its own contents (`_digest`: every key, value and tensor's
dtype, shape and bytes, in a canonical order) under "sha256"; `load` recomputes it and refuses
a file that was changed or damaged after it was written (torch.load itself checks no CRC:
a flipped byte in a tensor would load as another number). A digest is no signature: whoever
can write the file can write a matching digest, so only load files you trust (torch.load runs
with weights_only=True all the same).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import warnings

import numpy as np
import torch

from .build import build, module_from_entry
from .build.context import BuildContext
from .build.keras_model import attach_custom, build_model, module_from_spec
from .decoding import guard
from .describe.description import LayerDescription, Refused
from .describe.keras_model import describe_model, is_graph_config
from .describe.keras_rnn import describe_keras
from .describe.statements import Statements
from .describe.tf1_cells import describe_tf1
from .formats.checkpoint import read_checkpoint
from .formats.frozen_graph import is_graph_def, read_graph_def
from .formats.keras_files import is_keras_file, read_config_file, read_keras
from .formats.saved_model import is_saved_model, read_saved_model
from .source import Source, Writer, keras_rnn_scopes, keras_version_tuple

__all__ = ["FORMAT", "convert", "describe", "load", "read_source", "read_variables"]

FORMAT = "torch_lstm_grad.convert/3"
# /1 did not record what each layer computed; /2 had no digest of its contents.
_OLD_FORMATS = ("torch_lstm_grad.convert/1", "torch_lstm_grad.convert/2")
_DIGEST_KEY = "sha256"


def read_source(path, reader: str | None = None, config=None, signature=None) -> Source:
    """The file's variables and what it says about its layers; `config`: a Keras model config
    for a file that stores none (`read_keras_config`); `signature`: a SavedModel's signature
    whose functions describe the layers (default: serving_default)."""
    path = os.fspath(path)
    if signature is not None and not is_saved_model(path):
        raise ValueError(f"--signature {signature}: {path} is not a SavedModel directory")
    if is_saved_model(path):
        source = read_saved_model(path, reader, signature)
    elif is_keras_file(path):
        source = read_keras(path)
    elif is_graph_def(path):
        source = read_graph_def(path)
    else:
        source = read_checkpoint(path, reader)
    if config is not None:
        source.layers, source.mask_layers, version, source.model_config = read_config_file(
            os.fspath(config)
        )
        source.config_origin = f"--config {os.fspath(config)}"
        if version and source.writer.keras_version is None:
            source.writer = Writer(
                "keras", version, keras_version_tuple(version)[0], f"--config {os.fspath(config)}"
            )
    return source


def read_variables(path, reader: str | None = None) -> dict[str, np.ndarray]:
    """Every floating-point weight of a Keras file or TF checkpoint, by its uniform name
    (`read_source(...).variables`): Keras `<layer>/<cell>/<weight>`, TF1 names as they are, TF2
    variables by their own (Keras) names."""
    return read_source(path, reader).variables


def describe(source: Source, statements: Statements | None = None):
    """`(descriptions, refusals)` of every recurrent layer of `source` (what the statements
    supplied is recorded in `statements.used`)."""
    statements = statements or Statements()
    keras_names = {n for w in keras_rnn_scopes(source.variables).values() for n in w.values()}
    out, refusals = [], []
    if keras_names:
        keras_source = source
        if source.writer.family != "keras":  # Keras layers in a TF1/TF2 checkpoint
            keras_source = dataclasses.replace(
                source,
                writer=Writer(
                    "keras",
                    None,
                    None,
                    f"Keras layers in a {source.format}; the Keras version is not stored",
                ),
            )
        d, r = describe_keras(keras_source, statements)
        out, refusals = out + d, refusals + r
    if source.writer.family != "keras":
        d, r = describe_tf1(source, statements, exclude=keras_names)
        out, refusals = out + d, refusals + r
    return out, refusals


def _digest(data) -> str:
    """SHA-256 of a saved dict's contents in a canonical form (dict keys sorted, every value's
    type, every tensor's dtype and shape before its bytes), the digest key itself left out."""
    h = hashlib.sha256()

    def feed(x) -> None:
        if isinstance(x, dict):
            keys = sorted((k for k in x if k != _DIGEST_KEY or x is not data), key=repr)
            h.update(b"{%d;" % len(keys))
            for k in keys:
                feed(k)
                feed(x[k])
        elif isinstance(x, (list, tuple)):
            h.update(b"%s%d;" % (b"[" if isinstance(x, list) else b"(", len(x)))
            for v in x:
                feed(v)
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)};".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif x is None or isinstance(x, (bool, int, float, str, bytes)):
            text = repr(x).encode("utf-8", "surrogatepass")
            h.update(b"%s:%d:%s;" % (type(x).__name__.encode(), len(text), text))
        else:
            raise TypeError(f"cannot digest a {type(x).__name__}")

    feed(data)
    return h.hexdigest()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def convert(
    src,
    out,
    *,
    sets=(),
    keras_version: str | None = None,
    config=None,
    assume_defaults: bool = False,
    approximate: bool = False,
    forget_bias: float | None = None,
    reader: str | None = None,
    signature: str | None = None,
    layers_only: bool = False,
    custom=(),
    log=print,
    warn=_stderr,
) -> dict:
    """Reads `src`, describes and builds every recurrent layer, writes `out` (torch.save) and
    logs each description and what it became. `sets`: `"[LAYER:]KEY=VALUE"` statements for
    what the file does not store (`--set`); `keras_version`: the Keras that wrote a file that
    does not say; `config`: a Keras model config for a weights-only file; `assume_defaults`:
    take the class defaults for whatever a TF1 checkpoint without its meta graph does not store;
    `forget_bias`: shorthand for `sets=["forget_bias=..."]`; `signature`: a SavedModel's
    signature whose functions describe the layers (default serving_default). Where the file
    holds a Keras model config (or `config` gives one), the whole model is ported too
    (`load_model` reads it), unless `layers_only`; `custom`: class names of the user's own
    layers, kept with their config and weights for `load_model(custom_layers=...)`. Raises
    `Refused` (a ValueError) listing
    every attribute or layer it cannot reproduce, and writes nothing then. Returns the saved
    dict."""
    statements = Statements.from_args(sets, keras_version, assume_defaults, forget_bias)
    source = read_source(src, reader, config, signature)
    log(f"read {source.path}: {source.format}")
    log(f"written by: {source.writer.describe()}")
    log(f"found {len(source.variables)} weight variables:")
    for name, value in sorted(source.variables.items()):
        key = source.keys.get(name, name)
        shown = name if key == name else f"{name} (stored as {key})"
        log(f"  {shown} {list(np.shape(value))} {np.asarray(value).dtype}")
    if not source.variables:
        raise ValueError(f"{source.path}: no weight variables found")
    descriptions, refusals = describe(source, statements)
    unused = statements.unused()
    if unused:
        raise ValueError(
            f"--set {', '.join(unused)}: not used (no layer of {source.path} takes that key "
            "from the command line: the file stores it, or the layer or key does not exist; "
            f"layers: {', '.join(d.name for d in descriptions) or 'none'})"
        )
    if not descriptions and not refusals:
        raise ValueError(
            f"{source.path}: no recurrent layer (LSTM/GRU/RNN variable set) "
            "recognised among: " + ", ".join(sorted(source.variables))
        )
    log("layers (attribute = value <- where it came from):")
    for d in descriptions:
        for line in d.lines():
            log("  " + line)
    build_warnings = []
    if refusals:
        blocking = [r for r in refusals if not (approximate and r.approximation)]
        if blocking:
            raise Refused(blocking)
        build_warnings = [f"approximate port: {r}" for r in refusals]
    entries, more = build(descriptions, source.variables, approximate)
    build_warnings += more
    for w in build_warnings:
        warn(f"WARNING: {w}")
    model = None
    if source.model_config is not None and not layers_only:
        if is_graph_config(source.model_config):
            model = _whole_model(source, descriptions, approximate, log, custom)
        else:
            log("model: its config is no graph of layers (a subclassed model): its recurrent "
                "layers are ported alone")  # fmt: skip
    used_vars = set(model["used"]) if model else set()
    for name, e in entries.items():
        used_vars |= set(e["used"])
        params = ", ".join(f"{k} {list(t.shape)}" for k, t in e["state_dict"].items())
        log(f"{name}: {e['class']} <- {', '.join(e['used'])}; params: {params}")
    for name in sorted(set(source.variables) - used_vars):
        log(f"not a recurrent layer's weight (left out): {name}")
    if model is not None:
        log(f"model: {model['spec']['name']} as one KerasModel (load_model)")
    for name, why in sorted(source.ignored.items()):
        log(f"ignored: {name} ({why})")
    data = {
        "format": FORMAT,
        "source": source.path,
        "approximate": bool(build_warnings),
        "modules": entries,
    }
    if model is not None:
        data["model"] = {k: model[k] for k in ("spec", "state_dict", "description")}
    data[_DIGEST_KEY] = _digest(data)
    torch.save(data, out)
    return data


def _whole_model(source: Source, rnn: list[LayerDescription], approximate: bool, log,
                 custom=()) -> dict:  # fmt: skip
    """The whole Keras model of `source`: its description logged, its module built; raises
    Refused naming every layer it cannot port (`custom`: the user's own classes)."""
    m, refusals = describe_model(source, rnn, custom)
    if m is None or refusals:
        raise Refused(refusals)
    log(f"model: {m.class_name} {m.name!r}, Keras {m.keras_major}'s semantics; inputs "
        + ", ".join(f"{r[0]} {s['shape']} {s['dtype']}" for r, s in
                    zip(m.inputs, m.input_specs, strict=True))  # fmt: skip
        + "; outputs " + ", ".join(f"{r[0]}:{r[1]}:{r[2]}" for r in m.outputs))
    for line in _model_lines(m, {d.name for d in rnn}):
        log("  " + line)
    ctx = BuildContext(source.variables, approximate)
    built = build_model(ctx, source, m)
    if built is None or ctx.refusals:
        raise Refused(ctx.refusals)
    module, spec, used = built
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return {"spec": spec, "state_dict": state, "description": _model_dict(m), "used": used}


def _model_lines(m, printed: set[str], indent: str = "") -> list[str]:
    out = []
    for name, d in m.layers.items():
        if hasattr(d, "calls"):  # a nested model
            out.append(f"{indent}{name}: nested {d.class_name}")
            out += _model_lines(d, printed, indent + "  ")
        elif d is not None and d.name not in printed:
            out += [indent + line for line in d.lines()]
    return out


def _model_dict(m) -> dict:
    return {
        "name": m.name,
        "class_name": m.class_name,
        "keras_major": m.keras_major,
        "layers": {
            n: (_model_dict(d) if hasattr(d, "calls") else d.to_dict()) for n, d in m.layers.items()
        },
    }


def _read_converted(path) -> dict:
    """A file written by `convert`, checked: its format and its SHA-256 digest."""
    with guard.reading(path, "not a readable torch-lstm-grad convert file", ("torch", "zipfile")):
        # torch.load's zip reader raises RuntimeError on a damaged archive, its weights-only
        # unpickler UnpicklingError (or others) on a damaged pickle: errors of the file.
        data = torch.load(path, weights_only=True)
    if not isinstance(data, dict) or not isinstance(data.get("format"), str):
        raise ValueError(f"{path}: not a torch-lstm-grad convert file (format {FORMAT!r})")
    if data["format"] in _OLD_FORMATS:
        raise ValueError(
            f"{path}: written by an earlier torch-lstm-grad ({data['format']}) that did not "
            "record what each layer computed, or no digest of the file: convert the source again"
        )
    if data["format"] != FORMAT:
        raise ValueError(f"{path}: format {data['format']!r}, this version reads {FORMAT!r}")
    try:
        digest = _digest(data)
    except (TypeError, RuntimeError) as err:  # a value convert never writes
        raise guard.CorruptFile(f"{path}: not a torch-lstm-grad convert file ({err})") from err
    if data.get(_DIGEST_KEY) != digest:
        raise guard.CorruptFile(
            f"{path}: its contents do not match the SHA-256 digest written with them: the file "
            "was changed or damaged after convert wrote it"
        )
    if data.get("approximate"):
        warnings.warn(
            f"{path} was converted with --approximate: its modules differ from the "
            "TF/Keras layers (see each module's port_description)",
            stacklevel=3,
        )
    return data


def load(path) -> dict[str, torch.nn.Module]:
    """The modules of a file written by `convert` (`torch-lstm-grad convert`), by name. Each
    carries its layer description as `module.port_description`. Raises ValueError for a file
    this version cannot honour (an older format, which did not record what each layer
    computed or carried no digest, or a layer variant this version's kernels lack) and for one
    that is damaged or was changed after convert wrote it (its SHA-256 digest)."""
    data = _read_converted(path)
    if not isinstance(data.get("modules"), dict):
        raise ValueError(f"{path}: no modules")
    out = {}
    for name, e in data["modules"].items():
        try:
            module = module_from_entry(e)
            module.port_description = LayerDescription.from_dict(e["description"])
        except (NotImplementedError, ValueError, TypeError, KeyError, AttributeError) as err:
            kind = e.get("kind") if isinstance(e, dict) else None
            raise ValueError(
                f"{path}: layer {name!r} ({kind}) cannot be built by this version: {err}"
            ) from err
        out[name] = module
    return out


def load_model(path, custom_layers: dict | None = None) -> torch.nn.Module:
    """The whole Keras model of a file written by `convert`, as one `KerasModel`: called with
    the model's inputs in Keras' order, returning Keras' outputs; `keras_weights()` maps Keras'
    weight names to its tensors. `custom_layers`: a module factory for each class of the
    user's own the file was converted with (`--custom`), `factory(config, weights) ->
    nn.Module`. Raises ValueError for a file that holds no whole model (its source stored no
    model config, or it was converted with `--layers-only`), that this version cannot build, that
    needs a factory not given, or that is damaged or changed (its digest)."""
    data = _read_converted(path)
    model = data.get("model")
    if not isinstance(model, dict):
        raise ValueError(
            f"{path}: holds no whole model (the source stored no Keras model config, or it was "
            "converted with --layers-only); torch_lstm_grad.load() returns its layers"
        )
    try:
        module = module_from_spec(model["spec"])
        module.load_state_dict(model["state_dict"])
    except (NotImplementedError, ValueError, TypeError, KeyError, AttributeError,
            RuntimeError) as err:  # fmt: skip
        raise ValueError(f"{path}: the model cannot be built by this version: {err}") from err
    attach_custom(module, custom_layers)
    module.port_description = model["description"]
    return module
