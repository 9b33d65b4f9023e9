"""torch.library.opcheck on every block op, fake/meta metadata against the real kernels, and
torch.compile through the raw ops; that every registered op has an opcheck somewhere.

opcheck runs its default test_utils (test_schema, test_autograd_registration, test_faketensor,
test_aot_dispatch_dynamic) on a list of samples per op: float32 and float64, peephole on and off,
seq_len_max below T, requires_grad on some inputs of the forward ops (none on the Grad ops).
torch.library.opcheck does not import `expecttest` (this file passes without it installed).
"""

import ast
import pathlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import torch_lstm_grad  # noqa: F401  (registers the ops)
from tests.helpers import TESTS_DIR
from torch_lstm_grad import raw_ops

ops = torch.ops.torch_lstm_grad

OP_NAMES = [
    "lstm_block_cell",
    "lstm_block_cell_grad",
    "_lstm_block_cell_backward",
    "block_lstm",
    "block_lstm_v2",
    "block_lstm_grad",
    "block_lstm_grad_v2",
    "gru_block_cell",
    "gru_block_cell_grad",
    "_gru_block_cell_backward",
]

# Output masks of _gru_block_cell_backward's samples: all, no d_x (a first layer), weights only.
GRU_BACKWARD_MASKS = ([True] * 6, [False] + [True] * 5, [False, False, True, True, True, True])
# and of _lstm_block_cell_backward's: all, no x (a first layer), x alone, state and peepholes,
# w and b (its configs cycle through them).
LSTM_BACKWARD_MASKS = ([True] * 8, [False] + [True] * 7, [True] + [False] * 7,
                       [False, True, True, False, True, True, True, False],
                       [False] * 3 + [True] + [False] * 3 + [True])  # fmt: skip

LSTM_NAMES = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def _lstm(dtype, T, B, n_in, H, time_major, requires=(), empty_peepholes=False):
    shapes = {
        "x": (T, B, n_in) if time_major else (B, n_in),
        "cs_prev": (B, H),
        "h_prev": (B, H),
        "w": (n_in + H, 4 * H),
        "wci": (0,) if empty_peepholes else (H,),
        "wcf": (0,) if empty_peepholes else (H,),
        "wco": (0,) if empty_peepholes else (H,),
        "b": (4 * H,),
    }
    out = []
    for name, shape in shapes.items():
        t = torch.randn(shape, dtype=dtype) * (0.5 if name == "w" else 1.0)
        out.append(t.requires_grad_(name in requires))
    return out


def _gru(dtype, B, n_in, H, requires=()):
    shapes = {
        "x": (B, n_in),
        "h_prev": (B, H),
        "w_ru": (n_in + H, 2 * H),
        "w_c": (n_in + H, H),
        "b_ru": (2 * H,),
        "b_c": (H,),
    }
    names = list(shapes)
    return [
        (0.5 * torch.randn(s, dtype=dtype)).requires_grad_(n in requires)
        for n, s in zip(names, shapes.values(), strict=True)
    ]


# (dtype, use_peephole, seq_len_max or None for T, requires_grad subset, empty peepholes, sizes)
CONFIGS = [
    (torch.float32, False, None, (), False, (3, 2, 3, 4)),
    (torch.float64, True, None, LSTM_NAMES, False, (4, 2, 3, 4)),
    (torch.float64, False, 2, ("x", "w", "b"), False, (4, 2, 3, 4)),
    (torch.float32, True, 1, ("cs_prev", "h_prev", "wci", "wcf", "wco"), False, (3, 3, 2, 5)),
    (torch.float32, False, 2, LSTM_NAMES, True, (3, 2, 3, 4)),  # unused peepholes of shape [0]
    (torch.float64, True, 0, ("x", "cs_prev", "w"), False, (3, 2, 3, 4)),  # no step runs
]


def sample_inputs(op_name):
    """A list of (args, kwargs) for `op_name`; args match the op schema positionally."""
    samples = []
    for dtype, peep, slm, requires, empty_peep, (T, B, n_in, H) in CONFIGS:
        L = torch.tensor(T if slm is None else slm)
        if op_name in ("block_lstm", "block_lstm_v2"):
            args = _lstm(dtype, T, B, n_in, H, True, requires, empty_peep)
            attrs = (1.0, 2.0, peep) if op_name == "block_lstm" else (2.0, peep)
            samples.append(((L, *args, *attrs), {}))
        elif op_name in ("block_lstm_grad", "block_lstm_grad_v2"):
            args = _lstm(dtype, T, B, n_in, H, True, (), empty_peep)
            if op_name == "block_lstm_grad":
                act = ops.block_lstm(L, *args, 1.0, 2.0, peep)
            else:
                act = ops.block_lstm_v2(L, *args, 2.0, peep)
            grads = [torch.randn(T, B, H, dtype=dtype) for _ in range(2)]
            samples.append(((L, *args, *act, *grads, peep), {}))
        elif op_name == "lstm_block_cell":
            args = _lstm(dtype, T, B, n_in, H, False, requires, empty_peep)
            samples.append(((*args, 1.0, 2.0, peep), {}))
        elif op_name in ("lstm_block_cell_grad", "_lstm_block_cell_backward"):
            args = _lstm(dtype, T, B, n_in, H, False, (), empty_peep)
            act = ops.lstm_block_cell(*args, 1.0, 2.0, peep)[:6]
            grads = [torch.randn(B, H, dtype=dtype) for _ in range(2)]
            mask = (LSTM_BACKWARD_MASKS[len(samples) % len(LSTM_BACKWARD_MASKS)],)
            tail = mask if op_name == "_lstm_block_cell_backward" else ()
            samples.append(((*args, *act, *grads, peep, *tail), {}))
    if "gru_block_cell" in op_name:
        gru_cfgs = [
            (torch.float32, 2, 3, 4, ()),
            (torch.float64, 2, 3, 4, ("x", "h_prev", "w_ru", "w_c", "b_ru", "b_c")),
            (torch.float64, 3, 2, 5, ("w_ru", "b_c")),
        ]
        for k, (dtype, B, n_in, H, requires) in enumerate(gru_cfgs):
            if op_name == "gru_block_cell":
                samples.append((tuple(_gru(dtype, B, n_in, H, requires)), {}))
            else:
                args = _gru(dtype, B, n_in, H)
                r, u, c, _h = ops.gru_block_cell(*args)
                args = (*args, r, u, c, torch.randn(B, H, dtype=dtype))
                if op_name == "_gru_block_cell_backward":
                    args = (*args, GRU_BACKWARD_MASKS[k])
                samples.append((args, {}))
    for args, _ in samples:
        if op_name.endswith(("_grad", "_grad_v2", "_backward")):
            assert not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
    return samples


# Where every registered op is exercised: the block ops by this file's test_opcheck (parametrized
# over OP_NAMES); the others by the named test, whose body must call `ops.<name>`.
OTHER_OP_TESTS = {
    "cudnn_rnn": ("ops/integration/test_cudnn_rnn.py", "test_opcheck_cudnn_rnn"),
    "cudnn_rnn_backprop": ("ops/integration/test_cudnn_rnn.py", "test_opcheck_cudnn_rnn_backprop"),
    "_cudnn_rnn_backprop_consuming": (
        "ops/integration/test_cudnn_rnn.py", "test_opcheck_cudnn_rnn_backprop"
    ),
    "_cudnn_rnn_params_layout": ("ops/test_raw_ops_cudnn_rnn.py", "test_params_layout_op"),
    "_built_with_cuda": ("ops/test_raw_ops_cudnn_rnn.py", "test_built_with_cuda_op"),
    "_cpu_isa": ("tools/test_doctor.py", "test_cpu_isa_op"),
    "block_lstm_ex": ("ops/integration/test_lstm_variants.py", "test_opcheck"),
    "block_lstm_ex_grad": ("ops/integration/test_lstm_variants.py", "test_opcheck"),
    "keras_gru": ("ops/integration/test_gru_variants.py", "test_opcheck"),
    "keras_gru_grad": ("ops/integration/test_gru_variants.py", "test_opcheck"),
    "block_lstm_inference": ("ops/integration/test_inference.py", "test_opcheck"),
    "pack_recurrent_weight": ("ops/integration/test_inference.py", "test_opcheck_pack"),
    "cudnn_rnn_inference": (
        "ops/integration/test_inference.py", "test_opcheck_cudnn_rnn_inference"
    ),
    "keras_gru_inference": (
        "ops/integration/test_inference.py", "test_opcheck_keras_gru_inference"
    ),
}


def _registered_ops() -> set[str]:
    # From the dispatcher: `dir(ops)` lists only the ops already looked up.
    prefix = "torch_lstm_grad::"
    return {n[len(prefix) :] for n in torch._C._dispatch_get_all_op_names() if n.startswith(prefix)}


def test_every_registered_op_is_covered():
    """Every op in the library (public and private) is exercised by some test."""
    registered = _registered_ops()
    assert {"cudnn_rnn", "cudnn_rnn_backprop", "_cudnn_rnn_params_layout"} <= registered
    assert set(OP_NAMES).isdisjoint(OTHER_OP_TESTS)
    assert registered == set(OP_NAMES) | set(OTHER_OP_TESTS)
    here = pathlib.Path(TESTS_DIR)
    for op, (file, test) in OTHER_OP_TESTS.items():
        source = (here / file).read_text()
        funcs = {f.name: f for f in ast.walk(ast.parse(source)) if isinstance(f, ast.FunctionDef)}
        assert test in funcs, f"{op}: {file}::{test} does not exist"
        body = ast.get_source_segment(source, funcs[test])
        assert f"ops.{op}" in body, f"{op}: {file}::{test} does not call ops.{op}"


def _to_device(a, device):
    if not isinstance(a, torch.Tensor) or device == "cpu":
        return a
    return a.detach().to(device).requires_grad_(a.requires_grad)


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_opcheck(op_name, device):
    op = getattr(ops, op_name).default
    samples = sample_inputs(op_name)
    assert len(samples) >= 3
    for args, kwargs in samples:
        args = tuple(_to_device(a, device) for a in args)
        result = torch.library.opcheck(op, args, kwargs)
        assert set(result.values()) == {"SUCCESS"}, result


def test_forward_samples_include_requires_grad():
    """The forward samples exercise test_autograd_registration / aot backward for real."""
    for op_name in ("block_lstm", "block_lstm_v2", "lstm_block_cell", "gru_block_cell"):
        assert any(
            any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
            for args, _ in sample_inputs(op_name)
        )


# ---------------------------------------------------------------------------------------------
# Fake / meta metadata equals the real CPU kernels' (shape, dtype, strides)


def _metadata_samples(op_name, dtype):
    """Shapes that stress the metadata: normal, B = 0, T = 0, non-contiguous inputs."""
    samples = []
    for T, B, n_in, H, noncontig in [(3, 2, 3, 4, False), (3, 0, 2, 4, False), (0, 2, 3, 5, False),
                                  (3, 2, 3, 4, True)]:  # fmt: skip
        if "gru_block_cell" in op_name:
            args = _gru(dtype, B, n_in, H)
            if op_name != "gru_block_cell":
                r, u, c, _ = ops.gru_block_cell(*args)
                args = [*args, r, u, c, torch.randn(B, H, dtype=dtype)]
            if op_name == "_gru_block_cell_backward":
                args.append(GRU_BACKWARD_MASKS[1 if noncontig else 0])
        elif op_name in ("lstm_block_cell", "lstm_block_cell_grad", "_lstm_block_cell_backward"):
            args = _lstm(dtype, T, B, n_in, H, False)
            if op_name != "lstm_block_cell":
                act = ops.lstm_block_cell(*args, 1.0, 2.0, True)[:6]
                args = [*args, *act, torch.randn(B, H, dtype=dtype), torch.randn(B, H, dtype=dtype)]
                args.append(True)
            else:
                args.extend([1.0, 2.0, True])
            if op_name == "_lstm_block_cell_backward":
                args.append(LSTM_BACKWARD_MASKS[1 if noncontig else 0])
        else:
            L = torch.tensor(max(T - 1, 0))
            args = [L, *_lstm(dtype, T, B, n_in, H, True)]
            v1 = op_name in ("block_lstm", "block_lstm_grad")
            fwd = (1.0, 2.0, True) if v1 else (2.0, True)
            fwd_op = ops.block_lstm if v1 else ops.block_lstm_v2
            if op_name.endswith("grad") or op_name.endswith("grad_v2"):
                act = fwd_op(*args, *fwd)
                grads = [torch.randn(T, B, H, dtype=dtype) for _ in range(2)]
                args = [*args, *act, *grads, True]
            else:
                args = [*args, *fwd]
        if noncontig:
            args = [_noncontiguous(a) if isinstance(a, torch.Tensor) and a.dim() > 0 else a
                    for a in args]  # fmt: skip
        samples.append(args)
    return samples


def _noncontiguous(t):
    """The same values in a non-contiguous layout."""
    if t.dim() == 1:
        return torch.stack([t, t], dim=1)[:, 0]
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def _meta(args, convert):
    return [convert(a) if isinstance(a, torch.Tensor) else a for a in args]


def _assert_same_metadata(fake_out, real_out, device):
    assert len(fake_out) == len(real_out)
    for k, (f, r) in enumerate(zip(fake_out, real_out, strict=True)):
        if r is None:  # an output its mask did not ask for
            assert f is None, k
            continue
        assert f.shape == r.shape, (k, f.shape, r.shape)
        assert f.dtype == r.dtype, (k, f.dtype, r.dtype)
        assert f.stride() == r.stride(), (k, f.stride(), r.stride())
        assert f.device.type == device, (k, f.device)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("op_name", OP_NAMES)
def test_fake_tensor_metadata_matches_cpu(op_name, dtype):
    op = getattr(ops, op_name).default
    for args in _metadata_samples(op_name, dtype):
        real = op(*args)
        mode = FakeTensorMode()
        fake_args = _meta(args, mode.from_tensor)
        with mode:
            fake = op(*fake_args)
        _assert_same_metadata(fake, real, "cpu")


@pytest.mark.parametrize("op_name", OP_NAMES)
def test_meta_device_metadata_matches_cpu(op_name):
    op = getattr(ops, op_name).default
    for args in _metadata_samples(op_name, torch.float32):
        real = op(*args)
        meta = op(*_meta(args, lambda t: t.to("meta")))
        _assert_same_metadata(meta, real, "meta")


# ---------------------------------------------------------------------------------------------
# torch.compile (backend="aot_eager", fullgraph=True) through the raw ops, forward and backward.
# aot_eager needs no Inductor codegen; it proves that the fake kernels and the registered
# autograd compose with Dynamo/AOTAutograd without graph breaks (fullgraph=True turns a break
# into an error) and that the compiled results equal eager ones.

T, B, I, H = 4, 2, 3, 4  # noqa: E741
DT = torch.float32


def lstm_inputs(time_major=True, batch=B):
    shapes = [
        (T, batch, I) if time_major else (batch, I),
        (batch, H),
        (batch, H),
        (I + H, 4 * H),
        (H,),
        (H,),
        (H,),
        (4 * H,),
    ]
    return [(0.5 * torch.randn(s, dtype=DT)).requires_grad_() for s in shapes]


def gru_inputs(batch=B):
    shapes = [(batch, I), (batch, H), (I + H, 2 * H), (I + H, H), (2 * H,), (H,)]
    return [(0.5 * torch.randn(s, dtype=DT)).requires_grad_() for s in shapes]


# Each function also combines an output with h_prev inside the compiled region, so the traced
# (fake) output shapes must be right for the graph to trace at all.


def block_lstm(seq_len_max, x, cs_prev, h_prev, *args):
    out = raw_ops.BlockLSTM(seq_len_max, x, cs_prev, h_prev, *args, forget_bias=1.0,
                            cell_clip=1.0, use_peephole=True)  # fmt: skip
    return out.cs, out.h, out.h * h_prev


def block_lstm_v2(seq_len_max, x, cs_prev, h_prev, *args):
    out = raw_ops.BlockLSTMV2(seq_len_max, x, cs_prev, h_prev, *args, cell_clip=0.0,
                              use_peephole=True)  # fmt: skip
    return out.cs, out.h, out.h * h_prev


def lstm_block_cell(x, cs_prev, h_prev, *args):
    out = raw_ops.LSTMBlockCell(x, cs_prev, h_prev, *args, forget_bias=1.0, cell_clip=3.0,
                                use_peephole=False)  # fmt: skip
    return out.cs, out.h, out.h * h_prev


def gru_block_cell(x, h_prev, *args):
    h = raw_ops.GRUBlockCell(x, h_prev, *args).h
    return h, h * h_prev


def _fwd_bwd(f, args, leaves, seed=1):
    outs = f(*args)
    gen = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() for o in outs)
    grads = torch.autograd.grad(loss, leaves)
    return [o.detach() for o in outs], list(grads)


CASES = {
    "BlockLSTM": (block_lstm, True, True),  # (function, time-major inputs, takes seq_len_max)
    "BlockLSTMV2": (block_lstm_v2, True, True),
    "LSTMBlockCell": (lstm_block_cell, False, False),
    "GRUBlockCell": (gru_block_cell, None, False),
}


def _args(name, batch=B, seq_len_max=T - 1):
    f, time_major, takes_len = CASES[name]
    leaves = gru_inputs(batch) if time_major is None else lstm_inputs(time_major, batch)
    args = [torch.tensor(seq_len_max), *leaves] if takes_len else list(leaves)
    return f, args, leaves


@pytest.mark.parametrize("name", list(CASES))
def test_compile_aot_eager_fullgraph_matches_eager(name):
    torch._dynamo.reset()
    f, args, leaves = _args(name)
    eager_out, eager_grads = _fwd_bwd(f, args, leaves)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out, grads = _fwd_bwd(compiled, args, leaves)
    for got, want in zip(out + grads, eager_out + eager_grads, strict=True):
        torch.testing.assert_close(got, want)
    # The gradients are not trivially zero (the comparison means something).
    assert all(g.abs().sum() > 0 for g in eager_grads[:4])


def test_compile_dynamic_shapes_block_lstm():
    """dynamic=True: new batch sizes and sequence lengths reuse one graph and match eager."""
    torch._dynamo.reset()
    from torch._dynamo.backends.registry import lookup_backend

    aot_eager = lookup_backend("aot_eager")
    n_graphs = 0

    def counting_backend(gm, example_inputs):
        nonlocal n_graphs
        n_graphs += 1
        return aot_eager(gm, example_inputs)

    compiled = torch.compile(block_lstm, backend=counting_backend, fullgraph=True, dynamic=True)
    for batch, seq_len_max in [(2, T), (3, 2), (5, 1)]:
        f, args, leaves = _args("BlockLSTM", batch, seq_len_max)
        eager_out, eager_grads = _fwd_bwd(f, args, leaves)
        out, grads = _fwd_bwd(compiled, args, leaves)
        assert out[1].shape == (T, batch, H)
        for got, want in zip(out + grads, eager_out + eager_grads, strict=True):
            torch.testing.assert_close(got, want)
    assert n_graphs == 1
