"""The forward for callers that record no gradient: block_lstm_inference and
cudnn_rnn_inference, the packed recurrent weights the small-batch CPU kernels read
(pack_recurrent_weight), and the modules that call them under no_grad / inference_mode.

The inference forward computes what the full forward computes, in the same order, and only
writes less: its outputs equal the differentiable forward's bit for bit (the same CPU, the same
build). The packed weights the modules keep are rebuilt when the parameter changes in place.
"""

import pytest
import torch

import torch_lstm_grad  # noqa: F401  (registers the ops)
from tests.helpers import (
    assert_same_outputs,
    inference_block_args,
    inference_cudnn_args,
    inference_fused_cell,
    keras_gru_inputs,
)
from torch_lstm_grad import modules, packed_weights
from torch_lstm_grad import ops as tlg_ops

ops = torch.ops.torch_lstm_grad


# (T, B, I, H): B <= 64 take the small-batch panels on AVX-512 CPUs (the units split over the
# threads from B·H·4H >= 2^18; H = 40, 72 leave a partial block of 16 units; B = 9, 20, 32, 50
# are row chunks of 12 and less), B = 70 the brgemm blocks; T = 3 is below the steps from
# which either is prepared.
LSTM_SHAPES = [(6, 1, 5, 40), (50, 1, 64, 256), (7, 3, 4, 72), (5, 8, 6, 96), (4, 9, 3, 10),
               (5, 20, 4, 24), (5, 32, 8, 72), (4, 50, 3, 20), (4, 70, 3, 20),
               (3, 2, 4, 16)]  # fmt: skip
LSTM_VARIANTS = [
    {},
    {"use_peephole": True, "cell_clip": 0.5},
    {"gate_activation": "hard_sigmoid_keras2", "activation": "relu", "use_peephole": True},
    {"gate_order": "ifco", "activation": "linear", "cell_clip": 2.0},
    {"num_proj": 6, "proj_clip": 0.3, "use_peephole": True},
]


@pytest.mark.parametrize("shape", LSTM_SHAPES)
@pytest.mark.parametrize("variant", range(len(LSTM_VARIANTS)))
def test_fused_cell_inference_equals_training_forward(shape, variant):
    T, B, I, H = shape  # noqa: E741
    m = inference_fused_cell(H, I, **LSTM_VARIANTS[variant])
    x = torch.randn(T, B, I)
    state = (torch.randn(B, H), torch.randn(B, m.output_size))
    lengths = torch.randint(0, T + 1, (B,))
    lengths[0] = T
    for seq in (None, lengths):
        want = m(x, state, sequence_length=seq)  # records a graph: block_lstm(_ex)
        assert want[0].grad_fn is not None
        with torch.no_grad():
            got = m(x, state, sequence_length=seq)
        assert_same_outputs(got, want)
        with torch.inference_mode():
            got = m(x, None if seq is None else state, sequence_length=seq)
        assert_same_outputs(got, m(x, None if seq is None else state, sequence_length=seq))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_fused_cell_inference_other_dtypes(dtype):
    m = inference_fused_cell(24, 5, dtype=dtype, use_peephole=True, cell_clip=1.0)
    x = torch.randn(6, 3, 5, dtype=dtype)
    want = m(x)
    with torch.no_grad():
        assert_same_outputs(m(x), want)


def test_inference_op_matches_block_lstm_ex():
    """The op itself, with and without a packed weight: block_lstm_ex's h, each row's final
    state at its length, and h zero from each row's length on."""
    T, B, I, H = 9, 4, 5, 40  # noqa: E741
    x, cs0, h0 = torch.randn(T, B, I), torch.randn(B, H), torch.randn(B, H)
    w, b = torch.randn(I + H, 4 * H) * 0.3, torch.randn(4 * H)
    lengths = torch.tensor([9, 0, 4, 7])
    full = tlg_ops.block_lstm_ex(x, cs0, h0, w, b, seq_len_max=9, cell_clip=1.5)
    packed = tlg_ops.pack_recurrent_weight(w[I:])
    for pw in (None, packed):
        out = tlg_ops.block_lstm_inference(x, cs0, h0, w, b, cell_clip=1.5, packed_w=pw)
        assert_same_outputs(out, (full.h, full.cs[-1], full.h[-1]))
        out = tlg_ops.block_lstm_inference(x, cs0, h0, w, b, cell_clip=1.5, packed_w=pw,
                                           sequence_length=lengths)  # fmt: skip
        mask = (torch.arange(T)[:, None] < lengths[None, :]).unsqueeze(-1)
        assert_same_outputs(out.h, torch.where(mask, full.h, 0.0))
        for row, n in enumerate(lengths.tolist()):
            want_cs = cs0[row] if n == 0 else full.cs[n - 1, row]
            want_h = h0[row] if n == 0 else full.h[n - 1, row]
            assert_same_outputs((out.cs[row], out.h_last[row]), (want_cs, want_h))


def test_inference_op_prepared_weights_change_no_bit():
    """With 64 rows of T·B or more the input projection runs on the packed input rows (AVX-512
    CPUs): given packed_w and packed_x, or neither (packed per call), the same bits, which are
    block_lstm_ex's (the training forward's)."""
    T, B, I, H = 33, 2, 24, 40  # noqa: E741
    x, cs0, h0 = torch.randn(T, B, I), torch.randn(B, H), torch.randn(B, H)
    w, b = torch.randn(I + H, 4 * H) * 0.3, torch.randn(4 * H)
    full = tlg_ops.block_lstm_ex(x, cs0, h0, w, b, seq_len_max=T, cell_clip=1.5)
    pw, px = tlg_ops.pack_recurrent_weight(w[I:]), tlg_ops.pack_recurrent_weight(w[:I])
    for kw in ({}, {"packed_w": pw}, {"packed_x": px}, {"packed_w": pw, "packed_x": px}):
        out = tlg_ops.block_lstm_inference(x, cs0, h0, w, b, cell_clip=1.5, **kw)
        assert_same_outputs(out, (full.h, full.cs[-1], full.h[-1]))
    # A packed_x of other weights is read as given (it is the caller's promise): it shows.
    other = tlg_ops.pack_recurrent_weight(torch.randn(I, 4 * H))
    out = tlg_ops.block_lstm_inference(x, cs0, h0, w, b, cell_clip=1.5, packed_x=other)
    uses_panels = not torch.equal(out.h, full.h)
    assert uses_panels or not torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def test_inference_op_no_steps():
    x = torch.randn(0, 2, 3)
    cs0, h0 = torch.randn(2, 4), torch.randn(2, 4)
    out = tlg_ops.block_lstm_inference(x, cs0, h0, torch.randn(7, 16), torch.randn(16))
    assert out.h.shape == (0, 2, 4)
    assert_same_outputs((out.cs, out.h_last), (cs0, h0))
    out = tlg_ops.block_lstm_inference(
        torch.randn(3, 2, 3), cs0, h0, torch.randn(7, 16), torch.randn(16),
        sequence_length=torch.tensor([0, 0]),
    )  # fmt: skip
    assert_same_outputs((out.h, out.cs, out.h_last), (torch.zeros(3, 2, 4), cs0, h0))


def test_pack_recurrent_weight_layout():
    for K, G, H in ((7, 4, 40), (3, 3, 16), (5, 1, 1)):
        w = torch.randn(K, G * H)
        for src in (w, w.t().contiguous().t()):  # row-major, and a transposed view
            p = tlg_ops.pack_recurrent_weight(src, G)
            U = (H + 15) // 16
            assert p.shape == (U, G, K, 16) and p.is_contiguous()
            padded = torch.nn.functional.pad(w.view(K, G, H), (0, 16 * U - H))
            want = padded.view(K, G, U, 16).permute(2, 1, 0, 3)
            torch.testing.assert_close(p, want, rtol=0, atol=0)


CUDNN_CASES = [
    # (module, layers, T, B, I, H, direction, num_proj, time_major)
    (modules.CudnnLSTM, 1, 50, 1, 64, 256, "unidirectional", 0, True),
    (modules.CudnnLSTM, 1, 6, 8, 4, 96, "unidirectional", 0, False),
    (modules.CudnnLSTM, 2, 7, 3, 5, 40, "bidirectional", 0, True),
    (modules.CudnnLSTM, 2, 6, 2, 4, 20, "unidirectional", 8, True),
    (modules.CudnnLSTM, 1, 5, 12, 4, 20, "unidirectional", 0, True),
    (modules.CudnnLSTM, 1, 5, 50, 4, 20, "unidirectional", 0, True),
    (modules.CudnnLSTM, 1, 5, 70, 4, 20, "unidirectional", 0, True),
    (modules.CudnnGRU, 2, 7, 3, 5, 33, "bidirectional", 0, True),
    (modules.CudnnRNNRelu, 1, 5, 1, 3, 20, "unidirectional", 0, False),
]


@pytest.mark.parametrize("case", CUDNN_CASES, ids=lambda c: c[0].__name__)
def test_cudnn_inference_equals_training_forward(case):
    cls, L, T, B, I, H, direction, proj, time_major = case  # noqa: E741
    m = cls(L, H, I, direction=direction, num_proj=proj or None, dropout=0.5)
    x = torch.randn(T, B, I) if time_major else torch.randn(B, T, I)
    lengths = torch.randint(0, T + 1, (B,))
    for seq in (None, lengths):
        m.eval()
        want = m(x, sequence_lengths=seq, time_major=time_major)
        with torch.no_grad():
            assert_same_outputs(m(x, sequence_lengths=seq, time_major=time_major), want)
        with torch.inference_mode():
            got = m(x, sequence_lengths=seq, time_major=time_major)
        assert_same_outputs(got, want)
    # In training with dropout between layers the masks are drawn: no_grad keeps the op.
    m.train()
    with torch.no_grad():
        out = m(x, time_major=time_major)
    assert out[0].shape == want[0].shape


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cudnn_inference_op_with_and_without_packed(mode):
    """packed_r (LSTM) and packed_x, each given or not (packed per call): the same bits, which
    are cudnn_rnn's (the training forward's); the input weights of another model, given as
    packed_x, show (the kernel reads them: AVX-512 CPUs)."""
    cls = {"lstm": modules.CudnnLSTM, "gru": modules.CudnnGRU}[mode]
    m = cls(2, 48, 5, direction="bidirectional")
    x, h0 = torch.randn(8, 3, 5), torch.randn(4, 3, 48)
    c0 = torch.randn(4, 3, 48) if mode == "lstm" else torch.zeros(())
    params = m.opaque_kernel.detach()
    attrs = (mode, "linear_input", "bidirectional", 0)
    want = ops.cudnn_rnn(x, h0, c0, params, None, *attrs[:3], 0.0, 0, 0, 0, False, True)[:3]
    with torch.no_grad():
        packed_r, packed_x = m._prepared(x, 3)
    assert len(packed_r) == (4 if mode == "lstm" else 0) and len(packed_x) == 4
    for pr, pw in (([], []), (packed_r, []), ([], packed_x), (packed_r, packed_x)):
        got = ops.cudnn_rnn_inference(x, h0, c0, params, None, pr, pw, *attrs, True)
        assert_same_outputs(got, want)
    with torch.no_grad():
        _, other = cls(2, 48, 5, direction="bidirectional")._prepared(x, 3)
    got = ops.cudnn_rnn_inference(x, h0, c0, params, None, packed_r, other, *attrs, True)
    uses_panels = not torch.equal(got[0], want[0])
    assert uses_panels or not torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def test_cudnn_module_packs_no_input_weight_under_skip_input():
    m = modules.CudnnLSTM(2, 16, 16, input_mode="skip_input")
    x = torch.randn(4, 2, 16)
    with torch.no_grad():
        packed_r, packed_x = m._prepared(x, 2)
        got = m(x)
    assert len(packed_r) == 2 and packed_x == []
    assert_same_outputs(got, m(x))


# ---------------------------------------------------------------------------------------------
# The packed weights a module keeps


def test_packed_weight_follows_in_place_changes():
    """Both packed parts of the kernel (recurrent rows; input rows, read from 64 rows of T·B
    on AVX-512 CPUs) follow every in-place write: the no-grad forward on them equals the
    recorded forward, which packs per call."""
    m = inference_fused_cell(32, 4)
    x = torch.randn(40, 2, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    with torch.no_grad():
        m(x)
    first = m._packed._packed[0]
    with torch.no_grad():  # the same weight again: the same packed tensor
        m(x)
    assert m._packed._packed[0] is first
    m(x)[0].sum().backward()  # an optimizer step writes the kernel in place
    opt.step()
    with torch.no_grad():
        got = m(x)
    assert_same_outputs(got, m(x))
    assert m._packed._packed[0] is not first
    with torch.no_grad():  # copy_, load_state_dict, init: in place through the parameter
        m.kernel.copy_(torch.randn_like(m.kernel))
        got = m(x)
    assert_same_outputs(got, m(x))
    m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()})
    with torch.no_grad():
        got = m(x)
    assert_same_outputs(got, m(x))
    # Through .data the version does not move (as autograd does not see it): release it.
    m.kernel.data.mul_(0.5)
    m.release_prepared_weights()
    with torch.no_grad():
        got = m(x)
    assert_same_outputs(got, m(x))
    # A new tensor (module.to, parameter replaced): a new data_ptr.
    m.kernel = torch.nn.Parameter(torch.randn_like(m.kernel))
    with torch.no_grad():
        got = m(x)
    assert_same_outputs(got, m(x))


def test_cudnn_packed_weight_follows_in_place_changes():
    m = modules.CudnnLSTM(1, 32, 4)
    x = torch.randn(10, 2, 4)
    with torch.no_grad():
        m(x)
        first = m._packed._packed[0]
        m.set_canonical_weights(*(([torch.randn_like(t) for t in ts]) for ts in
                                  m.canonical_weights()))  # fmt: skip
        got = m(x)
    assert m._packed._packed[0] is not first
    assert_same_outputs(got, m(x))
    m.opaque_kernel.data.mul_(0.5)
    m.release_prepared_weights()
    with torch.no_grad():
        got = m(x)
    assert_same_outputs(got, m(x))


def test_no_packing_where_the_kernels_do_not_use_it():
    m = inference_fused_cell(32, 4)
    with torch.no_grad():
        m(torch.randn(5, packed_weights.PANEL_MAX_ROWS + 1, 4))  # one row too many: brgemm's blocks
        assert m._packed._packed[0] is None  # the recurrent rows: not packed
        assert m._packed._packed[1] is not None  # the input rows: T·B rows, the panels
        m._packed.clear()
        m.double()(torch.randn(5, 2, 4, dtype=torch.float64))
        assert m._packed._key is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("reset_after,use_bias", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("gate,act", [("sigmoid", "tanh"), ("hard_sigmoid_keras2", "relu")])
def test_keras_gru_inference_is_keras_gru_h(dtype, reset_after, use_bias, gate, act):
    """keras_gru_inference's h is keras_gru's, bit for bit, past seq_len_max (zeros) too."""
    inp = keras_gru_inputs(6, dtype, reset_after, use_bias, seed=3)
    kw = dict(seq_len_max=4, reset_after=reset_after, gate_activation=gate, activation=act)
    want = tlg_ops.keras_gru(*inp, **kw).h
    got = tlg_ops.keras_gru_inference(*inp, **kw)
    assert torch.equal(got, want)


def test_inference_ops_have_no_gradient():
    args = inference_block_args(requires=True)
    out = ops.block_lstm_inference(*args)
    with pytest.raises(RuntimeError, match="block_lstm_inference keeps no activations"):
        out[0].sum().backward()
    x, h, c, params, *rest = inference_cudnn_args()
    out = ops.cudnn_rnn_inference(x, h, c, params.clone().requires_grad_(), *rest)
    with pytest.raises(RuntimeError, match="cudnn_rnn_inference keeps no activations"):
        out[0].sum().backward()
    x, h, k, r, b = keras_gru_inputs(3, torch.float32, True)
    out = ops.keras_gru_inference(torch.tensor(3), x, h, k.requires_grad_(), r, b, True,
                                  "sigmoid", "tanh")  # fmt: skip
    with pytest.raises(RuntimeError, match="keras_gru_inference keeps no activations"):
        out.sum().backward()


def _raises_same(op, args, exc, match):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(exc, match=match) as eager:
        op(*args)
    with FakeTensorMode(allow_non_fake_inputs=True):
        with pytest.raises(exc) as fake:
            op(*args)
    assert str(fake.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_bad_inputs_eager_and_fake():
    args = list(inference_block_args(packed=True))
    bad = dict(enumerate(args))
    bad[9] = args[9][:, :2]
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), ValueError,
                 r"packed_w: expected shape \[ceil\(H / 16\), 4, P, 16\]")  # fmt: skip
    bad[9] = args[9].double()
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), TypeError,
                 "packed_w: expected dtype Float")  # fmt: skip
    bad[9] = args[9].transpose(0, 1).contiguous().transpose(0, 1)
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), ValueError,
                 "packed_w: expected a contiguous tensor")  # fmt: skip
    bad = dict(enumerate(args))
    bad[18] = args[18][:, :, :2]
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), ValueError,
                 r"packed_x: expected shape \[ceil\(H / 16\), 4, I, 16\] \(pack_recurrent_weight "
                 r"of w's input rows\) = \[2, 4, 3, 16\], got \[2, 4, 2, 16\]")  # fmt: skip
    bad[18] = args[18].double()
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), TypeError,
                 "packed_x: expected dtype Float")  # fmt: skip
    bad = dict(enumerate(args))
    bad[10] = torch.tensor([1, 2, 3])
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), ValueError,
                 r"sequence_length: expected shape \[B\] = \[2\]")  # fmt: skip
    bad[10] = torch.tensor([1.0, 2.0])
    _raises_same(ops.block_lstm_inference.default, tuple(bad.values()), TypeError,
                 "sequence_length: expected an integer dtype")  # fmt: skip
    bad[10] = torch.tensor([1, args[0].shape[0] + 1])
    with pytest.raises(ValueError, match=r"sequence_length: expected values in \[0, T\]"):
        ops.block_lstm_inference(*bad.values())
    cargs = list(inference_cudnn_args(packed=True))
    cargs[5] = cargs[5][:1]
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), ValueError,
                 r"packed_r: expected none or one tensor per layer and direction \(2\), "
                 "got 1")  # fmt: skip
    cargs[5] = [t[:, :3] for t in inference_cudnn_args(packed=True)[5]]
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), ValueError,
                 r"packed_r: expected shape \[ceil\(H / 16\), G, P, 16\]")  # fmt: skip
    cargs = list(inference_cudnn_args(packed=True))
    cargs[6] = cargs[6][1:]
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), ValueError,
                 r"packed_x: expected none or one tensor per layer and direction \(2\), "
                 "got 1")  # fmt: skip
    cargs[6] = [t[:, :, :2] for t in inference_cudnn_args(packed=True)[6]]
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), ValueError,
                 r"packed_x: expected shape \[ceil\(H / 16\), G, in_l, 16\] "
                 r"\(pack_recurrent_weight of Wᵀ\) = \[2, 4, 3, 16\], "
                 r"got \[2, 4, 2, 16\]")  # fmt: skip
    cargs[6] = [t.double() for t in inference_cudnn_args(packed=True)[6]]
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), TypeError,
                 "packed_x: expected dtype Float")  # fmt: skip
    # Under skip_input layer 0 has no input weights to pack.
    cargs = list(inference_cudnn_args(packed=True))
    cargs[2] = cargs[1] = torch.randn(2, 2, 20)
    cargs[0] = torch.randn(4, 2, 20)
    skip = modules.CudnnLSTM(1, 20, 20, input_mode="skip_input", direction="bidirectional")
    cargs[3] = skip.opaque_kernel.detach()
    cargs[8] = "skip_input"
    _raises_same(ops.cudnn_rnn_inference.default, tuple(cargs), ValueError,
                 r"packed_x: expected none with input_mode skip_input \(layer 0 has no input "
                 r"weights\), got 2 tensors")  # fmt: skip


def _workspace_modules():
    torch.manual_seed(7)
    return {
        "CudnnLSTM": modules.CudnnLSTM(2, 48, 8, direction="bidirectional"),
        "CudnnGRU": modules.CudnnGRU(1, 48, 8),
        "LSTMBlockFusedCell": modules.LSTMBlockFusedCell(48, 8),
    }


def _call(m, x):
    return m(x)[0]


def test_inference_outputs_are_not_the_kept_workspace():
    """The inference forwards keep their input products' buffer per thread
    (csrc/cpu/workspace.h): a call's outputs are never in it. The next call, of another shape,
    leaves them as they were, and each equals the differentiable forward's bits. T·B = 160
    rows reach the panels' input product, the path that writes to the workspace."""
    g = torch.Generator().manual_seed(3)
    x1, x2 = torch.randn(20, 8, 8, generator=g), torch.randn(33, 5, 8, generator=g)
    for name, m in _workspace_modules().items():
        want1, want2 = _call(m, x1), _call(m, x2)  # grad recorded: the training forwards
        assert want1.grad_fn is not None, name
        with torch.inference_mode():
            got1 = _call(m, x1)
            kept = got1.clone()
            got2 = _call(m, x2)
        assert torch.equal(got1, kept), name
        assert torch.equal(got1, want1.detach()) and torch.equal(got2, want2.detach()), name


def test_inference_from_two_threads_at_once():
    """Each thread keeps its own workspace: two threads calling the inference forwards at once
    get what one thread gets."""
    from concurrent.futures import ThreadPoolExecutor

    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(20 + k, 8, 8, generator=g) for k in range(6)]
    mods = _workspace_modules()
    with torch.inference_mode():
        want = {(n, k): _call(m, x) for n, m in mods.items() for k, x in enumerate(xs)}

    def run(k):
        with torch.inference_mode():
            return {(n, k): _call(m, xs[k]) for n, m in mods.items()}

    with ThreadPoolExecutor(max_workers=2) as pool:
        got = {key: v for part in pool.map(run, [0, 1, 2, 3, 4, 5] * 3) for key, v in part.items()}
    assert got.keys() == want.keys()
    for key, v in got.items():
        assert torch.equal(v, want[key]), key
