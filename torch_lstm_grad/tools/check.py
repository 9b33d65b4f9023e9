"""Parity of every raw op with TensorFlow or the float64 reference: the cases and the one loop.

Used by ``torch-lstm-grad check`` (tools/cli.py) and by the tests. The cases are data: :data:`OPS`
(what each op takes and which dtypes TF has kernels for), the configs (:data:`LSTM_CONFIGS`, ...)
and :data:`TOLERANCES`. :func:`run_checks` runs each (op, config, dtype) once through
``torch_lstm_grad.raw_ops`` and once through the oracle, and returns one :class:`Row` per output.

Inputs are generated in float64 and rounded to the case's dtype; both sides get the same rounded
values (the reference gets them cast back to float64). A Grad op is fed the outputs of our forward
op, computed once, on both sides; the reference recomputes the forward itself in float64.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

from .. import raw_ops, reference

__all__ = ["OPS", "TOLERANCES", "Row", "import_tf", "oracle_dtypes", "run_checks"]

T, B, I, H = 5, 3, 4, 6  # noqa: E741 (TF's names); I != H so a transposed block is caught
SEQ_SHORT = T - 2


@dataclass(frozen=True)
class Config:
    name: str
    use_peephole: bool = False
    cell_clip: float = 0.0
    forget_bias: float = 1.0
    seq_short: bool = False  # seq_len_max = SEQ_SHORT < T (block ops only)

    def label(self, op: str) -> str:
        shown = OPS[op].family != "gru" and OPS[op].gate_order == "icfo" and self.forget_bias != 1
        return self.name + (f" fb={self.forget_bias:g}" if shown else "")


# cs_prev is randn and cell_clip 0.5, so the clip engages on about half of the cells.
LSTM_CONFIGS = (
    Config("plain"),
    Config("clip", cell_clip=0.5, forget_bias=0.5),
    Config("peephole+clip", use_peephole=True, cell_clip=0.5),
)
BLOCK_CONFIGS = (
    *LSTM_CONFIGS,
    Config("peephole+clip seq<T", use_peephole=True, cell_clip=0.5, seq_short=True),
)
GRU_CONFIGS = (Config("-"),)


@dataclass(frozen=True)
class OpSpec:
    family: str  # "cell", "block" or "gru": which inputs, configs and reference function
    forward: str | None = None  # for a Grad op, the forward op whose outputs it takes
    gate_order: str = "icfo"
    tf_dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16)


OPS = {
    "LSTMBlockCell": OpSpec("cell"),
    "LSTMBlockCellGrad": OpSpec("cell", forward="LSTMBlockCell"),
    "BlockLSTM": OpSpec("block"),
    "BlockLSTMGrad": OpSpec("block", forward="BlockLSTM"),
    "BlockLSTMV2": OpSpec("block", gate_order="ifco"),
    "BlockLSTMGradV2": OpSpec("block", forward="BlockLSTMV2", gate_order="ifco"),
    # TF registers its GRU kernels for float only.
    "GRUBlockCell": OpSpec("gru", tf_dtypes=(torch.float32,)),
    "GRUBlockCellGrad": OpSpec("gru", forward="GRUBlockCell", tf_dtypes=(torch.float32,)),
}
_CONFIGS = {"cell": LSTM_CONFIGS, "block": BLOCK_CONFIGS, "gru": GRU_CONFIGS}
_INPUTS = {
    "cell": ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"),
    "block": ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b"),
    "gru": ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c"),
}
# Forward outputs each Grad op takes (LSTMBlockCellGrad does not take h).
_SAVED = {
    "cell": ("i", "cs", "f", "o", "ci", "co"),
    "block": ("i", "cs", "f", "o", "ci", "co", "h"),
    "gru": ("r", "u", "c"),
}
_UPSTREAM = {"cell": ("cs_grad", "h_grad"), "block": ("cs_grad", "h_grad"), "gru": ("d_h",)}
_GATES = ("i", "f", "o", "ci", "co")

# Max abs error allowed, times max(1, max |oracle output|) so that large gradients (w_grad sums
# over T*B terms) get a relative bound and O(1) outputs an absolute one.
# Measured over seeds 0-39 (scaled as above):
# * float32 vs TF: TF's Eigen sigmoid/tanh are up to ~5 ulp off and its GEMMs sum in another
#   order; measured <= 4e-7, the bound is the project's float32 tolerance.
# * float16 vs TF: TF's half kernels round intermediates (GEMM results, gates, each step's cs) to
#   half where ours computes in float32 and rounds once at the end; measured <= 3.9e-3 (one half
#   ulp at [1, 2); BlockLSTMGrad's peephole grads, sums of half-rounded terms). x4 headroom: 2e-2.
# * float16 vs reference: a final half rounding, plus the half-rounded forward outputs a Grad op is
#   fed where the reference recomputes them exactly; measured <= 2.4e-3 (LSTMBlockCellGrad
#   wcf_grad). x4 headroom: 1e-2.
# * float32 vs reference: measured <= 7e-7; float64 vs reference: <= 1e-15.
TOLERANCES = {
    ("tf", torch.float32): 2e-5,
    ("tf", torch.float16): 2e-2,
    ("reference", torch.float64): 1e-10,
    ("reference", torch.float32): 2e-5,
    ("reference", torch.float16): 1e-2,
}


@dataclass(frozen=True)
class Row:
    op: str
    config: str
    dtype: str
    oracle: str
    output: str
    max_abs_err: float
    tol: float

    @property
    def ok(self) -> bool:
        return self.max_abs_err <= self.tol  # False for NaN


def oracle_dtypes(op: str, oracle: str) -> tuple[torch.dtype, ...]:
    if oracle == "tf":
        return OPS[op].tf_dtypes
    return (torch.float64, torch.float32, torch.float16)


def import_tf():
    """TensorFlow, imported quietly; raises ImportError when it is not installed."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before the import; hides its C++ logs
    import tensorflow as tf

    return tf


def _inputs(family: str, seed: int) -> dict[str, torch.Tensor]:
    """float64 inputs and upstream gradients for one op family."""
    g = torch.Generator().manual_seed(seed)

    def u(*shape, scale=1.0):
        return (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * scale

    def n(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    lead = (T, B) if family == "block" else (B,)
    if family == "gru":
        return dict(
            x=n(B, I),
            h_prev=u(B, H),
            w_ru=u(I + H, 2 * H, scale=0.5),
            w_c=u(I + H, H, scale=0.5),
            b_ru=u(2 * H, scale=0.5),
            b_c=u(H, scale=0.5),
            d_h=n(B, H),
        )
    return dict(
        x=n(*lead, I),
        cs_prev=n(B, H),
        h_prev=u(B, H),
        w=u(I + H, 4 * H, scale=0.5),
        wci=u(H, scale=0.5),
        wcf=u(H, scale=0.5),
        wco=u(H, scale=0.5),
        b=u(4 * H, scale=0.5),
        cs_grad=n(*lead, H),
        h_grad=n(*lead, H),
    )


def _forward_attrs(op: str, cfg: Config) -> dict:
    spec = OPS[op]
    if spec.family == "gru":
        return {}
    attrs = dict(cell_clip=cfg.cell_clip, use_peephole=cfg.use_peephole)
    if spec.gate_order == "icfo":
        attrs["forget_bias"] = cfg.forget_bias
    return attrs


def _op_kwargs(op: str, cfg: Config, data: dict[str, torch.Tensor]) -> dict:
    """The raw op's keyword arguments (TF's names), for ours and TF alike."""
    spec = OPS[op]
    kwargs = {k: data[k] for k in _INPUTS[spec.family]}
    if spec.family == "block":
        kwargs = {"seq_len_max": SEQ_SHORT if cfg.seq_short else T, **kwargs}
    if spec.forward is None:
        return {**kwargs, **_forward_attrs(op, cfg)}
    fwd = getattr(raw_ops, spec.forward)(**kwargs, **_forward_attrs(spec.forward, cfg))
    kwargs.update({k: getattr(fwd, k) for k in _SAVED[spec.family]})
    kwargs.update({k: data[k] for k in _UPSTREAM[spec.family]})
    if spec.family != "gru":
        kwargs["use_peephole"] = cfg.use_peephole
    return kwargs


def _reference(op: str, cfg: Config, d: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    spec = OPS[op]
    ins = [d[k] for k in _INPUTS[spec.family]]
    if spec.family == "gru":
        if spec.forward is None:
            return reference.gru_block_cell(*ins)
        return reference.gru_block_cell_grad(*ins, d["d_h"])
    fb = cfg.forget_bias if spec.gate_order == "icfo" else 0.0
    attrs = (fb, cfg.cell_clip, cfg.use_peephole, spec.gate_order)
    grads = (d["cs_grad"], d["h_grad"]) if spec.forward else ()
    if spec.family == "cell":
        fn = reference.lstm_block_cell_grad if spec.forward else reference.lstm_block_cell
        return fn(*ins, *grads, *attrs)
    fn = reference.block_lstm_grad if spec.forward else reference.block_lstm
    return fn(SEQ_SHORT if cfg.seq_short else T, *ins, *grads, *attrs)


def _tf_call(tf, op: str, kwargs: dict) -> tuple[torch.Tensor, ...]:
    def to_tf(name, value):
        if name == "seq_len_max":
            return tf.constant(value, dtype=tf.int64)
        if isinstance(value, torch.Tensor):
            return tf.constant(value.detach().numpy())  # keeps the dtype
        return value  # an attribute

    with tf.device("/CPU:0"):
        out = getattr(tf.raw_ops, op)(**{k: to_tf(k, v) for k, v in kwargs.items()})
    return tuple(torch.from_numpy(o.numpy().copy()) for o in out)


def _max_abs_err(ours: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max |ours - ref|, max |ref|) in float64; inf when the shapes differ."""
    if ours.shape != ref.shape:
        return math.inf, 1.0
    ours, ref = ours.detach().double(), ref.detach().double()
    if ref.numel() == 0:
        return 0.0, 0.0
    return (ours - ref).abs().max().item(), ref.abs().max().item()


def run_checks(oracle: str, seed: int = 0, ops=None) -> list[Row]:
    """Compare every op in ``ops`` (default: all of :data:`OPS`) with ``oracle`` ("tf" or
    "reference") over its configs and dtypes; one Row per output."""
    tf = import_tf() if oracle == "tf" else None
    rows = []
    for op in ops or OPS:
        spec = OPS[op]
        base = _inputs(spec.family, seed)
        for cfg in _CONFIGS[spec.family]:
            for dtype in oracle_dtypes(op, oracle):
                data = {k: v.to(dtype) for k, v in base.items()}
                label, dname = cfg.label(op), str(dtype).removeprefix("torch.")
                tol = TOLERANCES[(oracle, dtype)]
                try:
                    kwargs = _op_kwargs(op, cfg, data)
                    ours = getattr(raw_ops, op)(**kwargs)
                except Exception as err:  # a check tool reports, it does not stop at the first
                    msg = f"raised {type(err).__name__}: {str(err).splitlines()[0][:60]}"
                    rows.append(Row(op, label, dname, oracle, msg, math.inf, tol))
                    continue
                if oracle == "tf":
                    expected = _tf_call(tf, op, kwargs)
                else:
                    expected = _reference(op, cfg, {k: v.double() for k, v in data.items()})
                names = getattr(ours, "_fields", ("output",))
                ours = ours if isinstance(ours, tuple) else (ours,)
                for name, mine, theirs in zip(names, ours, expected, strict=True):
                    if oracle == "tf" and cfg.seq_short and spec.forward is None and name in _GATES:
                        # TF leaves the gates at t >= seq_len_max uninitialised
                        # (docs/differences.md).
                        mine, theirs = mine[:SEQ_SHORT], theirs[:SEQ_SHORT]
                    err, scale = _max_abs_err(mine, theirs)
                    rows.append(Row(op, label, dname, oracle, name, err, tol * max(1.0, scale)))
    return rows


# -- the CudnnRNN family: TF has no CPU kernel, so the oracle is torch.nn.LSTM/GRU/RNN --------

CUDNN_OP = "CudnnRNNV3"
# (label, rnn_mode, num_layers, bidirectional, num_proj, lengths or None for all = T)
CUDNN_CASES = (
    ("lstm", "lstm", 1, False, 0, None),
    ("lstm L2 bi proj lens", "lstm", 2, True, 2, (5, 1, 3)),
    ("gru bi lens", "gru", 1, True, 0, (5, 2, 4)),
    ("rnn_tanh L2", "rnn_tanh", 2, False, 0, None),
    ("rnn_relu", "rnn_relu", 1, False, 0, None),
)
# float64 vs torch.nn in float64: summation order only (measured <= 1e-15); float32 vs float64:
# float32 GEMMs and activations over a few steps (measured <= 3e-7).
CUDNN_TOLERANCES = {torch.float64: 1e-10, torch.float32: 2e-5}


def _cudnn_case(label, mode, layers, bidirectional, proj, lengths, dtype, seed):
    """Rows for one case: ours (raw_ops.CudnnRNNV3, grads by autograd through
    CudnnRNNBackpropV3) against the same weights in torch.nn, packed when lengths vary."""
    from .. import layouts

    torch.manual_seed(seed)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}.get(mode, torch.nn.RNN)
    extra = {"nonlinearity": mode[4:]} if cls is torch.nn.RNN else {}
    if proj:
        extra["proj_size"] = proj
    module = cls(I, H, layers, bidirectional=bidirectional, **extra).double()
    D, P = (2 if bidirectional else 1), (proj or H)
    lens = torch.tensor(lengths or (T,) * B)
    x, h0 = torch.randn(T, B, I, dtype=torch.float64), torch.randn(layers * D, B, P).double()
    c0 = torch.randn(layers * D, B, H, dtype=torch.float64)
    g_out, g_h = torch.randn(T, B, D * P, dtype=torch.float64), torch.randn_like(h0)
    g_c = torch.randn_like(c0)
    params = layouts.torch_rnn_to_cudnn(module).opaque_kernel.detach()

    leaves = [t.to(dtype).requires_grad_() for t in (x, h0, c0, params)]
    lstm = mode == "lstm"
    out = raw_ops.CudnnRNNV3(
        leaves[0], leaves[1], leaves[2] if lstm else torch.zeros((), dtype=dtype), leaves[3],
        lens.to(torch.int32), rnn_mode=mode,
        direction="bidirectional" if bidirectional else "unidirectional", num_proj=proj,
    )  # fmt: skip
    loss = (out.output * g_out.to(dtype)).sum() + (out.output_h * g_h.to(dtype)).sum()
    if lstm:
        loss = loss + (out.output_c * g_c.to(dtype)).sum()
    used = leaves if lstm else [leaves[0], leaves[1], leaves[3]]
    ours = [out.output, out.output_h] + ([out.output_c] if lstm else [])
    ours += list(torch.autograd.grad(loss, used))

    ref_in = [t.clone().requires_grad_() for t in (x, h0, c0)]
    packed = torch.nn.utils.rnn.pack_padded_sequence(ref_in[0], lens, enforce_sorted=False)
    y, state = module(packed, (ref_in[1], ref_in[2]) if lstm else ref_in[1])
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)
    h_n = state[0] if lstm else state
    ref_loss = (y * g_out).sum() + (h_n * g_h).sum() + ((state[1] * g_c).sum() if lstm else 0)
    ref_used = ref_in if lstm else ref_in[:2]
    weights = list(module.parameters())
    grads = torch.autograd.grad(ref_loss, ref_used + weights)
    with torch.no_grad():  # the weight grads in the params layout: the same linear map
        for p, g in zip(weights, grads[len(ref_used) :], strict=True):
            p.copy_(g)
    expected = [y, h_n] + ([state[1]] if lstm else []) + list(grads[: len(ref_used)])
    expected.append(layouts.torch_rnn_to_cudnn(module).opaque_kernel.detach())
    names = ["output", "output_h"] + (["output_c"] if lstm else [])
    names += ["input_backprop", "input_h_backprop"] + (["input_c_backprop"] if lstm else [])
    names.append("params_backprop")
    tol, dname = CUDNN_TOLERANCES[dtype], str(dtype).removeprefix("torch.")
    rows = []
    for name, mine, theirs in zip(names, ours, expected, strict=True):
        err, scale = _max_abs_err(mine, theirs)
        rows.append(Row(CUDNN_OP, label, dname, "torch.nn", name, err, tol * max(1.0, scale)))
    return rows


def run_cudnn_checks(seed: int = 0) -> list[Row]:
    """CudnnRNNV3 forward and backward (hence CudnnRNNBackpropV3, CudnnRNNParamsSize and the
    canonical layout) against torch.nn.LSTM/GRU/RNN over :data:`CUDNN_CASES`."""
    rows = []
    for case in CUDNN_CASES:
        for dtype in CUDNN_TOLERANCES:
            try:
                rows += _cudnn_case(*case, dtype, seed)
            except Exception as err:  # reported as a miss, like run_checks
                msg = f"raised {type(err).__name__}: {str(err).splitlines()[0][:60]}"
                tol = CUDNN_TOLERANCES[dtype]
                rows.append(Row(CUDNN_OP, case[0], str(dtype).removeprefix("torch."),
                                "torch.nn", msg, math.inf, tol))  # fmt: skip
    return rows
