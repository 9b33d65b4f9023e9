"""The CudnnRNN family's model description in Python: the params layout, and the shape rules and
fake kernels of `cudnn_rnn` / `cudnn_rnn_backprop`.

`params_layout` reads the layout from the C++ op `_cudnn_rnn_params_layout` (one source of
truth, csrc/cudnn_rnn_config.h). The shape rules below mirror that header's `parse_*`,
`make_rnn_config`, `check_cudnn_rnn_inputs`, `check_dropout`, `check_cudnn_rnn_outputs` and the
dtype/shape half of `check_sequence_lengths`, message for message, so a bad input fails the same
way eagerly and under FakeTensor / torch.compile. They compute the params size with symbolic
arithmetic (the C++ op takes plain ints), so dynamic shapes are not specialised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import checks as C

# Gates per cell (docs/tf-semantics.md §7.1): lstm i, f, c, o; gru r, z, h; rnn_* one.
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


# ---------------------------------------------------------------------------------------------
# Params layout (eager; plain ints)


@dataclass(frozen=True)
class PseudoLayerParams:
    """Element offsets in `params` of one pseudo-layer's regions (k = layer * D + direction).

    Each group of G matrices (or biases) is contiguous: W_g starts at `w + g * H * in_size`,
    R_g at `r + g * H * P`, bW_g at `bw + g * H`, bR_g at `br + g * H`. `w` is None for layer 0
    under skip_input (no input matrices), `proj` is None without projection.
    """

    w: int | None  # W_0..W_{G-1}, each [H, in_size]
    r: int  # R_0..R_{G-1}, each [H, P]
    proj: int | None  # W_proj [P, H]
    bw: int  # bW_0..bW_{G-1}, each [H]
    br: int  # bR_0..bR_{G-1}, each [H]
    in_size: int  # in_l: input_size for layer 0, D * P above


@dataclass(frozen=True)
class ParamsLayout:
    size: int  # CudnnRNNParamsSize
    gates: int  # G
    num_units: int  # H (cell units)
    proj_units: int  # P: num_proj when projecting, else H
    layers: list[PseudoLayerParams]

    def canonical_weights(self) -> list[tuple[int | None, tuple[int, int]]]:
        """(offset or None, [out, in] shape) of each canonical weight, in TF's canonical order
        (docs/tf-semantics.md §7.1): per pseudo-layer W_0..W_{G-1}, R_0..R_{G-1}, then W_proj.
        Layer 0's input matrices under skip_input have offset None and shape [H, 0]."""
        G, H, P = self.gates, self.num_units, self.proj_units
        out = []
        for p in self.layers:
            for g in range(G):
                out.append((None, (H, 0)) if p.w is None else (p.w + g * H * p.in_size,
                                                                 (H, p.in_size)))  # fmt: skip
            out.extend((p.r + g * H * P, (H, P)) for g in range(G))
            if p.proj is not None:
                out.append((p.proj, (P, H)))
        return out

    def canonical_biases(self) -> list[tuple[int, tuple[int]]]:
        """(offset, [H]) of each canonical bias: per pseudo-layer bW_0..bW_{G-1}, bR_0..bR_{G-1}."""
        H = self.num_units
        out = []
        for p in self.layers:
            out.extend((base + g * H, (H,)) for base in (p.bw, p.br) for g in range(self.gates))
        return out


def params_layout(rnn_mode: str, input_mode: str, direction: str, num_layers: int,
                  num_units: int, input_size: int, num_proj: int = 0) -> ParamsLayout:  # fmt: skip
    """The params buffer's layout for a model given by its attributes (what CudnnRNNParamsSize
    and the canonical ops see; auto_select compares input_size with num_units). Raises the C++
    ValueErrors for bad attributes."""
    flat = torch.ops.torch_lstm_grad._cudnn_rnn_params_layout(
        rnn_mode, input_mode, direction, num_layers, num_units, input_size, num_proj
    )

    def opt(v: int) -> int | None:
        return None if v < 0 else v

    layers = [
        PseudoLayerParams(w=opt(w), r=r, proj=opt(proj), bw=bw, br=br, in_size=in_size)
        for w, r, proj, bw, br, in_size in zip(*[iter(flat[1:])] * 6, strict=True)
    ]
    return ParamsLayout(size=flat[0], gates=GATES[rnn_mode], num_units=num_units,
                        proj_units=num_proj if num_proj > 0 else num_units,
                        layers=layers)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Shape rules (mirror csrc/cudnn_rnn_config.h; SymInt-friendly)


@dataclass
class RNNConfig:
    mode: str
    G: int  # gates
    skip_input: bool
    D: int  # directions
    L: int  # layers
    T: int
    B: int
    I: int  # noqa: E741
    H: int  # cell units
    P: int  # recurrent/output units: num_proj when projecting, else H
    time_major: bool

    @property
    def lstm(self) -> bool:
        return self.mode == "lstm"

    @property
    def proj(self) -> bool:
        return self.P != self.H

    def layer_input(self, layer: int) -> int:
        """in_l: the width of layer `layer`'s input."""
        return self.I if layer == 0 else self.D * self.P


def parse_rnn_mode(s: str) -> str:
    torch._check_value(
        s in GATES,
        lambda: f"rnn_mode: expected one of 'lstm', 'gru', 'rnn_tanh', 'rnn_relu', got '{s}'",
    )
    return s


def parse_direction(s: str) -> int:
    torch._check_value(
        s in ("unidirectional", "bidirectional"),
        lambda: f"direction: expected 'unidirectional' or 'bidirectional', got '{s}'",
    )
    return 2 if s == "bidirectional" else 1


def parse_input_mode(s: str, input_size, num_units, cell_units) -> bool:
    torch._check_value(
        s in ("linear_input", "skip_input", "auto_select"),
        lambda: f"input_mode: expected 'linear_input', 'skip_input' or 'auto_select', got '{s}'",
    )
    skip = s == "skip_input" or (s == "auto_select" and input_size == num_units)
    torch._check_value(
        not skip or input_size == cell_units,
        lambda: f"input_mode: '{s}' uses x itself as layer 0's gate input, which needs "
        f"input_size == num_units = {cell_units}, got input_size = {input_size}",
    )
    return skip


def make_rnn_config(rnn_mode, input_mode, direction, num_layers, num_units, input_size, num_proj,
                    auto_select_units) -> RNNConfig:  # fmt: skip
    """T, B and time_major are left 0/True; check_cudnn_rnn_inputs fills them."""
    parse_rnn_mode(rnn_mode)
    lstm = rnn_mode == "lstm"
    D = parse_direction(direction)
    torch._check_value(num_proj >= 0, lambda: f"num_proj: expected a value >= 0, got {num_proj}")
    torch._check_value(
        num_proj == 0 or lstm,
        lambda: "num_proj: projection is only defined for rnn_mode='lstm', got num_proj = "
        f"{num_proj} with rnn_mode='{rnn_mode}'",
    )
    torch._check_value(
        num_layers >= 1, lambda: f"num_layers: expected a value >= 1, got {num_layers}"
    )
    torch._check_value(num_units >= 1, lambda: f"num_units: expected a value >= 1, got {num_units}")
    torch._check_value(  # cuDNN refuses inputSize = 0, so the CPU does too
        input_size >= 1,
        lambda: "input_size: expected a value >= 1 (cuDNN refuses a model with no input "
        f"features), got {input_size}",
    )
    torch._check_value(
        num_proj == 0 or num_proj <= num_units,
        lambda: f"num_proj: expected a value <= num_units = {num_units}, got {num_proj}",
    )
    skip = parse_input_mode(input_mode, input_size, auto_select_units, num_units)
    return RNNConfig(mode=rnn_mode, G=GATES[rnn_mode], skip_input=skip, D=D, L=num_layers, T=0,
                     B=0, I=input_size, H=num_units, P=num_proj if num_proj > 0 else num_units,
                     time_major=True)  # fmt: skip


def params_size(c: RNNConfig, name: str = "num_units"):
    """csrc's params_size: the params element count (a SymInt under dynamic shapes), with the
    same checked operations in the same order, so an overflow raises the same ValueError."""
    mul, add = C.checked_mul, C.checked_add
    GH = mul(c.G, c.H, name, "G * H")
    w0 = mul(GH, 0 if c.skip_input else c.I, name, "G * H * input_size")
    r = mul(GH, c.P, name, "G * H * num_proj")
    proj = mul(c.P, c.H, name, "num_proj * H") if c.proj else 0
    biases = mul(2, GH, name, "2 * G * H")
    per = add(add(r, proj, name, "R + W_proj"), biases, name, "R + W_proj + biases")
    first = mul(c.D, add(w0, per, name, "layer 0's size"), name, "D * layer 0's size")
    if c.L == 1:
        return first
    DP = mul(c.D, c.P, name, "D * num_proj")
    w_up = mul(GH, DP, name, "G * H * D * num_proj")
    up = mul(mul(c.L - 1, c.D, name, "(num_layers - 1) * D"),
             add(w_up, per, name, "an upper layer's size"), name,
             "(num_layers - 1) * D * an upper layer's size")  # fmt: skip
    return add(first, up, name, "the params size")


def check_cudnn_rnn_inputs(input, input_h, input_c, params, rnn_mode, input_mode, direction,
                           num_proj, time_major) -> RNNConfig:  # fmt: skip
    C.check_float_input(input, "input")
    seq_layout = "[T, B, input_size]" if time_major else "[B, T, input_size]"
    torch._check_value(
        input.dim() == 3,
        lambda: f"input: expected a 3-D tensor {seq_layout}, got shape {C.shape_str(input.shape)}",
    )
    T, B = (input.shape[0], input.shape[1]) if time_major else (input.shape[1], input.shape[0])
    I = input.shape[2]  # noqa: E741
    parse_rnn_mode(rnn_mode)
    D = parse_direction(direction)
    h_layout = "[num_layers * D, B, num_units]" if time_major else "[B, num_layers * D, num_units]"
    C.check_like(input_h, "input_h", input, "input")
    torch._check_value(
        input_h.dim() == 3 and input_h.shape[2] >= 1,
        lambda: f"input_h: expected a 3-D tensor {h_layout}, got shape "
        f"{C.shape_str(input_h.shape)}",
    )
    L = input_h.shape[0 if time_major else 1] // D
    n = input_h.shape[2]
    # The output's [T, B, D * n] (T * B fits: input's storage size did).
    C.checked_mul(T * B, C.checked_mul(D, n, "input_h", "D * num_units"), "input",
                  "T * B * (D * num_units)")  # fmt: skip
    torch._check_value(
        L >= 1,
        lambda: f"input_h: expected at least {D} state slots (num_layers * D with D = {D}), got "
        f"shape {C.shape_str(input_h.shape)}",
    )
    h_shape = [L * D, B, n] if time_major else [B, L * D, n]
    C.check_shape(input_h, "input_h", h_shape, h_layout)
    H = n
    if rnn_mode == "lstm":
        C.check_like(input_c, "input_c", input, "input")
        torch._check_value(
            input_c.dim() == 3,
            lambda: "input_c: expected a 3-D tensor shaped like input_h, got shape "
            f"{C.shape_str(input_c.shape)}",
        )
        H = input_c.shape[2]
        if num_proj > 0:
            torch._check_value(
                n == num_proj,
                lambda: f"input_h: with num_proj = {num_proj} the state size (dim 2) must equal "
                f"num_proj, got shape {C.shape_str(input_h.shape)}",
            )
        c_shape = [*h_shape[:2], H if num_proj > 0 else n]
        c_layout = ("input_h's shape with dim 2 = cell units" if num_proj > 0
                    else "input_h's shape (no projection)")  # fmt: skip
        C.check_shape(input_c, "input_c", c_shape, c_layout)
    c = make_rnn_config(rnn_mode, input_mode, direction, L, H, I, num_proj, n)
    c.T, c.B, c.time_major = T, B, time_major
    C.check_like(params, "params", input, "input")
    expected = params_size(c, "params")
    torch._check_value(
        params.dim() == 1 and params.numel() == expected,
        lambda: f"params: expected a 1-D tensor of CudnnRNNParamsSize = {expected} elements for "
        f"this model, got shape {C.shape_str(params.shape)}",
    )
    return c


def _float_str(v: float) -> str:
    # std::ostream's default float format (what TORCH_CHECK prints): %g, 6 significant digits.
    return f"{v:g}"


def check_dropout(dropout: float) -> None:
    torch._check_value(
        dropout >= 0 and dropout <= 1,
        lambda: f"dropout: expected a probability in [0, 1], got {_float_str(dropout)}",
    )


def check_cudnn_rnn_outputs(c: RNNConfig, input, input_h, input_c, output, output_h, output_c,
                            output_backprop, output_h_backprop,
                            output_c_backprop) -> None:  # fmt: skip
    out_shape = [c.T, c.B, c.D * c.P] if c.time_major else [c.B, c.T, c.D * c.P]
    out_layout = "[T, B, D * num_units]" if c.time_major else "[B, T, D * num_units]"
    for t, name in ((output, "output"), (output_backprop, "output_backprop")):
        C.check_like(t, name, input, "input")
        C.check_shape(t, name, out_shape, out_layout)
    for t, name in ((output_h, "output_h"), (output_h_backprop, "output_h_backprop")):
        C.check_like(t, name, input, "input")
        C.check_shape(t, name, list(input_h.shape), "input_h's shape")
    if c.lstm:
        for t, name in ((output_c, "output_c"), (output_c_backprop, "output_c_backprop")):
            C.check_like(t, name, input, "input")
            C.check_shape(t, name, list(input_c.shape), "input_c's shape")


def check_sequence_lengths(lengths, c: RNNConfig) -> None:
    """dtype and shape only: the values ([0, T]) need a real tensor and are checked in C++."""
    if lengths is None:
        return
    torch._check_type(
        not (lengths.is_floating_point() or lengths.is_complex()) and lengths.dtype != torch.bool,
        lambda: "sequence_lengths: expected an integer dtype (TF uses int32), got "
        f"{C.dtype_name(lengths.dtype)}",
    )
    C.check_shape(lengths, "sequence_lengths", [c.B], "[B]")


# ---------------------------------------------------------------------------------------------
# Fake kernels (registered in registrations.py)


def cudnn_rnn_fake(input, input_h, input_c, params, sequence_lengths, rnn_mode, input_mode,
                   direction, dropout, seed, seed2, num_proj, is_training, time_major):  # fmt: skip
    c = check_cudnn_rnn_inputs(input, input_h, input_c, params, rnn_mode, input_mode, direction,
                               num_proj, time_major)  # fmt: skip
    check_dropout(dropout)
    check_sequence_lengths(sequence_lengths, c)
    out_shape = (c.T, c.B, c.D * c.P) if time_major else (c.B, c.T, c.D * c.P)
    output_c = input.new_empty(input_c.shape if c.lstm else ())
    if is_training:
        # The reserve is opaque and its size is the device's own (cuDNN's workspace query on
        # GPU, the CPU kernel's activations): an unbacked size. Inference returns a 0-d dummy.
        reserve_space = input.new_empty((torch.library.get_ctx().new_dynamic_size(),))
    else:
        reserve_space = input.new_empty(())
    host_reserved = input.new_empty((), dtype=torch.int8)
    return (input.new_empty(out_shape), input.new_empty(input_h.shape), output_c, reserve_space,
            host_reserved)  # fmt: skip


def cudnn_rnn_backprop_fake(input, input_h, input_c, params, sequence_lengths, output, output_h,
                            output_c, output_backprop, output_h_backprop, output_c_backprop,
                            reserve_space, host_reserved, rnn_mode, input_mode, direction,
                            dropout, seed, seed2, num_proj, time_major):  # fmt: skip
    c = check_cudnn_rnn_inputs(input, input_h, input_c, params, rnn_mode, input_mode, direction,
                               num_proj, time_major)  # fmt: skip
    check_dropout(dropout)
    check_cudnn_rnn_outputs(c, input, input_h, input_c, output, output_h, output_c,
                            output_backprop, output_h_backprop, output_c_backprop)  # fmt: skip
    check_sequence_lengths(sequence_lengths, c)
    input_c_backprop = input.new_empty(input_c.shape if c.lstm else ())
    return (input.new_empty(input.shape), input.new_empty(input_h.shape), input_c_backprop,
            input.new_empty(params.shape))  # fmt: skip
