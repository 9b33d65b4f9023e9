"""GPU kernels against the CPU kernels (which the rest of the suite ties to TF and the float64
reference). Skipped, with the reason printed, without a GPU or a CUDA build of the extension.

TF32 is off for parity. float64 compares at 1e-10 (same math, different summation order);
float32 at 2e-5 (cuBLAS/cuDNN GEMM order and libm vs our vectorised activations, as vs TF).
"""

import re

import pytest
import torch

from tests.helpers import CUDA_OK, CUDA_SKIP
from torch_lstm_grad import raw_ops as R

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not CUDA_OK, reason=CUDA_SKIP),
    pytest.mark.usefixtures("no_tf32"),
]

TOL = {torch.float64: 1e-10, torch.float32: 2e-5}


def _lstm_args(T=5, B=3, I=4, H=6, dtype=torch.float64):
    g = lambda *s: torch.randn(*s, dtype=dtype) * 0.5  # noqa: E731
    return [g(T, B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H), g(H), g(4 * H)]


def _cudnn_args(mode, L, D, lengths, T=5, I=4, H=6, P=0, dtype=torch.float64):
    B = len(lengths)
    n = P or H
    size = R.CudnnRNNParamsSize(num_layers=L, num_units=H, input_size=I, T=dtype, S=torch.int64,
                                rnn_mode=mode, direction="bidirectional" if D == 2 else
                                "unidirectional", num_proj=P)  # fmt: skip
    g = lambda *s: torch.randn(*s, dtype=dtype) * 0.3  # noqa: E731
    c = g(L * D, B, H) if mode == "lstm" else torch.zeros((), dtype=dtype)
    return [
        g(T, B, I),
        g(L * D, B, n),
        c,
        g(int(size[0])),
        torch.tensor(lengths, dtype=torch.int32),
    ]


def _to(ts, device):
    return [t.to(device).requires_grad_(t.is_floating_point() and t.dim() > 0) for t in ts]


def _compare(cpu_out, gpu_out, dtype):
    for a, b in zip(cpu_out, gpu_out, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=TOL[dtype], rtol=TOL[dtype])


def _grads(outs, ins, n_diff):
    loss = sum((o.double() * torch.linspace(-1, 1, o.numel(), dtype=torch.float64,
                device=o.device).view_as(o)).sum() for o in outs[:n_diff])  # fmt: skip
    return torch.autograd.grad(loss, [t for t in ins if t.requires_grad], allow_unused=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("peep", [False, True])
@pytest.mark.parametrize("op", ["BlockLSTM", "BlockLSTMV2", "LSTMBlockCell"])
def test_lstm_block_ops_match_cpu(op, peep, dtype):
    args = _lstm_args(dtype=dtype)
    if op == "LSTMBlockCell":
        args[0] = args[0][0]
    kw = {"use_peephole": peep, "cell_clip": 0.5}
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(args, device)
        call = getattr(R, op)
        out = call(*ins, **kw) if op == "LSTMBlockCell" else call(3, *ins, **kw)
        results.append((out, _grads((out.cs, out.h), ins, 2)))
    _compare(results[0][0], results[1][0], dtype)
    _compare([g for g in results[0][1]], [g for g in results[1][1]], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gru_block_cell_matches_cpu(dtype):
    g = lambda *s: torch.randn(*s, dtype=dtype) * 0.5  # noqa: E731
    B, I, H = 3, 4, 5
    args = [g(B, I), g(B, H), g(I + H, 2 * H), g(I + H, H), g(2 * H), g(H)]
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(args, device)
        out = R.GRUBlockCell(*ins)
        results.append((out, _grads((out.h,), ins, 1)))
    _compare(results[0][0], results[1][0], dtype)
    _compare(results[0][1], results[1][1], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "mode,L,D,P,lengths,time_major",
    [
        ("lstm", 1, 1, 0, [5, 5, 5], True),
        ("lstm", 2, 2, 0, [5, 0, 3], True),
        ("lstm", 2, 2, 3, [2, 5, 4], False),
        ("gru", 2, 2, 0, [5, 3, 0], False),
        ("rnn_tanh", 2, 1, 0, [1, 5, 2], True),
        ("rnn_relu", 1, 2, 0, [5, 4, 5], True),
        ("lstm", 1, 2, 0, [0, 0, 0], False),  # no row for cuDNN: zeros and the initial states
    ],
)
def test_cudnn_rnn_v3_matches_cpu(mode, L, D, P, lengths, time_major, dtype):
    args = _cudnn_args(mode, L, D, lengths, P=P, dtype=dtype)
    if not time_major:
        args[0] = args[0].transpose(0, 1).contiguous()
        args[1] = args[1].transpose(0, 1).contiguous()
        if mode == "lstm":
            args[2] = args[2].transpose(0, 1).contiguous()
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(args, device)
        out = R.CudnnRNNV3(*ins, rnn_mode=mode, direction="bidirectional" if D == 2 else
                           "unidirectional", num_proj=P, time_major=time_major)  # fmt: skip
        n_diff = 3 if mode == "lstm" else 2
        results.append((out[:n_diff], _grads(out, ins, n_diff)))
    _compare(results[0][0], results[1][0], dtype)
    _compare(results[0][1], results[1][1], dtype)


@pytest.mark.parametrize("proj", [0, 3])
@pytest.mark.parametrize("L,bidirectional", [(1, False), (3, False), (2, True)])
def test_params_layout_is_cudnns(L, bidirectional, proj):
    """nn.LSTM's flattened cuDNN weights show cuDNN's own layout: ours must be the same."""
    I, H = 4, 6
    lstm = torch.nn.LSTM(I, H, L, bidirectional=bidirectional, proj_size=proj).cuda()
    lstm.flatten_parameters()
    base = lstm._flat_weights[0].data_ptr()
    D = 2 if bidirectional else 1
    canon_w, canon_b = R.CudnnRNNParamsToCanonicalV2(
        num_layers=L, num_units=H, input_size=I, params=torch.arange(
            int(R.CudnnRNNParamsSize(num_layers=L, num_units=H, input_size=I, T=torch.float32,
                                     S=torch.int64, num_proj=proj, direction="bidirectional"
                                     if bidirectional else "unidirectional")[0]),
            dtype=torch.float32),
        num_params_weights=L * D * (8 + (1 if proj else 0)), num_params_biases=L * D * 8,
        num_proj=proj, direction="bidirectional" if bidirectional else "unidirectional",
    )  # fmt: skip
    # Element offset of each canonical tensor in our layout = its first value (params = arange).
    ours = [int(t.flatten()[0]) for t in canon_w + canon_b if t.numel()]
    theirs = []
    per = 9 if proj else 8
    for k in range(L * D):
        sfx = f"_l{k // D}" + ("_reverse" if k % D else "")
        w_ih, w_hh = getattr(lstm, "weight_ih" + sfx), getattr(lstm, "weight_hh" + sfx)
        mats = [w_ih[g * H] for g in range(4)] + [w_hh[g * H] for g in range(4)]
        if proj:
            mats.append(getattr(lstm, "weight_hr" + sfx)[0])
        theirs_w = [(m.data_ptr() - base) // 4 for m in mats]
        assert len(theirs_w) == per
        theirs += theirs_w
    for k in range(L * D):
        sfx = f"_l{k // D}" + ("_reverse" if k % D else "")
        for name in ("bias_ih", "bias_hh"):
            b = getattr(lstm, name + sfx)
            theirs += [(b[g * H :].data_ptr() - base) // 4 for g in range(4)]
    assert ours == theirs


# ---------------------------------------------------------------------------------------------
# The variant ops: block_lstm_ex and keras_gru, every variant, against the CPU kernels.

_VARIANTS = [
    ("sigmoid", "tanh", "straight_through"),
    ("hard_sigmoid_keras2", "relu", "zero"),
    ("hard_sigmoid_keras3", "linear", "zero"),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("proj", [False, True])
@pytest.mark.parametrize("gate,act,clip_grad", _VARIANTS)
def test_block_lstm_ex_matches_cpu(dtype, proj, gate, act, clip_grad):
    from torch_lstm_grad import ops

    T, B, I, H, P = 5, 3, 4, 6, 3  # noqa: E741
    n = P if proj else H
    g = lambda *s: torch.randn(*s, dtype=dtype) * 0.5  # noqa: E731
    base = [g(T, B, I), g(B, H), g(B, n), g(I + n, 4 * H), g(H), g(H), g(H), g(4 * H)]
    if proj:
        base.append(g(H, P))
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(base, device)
        out = ops.block_lstm_ex(
            ins[0], ins[1], ins[2], ins[3], ins[7], seq_len_max=T - 1, wci=ins[4], wcf=ins[5],
            wco=ins[6], w_proj=ins[8] if proj else None, cell_clip=0.4, proj_clip=0.3,
            use_peephole=True, gate_activation=gate, activation=act, clip_gradient=clip_grad,
        )  # fmt: skip
        outs = [out.cs, out.h]
        results.append(list(out) + list(_grads(outs, ins, 2)))
    _compare(results[0], results[1], dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("reset_after", [True, False])
@pytest.mark.parametrize("gate,act,_clip", _VARIANTS)
def test_keras_gru_matches_cpu(dtype, reset_after, gate, act, _clip):
    from torch_lstm_grad import ops

    T, B, I, H = 5, 3, 4, 6  # noqa: E741
    g = lambda *s: torch.randn(*s, dtype=dtype) * 0.5  # noqa: E731
    bias = g(2, 3 * H) if reset_after else g(3 * H)
    base = [g(T, B, I), g(B, H), g(I, 3 * H), g(H, 3 * H), bias]
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(base, device)
        out = ops.keras_gru(*ins, seq_len_max=T - 1, reset_after=reset_after,
                            gate_activation=gate, activation=act)  # fmt: skip
        results.append(list(out) + list(_grads([out.h], ins, 1)))
        with torch.no_grad():  # the inference op: keras_gru's h on each device
            inf = ops.keras_gru_inference(*ins, seq_len_max=T - 1, reset_after=reset_after,
                                          gate_activation=gate, activation=act)  # fmt: skip
        assert torch.equal(inf, out.h.detach())
    _compare(results[0], results[1], dtype)


# --- the cuDNN calls' own behaviour: dropout states, reserve device, retain_graph ---------------


def _dropout_model(seed, seed2, dropout=0.5, L=2, dtype=torch.float32):
    """A 2-layer LSTM on the GPU (dropout between the layers): the forward's output."""
    torch.manual_seed(123)  # the same inputs each time; the dropout state is the variable
    args = _to(_cudnn_args("lstm", L, 1, [5, 5, 5], dtype=dtype), "cuda")
    return lambda: R.CudnnRNNV3(*args, dropout=dropout, seed=seed, seed2=seed2).output.detach()


def test_unseeded_dropout_repeats_after_manual_seed():
    """seed = seed2 = 0 draws the cuDNN state's seed from torch's CUDA generator: after the same
    torch.manual_seed the same masks (opcheck and users rely on it); without one, the state
    advances and the next call's masks differ."""
    run = _dropout_model(0, 0)
    torch.manual_seed(7)
    a, a_next = run(), run()
    torch.manual_seed(7)
    b, b_next = run(), run()
    assert torch.equal(a, b) and torch.equal(a_next, b_next)
    assert not torch.equal(a, a_next)
    torch.manual_seed(8)
    assert not torch.equal(run(), a)


def test_seeded_dropout_ignores_manual_seed_and_restarts_after_eviction():
    """Explicit seeds: TF's 64-bit seed alone decides the masks (torch's generator plays no part);
    the state advances from call to call; a seed pair whose state was evicted (more than 16 pairs
    since) starts again from its first masks."""
    run = _dropout_model(101, 1)
    torch.manual_seed(1)
    first, second = run(), run()
    assert not torch.equal(first, second)
    for k in range(17):  # evict (101, 1)
        _dropout_model(200 + k, 1)()
    torch.manual_seed(2)
    assert torch.equal(run(), first)


def test_dropout_one_matches_cpu():
    """dropout = 1 in training: every input above layer 0 is zero on both devices, so the GPU's
    outputs are the CPU's (no mask is random)."""
    args = _cudnn_args("lstm", 2, 1, [5, 4, 5])
    outs = [R.CudnnRNNV3(*_to(args, d), dropout=1.0)[:3] for d in ("cpu", "cuda")]
    _compare(outs[0], outs[1], torch.float64)


def test_backward_twice_with_retain_graph():
    ins = _to(_cudnn_args("gru", 2, 2, [5, 2, 4]), "cuda")
    out = R.CudnnRNNV3(*ins, rnn_mode="gru", direction="bidirectional")
    first = torch.autograd.grad(
        out.output.sum(), [t for t in ins if t.requires_grad], retain_graph=True
    )
    again = torch.autograd.grad(out.output.sum(), [t for t in ins if t.requires_grad])
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)


def test_reserve_from_the_host_is_refused():
    ins = _to(_cudnn_args("lstm", 1, 1, [5, 5, 5]), "cuda")
    out = R.CudnnRNNV3(*ins)
    with pytest.raises(ValueError, match=r"reserve_space: expected a tensor on cuda"):
        R.CudnnRNNBackpropV3(*ins, out.output, out.output_h, out.output_c,
                             torch.ones_like(out.output), torch.zeros_like(out.output_h),
                             torch.zeros_like(out.output_c), out.reserve_space.cpu(),
                             out.host_reserved)  # fmt: skip


def test_cached_descriptors_follow_the_lengths():
    """The model's descriptors are cached per configuration; each call's rows and lengths are
    its own: calls alternating lengths (zero-length rows included) each match the CPU."""
    for lengths in ([5, 5, 5], [1, 0, 3], [5, 5, 5], [0, 2, 5]):
        args = _cudnn_args("lstm", 2, 1, lengths, dtype=torch.float64)
        outs = [R.CudnnRNNV3(*_to(args, d))[:3] for d in ("cpu", "cuda")]
        _compare(outs[0], outs[1], torch.float64)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 3e-3), (torch.bfloat16, 2e-2)])
def test_cudnn_rnn_v3_low_precision_matches_cpu(dtype, tol):
    """float16 through cuDNN's half math, bfloat16 as float32 (as TF): against the CPU's result
    for the same rounded inputs."""
    args = [t.to(dtype) if t.is_floating_point() else t
            for t in _cudnn_args("lstm", 2, 1, [5, 3, 5], dtype=torch.float32)]  # fmt: skip
    outs = [R.CudnnRNNV3(*_to(args, d))[:3] for d in ("cpu", "cuda")]
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(b.cpu().float(), a.float(), atol=tol, rtol=tol)


# --- the reserve's device and owner, inference ops, float16/bfloat16 block ops ----------------


def _backprop_args(fwd, ins, reserve):
    return (*ins, fwd.output, fwd.output_h, fwd.output_c, torch.ones_like(fwd.output),
            torch.zeros_like(fwd.output_h), torch.zeros_like(fwd.output_c), reserve,
            fwd.host_reserved)  # fmt: skip


def test_reserve_from_the_other_device_is_refused():
    """A CPU reserve on the GPU, or a cuDNN reserve on the CPU, names its maker (their layouts
    differ): never read as the other's."""
    args = _cudnn_args("lstm", 1, 1, [5, 5, 5], dtype=torch.float32)
    for made, runs, maker in (("cpu", "cuda", "the CPU kernels"), ("cuda", "cpu", "cuDNN (CUDA)")):
        fwd = R.CudnnRNNV3(*[t.to(made) for t in args])
        ins = [t.to(runs) for t in args]
        moved = fwd._replace(**{k: v.to(runs) for k, v in fwd._asdict().items()})
        with pytest.raises(ValueError, match=re.escape(f"reserve_space: made by {maker}, ")):
            R.CudnnRNNBackpropV3(*_backprop_args(moved, ins, moved.reserve_space))


def _maker_word(reserve) -> int:
    """Word 11 of a reserve's signature: the kernels (and cuDNN algorithm) that made it."""
    return int(reserve.view(torch.uint8)[88:96].cpu().view(torch.int64)[0])


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_persistent_small_h_algorithm_under_auto(monkeypatch, mode):
    """TORCH_LSTM_GRAD_CUDNN_RNN_ALGO=auto: equal lengths at a small hidden size run cuDNN's
    persistent small-H algorithm (the reserve's maker word 3) and match the CPU kernels forward
    and backward; the backward follows its reserve's algorithm whatever the variable says then;
    varied lengths keep the standard one (word 2)."""
    monkeypatch.setenv("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO", "auto")
    args = _cudnn_args(mode, 1, 1, [5, 5, 5], H=8, dtype=torch.float32)
    ins = [t.cuda() for t in args]
    cpu, fwd = R.CudnnRNNV3(*args, rnn_mode=mode), R.CudnnRNNV3(*ins, rnn_mode=mode)
    assert _maker_word(fwd.reserve_space) == 3
    for a, b in zip(cpu[:3], fwd[:3], strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    monkeypatch.setenv("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO", "standard")
    got = R.CudnnRNNBackpropV3(*_backprop_args(fwd, ins, fwd.reserve_space), rnn_mode=mode)
    want = R.CudnnRNNBackpropV3(*_backprop_args(cpu, args, cpu.reserve_space), rnn_mode=mode)
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    monkeypatch.setenv("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO", "auto")
    varied = [t.cuda() for t in _cudnn_args(mode, 1, 1, [5, 3, 4], H=8, dtype=torch.float32)]
    assert _maker_word(R.CudnnRNNV3(*varied, rnn_mode=mode).reserve_space) == 2


def test_an_unknown_algorithm_setting_is_refused(monkeypatch):
    monkeypatch.setenv("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO", "fastest")
    ins = [t.cuda() for t in _cudnn_args("lstm", 1, 1, [5, 2, 4], dtype=torch.float32)]
    with pytest.raises(ValueError, match='TORCH_LSTM_GRAD_CUDNN_RNN_ALGO: expected "standard"'):
        R.CudnnRNNV3(*ins)


def test_reserve_checked_through_its_device_copy_when_not_the_forwards_own():
    """The forward's own reserve carries its signature on the host (no device read); a copy of
    it is checked through the device header: both give the same gradients, a copy with another
    rnn_mode in its header is refused."""
    ins = _to(_cudnn_args("lstm", 2, 1, [5, 3, 5], dtype=torch.float64), "cuda")
    ins = [t.detach() for t in ins]  # no autograd: the reserve stays the user's
    fwd = R.CudnnRNNV3(*ins)
    own = R.CudnnRNNBackpropV3(*_backprop_args(fwd, ins, fwd.reserve_space))
    copy = R.CudnnRNNBackpropV3(*_backprop_args(fwd, ins, fwd.reserve_space.clone()))
    for a, b in zip(own, copy, strict=True):
        assert torch.equal(a, b)
    tampered = fwd.reserve_space.clone()
    # word 1: the rnn_mode (RNNMode in cudnn_rnn_config.h: 0 = rnn_relu, this forward's 2 = lstm)
    tampered.view(torch.uint8)[8:16] = torch.tensor([0], dtype=torch.int64).view(torch.uint8)
    with pytest.raises(ValueError, match="made by a forward with another rnn_mode"):
        R.CudnnRNNBackpropV3(*_backprop_args(fwd, ins, tampered))


def test_backward_without_retain_graph_consumes_the_reserve():
    """A plain backward lets cuDNN write into the reserve (no copy); the forward's reserve,
    kept by the caller, then raises instead of giving another gradient. With retain_graph it
    is not consumed and the raw Backprop gives the autograd gradients."""
    ins = _to(_cudnn_args("gru", 1, 2, [5, 2, 4], dtype=torch.float64), "cuda")
    fwd = R.CudnnRNNV3(*ins, rnn_mode="gru", direction="bidirectional")
    fwd.output.sum().backward(retain_graph=True)
    raw = R.CudnnRNNBackpropV3(*_backprop_args(fwd, [t.detach() for t in ins], fwd.reserve_space),
                               rnn_mode="gru", direction="bidirectional")  # fmt: skip
    torch.testing.assert_close(raw.input_backprop, ins[0].grad, atol=1e-12, rtol=1e-12)
    fwd = R.CudnnRNNV3(*ins, rnn_mode="gru", direction="bidirectional")
    fwd.output.sum().backward()
    with pytest.raises(ValueError, match="already used by a backward that did not retain"):
        R.CudnnRNNBackpropV3(*_backprop_args(fwd, [t.detach() for t in ins], fwd.reserve_space),
                             rnn_mode="gru", direction="bidirectional")  # fmt: skip


def test_padded_rows_input_gradient_is_zero():
    """cuDNN leaves dx of a row's padded steps undefined: ours are zeros, as the CPU's."""
    ins = _to(_cudnn_args("lstm", 1, 1, [5, 2, 1], dtype=torch.float32), "cuda")
    fwd = R.CudnnRNNV3(*ins)
    (dx,) = torch.autograd.grad((fwd.output * 3).sum() + fwd.output_h.sum(), [ins[0]])
    assert torch.count_nonzero(dx[2:, 1]) == 0 and torch.count_nonzero(dx[1:, 2]) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("lengths", [None, [5, 2, 0]])
@pytest.mark.parametrize("proj", [False, True])
def test_block_lstm_inference_matches_cpu(dtype, lengths, proj):
    """The modules' no-grad LSTM path, with and without sequence_length and w_proj."""
    from torch_lstm_grad import ops

    T, B, I, H, P = 5, 3, 4, 6, 3  # noqa: E741
    n = P if proj else H
    g = lambda *s: (torch.randn(*s) * 0.5).to(dtype)  # noqa: E731
    base = [g(T, B, I), g(B, H), g(B, n), g(I + n, 4 * H), g(4 * H), g(H), g(H), g(H)]
    w_proj = g(H, P) if proj else None
    outs = []
    for device in ("cpu", "cuda"):
        x, cs, h, w, b, wci, wcf, wco = (t.to(device) for t in base)
        seq = None if lengths is None else torch.tensor(lengths, device=device)
        outs.append(ops.block_lstm_inference(
            x, cs, h, w, b, wci=wci, wcf=wcf, wco=wco, w_proj=None if w_proj is None
            else w_proj.to(device), sequence_length=seq, cell_clip=0.5, proj_clip=0.4,
            use_peephole=True))  # fmt: skip
    tol = {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 2e-2}[dtype]
    for a, b in zip(outs[0], outs[1], strict=True):
        torch.testing.assert_close(b.cpu().float(), a.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("lengths", [None, [5, 2, 0]])
@pytest.mark.parametrize("mode,D,P", [("lstm", 2, 0), ("lstm", 1, 3), ("gru", 2, 0)])
def test_cudnn_rnn_inference_matches_cpu(lengths, mode, D, P):
    """The cuDNN modules' no-grad path (cuDNN's inference forward on the GPU)."""
    args = _cudnn_args(mode, 2, D, lengths or [5, 5, 5], P=P, dtype=torch.float32)
    if lengths is None:
        args[4] = None
    outs = []
    for device in ("cpu", "cuda"):
        ins = [None if t is None else t.to(device) for t in args]
        outs.append(torch.ops.torch_lstm_grad.cudnn_rnn_inference(
            *ins, [], [], mode, "linear_input", "bidirectional" if D == 2 else "unidirectional",
            P, True))  # fmt: skip
    _compare(outs[0][:2] if mode != "lstm" else outs[0], outs[1][:2] if mode != "lstm"
             else outs[1], torch.float32)  # fmt: skip


_LOW = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


def _compare_low(cpu_out, gpu_out, tol):
    for a, b in zip(cpu_out, gpu_out, strict=True):
        if a is None:
            assert b is None
            continue
        scale = max(1.0, float(a.float().abs().max())) if a.numel() else 1.0
        torch.testing.assert_close(b.cpu().float(), a.float(), atol=tol * scale, rtol=tol)


@pytest.mark.parametrize("dtype", list(_LOW))
@pytest.mark.parametrize("op", ["BlockLSTM", "LSTMBlockCell", "block_lstm_ex", "keras_gru",
                                "GRUBlockCell"])  # fmt: skip
def test_block_ops_low_precision_match_cpu(op, dtype):
    """float16/bfloat16 (float32 arithmetic inside; the GPU's bfloat16 LSTM products multiply
    bf16 operands on tensor cores, the backward's on gate gradients rounded to bf16, as
    mixed precision does): forward and every gradient against the CPU's for the same rounded
    inputs."""
    from torch_lstm_grad import ops

    torch.manual_seed(5)
    T, B, I, H = 5, 3, 4, 6  # noqa: E741
    g = lambda *s: (torch.randn(*s) * 0.5).to(dtype)  # noqa: E731
    if op == "GRUBlockCell":
        base = [g(B, I), g(B, H), g(I + H, 2 * H), g(I + H, H), g(2 * H), g(H)]
    elif op == "keras_gru":
        base = [g(T, B, I), g(B, H), g(I, 3 * H), g(H, 3 * H), g(2, 3 * H)]
    else:
        base = [g(T, B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H), g(H), g(4 * H)]
        if op == "LSTMBlockCell":
            base[0] = base[0][0]
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(base, device)
        if op == "GRUBlockCell":
            out = R.GRUBlockCell(*ins)
            outs = [out.h]
        elif op == "keras_gru":
            out = ops.keras_gru(*ins, seq_len_max=T - 1, reset_after=True)
            outs = [out.h]
        elif op == "block_lstm_ex":
            out = ops.block_lstm_ex(ins[0], ins[1], ins[2], ins[3], ins[7], seq_len_max=T - 1,
                                    wci=ins[4], wcf=ins[5], wco=ins[6], cell_clip=0.4,
                                    use_peephole=True, gate_activation="hard_sigmoid_keras3")
            outs = [out.cs, out.h]
        else:
            call = getattr(R, op)
            kw = {"use_peephole": True, "cell_clip": 0.5}
            out = call(*ins, **kw) if op == "LSTMBlockCell" else call(T - 1, *ins, **kw)
            outs = [out.cs, out.h]
        results.append(list(out) + list(_grads(outs, ins, len(outs))))
    _compare_low(results[0], results[1], _LOW[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T,B,I", [(4, 0, 3), (0, 2, 3), (4, 2, 0), (4, 1, 3)])
def test_block_lstm_edge_shapes_match_cpu(T, B, I, dtype):  # noqa: E741
    """The cuBLAS calls on pointers (csrc/cuda/cublas_gemm.h) at their edges: no rows, no
    steps, no inputs (a product over K = 0: zeros) and one row (whose leading dimensions
    cuBLAS still checks), forward and every gradient against the CPU."""
    torch.manual_seed(7)
    H = 5
    shapes = [(T, B, I), (B, H), (B, H), (I + H, 4 * H), (H,), (H,), (H,), (4 * H,)]
    base = [(torch.randn(*s) * 0.5).to(dtype) for s in shapes]
    results = []
    for device in ("cpu", "cuda"):
        ins = _to(base, device)
        out = R.BlockLSTM(T, *ins, use_peephole=True, cell_clip=0.5)
        results.append(list(out) + list(_grads([out.cs, out.h], ins, 2)))
    _compare_low(results[0], results[1], {torch.float32: 2e-5, torch.bfloat16: 2e-2}[dtype])
