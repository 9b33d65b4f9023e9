"""Shape and dtype rules of the ops, for the fake (meta) kernels.

A line-for-line mirror of csrc/checks.h, with the same messages, so a bad input fails the same
way eagerly (C++) and under torch.compile / FakeTensor tracing (here). tests/test_bad_input.py
runs every bad case through both and compares the exception type and message. Values that
only a real tensor has (seq_len_max) are checked by the C++ kernels alone. Sizes are Python
ints (or SymInts), which do not wrap: where the C++ arithmetic would overflow int64, these raise
the C++ message (`checked_mul`, `checked_add`).
"""

from __future__ import annotations

import torch

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# c10's ScalarType names, as the C++ messages print them.
_DTYPE_NAMES = {
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.bool: "Bool",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def shape_str(sizes) -> str:
    return "[" + ", ".join(str(s) for s in sizes) + "]"


INT64_MAX = 2**63 - 1


def checked_mul(a, b, name: str, what: str):
    """a * b, or csrc/checks.h's ValueError where it does not fit int64 (C++ would wrap)."""
    out = a * b
    torch._check_value(
        out <= INT64_MAX, lambda: f"{name}: {what} = {a} * {b} overflows int64"
    )
    return out


def checked_add(a, b, name: str, what: str):
    out = a + b
    torch._check_value(
        out <= INT64_MAX, lambda: f"{name}: {what} = {a} + {b} overflows int64"
    )
    return out


def check_float_input(x: torch.Tensor, name: str) -> None:
    torch._check_type(
        x.dtype in _FLOATS,
        lambda: f"{name}: expected dtype float16, bfloat16, float32 or float64, got "
        f"{dtype_name(x.dtype)}",
    )


def check_like(t: torch.Tensor, name: str, x: torch.Tensor, ref_name: str = "x") -> None:
    torch._check_type(
        t.dtype == x.dtype,
        lambda: f"{name}: expected dtype {dtype_name(x.dtype)} (the dtype of {ref_name}), got "
        f"{dtype_name(t.dtype)}",
    )
    torch._check_value(
        t.device == x.device,
        lambda: f"{name}: expected a tensor on {x.device} (the device of {ref_name}), got "
        f"{t.device}",
    )


def check_shape(t: torch.Tensor, name: str, expected: list, layout: str) -> None:
    torch._check_value(
        list(t.shape) == list(expected),
        lambda: f"{name}: expected shape {layout} = {shape_str(expected)}, got "
        f"{shape_str(t.shape)}",
    )


def check_seq_len_max(seq_len_max: torch.Tensor) -> None:
    torch._check_type(
        not (seq_len_max.is_floating_point() or seq_len_max.is_complex())
        and seq_len_max.dtype != torch.bool,
        lambda: "seq_len_max: expected an integer dtype (TF uses int64), got "
        f"{dtype_name(seq_len_max.dtype)}",
    )
    torch._check_value(
        seq_len_max.dim() == 0,
        lambda: "seq_len_max: expected a scalar (0-d) tensor, got shape "
        f"{shape_str(seq_len_max.shape)}",
    )


def _check_x(x, time_major: bool = True):
    """x [T, B, I] (time_major) or a single step's [B, I]; returns (T, B, I), T = 1 for a step."""
    check_float_input(x, "x")
    rank = 3 if time_major else 2
    torch._check_value(
        x.dim() == rank,
        lambda: f"x: expected a {rank}-D tensor {'[T, B, I]' if time_major else '[B, I]'}, "
        f"got shape {shape_str(x.shape)}",
    )
    T = x.shape[0] if time_major else 1
    return T, x.shape[rank - 2], x.shape[rank - 1]


def _check_state(t, name: str, x, B):
    """A [B, H] state that sets H (>= 1) for the other arguments; returns H."""
    check_like(t, name, x)
    torch._check_value(
        t.dim() == 2 and t.shape[0] == B and t.shape[1] > 0,
        lambda: f"{name}: expected shape [B, H] with B = {B} (from x) and H >= 1, got "
        f"{shape_str(t.shape)}",
    )
    return t.shape[1]


def check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, time_major):
    """Returns (T, B, I, H); T is 1 for the single-step cell ops."""
    T, B, I = _check_x(x, time_major)
    H = _check_state(cs_prev, "cs_prev", x, B)
    check_like(h_prev, "h_prev", x)
    check_shape(h_prev, "h_prev", [B, H], "[B, H]")
    check_like(w, "w", x)
    H4 = checked_mul(4, H, "w", "4 * H")
    check_shape(w, "w", [checked_add(I, H, "w", "I + H"), H4], "[I + H, 4 * H]")
    check_like(b, "b", x)
    check_shape(b, "b", [H4], "[4 * H]")
    if use_peephole:
        for t, name in ((wci, "wci"), (wcf, "wcf"), (wco, "wco")):
            check_like(t, name, x)
            check_shape(t, name, [H], "[H] (use_peephole=True)")
    return T, B, I, H


def check_lstm_activations(named, x, sizes, time_major) -> None:
    T, B, _, H = sizes
    for t, name in named:
        check_like(t, name, x)
        if time_major:
            check_shape(t, name, [T, B, H], "[T, B, H]")
        else:
            check_shape(t, name, [B, H], "[B, H]")


def check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c):
    """Returns (B, I, H)."""
    _, B, I = _check_x(x, time_major=False)
    H = _check_state(h_prev, "h_prev", x, B)
    check_like(w_ru, "w_ru", x)
    IH = checked_add(I, H, "w_ru", "I + H")
    H2 = checked_mul(2, H, "w_ru", "2 * H")
    check_shape(w_ru, "w_ru", [IH, H2], "[I + H, 2 * H]")
    for t, name, expected, layout in (
        (w_c, "w_c", [IH, H], "[I + H, H]"),
        (b_ru, "b_ru", [H2], "[2 * H]"),
        (b_c, "b_c", [H], "[H]"),
    ):
        check_like(t, name, x)
        check_shape(t, name, expected, layout)
    return B, I, H


# block_lstm_ex's string attributes, in the order of csrc/checks.h's check_lstm_ex_attrs.
LSTM_EX_CHOICES = {
    "gate_order": ("icfo", "ifco"),
    "gate_activation": ("sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3"),
    "activation": ("tanh", "relu", "linear"),
    "clip_gradient": ("straight_through", "zero"),
}


def check_choice(value, name: str, allowed) -> None:
    """ValueError "name: expected one of 'a', 'b', got 'c'" unless value is in allowed."""
    if value not in allowed:
        names = ", ".join(f"'{a}'" for a in allowed)
        raise ValueError(f"{name}: expected one of {names}, got '{value}'")


def check_lstm_ex_attrs(**attrs) -> None:
    for name, value in attrs.items():
        check_choice(value, name, LSTM_EX_CHOICES[name])


def check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj, use_peephole):
    """Returns (T, B, I, H, P); P = H without w_proj."""
    if w_proj is None:
        T, B, I, H = check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, True)
        return T, B, I, H, H
    T, B, I = _check_x(x)
    H = _check_state(cs_prev, "cs_prev", x, B)
    check_like(w_proj, "w_proj", x)
    torch._check_value(
        w_proj.dim() == 2 and w_proj.shape[0] == H and w_proj.shape[1] > 0,
        lambda: f"w_proj: expected shape [H, P] with H = {H} (from cs_prev) and P >= 1, got "
        f"{shape_str(w_proj.shape)}",
    )
    P = w_proj.shape[1]
    check_like(h_prev, "h_prev", x)
    check_shape(h_prev, "h_prev", [B, P], "[B, P]")
    check_like(w, "w", x)
    check_shape(w, "w", [I + P, 4 * H], "[I + P, 4 * H]")
    check_like(b, "b", x)
    check_shape(b, "b", [4 * H], "[4 * H]")
    if use_peephole:
        for t, name in ((wci, "wci"), (wcf, "wcf"), (wco, "wco")):
            check_like(t, name, x)
            check_shape(t, name, [H], "[H] (use_peephole=True)")
    return T, B, I, H, P


def check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias, reset_after):
    """keras_gru's inputs; returns (T, B, I, H)."""
    T, B, I = _check_x(x)
    H = _check_state(h_prev, "h_prev", x, B)
    check_like(kernel, "kernel", x)
    check_shape(kernel, "kernel", [I, 3 * H], "[I, 3 * H]")
    check_like(recurrent_kernel, "recurrent_kernel", x)
    check_shape(recurrent_kernel, "recurrent_kernel", [H, 3 * H], "[H, 3 * H]")
    if bias is not None:
        check_like(bias, "bias", x)
        if reset_after:
            check_shape(bias, "bias", [2, 3 * H], "[2, 3 * H] (reset_after=True)")
        else:
            check_shape(bias, "bias", [3 * H], "[3 * H] (reset_after=False)")
    return T, B, I, H
