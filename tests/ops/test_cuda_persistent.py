"""The LSTM block ops' persistent recurrence on CUDA (csrc/cuda/lstm_persistent.cuh, chosen with
TORCH_LSTM_GRAD_CUDA_RECURRENT=persistent) against the CPU kernels, forward and every gradient.
Each test also reads, from the profiler, which kernels ran: the persistent ones where the pass
fits, the steps path's where it does not, so that a silent fallback cannot pass for the
persistent path. Skipped without a GPU or a CUDA build of the extension."""

import pytest
import torch

from tests.helpers import CUDA_OK, CUDA_SKIP
from tests.ops.test_cuda import _compare_low, _grads, _to
from torch_lstm_grad import ops
from torch_lstm_grad import raw_ops as R

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP),
    pytest.mark.usefixtures("no_tf32"),
]

ENV = "TORCH_LSTM_GRAD_CUDA_RECURRENT"
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}
# small: one unit a block; chunked: several units a block (on 132 SMs: 3, the last block 1),
# the batch in chunks of 64 (the last of 2 rows)
SHAPES = {"small": (7, 3, 4, 6), "chunked": (6, 130, 8, 301)}


def _args(T, B, I, H, dtype, seed=0):  # noqa: E741
    torch.manual_seed(seed)
    g = lambda *s: (torch.randn(*s) * 0.5).to(dtype)  # noqa: E731
    return [g(T, B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H), g(H), g(4 * H)]


def _kernels(fn):
    """fn()'s result and the names of the CUDA kernels it ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    return result, names


def _ran(names, which):
    return any(f"persistent::{which}_kernel" in n for n in names)


def _block_lstm(op, args, device, seq_len_max, **kw):
    ins = _to(args, device)
    out = getattr(R, op)(seq_len_max, *ins, **kw)
    return list(out) + list(_grads([out.cs, out.h], ins, 2))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2"])
def test_persistent_block_lstm_matches_cpu(monkeypatch, op, dtype, shape):
    """float32 against the CPU kernels; bfloat16 against the GPU's steps path, whose products
    round the gate gradients to bfloat16 as this one's do (the CPU's do not; test_cuda.py ties
    the steps path to the CPU)."""
    T, B, I, H = SHAPES[shape]  # noqa: E741
    args = _args(T, B, I, H, dtype)
    kw = {"use_peephole": True, "cell_clip": 0.5}
    monkeypatch.setenv(ENV, "steps")
    want = _block_lstm(op, args, "cpu" if dtype == torch.float32 else "cuda", T - 1, **kw)
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: _block_lstm(op, args, "cuda", T - 1, **kw))
    assert _ran(names, "forward") and _ran(names, "backward"), sorted(names)
    _compare_low(want, got, TOL[dtype])


def test_steps_path_is_the_default(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    args = _args(*SHAPES["small"], torch.float32)
    _, names = _kernels(lambda: _block_lstm("BlockLSTM", args, "cuda", 7))
    assert not _ran(names, "forward") and not _ran(names, "backward")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_persistent_inference_matches_cpu(monkeypatch, dtype):
    """The modules' no-grad path: its cell states alternate between two rows and its gate
    activations go to scratch rows, both of which the kernel's per-step pointers follow."""
    T, B, I, H = SHAPES["chunked"]  # noqa: E741
    x, cs, h, w, wci, wcf, wco, b = _args(T, B, I, H, dtype)

    def run(device):
        t = [v.to(device) for v in (x, cs, h, w, b, wci, wcf, wco)]
        return list(ops.block_lstm_inference(*t[:5], wci=t[5], wcf=t[6], wco=t[7],
                                             cell_clip=0.5, use_peephole=True))  # fmt: skip

    want = run("cpu")
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: run("cuda"))
    assert _ran(names, "forward"), sorted(names)
    _compare_low(want, got, TOL[dtype])


def test_other_activations_run_the_persistent_backward(monkeypatch):
    """The persistent forward takes TF's sigmoid/tanh only (others run the steps path); the
    backward takes every variant (their derivatives blended as on the steps path)."""
    T, B, I, H = SHAPES["small"]  # noqa: E741
    x, cs, h, w, wci, wcf, wco, b = _args(T, B, I, H, torch.float32)

    def run(device):
        ins = _to([x, cs, h, w, b], device)
        out = ops.block_lstm_ex(*ins, seq_len_max=T, cell_clip=0.4,
                                gate_activation="hard_sigmoid_keras3", activation="relu",
                                clip_gradient="zero")  # fmt: skip
        return list(out) + list(_grads([out.cs, out.h], ins, 2))

    want = run("cpu")
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: run("cuda"))
    assert not _ran(names, "forward") and _ran(names, "backward"), sorted(names)
    _compare_low(want, got, TOL[torch.float32])


def test_a_pass_too_large_for_shared_memory_runs_the_steps_path(monkeypatch):
    """H = 2048 in float32: a block's slice of Wh (16 units x 4 gates x 2048 rows) is over the
    shared memory of a block; the op runs the steps path and its numbers."""
    T, B, I, H = 2, 1, 3, 2048  # noqa: E741
    args = _args(T, B, I, H, torch.float32)
    want = _block_lstm("BlockLSTM", args, "cpu", T)
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: _block_lstm("BlockLSTM", args, "cuda", T))
    assert not _ran(names, "forward") and not _ran(names, "backward")
    _compare_low(want, got, TOL[torch.float32])


def test_persistent_forward_in_a_cuda_graph(monkeypatch):
    """The cooperative launch inside stream capture: a captured no-grad forward replays to the
    eager result, on new inputs copied into the captured ones."""
    monkeypatch.setenv(ENV, "persistent")
    T, B, I, H = SHAPES["small"]  # noqa: E741
    x, cs, h, w, wci, wcf, wco, b = (t.cuda() for t in _args(T, B, I, H, torch.float32))

    def forward():
        return ops.block_lstm_inference(x, cs, h, w, b)[0]

    with torch.no_grad():
        forward()  # warm-up outside the capture (descriptors, workspace)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                captured = forward()
        torch.cuda.current_stream().wait_stream(stream)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, forward(), atol=0, rtol=0)


def test_an_unknown_setting_is_refused(monkeypatch):
    monkeypatch.setenv(ENV, "fastest")
    args = _to(_args(*SHAPES["small"], torch.float32), "cuda")
    with pytest.raises(ValueError, match='TORCH_LSTM_GRAD_CUDA_RECURRENT: expected "steps"'):
        R.BlockLSTM(7, *args)


# -- keras_gru (reset_after: one product a step) ---------------------------------------------


def _gru_args(T, B, I, H, dtype, reset_after=True, seed=1):  # noqa: E741
    torch.manual_seed(seed)
    g = lambda *s: (torch.randn(*s) * 0.5).to(dtype)  # noqa: E731
    bias = g(2, 3 * H) if reset_after else g(3 * H)
    return [g(T, B, I), g(B, H), g(I, 3 * H), g(H, 3 * H), bias]


def _keras_gru(args, device, seq_len_max, **kw):
    ins = _to(args, device)
    out = ops.keras_gru(*ins, seq_len_max=seq_len_max, **kw)
    return list(out) + list(_grads([out.h], ins, 1))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gate,act", [("sigmoid", "tanh"), ("hard_sigmoid_keras2", "relu")])
def test_persistent_keras_gru_matches_cpu(monkeypatch, gate, act, dtype, shape):
    """float32 against the CPU kernels; bfloat16 against the GPU's steps path (the same float
    products on the rounded values), as for the LSTM."""
    T, B, I, H = SHAPES[shape]  # noqa: E741
    args = _gru_args(T, B, I, H, dtype)
    kw = {"reset_after": True, "gate_activation": gate, "activation": act}
    monkeypatch.setenv(ENV, "steps")
    want = _keras_gru(args, "cpu" if dtype == torch.float32 else "cuda", T - 1, **kw)
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: _keras_gru(args, "cuda", T - 1, **kw))
    assert _ran(names, "gru_forward") and _ran(names, "gru_backward"), sorted(names)
    _compare_low(want, got, TOL[dtype])


def test_persistent_keras_gru_inference_matches_cpu(monkeypatch):
    """keras_gru_inference: the gates of every step in one reused row block, h a sequence."""
    T, B, I, H = SHAPES["chunked"]  # noqa: E741
    args = _gru_args(T, B, I, H, torch.float32)

    def run(device):
        return ops.keras_gru_inference(*(t.to(device) for t in args), seq_len_max=T)

    want = run("cpu")
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: run("cuda"))
    assert _ran(names, "gru_forward"), sorted(names)
    _compare_low([want], [got], TOL[torch.float32])


def test_reset_before_gru_runs_the_steps_path(monkeypatch):
    """reset_after=False (two products a step) has no persistent form: the steps path's kernels
    and numbers."""
    T, B, I, H = SHAPES["small"]  # noqa: E741
    args = _gru_args(T, B, I, H, torch.float32, reset_after=False)
    want = _keras_gru(args, "cpu", T, reset_after=False)
    monkeypatch.setenv(ENV, "persistent")
    got, names = _kernels(lambda: _keras_gru(args, "cuda", T, reset_after=False))
    assert not _ran(names, "gru_forward") and not _ran(names, "gru_backward")
    _compare_low(want, got, TOL[torch.float32])
