"""TF1 cell descriptions -> this package's TF1-layout modules (`torch_lstm_grad/modules.py`).

* tf1.LSTMCell, tf1.BasicLSTMCell, tf1.LSTMBlockCell, tf1.CudnnCompatibleLSTMCell ->
  `LSTMBlockCell` (one step; `LSTMBlockFusedCell` takes the same state_dict for a sequence);
* tf1.LSTMBlockFusedCell (the BlockLSTM and BlockLSTMV2 ops) -> `LSTMBlockFusedCell`
  (BlockLSTMV2's weights keep their i, f, c, o order: `gate_order="ifco"`);
* tf1.GRUCell, tf1.GRUBlockCell -> `GRUBlockCell`;
* tf1.CudnnLSTM, tf1.CudnnGRU -> `CudnnLSTM`, `CudnnGRU`; tf1.CudnnRNN (a graph's op on an
  opaque buffer) -> the module of its `rnn_mode`, the buffer its `opaque_kernel`.

The description's variants (an activation other than tanh, `clip_gradient="zero"`, a
projection) are passed to the module's constructor only when they differ from the module's
defaults; a module that does not take or compute one raises, and the builder turns that into a
refusal naming the attribute.
"""

from __future__ import annotations

import torch

from ... import layouts, modules
from ..describe.description import LayerDescription
from .context import BuildContext, make_entry, tensor

__all__ = ["PARAMS", "build", "cudnn_entry", "module_from_entry"]

_LSTM_CELLS = {
    "tf1.LSTMCell",
    "tf1.BasicLSTMCell",
    "tf1.LSTMBlockCell",
    "tf1.CudnnCompatibleLSTMCell",
}
_CLASSES = {
    "LSTMBlockCell": modules.LSTMBlockCell,
    "LSTMBlockFusedCell": modules.LSTMBlockFusedCell,
    "GRUBlockCell": modules.GRUBlockCell,
    "CudnnLSTM": modules.CudnnLSTM,
    "CudnnGRU": modules.CudnnGRU,
    "CudnnRNNTanh": modules.CudnnRNNTanh,
    "CudnnRNNRelu": modules.CudnnRNNRelu,
}
_BY_MODE = {"lstm": modules.CudnnLSTM, "gru": modules.CudnnGRU, "rnn_tanh": modules.CudnnRNNTanh,
            "rnn_relu": modules.CudnnRNNRelu}  # fmt: skip


# A TF1 cell's variable (its leaf under the cell's scope) -> the module parameter that holds it
# (LSTMBlockCell / LSTMBlockFusedCell, GRUBlockCell).
PARAMS = {
    "kernel": "kernel",
    "bias": "bias",
    "w_i_diag": "w_i_diag",
    "w_f_diag": "w_f_diag",
    "w_o_diag": "w_o_diag",
    "projection/kernel": "projection_kernel",
    "gates/kernel": "gates_kernel",
    "gates/bias": "gates_bias",
    "candidate/kernel": "candidate_kernel",
    "candidate/bias": "candidate_bias",
}


def _variants(d: LayerDescription) -> dict:
    """The module keyword arguments for the description's non-default variants."""
    kw = {}
    activation = d.value("activation")
    if activation != "tanh":
        kw["activation"] = activation
    if d.value("cell_clip") is not None and d.value("clip_gradient") == "zero":
        kw["clip_gradient"] = "zero"
    if d.value("gate_order", "icfo") != "icfo":  # BlockLSTMV2's weights, kept as they are
        kw["gate_order"] = d.value("gate_order")
    if d.value("num_proj") is not None:
        kw["num_proj"] = d.value("num_proj")
        if d.value("proj_clip") is not None:
            kw["proj_clip"] = d.value("proj_clip")
    return kw


def _construct(ctx: BuildContext, d: LayerDescription, cls, config: dict, variants: dict, dtype):
    """The module, or None after a refusal naming the variants it does not take (TypeError:
    no such argument in this version) or compute (ValueError: a value outside the kernels'
    choices; NotImplementedError)."""
    try:
        return cls(**config, **variants, dtype=dtype)
    except (TypeError, ValueError, NotImplementedError) as err:
        if not variants:
            ctx.refuse(d.name, "layer", d.kind, str(err))
            return None
        value = next(iter(variants.values())) if len(variants) == 1 else variants
        ctx.refuse(
            d.name,
            ", ".join(variants),
            value,
            f"not computed by this version's {cls.__name__} ({type(err).__name__}: {err})",
        )
        return None


def build(ctx: BuildContext, d: LayerDescription) -> dict | None:
    """The entry of a `tf1.*` description, or None after a refusal."""
    v = ctx.variables
    if d.kind in _LSTM_CELLS or d.kind == "tf1.LSTMBlockFusedCell":
        w = d.weights
        kernel, bias = tensor(v[w["kernel"]]), tensor(v[w["bias"]])
        peep = bool(d.value("use_peepholes"))
        config = {
            "num_units": d.value("units"),
            "input_size": d.value("input_size"),
            "forget_bias": float(d.value("forget_bias")),
            "cell_clip": d.value("cell_clip"),
            "use_peephole": peep,
        }
        cls = (
            modules.LSTMBlockFusedCell
            if d.kind == "tf1.LSTMBlockFusedCell"
            else (modules.LSTMBlockCell)
        )
        variants = _variants(d)
        m = _construct(ctx, d, cls, config, variants, kernel.dtype)
        if m is None:
            return None
        config.update({k: val for k, val in variants.items() if hasattr(m, k)})
        with torch.no_grad():
            m.kernel.copy_(kernel)
            m.bias.copy_(bias)
            for k in ("w_i_diag", "w_f_diag", "w_o_diag") if peep else ():
                getattr(m, k).copy_(tensor(v[w[k]]))
            if "projection/kernel" in w and hasattr(m, PARAMS["projection/kernel"]):
                getattr(m, PARAMS["projection/kernel"]).copy_(tensor(v[w["projection/kernel"]]))
        return _entry(m, d, config)
    if d.kind in ("tf1.GRUCell", "tf1.GRUBlockCell"):
        w = d.weights
        config = {"num_units": d.value("units"), "input_size": d.value("input_size")}
        gk = tensor(v[w["gates/kernel"]])
        variants = _variants(d)
        m = _construct(ctx, d, modules.GRUBlockCell, config, variants, gk.dtype)
        if m is None:
            return None
        config.update({k: val for k, val in variants.items() if hasattr(m, k)})
        with torch.no_grad():
            for n in ("gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"):
                getattr(m, PARAMS[n]).copy_(tensor(v[w[n]]))
        return _entry(m, d, config)
    if d.kind in ("tf1.CudnnLSTM", "tf1.CudnnGRU"):
        return cudnn_entry(ctx, d)
    if d.kind == "tf1.CudnnRNN":  # a graph's op on an opaque buffer: the buffer is the module's
        config = {"num_layers": d.value("num_layers"), "num_units": d.value("units"),
                  "input_size": d.value("input_size"), "input_mode": d.value("input_mode"),
                  "direction": d.value("direction"), "dropout": d.value("dropout")}  # fmt: skip
        if d.value("num_proj", 0):
            config["num_proj"] = d.value("num_proj")
        buffer = tensor(ctx.variables[d.weights["opaque_kernel"]])
        m = _BY_MODE[d.value("rnn_mode")](**config, dtype=buffer.dtype)
        if m.opaque_kernel.shape != buffer.shape:
            ctx.refuse(d.name, "opaque_kernel", list(buffer.shape),
                       f"the module's buffer holds {m.opaque_kernel.numel()}")  # fmt: skip
            return None
        with torch.no_grad():
            m.opaque_kernel.copy_(buffer)
        return _entry(m, d, config)
    ctx.refuse(d.name, "kind", d.kind, "no module builder for this kind")
    return None


def cudnn_entry(ctx, d: LayerDescription) -> dict:
    """The entry of a TF1 contrib CudnnLSTM/CudnnGRU description: its canonical weights
    packed into the module's opaque params (`verify` packs directions in TF's variables the same
    way; only `ctx.variables` is read)."""
    v = ctx.variables
    kind = "lstm" if d.kind == "tf1.CudnnLSTM" else "gru"
    L, H, I = d.value("num_layers"), d.value("units"), d.value("input_size")
    D = 2 if d.value("direction") == "bidirectional" else 1
    cells: dict[tuple[int, int], dict[str, str]] = {}
    for role, name in d.weights.items():
        cell, leaf = role.split("/", 1)
        _, layer, direction = cell.split("_")
        cells.setdefault((int(layer), int(direction)), {})[leaf] = name
    weights, biases = [], []
    for layer in range(L):
        for direction in range(D):
            w, bs = _cudnn_cell_canonical(
                kind, v, cells[(layer, direction)], I if layer == 0 else D * H, H
            )
            weights += w
            biases += bs
    config = {"num_layers": L, "num_units": H, "input_size": I}
    if D == 2:
        config["direction"] = "bidirectional"
    cls = modules.CudnnLSTM if kind == "lstm" else modules.CudnnGRU
    m = cls(**config, dtype=weights[0].dtype)
    m.set_canonical_weights(weights, biases)
    return _entry(m, d, config)


def _cudnn_cell_canonical(kind, v, names, in_size, H):
    """One (layer, direction)'s canonical `(weights, biases)` lists (docs/tf-semantics.md §7.1)."""
    if kind == "lstm":
        kernel = tensor(v[names["kernel"]])
        if kernel.shape != (in_size + H, 4 * H):
            raise ValueError(
                f"{names['kernel']}: shape {list(kernel.shape)}, expected {[in_size + H, 4 * H]}"
            )
        if {"bias_cudnn_0", "bias_cudnn_1"} <= names.keys():  # bW, bR kept apart (ICFO)
            w, bw = layouts.block_lstm_to_canonical(
                kernel, tensor(v[names["bias_cudnn_0"]]), forget_bias=0.0, split="input"
            )
            _, br = layouts.block_lstm_to_canonical(
                kernel, tensor(v[names["bias_cudnn_1"]]), forget_bias=0.0, split="input"
            )
            return w, bw[:4] + br[:4]
        bias = tensor(v[names["bias"]])
        return layouts.block_lstm_to_canonical(kernel, bias, forget_bias=0.0, split="half")
    gk = tensor(v[names["gates/kernel"]])
    ik = tensor(v[names["candidate/input_projection/kernel"]])
    hk = tensor(v[names["candidate/hidden_projection/kernel"]])
    for n, t, shape in (
        ("gates/kernel", gk, (in_size + H, 2 * H)),
        ("candidate/input_projection/kernel", ik, (in_size, H)),
        ("candidate/hidden_projection/kernel", hk, (H, H)),
    ):
        if t.shape != shape:
            raise ValueError(f"{names[n]}: shape {list(t.shape)}, expected {list(shape)}")
    wx, wh = gk[:in_size].t(), gk[in_size:].t()  # [2H, in], [2H, H]: rows r then u (= z)
    weights = [wx[:H], wx[H:], ik.t(), wh[:H], wh[H:], hk.t()]
    weights = [w.contiguous() for w in weights]
    ib = tensor(v[names["candidate/input_projection/bias"]])
    hb = tensor(v[names["candidate/hidden_projection/bias"]])
    if {"bias_cudnn_0", "bias_cudnn_1"} <= names.keys():  # [bW_r, bW_z], [bR_r, bR_z]
        b0, b1 = tensor(v[names["bias_cudnn_0"]]), tensor(v[names["bias_cudnn_1"]])
    else:
        b0 = b1 = tensor(v[names["gates/bias"]]) * 0.5  # TF1's restore: halves
    return weights, [b0[:H], b0[H:], ib, b1[:H], b1[H:], hb]


def _entry(m, d: LayerDescription, config: dict) -> dict:
    return make_entry(m, d.kind, {"class": type(m).__name__, **config}, d, list(d.weights.values()))


def module_from_entry(entry: dict, dtype) -> torch.nn.Module:
    config = dict(entry["config"])
    cls = _CLASSES.get(config.pop("class", None))
    if cls is None:
        raise ValueError(f"unknown module class in {entry['kind']!r}")
    return cls(**config, dtype=dtype)
