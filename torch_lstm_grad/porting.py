"""Porting: TF checkpoints and Keras weight files into this package's modules (SPEC §1.2, §1.3).

Sources (`read_variables`):

* Keras 3 `.weights.h5` (h5py; `layers/<layer>/cell/vars/{0,1,2}` = kernel, recurrent_kernel,
  bias), a `.keras` archive (a zip holding `model.weights.h5`), legacy Keras 2 `.h5`
  (`<layer>/<layer>/<cell>/kernel:0`, ...).
* TF checkpoints (TF1 `Saver` and TF2 `tf.train.Checkpoint` prefixes) through
  `tf.train.load_checkpoint`, or without TensorFlow through `_tensorbundle.TensorBundleReader`
  (a TF-free reader of the TensorBundle format; `reader=` or TORCH_LSTM_GRAD_CHECKPOINT_READER
  choose explicitly). Partitioned variables and snappy-compressed indexes need TensorFlow.

Variable sets recognised (`map_variables`), per scope:

* `kernel [I + H, 4H]`, `bias [4H]` (+ `w_i_diag`, `w_f_diag`, `w_o_diag`): TF1 `LSTMCell`,
  `LSTMBlockCell` → `LSTMBlockCell`; scope `lstm_fused_cell` → `LSTMBlockFusedCell`. The
  checkpoint does not store `forget_bias` (added at run time): `forget_bias` (default 1.0, TF1's)
  is used, 0.0 for `cudnn_compatible_lstm_cell`.
* TF1 contrib `CudnnLSTM` / `CudnnGRU` canonical names (tf_semantics §7.5), unidirectional
  `<scope>/rnn/multi_rnn_cell/cell_<l>/<cell>/...` and bidirectional
  `<scope>/stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/{fw|bw}/<cell>/...` → `CudnnLSTM` /
  `CudnnGRU` (`direction="bidirectional"` for the latter), named `<scope>` (or `cudnn_lstm`,
  `cudnn_gru`). `<cell>` = `cudnn_compatible_lstm_cell` with `kernel`, `bias`, or
  `cudnn_compatible_gru_cell` with `gates/{kernel,bias}`,
  `candidate/{input,hidden}_projection/{kernel,bias}`. The summed biases (LSTM `bias`, GRU
  `gates/bias`) are split in halves into bW and bR as TF1's restore does; the older separate
  `bias_cudnn_0`, `bias_cudnn_1` (GRU: `bias_cudnn 0`, `bias_cudnn 1`) = bW, bR are used instead
  when both are present. `<scope>/opaque_kernel` next to them is superseded. An `opaque_kernel`
  alone cannot be mapped (its sizes and mode are not stored).
* `gates/kernel`, `gates/bias`, `candidate/kernel`, `candidate/bias` (GRUBlockCellV2, GRUCell),
  or contrib v1's `w_ru`, `w_c`, `b_ru`, `b_c` (kernel names swapped, told apart by shape) →
  `GRUBlockCell`.
* Keras `kernel [I, 4H]`, `recurrent_kernel [H, 4H]`, `bias [4H]` → `LSTMBlockFusedCell`
  (forget_bias 0, no clip: Keras' math; time-major input). Keras GRU `bias [2, 3H]`
  (reset_after=True) → `CudnnGRU`, `bias [3H]` (reset_after=False) → `GRUBlockCell`.

A scope holding part of such a set raises ValueError listing what is missing; unrelated
variables (step counters, optimizer slots) are reported as ignored. `convert` writes a file that
`load` turns back into modules.
"""

from __future__ import annotations

import io
import os
import re
import zipfile

import numpy as np
import torch

from . import layouts, modules

__all__ = ["convert", "load", "map_variables", "read_variables"]

FORMAT = "torch_lstm_grad.convert/1"
_KERAS3_VARS = ("kernel", "recurrent_kernel", "bias")
_RNN_LEAVES = {"kernel", "recurrent_kernel", "bias", "w_i_diag", "w_f_diag", "w_o_diag",
               "opaque_kernel", "w_ru", "w_c", "b_ru", "b_c"}  # fmt: skip


# -- reading --------------------------------------------------------------------------------


def _read_h5(f) -> dict[str, np.ndarray]:
    import h5py

    out = {}
    with h5py.File(f, "r") as h5:

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                m = re.fullmatch(r"(.*/cell)/vars/([012])", name)
                key = f"{m.group(1)}/{_KERAS3_VARS[int(m.group(2))]}" if m else name
                out[key.removesuffix(":0")] = np.array(obj)

        h5.visititems(visit)
    return out


_READERS = ("auto", "tensorflow", "tensorbundle")
READER_ENV = "TORCH_LSTM_GRAD_CHECKPOINT_READER"


def _tf_reader(path: str):
    import tensorflow as tf

    try:
        return tf.train.load_checkpoint(path)
    except (tf.errors.OpError, ValueError) as err:
        raise ValueError(
            f"{path}: not a Keras file (.keras, .h5) nor a readable TF checkpoint prefix "
            f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err


def _bundle_reader(path: str):
    from ._tensorbundle import TensorBundleReader

    try:
        return TensorBundleReader(path)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{path}: not a Keras file (.keras, .h5) nor a readable TF checkpoint prefix "
            f"(TF-free reader: {type(err).__name__}: {err})"
        ) from err


def _float_value(value) -> np.ndarray | None:
    value = np.asarray(value)
    if value.dtype.name == "bfloat16":  # TF's (ml_dtypes) bfloat16: widened exactly
        return value.astype(np.float32)
    return value if value.dtype.kind == "f" else None


def read_variables(path: str | os.PathLike, reader: str | None = None) -> dict[str, np.ndarray]:
    """Every floating-point variable of a Keras file or TF checkpoint prefix, by (normalised)
    name: `:0` and TF2's `/.ATTRIBUTES/VARIABLE_VALUE` are stripped; Keras 3 `cell/vars/i` become
    the names; bfloat16 is widened to float32 (exact).

    TF checkpoints: `reader="tensorflow"` uses `tf.train.load_checkpoint`, `"tensorbundle"` this
    package's TF-free reader (`_tensorbundle`: no partitioned variables, no snappy-compressed
    index), `"auto"` (default) the first when TensorFlow imports, else the second. When `reader`
    is None the environment variable TORCH_LSTM_GRAD_CHECKPOINT_READER, if set, chooses."""
    path = os.fspath(path)
    if path.endswith(".keras"):
        with zipfile.ZipFile(path) as z:
            return _read_h5(io.BytesIO(z.read("model.weights.h5")))
    if path.endswith(".h5") or path.endswith(".hdf5"):
        return _read_h5(path)
    if reader is None:
        reader = os.environ.get(READER_ENV) or "auto"
    if reader not in _READERS:
        raise ValueError(f"reader={reader!r}: expected one of {_READERS}")
    if reader == "auto":
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            reader = "tensorbundle"
        else:
            reader = "tensorflow"
    ckpt = _tf_reader(path) if reader == "tensorflow" else _bundle_reader(path)
    dtypes = ckpt.get_variable_to_dtype_map() if reader == "tensorbundle" else None
    out = {}
    for name in ckpt.get_variable_to_shape_map():
        if name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            continue
        if dtypes is not None and dtypes[name] not in ("float16", "bfloat16", "float32", "float64"):
            continue  # ints, strings, resources: never RNN weights (the TF path drops them too)
        value = _float_value(ckpt.get_tensor(name))
        if value is not None:
            out[name.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")] = value
    return out


# -- mapping --------------------------------------------------------------------------------


def _t(v) -> torch.Tensor:
    return torch.from_numpy(np.array(v, copy=True))


def _entry(module: torch.nn.Module, config: dict, used: list[str]) -> dict:
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    return {"class": type(module).__name__, "config": config, "used": used, "state_dict": state}


def _lstm_shaped(v, names) -> bool:
    """kernel [I + H, 4H] with I >= 0 and bias [4H]: a TF1 LSTM cell's pair."""
    k, b = np.shape(v[names["kernel"]]), np.shape(v[names["bias"]])
    return (
        len(k) == 2
        and len(b) == 1
        and k[1] % 4 == 0
        and k[1] > 0
        and b[0] == k[1]
        and (k[0] >= k[1] // 4)
    )


def _lstm_block(scope, v, names, forget_bias):
    kernel = _t(v[names["kernel"]])
    H = kernel.shape[1] // 4
    peep = all(k in names for k in ("w_i_diag", "w_f_diag", "w_o_diag"))
    fused = scope.rsplit("/", 1)[-1] == "lstm_fused_cell"
    if scope.rsplit("/", 1)[-1] == "cudnn_compatible_lstm_cell":
        forget_bias = 0.0
    config = {"num_units": H, "input_size": kernel.shape[0] - H, "forget_bias": forget_bias,
              "use_peephole": peep}  # fmt: skip
    m = (modules.LSTMBlockFusedCell if fused else modules.LSTMBlockCell)(
        **config, dtype=kernel.dtype
    )
    with torch.no_grad():
        for n in ("kernel", "bias") + (("w_i_diag", "w_f_diag", "w_o_diag") if peep else ()):
            getattr(m, n).copy_(_t(v[names[n]]))
    used = [
        names[n]
        for n in ("kernel", "bias") + (("w_i_diag", "w_f_diag", "w_o_diag") if peep else ())
    ]
    return _entry(m, config, used)


def _keras_rnn(v, names):
    k, rk, b = (_t(v[names[n]]) for n in _KERAS3_VARS)
    H = rk.shape[0]
    used = [names[n] for n in _KERAS3_VARS]
    if k.shape[1] == 4 * H:
        config = {"num_units": H, "input_size": k.shape[0], "forget_bias": 0.0}
        m = modules.LSTMBlockFusedCell(**config, dtype=k.dtype)
        kernel, bias = layouts.keras_lstm_to_block(k, rk, b, forget_bias=0.0)
        with torch.no_grad():
            m.kernel.copy_(kernel)
            m.bias.copy_(bias)
        return _entry(m, config, used)
    if k.shape[1] != 3 * H:
        raise ValueError(f"{names['kernel']}: shape {list(k.shape)} is neither an LSTM [I, 4H] nor "
                         f"a GRU [I, 3H] kernel for H = {H}")  # fmt: skip
    if b.dim() == 2:
        config = {"num_layers": 1, "num_units": H, "input_size": k.shape[0]}
        m = modules.CudnnGRU(**config, dtype=k.dtype)
        m.set_canonical_weights(*layouts.keras_gru_to_canonical(k, rk, b))
        return _entry(m, config, used)
    config = {"num_units": H, "input_size": k.shape[0]}
    m = modules.GRUBlockCell(**config, dtype=k.dtype)
    with torch.no_grad():
        for p, t in zip((m.gates_kernel, m.gates_bias, m.candidate_kernel, m.candidate_bias),
                        layouts.keras_gru_to_block(k, rk, b), strict=True):  # fmt: skip
            p.copy_(t)
    return _entry(m, config, used)


def _gru_block(v, kernels, biases):
    a, b = (_t(v[n]) for n in kernels)
    gk, ck = (a, b) if a.shape[1] == 2 * b.shape[1] else (b, a)  # told apart by shape (§5.4)
    gb, cb = (_t(v[n]) for n in biases)
    gb, cb = (gb, cb) if gb.shape[0] == gk.shape[1] else (cb, gb)
    config = {"num_units": ck.shape[1], "input_size": ck.shape[0] - ck.shape[1]}
    m = modules.GRUBlockCell(**config, dtype=ck.dtype)
    with torch.no_grad():
        for p, t in zip((m.gates_kernel, m.gates_bias, m.candidate_kernel, m.candidate_bias),
                        (gk, gb, ck, cb), strict=True):  # fmt: skip
            p.copy_(t)
    return _entry(m, config, [*kernels, *biases])


# TF1 contrib CudnnLSTM / CudnnGRU canonical names (tf_semantics §7.5): `<outer>/` then
# `[rnn/]multi_rnn_cell/cell_<l>/` or `stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/<fw|bw>/`
# then the cell scope and a leaf.
_CUDNN_NAME = re.compile(
    r"(?:(?P<outer>.*?)/)??(?:(?:rnn/)?multi_rnn_cell/cell_(?P<ul>\d+)"
    r"|stack_bidirectional_rnn/cell_(?P<bl>\d+)/bidirectional_rnn/(?P<dir>fw|bw))"
    r"/cudnn_compatible_(?P<kind>lstm|gru)_cell/(?P<leaf>.+)"
)
_CUDNN_LEAVES = {
    "lstm": {"kernel", "bias", "bias_cudnn_0", "bias_cudnn_1"},
    "gru": {"gates/kernel", "gates/bias", "candidate/input_projection/kernel",
            "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
            "candidate/hidden_projection/bias", "bias_cudnn_0", "bias_cudnn_1"},
}  # fmt: skip
_CUDNN_NEED = {
    "lstm": {"kernel", "bias"},
    "gru": _CUDNN_LEAVES["gru"] - {"bias_cudnn_0", "bias_cudnn_1"},
}


def _cudnn_groups(v) -> dict[tuple[str, str, bool], dict[tuple[int, int], dict[str, str]]]:
    """(outer, kind, bidirectional) -> (layer, direction) -> leaf -> variable name. The old
    separate biases (`bias_cudnn_0`; GRU's `bias_cudnn 0`, with a space) become `bias_cudnn_<j>`."""
    groups: dict = {}
    for name in v:
        m = _CUDNN_NAME.fullmatch(name)
        if not m:
            continue
        leaf = re.sub(r"^bias_cudnn[ _]([01])$", r"bias_cudnn_\1", m["leaf"])
        if leaf not in _CUDNN_LEAVES[m["kind"]]:
            continue
        bidi = m["dir"] is not None
        layer = int(m["bl"] if bidi else m["ul"])
        key = (m["outer"] or "", m["kind"], bidi)
        cell = (layer, int(m["dir"] == "bw"))
        groups.setdefault(key, {}).setdefault(cell, {})[leaf] = name
    return groups


def _cudnn_cell_canonical(kind, v, names, in_size, H):
    """One (layer, direction)'s canonical `(weights, biases)` lists (tf_semantics §7.1)."""
    if kind == "lstm":
        kernel = _t(v[names["kernel"]])
        if kernel.shape != (in_size + H, 4 * H):
            raise ValueError(f"{names['kernel']}: shape {list(kernel.shape)}, expected "
                             f"{[in_size + H, 4 * H]}")  # fmt: skip
        if {"bias_cudnn_0", "bias_cudnn_1"} <= names.keys():  # bW, bR kept apart (ICFO)
            w, bw = layouts.block_lstm_to_canonical(
                kernel, _t(v[names["bias_cudnn_0"]]), forget_bias=0.0, split="input"
            )
            _, br = layouts.block_lstm_to_canonical(
                kernel, _t(v[names["bias_cudnn_1"]]), forget_bias=0.0, split="input"
            )
            return w, bw[:4] + br[:4]
        bias = _t(v[names["bias"]])
        return layouts.block_lstm_to_canonical(kernel, bias, forget_bias=0.0, split="half")
    gk = _t(v[names["gates/kernel"]])
    ik = _t(v[names["candidate/input_projection/kernel"]])
    hk = _t(v[names["candidate/hidden_projection/kernel"]])
    for n, t, shape in (("gates/kernel", gk, (in_size + H, 2 * H)),
                        ("candidate/input_projection/kernel", ik, (in_size, H)),
                        ("candidate/hidden_projection/kernel", hk, (H, H))):  # fmt: skip
        if t.shape != shape:
            raise ValueError(f"{names[n]}: shape {list(t.shape)}, expected {list(shape)}")
    wx, wh = gk[:in_size].t(), gk[in_size:].t()  # [2H, in], [2H, H]: rows r then u (= z)
    weights = [wx[:H], wx[H:], ik.t(), wh[:H], wh[H:], hk.t()]
    weights = [w.contiguous() for w in weights]
    ib = _t(v[names["candidate/input_projection/bias"]])
    hb = _t(v[names["candidate/hidden_projection/bias"]])
    if {"bias_cudnn_0", "bias_cudnn_1"} <= names.keys():  # [bW_r, bW_z], [bR_r, bR_z]
        b0, b1 = _t(v[names["bias_cudnn_0"]]), _t(v[names["bias_cudnn_1"]])
    else:
        b0 = b1 = _t(v[names["gates/bias"]]) * 0.5  # TF1's restore: halves
    return weights, [b0[:H], b0[H:], ib, b1[:H], b1[H:], hb]


def _cudnn_rnn(outer, kind, bidi, v, cells):
    """A CudnnLSTM / CudnnGRU from its canonical-name variables, or a string saying what is
    missing."""
    D = 2 if bidi else 1
    layers = sorted({layer for layer, _ in cells})
    want = [(layer, d) for layer in range(len(layers)) for d in range(D)]
    where = f"{outer or '(root)'} (TF1 Cudnn{kind.upper()} canonical names)"
    if sorted(cells) != want:
        have = ", ".join(f"cell_{lay}" + ("/" + "fb"[d] + "w" if bidi else "")
                         for lay, d in sorted(cells))  # fmt: skip
        return f"{where}: has {have}; expected cell_0..cell_<L-1>" + (" each fw and bw" * bidi)
    holes = [f"cell_{lay}{'/' + 'fb'[d] + 'w' if bidi else ''} missing {sorted(miss)}"
             for (lay, d), names in sorted(cells.items())
             if (miss := _CUDNN_NEED[kind] - names.keys())]  # fmt: skip
    if holes:
        return f"{where}: " + "; ".join(holes)
    first = cells[(0, 0)]
    if kind == "lstm":
        H = v[first["kernel"]].shape[1] // 4
        input_size = v[first["kernel"]].shape[0] - H
    else:
        H = v[first["candidate/hidden_projection/kernel"]].shape[0]
        input_size = v[first["candidate/input_projection/kernel"]].shape[0]
    weights, biases = [], []
    for layer, d in want:
        w, b = _cudnn_cell_canonical(kind, v, cells[(layer, d)], input_size if layer == 0
                                     else D * H, H)  # fmt: skip
        weights += w
        biases += b
    config = {"num_layers": len(layers), "num_units": H, "input_size": input_size}
    if bidi:
        config["direction"] = "bidirectional"
    dtype = _t(v[first["kernel" if kind == "lstm" else "gates/kernel"]]).dtype
    cls = modules.CudnnLSTM if kind == "lstm" else modules.CudnnGRU
    m = cls(**config, dtype=dtype)
    m.set_canonical_weights(weights, biases)
    used = [cells[c][leaf] for c in want for leaf in sorted(cells[c])]
    return _entry(m, config, used)


def map_variables(variables: dict[str, np.ndarray], forget_bias: float = 1.0):
    """`(entries, ignored)`: entries maps a module name (the scope, `/` → `.`) to
    `{"class", "config", "used", "state_dict"}`; ignored lists the unrelated variable names.
    Raises ValueError naming every scope whose variable set is incomplete."""
    v, used, entries, missing = variables, set(), {}, []
    scopes: dict[str, dict[str, str]] = {}
    for name in v:
        scope, _, leaf = name.rpartition("/")
        if leaf in _RNN_LEAVES:
            if leaf in ("kernel", "bias") and scope.rsplit("/", 1)[-1] in ("gates", "candidate"):
                scope, sub = scope.rsplit("/", 1)
                leaf = f"{sub}/{leaf}"
            scopes.setdefault(scope, {})[leaf] = name
    for (outer, kind, bidi), cells in _cudnn_groups(v).items():
        e = _cudnn_rnn(outer, kind, bidi, v, cells)
        used |= {n for names in cells.values() for n in names.values()}
        if isinstance(e, str):
            missing.append(e)
            continue
        name = outer.replace("/", ".") or f"cudnn_{kind}"
        if name in entries:  # an LSTM and a GRU (or uni- and bidirectional) under one scope
            name += f"_{kind}" + ("_bidirectional" if bidi else "")
        entries[name] = e
        if f"{outer}/opaque_kernel" in v:
            used.add(f"{outer}/opaque_kernel")
            scopes.pop(outer, None)
    for scope, names in scopes.items():
        keys, e = set(names), None
        if all(names[k] in used for k in keys):
            continue
        if "recurrent_kernel" in keys:
            need = set(_KERAS3_VARS)
            e = _keras_rnn(v, names) if need <= keys else None
        elif keys & {"gates/kernel", "candidate/kernel", "gates/bias", "candidate/bias"}:
            need = {"gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"}
            if need <= keys:
                e = _gru_block(v, [names["gates/kernel"], names["candidate/kernel"]],
                               [names["gates/bias"], names["candidate/bias"]])  # fmt: skip
        elif keys & {"w_ru", "w_c", "b_ru", "b_c"}:
            need = {"w_ru", "w_c", "b_ru", "b_c"}
            if need <= keys:
                e = _gru_block(v, [names["w_ru"], names["w_c"]], [names["b_ru"], names["b_c"]])
        elif keys == {"opaque_kernel"}:
            need = {"rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/kernel", "..."}
        else:
            if {"kernel", "bias"} <= keys and not _lstm_shaped(v, names):
                continue  # a kernel/bias pair of another layer (e.g. dense): not ours to map
            need = {"kernel", "bias"}
            peep = keys & {"w_i_diag", "w_f_diag", "w_o_diag"}
            need |= {"w_i_diag", "w_f_diag", "w_o_diag"} if peep else set()
            if need <= keys:
                e = _lstm_block(scope, v, names, forget_bias)
        if e is None:
            missing.append(
                f"{scope or '(root)'}: has {sorted(keys)}, missing {sorted(need - keys)}"
            )
            continue
        entries[scope.replace("/", ".") or "rnn"] = e
        used |= set(e["used"])
    if missing:
        raise ValueError("incomplete RNN variable sets (cannot build a module):\n  "
                         + "\n  ".join(missing))  # fmt: skip
    return entries, sorted(set(v) - used)


# -- files ----------------------------------------------------------------------------------


def convert(src, out, forget_bias: float = 1.0, log=print, reader: str | None = None) -> dict:
    """Reads `src` (see `read_variables`; `reader` picks the TF checkpoint reader), maps it
    (`map_variables`), writes `out` (torch.save) and logs what was found and what each variable
    became. Returns the saved dict."""
    variables = read_variables(src, reader=reader)
    log(f"found {len(variables)} variables in {src}:")
    for name, value in sorted(variables.items()):
        log(f"  {name} {list(np.shape(value))} {np.asarray(value).dtype}")
    if not variables:
        raise ValueError(f"{src}: no variables found")
    entries, ignored = map_variables(variables, forget_bias=forget_bias)
    if not entries:
        raise ValueError(f"{src}: no LSTM/GRU variable set recognised among: "
                         + ", ".join(sorted(variables)))  # fmt: skip
    for name, e in entries.items():
        params = ", ".join(f"{k} {list(t.shape)}" for k, t in e["state_dict"].items())
        log(f"{name}: {e['class']}({e['config']}) <- {', '.join(e['used'])}; params: {params}")
    for name in ignored:
        log(f"ignored: {name}")
    data = {"format": FORMAT, "source": os.fspath(src), "modules": entries}
    torch.save(data, out)
    return data


def load(path) -> dict[str, torch.nn.Module]:
    """The modules of a file written by `convert` (`torch-lstm-grad convert`), by name."""
    data = torch.load(path, weights_only=True)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a torch-lstm-grad convert file (format {FORMAT!r})")
    out = {}
    for name, e in data["modules"].items():
        cls = getattr(modules, e["class"])
        dtype = next(iter(e["state_dict"].values())).dtype
        m = cls(**e["config"], dtype=dtype)
        m.load_state_dict(e["state_dict"])
        out[name] = m
    return out
