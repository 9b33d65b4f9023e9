"""torch.library.opcheck and torch.compile (backend="aot_eager", fullgraph=True) on keras_gru and
its gradient op, Keras' GRU over a sequence with its activation variants."""

import torch

from tests.helpers import keras_gru_inputs as _inputs
from torch_lstm_grad import ops


def test_opcheck():
    ops = torch.ops.torch_lstm_grad  # (the name test_block_ops.py's coverage check looks for)
    for reset_after, use_bias, dtype in (
        (True, True, torch.float32),
        (False, False, torch.float64),
    ):
        inp = _inputs(4, dtype, reset_after, use_bias)
        inp[0].requires_grad_()
        inp[3].requires_grad_()
        fwd = (torch.tensor(3), *inp, reset_after, "hard_sigmoid_keras2", "relu")
        torch.library.opcheck(ops.keras_gru.default, fwd)
        out = ops.keras_gru(*fwd)
        plain = [t.detach() if t is not None else None for t in inp]
        grad_args = (
            torch.tensor(3),
            *plain,
            *(o.detach() for o in out),
            torch.randn_like(out[4]),
            reset_after,
            "hard_sigmoid_keras2",
            "relu",
        )
        torch.library.opcheck(ops.keras_gru_grad.default, grad_args)


def test_compile_aot_eager_fullgraph():
    torch._dynamo.reset()
    leaves = [t.requires_grad_() for t in _inputs(4, torch.float32, True)]

    def f(x, h_prev, kernel, rkernel, bias):
        h = ops.keras_gru(
            x,
            h_prev,
            kernel,
            rkernel,
            bias,
            seq_len_max=3,
            gate_activation="hard_sigmoid_keras3",
            activation="relu",
        ).h
        return h * h_prev

    def fwd_bwd(fn):
        out = fn(*leaves)
        return [out.detach(), *torch.autograd.grad((out * out).sum(), leaves)]

    want = fwd_bwd(f)
    got = fwd_bwd(torch.compile(f, backend="aot_eager", fullgraph=True))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
