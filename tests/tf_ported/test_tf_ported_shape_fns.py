"""TensorFlow's shape-function tests of these ops, ported to the fake kernels (FakeTensorMode: the
shapes torch.compile traces with; the eager ops return the same metadata,
tests/ops/integration/test_block_ops.py).

Sources: tensorflow/core/ops/rnn_ops_test.cc (GRUBlockCell, GRUBlockCellGrad, LSTMBlockCell,
LSTMBlockCellGrad, BlockLSTM, BlockLSTMGrad) and tensorflow/core/ops/cudnn_rnn_ops_test.cc
(CudnnRNNParamsSize, CudnnRNN, CudnnRNNV2, CudnnRNNV3 lstm and gru). TF's INFER_OK cases give
the output shapes from the input shapes; INFER_ERROR cases a rank error ("must be rank N"),
here a ValueError naming the argument. TF infers with unknown dimensions ("?"); the fake
kernels get concrete ones, so each case uses the sizes TF's own concrete cases use, and the
few of TF's rules ours does differently are said where they occur: H comes from cs_prev (TF's
BlockLSTM takes it from b, "[20] -> 5"), and the peephole ranks are checked only with
use_peephole (ignored otherwise: docs/differences.md, "Bad input raises").
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from torch_lstm_grad import raw_ops


def fake_call(op, **kw):
    mode = FakeTensorMode(shape_env=ShapeEnv())
    conv = {k: mode.from_tensor(v, static_shapes=True) if isinstance(v, torch.Tensor) else v
            for k, v in kw.items()}  # fmt: skip
    with mode:
        out = getattr(raw_ops, op)(**conv)
    return [tuple(t.shape) for t in out]


def e(*shape):
    return torch.empty(shape)


B, I, H, T = 3, 5, 4, 2  # noqa: E741


def gru_args(**over):
    a = dict(x=e(B, I), h_prev=e(B, H), w_ru=e(I + H, 2 * H), w_c=e(I + H, H), b_ru=e(2 * H),
             b_c=e(H))  # fmt: skip
    a.update(over)
    return a


def lstm_args(time_major=False, **over):
    a = dict(x=e(T, B, I) if time_major else e(B, I), cs_prev=e(B, H), h_prev=e(B, H),
             w=e(I + H, 4 * H), wci=e(H), wcf=e(H), wco=e(H), b=e(4 * H))  # fmt: skip
    if time_major:
        a["seq_len_max"] = torch.tensor(T)
    a.update(over)
    return a


ACTS = ("i", "cs", "f", "o", "ci", "co")


def test_gru_block_cell_shape_fn():
    assert fake_call("GRUBlockCell", **gru_args()) == [(B, H)] * 4
    for name, bad in (("x", e(I)), ("h_prev", e(H))):  # "[?];?;..." / "?;[?];..."
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("GRUBlockCell", **gru_args(**{name: bad}))


def test_gru_block_cell_grad_shape_fn():
    a = gru_args(r=e(B, H), u=e(B, H), c=e(B, H), d_h=e(B, H))
    # "in0;[d0_0,d1_1];[d0_0,d1_1];[d0_0,d2_1]": d_x is x's shape, d_r_bar_u_bar [B, 2H].
    assert fake_call("GRUBlockCellGrad", **a) == [(B, I), (B, H), (B, H), (B, 2 * H)]
    for name, bad in (("x", e(I)), ("h_prev", e(H)), ("w_ru", e(2 * H))):
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("GRUBlockCellGrad", **{**a, name: bad})


def test_lstm_block_cell_shape_fn():
    assert fake_call("LSTMBlockCell", **lstm_args()) == [(B, H)] * 7
    for name, bad in (("x", e(I)), ("cs_prev", e(H))):
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("LSTMBlockCell", **lstm_args(**{name: bad}))


def test_lstm_block_cell_grad_shape_fn():
    a = lstm_args(**{n: e(B, H) for n in ACTS}, cs_grad=e(B, H), h_grad=e(B, H),
                  use_peephole=True)  # fmt: skip
    # "[d0_0,d1_1];[d0_0,16];[d1_1];[d1_1];[d1_1]" for cs_prev [3, 4]: dicfo [B, 4H].
    assert fake_call("LSTMBlockCellGrad", **a) == [(B, H), (B, 4 * H), (H,), (H,), (H,)]
    for name, bad in (("x", e(I)), ("cs_prev", e(H))):
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("LSTMBlockCellGrad", **{**a, name: bad})


def test_block_lstm_shape_fn():
    assert fake_call("BlockLSTM", **lstm_args(True)) == [(T, B, H)] * 7
    with pytest.raises(ValueError, match=r"^x: expected a 3-D tensor"):  # "must be rank 3"
        fake_call("BlockLSTM", **lstm_args(True, x=e(I)))
    with pytest.raises(ValueError, match=r"^b: "):  # "must be rank 1"
        fake_call("BlockLSTM", **lstm_args(True, b=e(4 * H, 1)))
    # "must be evenly divisible": b of 11 entries cannot be 4H.
    with pytest.raises(ValueError, match=r"^b: expected shape \[4 \* H\] = \[16\], got \[11\]"):
        fake_call("BlockLSTM", **lstm_args(True, b=e(11)))


def test_block_lstm_grad_shape_fn():
    a = lstm_args(True, **{n: e(T, B, H) for n in ACTS}, h=e(T, B, H), cs_grad=e(T, B, H),
                  h_grad=e(T, B, H), use_peephole=True)  # fmt: skip
    # "in1;in2;...;in8": each gradient has its input's shape.
    assert fake_call("BlockLSTMGrad", **a) == [(T, B, I), (B, H), (B, H), (I + H, 4 * H), (H,),
                                               (H,), (H,), (4 * H,)]  # fmt: skip
    for name, bad in (("x", e(I)), ("cs_prev", e(1)), ("h_prev", e(1)), ("w", e(1)),
                      ("wci", e(1, H)), ("wcf", e(1, H)), ("wco", e(1, H)), ("b", e(1, 4 * H))):
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("BlockLSTMGrad", **{**a, name: bad})


# ---------------------------------------------------------------------------------------------
# cudnn_rnn_ops_test.cc: seq_length 2, batch 3, num_units 4, num_layers 5, unidirectional,
# input_mode auto_select (input size = num_units: skip_input).

L = 5


def cudnn_args(mode="lstm", **over):
    size = int(raw_ops.CudnnRNNParamsSize(num_layers=L, num_units=4, input_size=4, T=torch.float32,
                                          S=torch.int64, rnn_mode=mode,
                                          input_mode="auto_select")[0])  # fmt: skip
    a = dict(input=e(2, 3, 4), input_h=e(L, 3, 4), input_c=e(L, 3, 4), params=e(size),
             rnn_mode=mode, input_mode="auto_select")  # fmt: skip
    a.update(over)
    return a


def test_params_size_shape_fn():
    sizes = dict(num_layers=torch.tensor(L), num_units=torch.tensor(4), input_size=torch.tensor(4))
    out = raw_ops.CudnnRNNParamsSize(**sizes, T=torch.float32, S=torch.int32)
    assert tuple(out.shape) == (1,)  # "[1]"
    for arg in ("num_layers", "num_units", "input_size"):  # "Shape must be rank 0"
        kw = dict(num_layers=L, num_units=4, input_size=4)
        kw[arg] = torch.tensor([kw[arg]])
        with pytest.raises(ValueError, match=rf"^{arg}: expected a scalar"):
            raw_ops.CudnnRNNParamsSize(**kw, T=torch.float32, S=torch.int32)


@pytest.mark.parametrize("op", ["CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"])
def test_forward_lstm_shape_fn(op):
    extra = {"sequence_lengths": torch.tensor([2, 2, 2], dtype=torch.int32)} if op == "CudnnRNNV3" \
        else {}  # fmt: skip
    shapes = fake_call(op, **cudnn_args(), **extra)
    # "[d0_0,d0_1,d1_2];in1;in1 (in2 for V3);?[;?]": output [T, B, num_units], states.
    assert shapes[:3] == [(2, 3, 4), (L, 3, 4), (L, 3, 4)]
    assert len(shapes) == (4 if op == "CudnnRNN" else 5)
    bad = [("input", e()), ("input_h", e()), ("params", e())]
    if op == "CudnnRNNV3":
        bad += [("input_c", e()), ("sequence_lengths", torch.tensor(3, dtype=torch.int32))]
    for name, t in bad:
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call(op, **{**cudnn_args(), **extra, name: t})


def test_forward_v3_gru_shape_fn():
    seq = torch.tensor([2, 2, 2], dtype=torch.int32)
    shapes = fake_call("CudnnRNNV3", **cudnn_args("gru", input_c=e()), sequence_lengths=seq)
    # "[d0_0,d0_1,d1_2];in1;[];?;?": output_c is a scalar for GRU.
    assert shapes[:3] == [(2, 3, 4), (L, 3, 4), ()]
    for name, t in (("input", e()), ("input_h", e()), ("params", e()),
                    ("sequence_lengths", torch.tensor(3, dtype=torch.int32))):
        with pytest.raises(ValueError, match=rf"^{name}: "):
            fake_call("CudnnRNNV3", **{**cudnn_args("gru", input_c=e()), "sequence_lengths": seq,
                                       name: t})  # fmt: skip
