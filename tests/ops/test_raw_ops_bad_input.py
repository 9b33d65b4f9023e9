"""Bad input (docs/differences.md, "Bad input raises"; docs/tf-semantics.md §10) for the 8 block
ops.

Every case raises ValueError (shapes, values) or TypeError (dtypes) with a message that starts
with the argument's name and gives the expected and the actual shape or value. TensorFlow
aborts, reads out of bounds or silently accepts many of these; the package refuses them.

Every case that does not depend on a tensor's *value* is also run on the fake path (FakeTensorMode),
which must raise the same exception type with the same message: this proves
torch_lstm_grad/_library/checks.py mirrors csrc/checks.h (device="meta" runs the same fake
kernels: one test shows it, not every case again). Absurd sizes (H = 2^62, where 4 * H wraps
in int64) raise the same ValueError on both paths. Finally, zero-size batches (B = 0) work.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import assert_bad_input_message
from tests.helpers import randn as r
from tests.helpers import set_args as _set
from torch_lstm_grad import raw_ops

T, B, I, H = 3, 2, 3, 4  # noqa: E741
F32, F64 = torch.float32, torch.float64

LSTM_OPS = ["BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2", "LSTMBlockCell",
            "LSTMBlockCellGrad"]  # fmt: skip
BLOCK_OPS = ["BlockLSTM", "BlockLSTMV2", "BlockLSTMGrad", "BlockLSTMGradV2"]
BLOCK_GRAD_OPS = ["BlockLSTMGrad", "BlockLSTMGradV2"]
GRU_OPS = ["GRUBlockCell", "GRUBlockCellGrad"]
ALL_OPS = LSTM_OPS + GRU_OPS
ACTIVATIONS = ("i", "cs", "f", "o", "ci", "co")


def valid_args(op: str, dtype=F32, use_peephole=True, batch=B) -> dict:
    """Keyword arguments of a valid call of raw_ops.<op> (fresh tensors every time)."""
    if op in GRU_OPS:
        a = dict(x=r(batch, I, dtype=dtype), h_prev=r(batch, H, dtype=dtype),
                 w_ru=r(I + H, 2 * H, dtype=dtype), w_c=r(I + H, H, dtype=dtype),
                 b_ru=r(2 * H, dtype=dtype), b_c=r(H, dtype=dtype))  # fmt: skip
        if op == "GRUBlockCellGrad":
            out = raw_ops.GRUBlockCell(**a)
            a.update(r=out.r, u=out.u, c=out.c, d_h=r(batch, H, dtype=dtype))
        return a
    cell = op.startswith("LSTMBlockCell")
    a = dict(x=r(batch, I, dtype=dtype) if cell else r(T, batch, I, dtype=dtype),
             cs_prev=r(batch, H, dtype=dtype), h_prev=r(batch, H, dtype=dtype),
             w=r(I + H, 4 * H, dtype=dtype), wci=r(H, dtype=dtype), wcf=r(H, dtype=dtype),
             wco=r(H, dtype=dtype), b=r(4 * H, dtype=dtype))  # fmt: skip
    if not cell:
        a = {"seq_len_max": torch.tensor(T), **a}
    step = (batch, H) if cell else (T, batch, H)
    if op == "LSTMBlockCellGrad":
        out = raw_ops.LSTMBlockCell(**a, use_peephole=use_peephole)
        a.update({n: getattr(out, n) for n in ACTIVATIONS})
        a.update(cs_grad=r(*step, dtype=dtype), h_grad=r(*step, dtype=dtype))
    elif op in BLOCK_GRAD_OPS:
        fwd = raw_ops.BlockLSTM if op == "BlockLSTMGrad" else raw_ops.BlockLSTMV2
        out = fwd(**a, use_peephole=use_peephole)
        a.update({n: getattr(out, n) for n in ACTIVATIONS}, h=out.h)
        a.update(cs_grad=r(*step, dtype=dtype), h_grad=r(*step, dtype=dtype))
    a["use_peephole"] = use_peephole
    return a


def call(op: str, args: dict):
    return getattr(raw_ops, op)(**args)


@dataclass
class Case:
    id: str
    op: str
    mutate: Callable[[dict], None]  # edits a valid argument dict into a bad one
    exc: type
    name: str  # the argument the message must start with
    contains: tuple[str, ...]  # the expected and the actual shape/value
    value_dependent: bool = False  # only the real kernel can see it (not the fake path)


def _lstm_input_cases(op: str) -> list[Case]:
    cell = op.startswith("LSTMBlockCell")
    cases = []

    def add(id_, mutate, exc, name, *contains):
        cases.append(Case(f"{op}-{id_}", op, mutate, exc, name, contains))

    # x: rank, dtype.
    if cell:
        add("x_rank3", _set(x=lambda: r(T, B, I)), ValueError, "x", "2-D tensor [B, I]",
            "got shape [3, 2, 3]")  # fmt: skip
        add("x_rank1", _set(x=lambda: r(I)), ValueError, "x", "2-D", "got shape [3]")
    else:
        add("x_rank2", _set(x=lambda: r(B, I)), ValueError, "x", "3-D tensor [T, B, I]",
            "got shape [2, 3]")  # fmt: skip
        add("x_rank4", _set(x=lambda: r(T, B, I, 1)), ValueError, "x", "3-D",
            "got shape [3, 2, 3, 1]")  # fmt: skip
    add("x_int32", _set(x=lambda: r(T, B, I).int() if not cell else r(B, I).int()), TypeError,
        "x", "float16, bfloat16, float32 or float64", "got Int")  # fmt: skip
    add("x_int64", _set(x=lambda: r(T, B, I).long() if not cell else r(B, I).long()), TypeError,
        "x", "float16, bfloat16, float32 or float64", "got Long")  # fmt: skip
    add("x_bool", _set(x=lambda: (r(T, B, I) if not cell else r(B, I)) > 0), TypeError, "x",
        "float16, bfloat16, float32 or float64", "got Bool")  # fmt: skip
    # cs_prev / h_prev.
    add("cs_prev_wrong_B", _set(cs_prev=lambda: r(B + 1, H)), ValueError, "cs_prev",
        "[B, H] with B = 2", "got [3, 4]")  # fmt: skip
    add("cs_prev_rank1", _set(cs_prev=lambda: r(H)), ValueError, "cs_prev", "[B, H] with B = 2",
        "got [4]")  # fmt: skip
    add("cs_prev_H0", _set(cs_prev=lambda: r(B, 0)), ValueError, "cs_prev", "H >= 1",
        "got [2, 0]")  # fmt: skip
    add("h_prev_wrong_H", _set(h_prev=lambda: r(B, H + 1)), ValueError, "h_prev",
        "[B, H] = [2, 4]", "got [2, 5]")  # fmt: skip
    add("h_prev_wrong_B", _set(h_prev=lambda: r(B + 1, H)), ValueError, "h_prev",
        "[B, H] = [2, 4]", "got [3, 4]")  # fmt: skip
    add("h_prev_rank3", _set(h_prev=lambda: r(1, B, H)), ValueError, "h_prev", "[B, H] = [2, 4]",
        "got [1, 2, 4]")  # fmt: skip
    # w.
    add("w_4H_plus_1", _set(w=lambda: r(I + H, 4 * H + 1)), ValueError, "w",
        "[I + H, 4 * H] = [7, 16]", "got [7, 17]")  # fmt: skip
    add("w_I_plus_H_plus_1", _set(w=lambda: r(I + H + 1, 4 * H)), ValueError, "w",
        "[I + H, 4 * H] = [7, 16]", "got [8, 16]")  # fmt: skip
    add("w_transposed", _set(w=lambda: r(4 * H, I + H)), ValueError, "w",
        "[I + H, 4 * H] = [7, 16]", "got [16, 7]")  # fmt: skip
    # b: TF's BlockLSTMGrad accepts 4H+1..4H+3 (integer division); refused here.
    for n in (1, 2, 3):
        add(f"b_4H_plus_{n}", _set(b=lambda n=n: r(4 * H + n)), ValueError, "b",
            "[4 * H] = [16]", f"got [{16 + n}]")  # fmt: skip
    add("b_4H_minus_1", _set(b=lambda: r(4 * H - 1)), ValueError, "b", "[4 * H] = [16]",
        "got [15]")  # fmt: skip
    add("b_rank2", _set(b=lambda: r(1, 4 * H)), ValueError, "b", "[4 * H] = [16]",
        "got [1, 16]")  # fmt: skip
    # Peephole vectors when use_peephole=True (TF's LSTMBlockCell silently reads out of bounds).
    for p in ("wci", "wcf", "wco"):
        for id_, shape, got in (("long", (H + 1,), "[5]"), ("short", (H - 1,), "[3]"),
                                ("empty", (0,), "[0]"), ("rank2", (1, H), "[1, 4]")):  # fmt: skip
            add(f"{p}_{id_}", _set(**{p: lambda s=shape: r(*s)}), ValueError, p,
                "[H] (use_peephole=True) = [4]", f"got {got}")  # fmt: skip
        add(f"{p}_float64", _set(**{p: lambda: r(H, dtype=F64)}), TypeError, p,
            "expected dtype Float (the dtype of x)", "got Double")  # fmt: skip
    # dtype mismatches between inputs.
    for n, shape in (("cs_prev", (B, H)), ("h_prev", (B, H)), ("w", (I + H, 4 * H)),
                     ("b", (4 * H,))):  # fmt: skip
        add(f"{n}_float64", _set(**{n: lambda s=shape: r(*s, dtype=F64)}), TypeError, n,
            "expected dtype Float (the dtype of x)", "got Double")  # fmt: skip
        add(f"{n}_float16", _set(**{n: lambda s=shape: r(*s, dtype=torch.float16)}), TypeError,
            n, "expected dtype Float (the dtype of x)", "got Half")  # fmt: skip
    add("cs_prev_int32", _set(cs_prev=lambda: r(B, H).int()), TypeError, "cs_prev",
        "expected dtype Float (the dtype of x)", "got Int")  # fmt: skip
    add("x_float64_rest_float32", _set(x=lambda: r(B, I, dtype=F64) if cell else
                                        r(T, B, I, dtype=F64)),
        TypeError, "cs_prev", "expected dtype Double (the dtype of x)", "got Float")  # fmt: skip
    return cases


def _seq_len_max_cases(op: str) -> list[Case]:
    def case(id_, value, exc, contains, value_dependent):
        return Case(f"{op}-seq_len_max_{id_}", op, _set(seq_len_max=value), exc, "seq_len_max",
                    contains, value_dependent)  # fmt: skip

    rng = ("expected a value in [0, T] = [0, 3]",)
    return [
        case("T_plus_1", lambda: torch.tensor(T + 1), ValueError, (*rng, "got 4"), True),
        case("minus_1", lambda: torch.tensor(-1), ValueError, (*rng, "got -1"), True),
        case("huge", lambda: torch.tensor(2**40), ValueError, (*rng, f"got {2**40}"), True),
        case(
            "int32_T_plus_1",
            lambda: torch.tensor(T + 1, dtype=torch.int32),
            ValueError,
            (*rng, "got 4"),
            True,
        ),  # fmt: skip
        case(
            "float32",
            lambda: torch.tensor(2.0),
            TypeError,
            ("expected an integer dtype", "got Float"),
            False,
        ),  # fmt: skip
        case(
            "float64",
            lambda: torch.tensor(2.0, dtype=F64),
            TypeError,
            ("expected an integer dtype", "got Double"),
            False,
        ),  # fmt: skip
        case(
            "bool",
            lambda: torch.tensor(True),
            TypeError,
            ("expected an integer dtype", "got Bool"),
            False,
        ),  # fmt: skip
        case(
            "complex",
            lambda: torch.tensor(2 + 0j),
            TypeError,
            ("expected an integer dtype", "got ComplexFloat"),
            False,
        ),  # fmt: skip
        case(
            "shape_1",
            lambda: torch.tensor([T]),
            ValueError,
            ("expected a scalar (0-d) tensor", "got shape [1]"),
            False,
        ),  # fmt: skip
        case(
            "shape_2",
            lambda: torch.tensor([T, T]),
            ValueError,
            ("expected a scalar (0-d) tensor", "got shape [2]"),
            False,
        ),  # fmt: skip
    ]


def _grad_activation_cases(op: str) -> list[Case]:
    cases = []
    block = op in BLOCK_GRAD_OPS
    names = ACTIVATIONS + (("h",) if block else ()) + ("cs_grad", "h_grad")
    layout = "[T, B, H] = [3, 2, 4]" if block else "[B, H] = [2, 4]"
    for n in names:
        if block:
            bad = {"T_minus_1": ((T - 1, B, H), "[2, 2, 4]"),
                   "T_plus_1": ((T + 1, B, H), "[4, 2, 4]"),
                   "wrong_B": ((T, B + 1, H), "[3, 3, 4]"),
                   "wrong_H": ((T, B, H + 1), "[3, 2, 5]"),
                   "rank2": ((B, H), "[2, 4]")}  # fmt: skip
        else:
            bad = {"wrong_B": ((B + 1, H), "[3, 4]"), "wrong_H": ((B, H - 1), "[2, 3]"),
                   "rank3": ((1, B, H), "[1, 2, 4]")}  # fmt: skip
        for id_, (shape, got) in bad.items():
            cases.append(Case(f"{op}-{n}_{id_}", op, _set(**{n: lambda s=shape: r(*s)}),
                              ValueError, n, (layout, f"got {got}")))  # fmt: skip
        full = (T, B, H) if block else (B, H)
        cases.append(
            Case(
                f"{op}-{n}_float64",
                op,
                _set(**{n: lambda s=full: r(*s, dtype=F64)}),
                TypeError,
                n,
                ("expected dtype Float (the dtype of x)", "got Double"),
            )
        )
    return cases


def _gru_cases(op: str) -> list[Case]:
    cases = []

    def add(id_, mutate, exc, name, *contains):
        cases.append(Case(f"{op}-{id_}", op, mutate, exc, name, contains))

    add("x_rank3", _set(x=lambda: r(1, B, I)), ValueError, "x", "2-D tensor [B, I]",
        "got shape [1, 2, 3]")  # fmt: skip
    add("x_rank1", _set(x=lambda: r(I)), ValueError, "x", "2-D tensor [B, I]", "got shape [3]")
    add("x_int32", _set(x=lambda: r(B, I).int()), TypeError, "x",
        "float16, bfloat16, float32 or float64", "got Int")  # fmt: skip
    add("h_prev_wrong_B", _set(h_prev=lambda: r(B + 1, H)), ValueError, "h_prev",
        "[B, H] with B = 2", "got [3, 4]")  # fmt: skip
    add("h_prev_H0", _set(h_prev=lambda: r(B, 0)), ValueError, "h_prev", "H >= 1", "got [2, 0]")
    add("h_prev_rank1", _set(h_prev=lambda: r(H)), ValueError, "h_prev", "[B, H] with B = 2",
        "got [4]")  # fmt: skip
    for n, good, layout, bads in (
        ("w_ru", (I + H, 2 * H), "[I + H, 2 * H] = [7, 8]",
         (((I + H, 2 * H + 1), "[7, 9]"), ((I + H + 1, 2 * H), "[8, 8]"),
          ((2 * H, I + H), "[8, 7]"))),
        ("w_c", (I + H, H), "[I + H, H] = [7, 4]",
         (((I + H, H + 1), "[7, 5]"), ((I, H), "[3, 4]"), ((I + H, 4 * H), "[7, 16]"))),
        ("b_ru", (2 * H,), "[2 * H] = [8]",
         (((2 * H + 1,), "[9]"), ((H,), "[4]"), ((1, 2 * H), "[1, 8]"))),
        ("b_c", (H,), "[H] = [4]", (((H + 1,), "[5]"), ((2 * H,), "[8]"), ((0,), "[0]"))),
    ):  # fmt: skip
        for k, (shape, got) in enumerate(bads):
            add(f"{n}_bad{k}", _set(**{n: lambda s=shape: r(*s)}), ValueError, n, layout,
                f"got {got}")  # fmt: skip
        add(f"{n}_float64", _set(**{n: lambda s=good: r(*s, dtype=F64)}), TypeError, n,
            "expected dtype Float (the dtype of x)", "got Double")  # fmt: skip
    add("h_prev_int64", _set(h_prev=lambda: r(B, H).long()), TypeError, "h_prev",
        "expected dtype Float (the dtype of x)", "got Long")  # fmt: skip
    add("h_prev_float64", _set(h_prev=lambda: r(B, H, dtype=F64)), TypeError, "h_prev",
        "expected dtype Float (the dtype of x)", "got Double")  # fmt: skip
    if op == "GRUBlockCellGrad":
        for n in ("r", "u", "c", "d_h"):
            for id_, (shape, got) in {"wrong_B": ((B + 1, H), "[3, 4]"),
                                      "wrong_H": ((B, H + 1), "[2, 5]"),
                                      "rank3": ((1, B, H), "[1, 2, 4]")}.items():  # fmt: skip
                add(f"{n}_{id_}", _set(**{n: lambda s=shape: r(*s)}), ValueError, n,
                    "[B, H] = [2, 4]", f"got {got}")  # fmt: skip
            add(f"{n}_float64", _set(**{n: lambda: r(B, H, dtype=F64)}), TypeError, n,
                "expected dtype Float (the dtype of x)", "got Double")  # fmt: skip
    return cases


CASES: list[Case] = []
for _op in LSTM_OPS:
    CASES += _lstm_input_cases(_op)
for _op in BLOCK_OPS:
    CASES += _seq_len_max_cases(_op)
for _op in BLOCK_GRAD_OPS + ["LSTMBlockCellGrad"]:
    CASES += _grad_activation_cases(_op)
for _op in GRU_OPS:
    CASES += _gru_cases(_op)
SHAPE_CASES = [c for c in CASES if not c.value_dependent]

assert len({c.id for c in CASES}) == len(CASES)


def bad_args(case: Case) -> dict:
    args = valid_args(case.op)
    case.mutate(args)
    return args


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_raises(case):
    args = bad_args(case)
    with pytest.raises(case.exc) as info:
        call(case.op, args)
    assert type(info.value) is case.exc
    assert_bad_input_message(info.value, case)


def _eager_error(case: Case, args: dict) -> BaseException:
    with pytest.raises(case.exc) as info:
        call(case.op, args)
    return info.value


def _convert(args: dict, fn) -> dict:
    return {k: fn(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


@pytest.mark.parametrize("case", SHAPE_CASES, ids=lambda c: c.id)
def test_fake_tensor_raises_same_error(case):
    args = bad_args(case)
    eager = _eager_error(case, args)
    mode = FakeTensorMode()
    fake_args = _convert(args, mode.from_tensor)
    with mode, pytest.raises(Exception) as info:
        call(case.op, fake_args)
    assert type(info.value) is type(eager)
    assert str(info.value) == str(eager)


@pytest.mark.parametrize("op", ALL_OPS)
def test_meta_device_runs_the_fake_kernels(op):
    """device="meta" takes the registered fake kernels (the FakeTensor cases above test their
    messages case by case): one bad and one valid call per op."""
    args = valid_args(op)
    meta = _convert(args, lambda t: t.to("meta"))
    out = call(op, meta)
    assert [t.shape for t in out] == [t.shape for t in call(op, args)]
    bad = dict(args, x=r(1, 2, 3, 4))
    with pytest.raises(ValueError) as info:
        call(op, bad)
    with pytest.raises(ValueError) as meta_info:
        call(op, _convert(bad, lambda t: t.to("meta")))
    assert str(meta_info.value) == str(info.value)


# ---------------------------------------------------------------------------------------------
# Absurd sizes: shape arithmetic in checked int64 (csrc/checks.h checked_mul / checked_add).
# Zero-size tensors make them cheap: with B = 0, cs_prev [0, 2^62] holds nothing.

HUGE = 2**62


def _huge_lstm_args(op, H=HUGE, I=I):  # noqa: E741
    z = torch.empty
    cell = op.startswith("LSTMBlockCell")
    w = z(I + H, 0) if I + H < 2**63 else z(0, 0)
    a = dict(x=z(0, I) if cell else z(T, 0, I), cs_prev=z(0, H), h_prev=z(0, H),
             w=w, wci=z(0), wcf=z(0), wco=z(0), b=z(0))  # fmt: skip
    if not cell:
        a = {"seq_len_max": torch.tensor(T), **a}
    step = (0, H) if cell else (T, 0, H)
    if op == "LSTMBlockCellGrad" or op in BLOCK_GRAD_OPS:
        a.update({n: z(*step) for n in ACTIVATIONS}, cs_grad=z(*step), h_grad=z(*step))
        if op in BLOCK_GRAD_OPS:
            a["h"] = z(*step)
    return {**a, "use_peephole": False}


OVERFLOW_CASES = [
    # 4 * 2^62 wraps to 0: a [I + H, 0] w matched it and BlockLSTM returned [T, 0, 2^62].
    *[(op, lambda op=op: _huge_lstm_args(op), "w", f"4 * H = 4 * {HUGE} overflows int64")
      for op in LSTM_OPS],
    # I + H overflows where 4 * H fits (H = 2^60).
    ("BlockLSTM", lambda: _huge_lstm_args("BlockLSTM", H=2**60, I=2**63 - 2**60 + 1), "w",
     f"I + H = {2**63 - 2**60 + 1} + {2**60} overflows int64"),
    ("GRUBlockCell", lambda: dict(x=torch.empty(0, I), h_prev=torch.empty(0, HUGE),
                                  w_ru=torch.empty(I + HUGE, 0), w_c=torch.empty(0),
                                  b_ru=torch.empty(0), b_c=torch.empty(0)),
     "w_ru", f"2 * H = 2 * {HUGE} overflows int64"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "make", "name", "message"),
    OVERFLOW_CASES,
    ids=[f"{c[0]}-{c[2]}-{i}" for i, c in enumerate(OVERFLOW_CASES)],
)
def test_overflowing_sizes_raise_value_error(op, make, name, message):
    args = make()
    with pytest.raises(ValueError) as info:
        call(op, args)
    assert str(info.value) == f"{name}: {message}"
    mode = FakeTensorMode()
    with mode, pytest.raises(ValueError) as fake:
        call(op, _convert(args, mode.from_tensor))
    assert str(fake.value) == str(info.value)


@pytest.mark.parametrize("op", BLOCK_OPS)
def test_seq_len_max_uint64_above_int64_is_a_value_error(op):
    """A uint64 seq_len_max above int64's range is out of [0, T] (a ValueError, not a
    conversion RuntimeError); one within range is used."""
    args = valid_args(op)
    args["seq_len_max"] = torch.tensor(2**64 - 1, dtype=torch.uint64)
    with pytest.raises(ValueError) as info:
        call(op, args)
    assert str(info.value) == f"seq_len_max: expected a value in [0, T] = [0, {T}], got {2**64 - 1}"
    args["seq_len_max"] = torch.tensor(2, dtype=torch.uint64)
    ref = call(op, {**args, "seq_len_max": torch.tensor(2)})
    for got, want in zip(call(op, args), ref, strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("op", BLOCK_OPS)
def test_value_dependent_seq_len_max_passes_fake_path(op):
    """seq_len_max's value is only known to the real kernel; the fake path must not reject it
    (documented in _checks.py); the eager call does (test_bad_input_raises)."""
    args = valid_args(op)
    args["seq_len_max"] = torch.tensor(T + 1)
    mode = FakeTensorMode()
    with mode:
        out = call(op, _convert(args, mode.from_tensor))
    assert out[0].shape == ((T, B, I) if op in BLOCK_GRAD_OPS else (T, B, H))


# ---------------------------------------------------------------------------------------------
# seq_len_max given as a Python / numpy scalar: converted by the raw op. A float must not be
# truncated silently (docs/differences.md: float seq_len_max -> TypeError; TF refuses a float for
# an int64 input).


@pytest.mark.parametrize("value", [2.5, np.float64(2.5), np.array(2.0, dtype=np.float32)],
                         ids=["python_float", "numpy_float64", "numpy_float32_array"])  # fmt: skip
@pytest.mark.parametrize("op", BLOCK_OPS)
def test_float_seq_len_max_scalar_rejected(op, value):
    args = valid_args(op)
    args["seq_len_max"] = value
    with pytest.raises(TypeError) as info:
        call(op, args)
    assert str(info.value).startswith("seq_len_max: "), str(info.value)
    assert "integer" in str(info.value)


@pytest.mark.parametrize("value", [2, np.int64(2), np.array(2, dtype=np.int32)],
                         ids=["python_int", "numpy_int64", "numpy_int32_array"])  # fmt: skip
@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_integer_seq_len_max_scalar_accepted(op, value):
    args = valid_args(op)
    ref = call(op, {**args, "seq_len_max": torch.tensor(2)})
    args["seq_len_max"] = value
    out = call(op, args)
    for a, b in zip(out, ref, strict=True):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------------------------
# Peephole vectors are ignored (any shape, any dtype) when use_peephole=False


UNUSED_PEEPHOLES = {
    "empty": lambda: r(0),
    "long": lambda: r(H + 3),
    "rank2": lambda: r(2, 3),
    "scalar": lambda: r(),
    "float64": lambda: r(H, dtype=F64),
}


@pytest.mark.parametrize("kind", list(UNUSED_PEEPHOLES))
@pytest.mark.parametrize("op", LSTM_OPS)
def test_unused_peepholes_accept_any_shape(op, kind):
    args = valid_args(op, use_peephole=False)
    reference = call(op, args)
    for p in ("wci", "wcf", "wco"):
        args[p] = UNUSED_PEEPHOLES[kind]()
    out = call(op, args)
    for name in out._fields:
        got, want = getattr(out, name), getattr(reference, name)
        if name in ("wci_grad", "wcf_grad", "wco_grad"):
            # The gradient of an unused vector: zeros shaped like it.
            p = args[name[:3]]
            assert got.shape == p.shape and got.dtype == p.dtype
            assert not got.any()
        else:
            torch.testing.assert_close(got, want)
    # The fake path accepts them too, with the same output metadata.
    mode = FakeTensorMode()
    with mode:
        fake = call(op, _convert(args, mode.from_tensor))
    for got, want in zip(fake, out, strict=True):
        assert (got.shape, got.dtype, got.stride()) == (want.shape, want.dtype, want.stride())


# ---------------------------------------------------------------------------------------------
# Zero-size batch


ZERO_BATCH = [(op, p) for op in LSTM_OPS for p in (False, True)] + [(op, False) for op in GRU_OPS]


ZERO_BATCH_IDS = [f"{op}-{'peep' if p else 'nopeep'}" for op, p in ZERO_BATCH]


@pytest.mark.parametrize(("op", "use_peephole"), ZERO_BATCH, ids=ZERO_BATCH_IDS)
def test_zero_batch(op, use_peephole):
    args = valid_args(op, use_peephole=use_peephole, batch=0)
    if op in GRU_OPS:
        args.pop("use_peephole", None)
    out = call(op, args)
    expected = {
        "BlockLSTM": [(T, 0, H)] * 7,
        "BlockLSTMV2": [(T, 0, H)] * 7,
        "LSTMBlockCell": [(0, H)] * 7,
        "BlockLSTMGrad": [(T, 0, I), (0, H), (0, H), (I + H, 4 * H), (H,), (H,), (H,), (4 * H,)],
        "LSTMBlockCellGrad": [(0, H), (0, 4 * H), (H,), (H,), (H,)],
        "GRUBlockCell": [(0, H)] * 4,
        "GRUBlockCellGrad": [(0, I), (0, H), (0, H), (0, 2 * H)],
    }
    expected["BlockLSTMGradV2"] = expected["BlockLSTMGrad"]
    assert [tuple(t.shape) for t in out] == expected[op]
    for t in out:
        assert torch.isfinite(t).all()
        if t.numel():  # weight/bias/peephole grads with no batch rows are exactly zero
            assert not t.any()


@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2", "LSTMBlockCell", "GRUBlockCell"])
def test_zero_batch_backward(op):
    args = valid_args(op, batch=0)
    if op in GRU_OPS:
        args.pop("use_peephole", None)
    leaves = [v for k, v in args.items() if isinstance(v, torch.Tensor) and k != "seq_len_max"]
    for t in leaves:
        t.requires_grad_()
    out = call(op, args)
    loss = out.h.sum() + (out.cs.sum() if hasattr(out, "cs") else 0)
    grads = torch.autograd.grad(loss, leaves)
    assert [g.shape for g in grads] == [t.shape for t in leaves]
    assert not any(g.any() for g in grads)
