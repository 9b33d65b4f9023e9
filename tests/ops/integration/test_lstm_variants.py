"""torch.library.opcheck and torch.compile (backend="aot_eager", fullgraph=True) on block_lstm_ex
and its gradient op, the LSTM activation / clip-gradient variants with TF1 LSTMCell's
projection."""

import torch

from tests.helpers import EX_NAMES as NAMES
from tests.helpers import block_lstm_ex_inputs as _inputs
from torch_lstm_grad import ops


def test_opcheck():
    ops = torch.ops.torch_lstm_grad  # (the name test_block_ops.py's coverage check looks for)
    for proj, peep, dtype in ((False, True, torch.float32), (True, False, torch.float64)):
        inp = _inputs(4, dtype, proj)
        args = [inp[k] for k in NAMES]
        for k in (1, 3, 8):
            if args[k] is not None:
                args[k] = args[k].clone().requires_grad_()
        attrs = (1.0, 0.8, 0.4, peep, "icfo", "hard_sigmoid_keras2", "relu", "zero")
        fwd = (torch.tensor(3), *args, *attrs)
        torch.library.opcheck(ops.block_lstm_ex.default, fwd)
        out = ops.block_lstm_ex(*fwd)
        plain = [a.detach() if a is not None else None for a in args]
        grad_args = (
            torch.tensor(3),
            *plain,
            *(o.detach() for o in out),
            torch.randn_like(out[1]),
            torch.randn_like(out[6]),
            0.8,
            0.4,
            peep,
            "icfo",
            "hard_sigmoid_keras2",
            "relu",
            "zero",
        )
        torch.library.opcheck(ops.block_lstm_ex_grad.default, grad_args)


def test_compile_aot_eager_fullgraph():
    torch._dynamo.reset()
    inp = _inputs(4, torch.float32, True)
    leaves = [inp[k].clone().requires_grad_() for k in NAMES]

    def f(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj):
        out = ops.block_lstm_ex(
            x,
            cs_prev,
            h_prev,
            w,
            b,
            seq_len_max=3,
            wci=wci,
            wcf=wcf,
            wco=wco,
            w_proj=w_proj,
            cell_clip=0.8,
            proj_clip=0.4,
            use_peephole=True,
            gate_activation="hard_sigmoid_keras3",
            activation="relu",
            clip_gradient="zero",
        )
        return out.cs, out.h * 2

    def fwd_bwd(fn):
        outs = fn(*leaves)
        loss = sum((o * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in outs)
        return [o.detach() for o in outs] + list(torch.autograd.grad(loss, leaves))

    want = fwd_bwd(f)
    got = fwd_bwd(torch.compile(f, backend="aot_eager", fullgraph=True))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
