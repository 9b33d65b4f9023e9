"""Every module on the GPU against the same module on the CPU (whose numbers the rest of the
suite ties to TF): training (forward, input and parameter gradients) and no-grad inference,
which take different ops (block_lstm_inference, cudnn_rnn_inference). Skipped, with the reason
printed, without a GPU or a CUDA build of the extension. TF32 is off for parity.
"""

import copy

import pytest
import torch

from tests.helpers import CUDA_OK, CUDA_SKIP
from torch_lstm_grad import keras_layers as K
from torch_lstm_grad import modules as M

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP),
    pytest.mark.usefixtures("no_tf32"),
]

T, B, I = 5, 3, 4  # noqa: E741
LENGTHS = [5, 2, 0]


def _seq(device):
    return torch.tensor(LENGTHS, device=device)


def _mask(device):
    return torch.arange(T, device=device)[None, :] < _seq(device)[:, None]


# name -> (module factory, input shape, call(module, x, device) -> output structure)
CASES = {
    "LSTMBlockCell": (lambda: M.LSTMBlockCell(6, I, use_peephole=True, cell_clip=0.5),
                      (B, I), lambda m, x, d: m(x)),
    "LSTMBlockCell-proj-variant": (
        lambda: M.LSTMBlockCell(6, I, num_proj=3, proj_clip=0.4, activation="relu"),
        (B, I), lambda m, x, d: m(x)),
    "LSTMBlockFusedCell": (lambda: M.LSTMBlockFusedCell(6, I, use_peephole=True, cell_clip=0.5),
                           (T, B, I), lambda m, x, d: m(x)),
    "LSTMBlockFusedCell-lengths": (lambda: M.LSTMBlockFusedCell(6, I), (T, B, I),
                                   lambda m, x, d: m(x, sequence_length=_seq(d))),
    "LSTMBlockFusedCell-proj-lengths": (
        lambda: M.LSTMBlockFusedCell(6, I, num_proj=3, proj_clip=0.4), (T, B, I),
        lambda m, x, d: m(x, sequence_length=_seq(d))),
    "LSTMBlockFusedCell-variant": (
        lambda: M.LSTMBlockFusedCell(6, I, gate_activation="hard_sigmoid_keras2",
                                     clip_gradient="zero", cell_clip=0.3),
        (T, B, I), lambda m, x, d: m(x)),
    "GRUBlockCell": (lambda: M.GRUBlockCell(5, I), (B, I), lambda m, x, d: m(x)),
    "GRUBlockFusedCell-lengths": (lambda: M.GRUBlockFusedCell(5, I), (T, B, I),
                                  lambda m, x, d: m(x, sequence_length=_seq(d))),
    "GRUBlockFusedCell-reset-before": (lambda: M.GRUBlockFusedCell(5, I, reset_after=False),
                                       (T, B, I), lambda m, x, d: m(x)),
    "CudnnLSTM-bidirectional-lengths": (
        lambda: M.CudnnLSTM(2, 6, I, direction="bidirectional"), (T, B, I),
        lambda m, x, d: m(x, sequence_lengths=torch.tensor(LENGTHS, dtype=torch.int32))),
    "CudnnLSTM-proj-batch-major": (lambda: M.CudnnLSTM(1, 6, I, num_proj=3), (B, T, I),
                                   lambda m, x, d: m(x, time_major=False)),
    "CudnnGRU": (lambda: M.CudnnGRU(2, 5, I), (T, B, I), lambda m, x, d: m(x)),
    "CudnnRNNTanh-skip-input": (lambda: M.CudnnRNNTanh(1, I, I, input_mode="skip_input"),
                                (T, B, I), lambda m, x, d: m(x)),
    "KerasLSTM-mask": (lambda: K.KerasLSTM(6, I, return_sequences=True, return_state=True),
                       (B, T, I), lambda m, x, d: m(x, mask=_mask(d))),
    "KerasGRU": (lambda: K.KerasGRU(5, I, return_sequences=True), (B, T, I),
                 lambda m, x, d: m(x)),
    "KerasGRU-reset-before-mask": (
        lambda: K.KerasGRU(5, I, reset_after=False, return_state=True), (B, T, I),
        lambda m, x, d: m(x, mask=_mask(d))),
    "KerasSimpleRNN": (lambda: K.KerasSimpleRNN(5, I, return_sequences=True), (B, T, I),
                       lambda m, x, d: m(x)),
    "KerasBidirectional": (
        lambda: K.KerasBidirectional(K.KerasLSTM(6, I, return_sequences=True),
                                     K.KerasLSTM(6, I, return_sequences=True, go_backwards=True)),
        (B, T, I), lambda m, x, d: m(x, mask=_mask(d))),
}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _tensors(o)]


def _run(name, device, dtype, train):
    make, shape, call = CASES[name]
    torch.manual_seed(0)
    module = make().to(dtype)
    x = torch.randn(shape, dtype=dtype)
    module = copy.deepcopy(module).to(device)
    x = x.to(device).requires_grad_(train)
    if not train:
        with torch.no_grad():
            return [t.cpu() for t in _tensors(call(module.eval(), x, device))]
    outs = _tensors(call(module.train(), x, device))
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=device).view_as(o)
               for o in outs]  # fmt: skip
    loss = sum((o * w).sum() for o, w in zip(outs, weights, strict=True))
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [x, *params], allow_unused=True)
    return [t.detach().cpu() for t in outs] + [g.cpu() for g in grads if g is not None]


@pytest.mark.parametrize("train", [True, False], ids=["train", "no_grad"])
@pytest.mark.parametrize("name", list(CASES))
def test_module_matches_cpu(name, train):
    cpu, gpu = (_run(name, d, torch.float32, train) for d in ("cpu", "cuda"))
    assert len(cpu) == len(gpu)
    for a, b in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(b, a, atol=5e-5, rtol=5e-5)


@pytest.mark.parametrize("name", ["LSTMBlockFusedCell-lengths", "CudnnLSTM-bidirectional-lengths",
                                  "KerasGRU", "GRUBlockFusedCell-lengths"])  # fmt: skip
def test_module_bfloat16_matches_cpu(name):
    cpu, gpu = (_run(name, d, torch.bfloat16, True) for d in ("cpu", "cuda"))
    for a, b in zip(cpu, gpu, strict=True):
        scale = max(1.0, float(a.float().abs().max()))
        torch.testing.assert_close(b.float(), a.float(), atol=3e-2 * scale, rtol=3e-2)
