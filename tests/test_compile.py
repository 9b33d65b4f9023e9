"""torch.compile (backend="aot_eager", fullgraph=True) through the raw ops, forward and backward.

aot_eager needs no Inductor codegen; it proves that the fake kernels and the registered autograd
compose with Dynamo/AOTAutograd without graph breaks (fullgraph=True turns a break into an
error) and that the compiled results equal eager ones.
"""

import pytest
import torch

from torch_lstm_grad import raw_ops

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
