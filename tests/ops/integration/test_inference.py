"""torch.library.opcheck on the inference ops (block_lstm_inference, pack_recurrent_weight,
cudnn_rnn_inference, keras_gru_inference), their fake kernels' metadata against the kernels',
and torch.compile of the modules' no-grad forward."""

import torch

import torch_lstm_grad  # noqa: F401  (registers the ops)
from tests.helpers import (
    assert_same_outputs,
    inference_block_args,
    inference_cudnn_args,
    inference_fused_cell,
    keras_gru_inputs,
    tree_leaves,
)

ops = torch.ops.torch_lstm_grad


# ---------------------------------------------------------------------------------------------
# Registration: opcheck, fake kernels, autograd


def test_opcheck():
    for kw in ({}, {"packed": True}, {"lengths": True, "dtype": torch.float64},
               {"proj": True, "lengths": True}):  # fmt: skip
        torch.library.opcheck(ops.block_lstm_inference.default, inference_block_args(**kw))
    # With an input that requires grad: the autograd registration is there (its backward
    # raises, test_inference_ops_have_no_gradient, so the AOT backward is not run).
    torch.library.opcheck(ops.block_lstm_inference.default, inference_block_args(requires=True),
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor"))  # fmt: skip


def test_opcheck_pack():
    for w, g in ((torch.randn(7, 40), 4), (torch.randn(48, 5, dtype=torch.float64).t(), 3),
                 (torch.randn(3, 16), 1)):  # fmt: skip
        torch.library.opcheck(ops.pack_recurrent_weight.default, (w, g))


def test_opcheck_cudnn_rnn_inference():
    for kw in ({}, {"packed": True, "lengths": True}, {"mode": "gru", "time_major": False},
               {"packed": True, "direction": "unidirectional"}):  # fmt: skip
        torch.library.opcheck(ops.cudnn_rnn_inference.default, inference_cudnn_args(**kw))


def test_opcheck_keras_gru_inference():
    for reset_after, use_bias, dtype, slm in ((True, True, torch.float32, 4),
                                              (False, False, torch.float64, 2)):  # fmt: skip
        inp = keras_gru_inputs(4, dtype, reset_after, use_bias)
        args = (torch.tensor(slm), *inp, reset_after, "hard_sigmoid_keras3", "relu")
        torch.library.opcheck(ops.keras_gru_inference.default, args)


def test_fake_metadata_equals_kernels():
    from torch._subclasses.fake_tensor import FakeTensorMode

    cases = [(ops.block_lstm_inference.default, inference_block_args(proj=True, lengths=True)),
             (ops.cudnn_rnn_inference.default, inference_cudnn_args(packed=True, time_major=False)),
             (ops.pack_recurrent_weight.default, (torch.randn(8, 72), 4)),
             (ops.keras_gru_inference.default,
              (torch.tensor(3), *keras_gru_inputs(4, torch.float32, True), True, "sigmoid",
               "tanh"))]  # fmt: skip
    for op, args in cases:
        real = tree_leaves(op(*args))
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else
                         ([mode.from_tensor(t) for t in a] if isinstance(a, list) else a)
                         for a in args]  # fmt: skip
            fake = tree_leaves(op(*fake_args))
        for r, f in zip(real, fake, strict=True):
            assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())


def test_compile_inference_module():
    torch._dynamo.reset()
    m = inference_fused_cell(24, 4, use_peephole=True)
    x = torch.randn(6, 2, 4)
    with torch.no_grad():
        want = m(x)
        got = torch.compile(m, backend="aot_eager", fullgraph=True)(x)
    assert_same_outputs(got, want)
