"""The GPU at the sizes and settings users run and the other CUDA tests do not: projections
and bidirectional stacks with lengths at real hidden sizes, long sequences, large batches,
dropout's gradient, TF32 on, torch.compile, and CUDA-graph capture of the modules. Each is
checked against the CPU kernels or, for dropout, against central differences of the GPU's own
float64 forward under the same masks. Skipped without a GPU or a CUDA build of the extension."""

import importlib.util

import pytest
import torch

from tests.helpers import CUDA_OK, CUDA_SKIP
from tests.ops.test_cuda import _compare_low, _cudnn_args, _grads, _to
from torch_lstm_grad import keras_layers as K
from torch_lstm_grad import modules as M
from torch_lstm_grad import ops
from torch_lstm_grad import raw_ops as R

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP)]


def _cudnn_both(args, n_diff, **kw):
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(args, device)
        out = R.CudnnRNNV3(*ins, **kw)
        results.append(list(out[:n_diff]) + list(_grads(out, ins, n_diff)))
    return results


@pytest.mark.usefixtures("no_tf32")
def test_cudnn_rnn_v3_projection_at_a_real_size():
    torch.manual_seed(0)
    args = _cudnn_args("lstm", 2, 1, [50] * 32, T=50, I=256, H=512, P=128, dtype=torch.float32)
    cpu, gpu = _cudnn_both(args, 3, num_proj=128)
    _compare_low(cpu, gpu, 1e-4)


@pytest.mark.usefixtures("no_tf32")
def test_cudnn_rnn_v3_bidirectional_stack_with_lengths_at_a_real_size():
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 61, (32,), generator=g).tolist()
    lengths[5] = 0
    torch.manual_seed(1)
    args = _cudnn_args("lstm", 2, 2, lengths, T=60, I=128, H=256, dtype=torch.float32)
    cpu, gpu = _cudnn_both(args, 3, direction="bidirectional")
    _compare_low(cpu, gpu, 1e-4)


def _block(T, B, I, H, seed=2):  # noqa: E741
    torch.manual_seed(seed)
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    return [g(T, B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H), g(H), g(4 * H)]


def _block_lstm_both(args, **kw):
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(args, device)
        out = R.BlockLSTM(args[0].shape[0], *ins, **kw)
        results.append(list(out) + list(_grads((out.cs, out.h), ins, 2)))
    return results


@pytest.mark.usefixtures("no_tf32")
def test_block_lstm_ex_projection_at_a_real_size():
    T, B, I, H, P = 40, 16, 256, 512, 256  # noqa: E741
    torch.manual_seed(3)
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    args = [g(T, B, I), g(B, H), g(B, P), g(I + P, 4 * H), g(4 * H), g(H, P)]
    results = []
    for device in ("cpu", "cuda"):
        x, cs, h, w, b, w_proj = _to(args, device)
        out = ops.block_lstm_ex(x, cs, h, w, b, w_proj=w_proj, proj_clip=0.8, cell_clip=2.0)
        results.append(list(out) + list(_grads((out.cs, out.h), [x, cs, h, w, b, w_proj], 2)))
    _compare_low(*results, 1e-4)


@pytest.mark.usefixtures("no_tf32")
@pytest.mark.parametrize("T,B,H", [(10_000, 2, 32), (20, 512, 128)], ids=["T10000", "B512"])
def test_block_lstm_long_sequence_and_large_batch(T, B, H):
    _compare_low(*_block_lstm_both(_block(T, B, H, H), use_peephole=True, cell_clip=1.0), 1e-4)


def test_tf32_on_stays_near_float32():
    """TF32 products (10-bit mantissas) where torch allows them: the ops run, and stay within
    TF32's rounding of the CPU's float32 results."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        _compare_low(*_block_lstm_both(_block(20, 16, 128, 256)), 2e-2)
        torch.manual_seed(4)
        args = _cudnn_args("lstm", 2, 1, [20] * 16, T=20, I=128, H=256, dtype=torch.float32)
        _compare_low(*_cudnn_both(args, 3), 2e-2)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def test_dropout_gradient_matches_central_differences():
    """Dropout between layers (training): the input's gradient is the derivative of the forward
    under the same masks (torch.manual_seed before each call repeats them; unseeded dropout
    draws from torch's CUDA generator), by central differences in float64 on the GPU."""
    torch.manual_seed(5)
    args = _to(_cudnn_args("lstm", 2, 1, [5, 5, 5], H=8), "cuda")
    r = torch.randn(5, 3, 8, dtype=torch.float64, device="cuda")

    def f(x):
        torch.manual_seed(11)
        return (R.CudnnRNNV3(x, *args[1:], dropout=0.5).output * r).sum()

    (dx,) = torch.autograd.grad(f(args[0]), [args[0]])
    v = torch.randn_like(args[0])
    eps = 1e-6
    with torch.no_grad():
        numeric = (f(args[0] + eps * v) - f(args[0] - eps * v)) / (2 * eps)
    torch.testing.assert_close((dx * v).sum(), numeric, atol=1e-7, rtol=1e-6)
    torch.manual_seed(11)
    dropped = R.CudnnRNNV3(*args, dropout=0.5).output
    torch.manual_seed(11)
    kept = R.CudnnRNNV3(*args, dropout=0.0).output
    assert not torch.equal(dropped, kept)  # the masks are in play


_BACKENDS = ["aot_eager"] + (["inductor"] if importlib.util.find_spec("triton") else [])


@pytest.mark.usefixtures("no_tf32")
@pytest.mark.parametrize("backend", _BACKENDS)
def test_torch_compile_module_matches_eager(backend):
    torch.manual_seed(6)
    module = M.LSTMBlockFusedCell(64, 32).cuda()
    x = torch.randn(20, 8, 32, device="cuda", requires_grad=True)

    def run(m):
        y, _ = m(x)
        loss = (y * torch.linspace(-1, 1, y.numel(), device="cuda").view_as(y)).sum()
        return [y, *torch.autograd.grad(loss, [x, *module.parameters()])]

    want = run(module)
    got = run(torch.compile(module, backend=backend, fullgraph=True))
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("no_tf32")
@pytest.mark.parametrize("name", ["LSTMBlockFusedCell", "KerasLSTM", "CudnnLSTM", "KerasGRU"])
def test_module_inference_in_a_cuda_graph(name):
    """A module's no-grad forward captured once and replayed on new inputs copied into the
    captured input: the eager module's output."""
    torch.manual_seed(7)
    module, x = {
        "LSTMBlockFusedCell": lambda: (M.LSTMBlockFusedCell(32, 16), torch.randn(10, 4, 16)),
        "KerasLSTM": lambda: (K.KerasLSTM(32, 16, return_sequences=True), torch.randn(4, 10, 16)),
        "CudnnLSTM": lambda: (M.CudnnLSTM(2, 32, 16), torch.randn(10, 4, 16)),
        "KerasGRU": lambda: (K.KerasGRU(32, 16, return_sequences=True), torch.randn(4, 10, 16)),
    }[name]()
    module, x = module.cuda().eval(), x.cuda()

    def first(out):
        return out[0] if isinstance(out, tuple) else out

    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # warm-up outside the capture
                module(x)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                captured = first(module(x))
        torch.cuda.current_stream().wait_stream(stream)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, first(module(x)), atol=0, rtol=0)
