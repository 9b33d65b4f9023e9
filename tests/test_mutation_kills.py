"""Tests the mutation run (harness/mutation_run.py, issue 34) asked for: each kills mutants
of the Python layers no other test killed. Every expectation is TensorFlow's, Keras', torch.nn's,
a float64 computation's (`torch_lstm_grad.reference`, or written out here) or a documented
contract or refusal, never this package's own numbers."""

import numpy as np
import pytest
import torch
from tf_oracle import available as _tf_available

from torch_lstm_grad import layouts, modules, ops, reference

T, B, I, H = 3, 2, 4, 5  # noqa: E741


def _f64(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def _raised(fn):
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the type is what is compared
        return type(err)
    return None


@pytest.mark.parametrize("attr", ["gate_order", "gate_activation", "activation", "clip_gradient"])
@pytest.mark.parametrize("value", [None, 1])
def test_fused_ops_refuse_a_non_string_attribute_as_the_reference(attr, value):
    """A non-string attribute (None, 1) raises the ValueError the float64 reference raises
    (the op's schema alone would raise a RuntimeError, "Expected a value of type 'str'"):
    ops.block_lstm_ex, ops.block_lstm_inference and ops.keras_gru check their attributes
    before the call. Kills the mutants dropping those checks."""
    x, cs, h, w, b = _f64(T, B, I), _f64(B, H), _f64(B, H), _f64(I + H, 4 * H), _f64(4 * H)
    z = torch.zeros(H, dtype=torch.float64)
    want = _raised(lambda: reference.block_lstm(T, x, cs, h, w, z, z, z, b, **{attr: value}))
    assert want is ValueError
    assert _raised(lambda: ops.block_lstm_ex(x, cs, h, w, b, **{attr: value})) is want
    if attr != "clip_gradient":  # block_lstm_inference has no clip_gradient (no backward)
        assert _raised(lambda: ops.block_lstm_inference(x, cs, h, w, b, **{attr: value})) is want
    if attr in ("gate_activation", "activation"):
        k, rk, bias = _f64(I, 3 * H), _f64(H, 3 * H), _f64(2, 3 * H)
        want = _raised(lambda: reference.keras_gru(T, x, h, k, rk, bias, **{attr: value}))
        assert want is ValueError
        assert _raised(lambda: ops.keras_gru(x, h, k, rk, bias, **{attr: value})) is want


# -- layouts.py ------------------------------------------------------------------------------------

needs_tf = pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")


def _keras_lstm_step(x, h, c, kernel, recurrent_kernel, bias):
    """One Keras LSTM step in float64 (IFCO blocks, bias holds the forget bias): (h, c)."""
    x, h, c, kernel, recurrent_kernel, bias = (
        t.double() for t in (x, h, c, kernel, recurrent_kernel, bias)
    )
    i, f, g, o = (x @ kernel + h @ recurrent_kernel + bias).chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _torch_lstm_step(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh):
    """torch.nn.LSTMCell (float64) with these weights: (h, c)."""
    cell = torch.nn.LSTMCell(weight_ih.shape[1], weight_hh.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for p, t in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh),
                        (weight_ih, weight_hh, bias_ih, bias_hh), strict=True):  # fmt: skip
            p.copy_(t)
        return cell(x.double(), (h.double(), c.double()))


def _tf_block_lstm_step(x, h, c, kernel, bias, **forget_bias):
    """TF's LSTMBlockCell (float32; ICFO; its own forget_bias default, 1, unless given): (h, c)."""
    from tf_oracle import tf_raw

    z = torch.zeros(kernel.shape[1] // 4)
    out = tf_raw("LSTMBlockCell", x=x, cs_prev=c, h_prev=h, w=kernel, wci=z, wcf=z, wco=z,
                 b=bias, cell_clip=-1.0, **forget_bias)  # fmt: skip
    return out[6], out[1]


def _close_steps(got, want):
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w.double(), atol=2e-6, rtol=2e-6)


def _lstm_case(I=3, H=4):  # noqa: E741
    g = torch.Generator().manual_seed(34)
    r = lambda *s: torch.rand(*s, generator=g) - 0.5  # noqa: E731
    return r(2, I), r(2, H), r(2, H), I, H, r


@needs_tf
def test_layouts_lstm_forget_bias_defaults_are_tfs():
    """The converters' forget_bias defaults are the cells': 1.0 for the block layout (TF's
    LSTMBlockCell adds its default 1 at run time), 0.0 for canonical_to_block_lstm (a
    CudnnCompatibleLSTMCell adds none). Each conversion with its default computes the same step
    as its source: TF's LSTMBlockCell with TF's default, a float64 Keras step, torch.nn.LSTMCell.
    The torch weights carry a nonzero bias_hh (the sum bias_ih + bias_hh is Keras' bias)."""
    x, h, c, I, H, r = _lstm_case()  # noqa: E741
    # block -> Keras, torch, canonical: the block cell run by TF with TF's default forget_bias
    kernel, bias = r(I + H, 4 * H), r(4 * H)
    want = _tf_block_lstm_step(x, h, c, kernel, bias)
    _close_steps(_keras_lstm_step(x, h, c, *layouts.block_lstm_to_keras(kernel, bias)), want)
    _close_steps(_torch_lstm_step(x, h, c, **layouts.block_lstm_to_torch(kernel, bias)), want)
    w, b = layouts.block_lstm_to_canonical(kernel, bias)
    cat = lambda ts: torch.cat(list(ts))  # noqa: E731 - canonical = torch.nn's row blocks
    _close_steps(_torch_lstm_step(x, h, c, cat(w[:4]), cat(w[4:]), cat(b[:4]), cat(b[4:])), want)
    # Keras -> block: TF's cell with its default forget_bias on the result = the Keras step
    keras = r(I, 4 * H), r(H, 4 * H), r(4 * H)
    want = _keras_lstm_step(x, h, c, *keras)
    _close_steps(_tf_block_lstm_step(x, h, c, *layouts.keras_lstm_to_block(*keras)), want)
    # torch (bias_hh nonzero) -> Keras and -> block
    sd = {"weight_ih": r(4 * H, I), "weight_hh": r(4 * H, H), "bias_ih": r(4 * H),
          "bias_hh": r(4 * H)}  # fmt: skip
    want = _torch_lstm_step(x, h, c, **sd)
    _close_steps(_keras_lstm_step(x, h, c, *layouts.torch_lstm_to_keras(**sd)), want)
    _close_steps(_tf_block_lstm_step(x, h, c, *layouts.torch_lstm_to_block(**sd)), want)
    # canonical (torch's row blocks, split here) -> block: a cell adding no forget bias
    w = [*sd["weight_ih"].chunk(4), *sd["weight_hh"].chunk(4)]
    b = [*sd["bias_ih"].chunk(4), *sd["bias_hh"].chunk(4)]
    kernel, bias = layouts.canonical_to_block_lstm(w, b)
    _close_steps(_tf_block_lstm_step(x, h, c, kernel, bias, forget_bias=0.0), want)


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in _tensors(o)]


def test_layouts_return_new_tensors():
    """layouts.py's contract: "All functions return new tensors (never views of the inputs)":
    no output shares storage with an input, so writing one never changes the other."""
    I, H, P = 3, 4, 2  # noqa: E741
    r = torch.randn
    lstm_k, lstm_rk, lstm_b = r(I, 4 * H), r(H, 4 * H), r(4 * H)
    sd = {"weight_ih": r(4 * H, I), "weight_hh": r(4 * H, H), "bias_ih": r(4 * H),
          "bias_hh": r(4 * H)}  # fmt: skip
    gru_sd = {"weight_ih": r(3 * H, I), "weight_hh": r(3 * H, H), "bias_ih": r(3 * H),
              "bias_hh": r(3 * H)}  # fmt: skip
    canon = [r(H, I) for _ in range(4)] + [r(H, H) for _ in range(4)]
    canon_b = [r(H) for _ in range(8)]
    gru_canon = [r(H, I) for _ in range(3)] + [r(H, H) for _ in range(3)]
    gru_canon_b = [r(H) for _ in range(6)]
    block_gru = r(I + H, 2 * H), r(2 * H), r(I + H, H), r(H)
    calls = [
        (layouts.block_lstm_to_keras, (r(I + H, 4 * H), r(4 * H))),
        (layouts.block_lstm_to_keras, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.keras_lstm_to_block, (lstm_k, lstm_rk, lstm_b)),
        (layouts.keras_lstm_to_block, (lstm_k, lstm_rk, lstm_b, 0.0)),
        (layouts.keras_lstm_to_torch, (lstm_k, lstm_rk, lstm_b)),
        (layouts.torch_lstm_to_keras, tuple(sd.values())),
        (layouts.block_lstm_to_torch, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.torch_lstm_to_block, (*sd.values(), 0.0)),
        (layouts.torch_to_canonical, (*sd.values(), "lstm")),
        (
            layouts.torch_to_canonical,
            (r(4 * H, I), r(4 * H, P), r(4 * H), r(4 * H), "lstm", r(P, H)),
        ),  # fmt: skip
        (layouts.torch_to_canonical, (*gru_sd.values(), "gru")),
        (layouts.canonical_to_torch, (canon, canon_b, "lstm")),
        (layouts.canonical_to_torch, (canon + [r(P, H)], canon_b, "lstm")),
        (layouts.keras_lstm_to_canonical, (lstm_k, lstm_rk, lstm_b)),
        (layouts.canonical_to_keras_lstm, (canon, canon_b)),
        (layouts.block_lstm_to_canonical, (r(I + H, 4 * H), r(4 * H), 0.0)),
        (layouts.canonical_to_block_lstm, (canon, canon_b)),
        (layouts.keras_gru_to_torch, (r(I, 3 * H), r(H, 3 * H), r(2, 3 * H))),
        (layouts.torch_gru_to_keras, tuple(gru_sd.values())),
        (layouts.keras_gru_to_canonical, (r(I, 3 * H), r(H, 3 * H), r(2, 3 * H))),
        (layouts.canonical_to_keras_gru, (gru_canon, gru_canon_b)),
        (layouts.keras_gru_to_block, (r(I, 3 * H), r(H, 3 * H), r(3 * H))),
        (layouts.block_gru_to_keras, block_gru),
        (layouts.keras_cudnn_to_keras, (r(I, 4 * H), r(H, 4 * H), r(8 * H))),
        (layouts.keras_cudnn_to_keras, (r(I, 3 * H), r(H, 3 * H), r(6 * H))),
    ]
    for fn, args in calls:
        given = [a for a in args if not isinstance(a, (str, float))]
        ins = {t.untyped_storage().data_ptr() for t in _tensors(given)}
        for k, t in enumerate(_tensors(fn(*args))):
            assert t.untyped_storage().data_ptr() not in ins, f"{fn.__name__}: output {k}"


def test_layouts_refusals():
    """layouts.py's shape refusals: a ValueError naming the argument, not an IndexError or
    torch.cat's RuntimeError from deeper down, nor a silently wrong result."""
    r = torch.randn
    H = 3
    with pytest.raises(ValueError, match="kernel: expected a matrix"):
        layouts.block_lstm_to_keras(r(4 * H), r(4 * H))  # a vector for the kernel
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(5, 4 * H), r(4 * H + 1))  # the bias one too long
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(5, 4 * H + 1), r(4 * H))  # 13 columns: not 4 blocks
    with pytest.raises(ValueError, match=r"kernel/bias: expected \[I \+ H, 4H\] and \[4H\]"):
        layouts.block_lstm_to_keras(r(H - 1, 4 * H), r(4 * H))  # fewer rows than H
    with pytest.raises(ValueError, match=r"kernel: expected a matrix \[rows, 12\]"):
        layouts.keras_lstm_to_block(r(2, 3 * H), r(H, 4 * H), r(4 * H))
    with pytest.raises(ValueError, match=r"recurrent_kernel: expected a matrix \[rows, 12\]"):
        layouts.keras_lstm_to_block(r(2, 4 * H), r(H, 4 * H + 4), r(4 * H))
    with pytest.raises(ValueError, match="expected 8 .* weights and 8 biases"):
        layouts.canonical_to_torch([r(H, 2)] * 8, [r(H)] * 7, "lstm")  # a bias missing
    with pytest.raises(ValueError, match="expected 6 .* weights and 6 biases"):
        layouts.canonical_to_torch([r(H, 2)] * 6, [r(H)] * 7, "gru")
    with pytest.raises(ValueError, match=r"gates_kernel/gates_bias: expected \[5, 6\] and \[6\]"):
        layouts.block_gru_to_keras(r(2 + H, 2 * H), r(2 * H + 1), r(2 + H, H), r(H))
    # Keras 2's CuDNNLSTM ([I, 4U], [U, 4U], [8U]) / CuDNNGRU ([I, 3U], [U, 3U], [6U]) weights
    for shapes in [
        ((2, 2 * H), (H, 2 * H), (4 * H,)),  # two gate blocks: neither layer
        ((2, 4 * H), (H, 4 * H + 1), (8 * H,)),  # recurrent_kernel not [U, 4U]
        ((4 * H,), (H, 4 * H), (8 * H,)),  # a vector for the kernel
        ((2, 3 * H), (H, 4 * H), (8 * H,)),  # a GRU's kernel with an LSTM's recurrent kernel
        ((2, 4 * H), (H, 4 * H), (4 * H,)),  # one bias (Keras' LSTM's), not bW and bR
        ((2, 3 * H), (H, 3 * H), (3 * H,)),
        ((2, 0), (0, 0), (0,)),  # no units
    ]:
        with pytest.raises(ValueError, match="are not a CuDNNLSTM's"):
            layouts.keras_cudnn_to_keras(*(r(*s) for s in shapes))


@needs_tf
def test_layouts_block_lstm_without_inputs_vs_tf():
    """A block kernel of exactly H rows (I = 0: TF's LSTMBlockCell runs x [B, 0]) converts;
    its Keras weights compute TF's step."""
    _, h, c, _, H, r = _lstm_case()
    x = torch.zeros(2, 0)
    kernel, bias = r(H, 4 * H), r(4 * H)
    want = _tf_block_lstm_step(x, h, c, kernel, bias, forget_bias=0.5)
    k, rk, b = layouts.block_lstm_to_keras(kernel, bias, forget_bias=0.5)
    assert k.shape == (0, 4 * H)
    _close_steps(_keras_lstm_step(x, h, c, k, rk, b), want)


def _keras_gru_step(x, h, kernel, recurrent_kernel, bias):
    """One Keras GRU(reset_after=True) step in float64 (z, r, h blocks; bias [2, 3U])."""
    x, h, kernel, recurrent_kernel, bias = (t.double() for t in (x, h, kernel, recurrent_kernel,
                                                                 bias))  # fmt: skip
    xz, xr, xh = (x @ kernel + bias[0]).chunk(3, 1)
    hz, hr, hh = (h @ recurrent_kernel + bias[1]).chunk(3, 1)
    z, r = torch.sigmoid(xz + hz), torch.sigmoid(xr + hr)
    return z * h + (1 - z) * torch.tanh(xh + r * hh)


def test_layouts_keras2_cudnn_weights_vs_tf_keras():
    """Keras 2's CuDNNLSTM / CuDNNGRU weights as tf_keras saved them (tests/data/keras2/
    cudnn_weights.h5) through keras_cudnn_to_keras, run as Keras' LSTM and GRU(reset_after=True)
    steps in float64, give the outputs tf_keras computed for the twin model it loaded those
    weights into (its HDF5 loader's own conversion; expected.npz, written by
    make_fixtures.py): the LSTM's sequence, then the go_backwards GRU's on it."""
    import os

    import numpy as np

    h5py = pytest.importorskip("h5py", reason="h5py (TensorFlow's dependency) is not installed")

    here = os.path.join(os.path.dirname(__file__), "data", "keras2")
    e = np.load(os.path.join(here, "expected.npz"))
    with h5py.File(os.path.join(here, "cudnn_weights.h5"), "r") as f:
        w = {n: [torch.from_numpy(f[f"{n}/{n}/{v}:0"][()]) for v in
                 ("kernel", "recurrent_kernel", "bias")] for n in ("clstm", "cgru")}  # fmt: skip
    x = torch.from_numpy(e["cudnn/x"])  # [B, T, I]
    k, rk, b = layouts.keras_cudnn_to_keras(*w["clstm"])
    h = c = torch.zeros(x.shape[0], rk.shape[0], dtype=torch.float64)
    seq = []
    for t in range(x.shape[1]):
        h, c = _keras_lstm_step(x[:, t], h, c, k, rk, b)
        seq.append(h)
    lstm_out = torch.stack(seq, 1)
    torch.testing.assert_close(lstm_out, torch.from_numpy(e["cudnn/out0"]).double(), atol=1e-5,
                               rtol=1e-5)  # fmt: skip
    k, rk, b = layouts.keras_cudnn_to_keras(*w["cgru"])
    assert b.shape == (2, rk.shape[1])
    h, seq = torch.zeros(x.shape[0], rk.shape[0], dtype=torch.float64), []
    for t in reversed(range(x.shape[1])):  # go_backwards: the outputs in the order run
        h = _keras_gru_step(lstm_out[:, t], h, k, rk, b)
        seq.append(h)
    torch.testing.assert_close(torch.stack(seq, 1), torch.from_numpy(e["cudnn/out1"]).double(),
                               atol=1e-5, rtol=1e-5)  # fmt: skip


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
def test_layouts_opaque_params_round_trip_with_projection(direction):
    """Canonical lists of a 2-layer LSTM with a projection (per pseudo-layer 8 weights + W_proj,
    8 biases) -> canonical_to_params -> params_to_canonical: the same tensors back, every
    layer and direction's W_proj included."""
    L, H, I, P = 2, 4, 3, 2  # noqa: E741
    D = 2 if direction == "bidirectional" else 1
    weights, biases = [], []
    for layer in range(L):
        for _ in range(D):
            n_in = I if layer == 0 else P * D
            weights += [torch.randn(H, n_in) for _ in range(4)]
            weights += [torch.randn(H, P) for _ in range(4)] + [torch.randn(P, H)]
            biases += [torch.randn(H) for _ in range(8)]
    kw = {"direction": direction, "num_proj": P}
    params = layouts.canonical_to_params(weights, biases, "lstm", L, H, I, **kw)
    w2, b2 = layouts.params_to_canonical(params, "lstm", L, H, I, **kw)
    assert len(w2) == len(weights) and len(b2) == len(biases)
    assert all(torch.equal(a, b) for a, b in zip(w2 + b2, weights + biases, strict=True))


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_layouts_torch_rnn_without_bias_to_cudnn_vs_torch_nn(mode):
    """A torch.nn LSTM/GRU with bias=False (I != H) becomes a Cudnn* module with zero biases
    computing what torch.nn computes (float64: outputs and final states)."""
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    ref = cls(3, 5, num_layers=2, bias=False, dtype=torch.float64)
    ours = layouts.torch_rnn_to_cudnn(ref)
    x = torch.randn(4, 2, 3, dtype=torch.float64)
    with torch.no_grad():
        want, got = ref(x), ours(x)
    torch.testing.assert_close(got[0], want[0])
    want_states = want[1] if mode == "lstm" else (want[1],)
    for g, w in zip(got[1], want_states, strict=True):
        torch.testing.assert_close(g, w)


def test_layouts_cudnn_to_torch_rnn_input_modes():
    """cudnn_to_torch_rnn refuses a model whose layer 0 has no input matrix (skip_input, or
    auto_select with input_size == num_units, as the op decides), and converts every other:
    linear_input with input_size == num_units, auto_select with input_size != num_units. The
    converted weights are those of the torch.nn.LSTM they were set from."""
    for kw in ({"input_mode": "skip_input"}, {"input_mode": "auto_select"}):
        m = modules.CudnnLSTM(1, 4, 4, **kw)
        with pytest.raises(ValueError, match="skip_input feeds x to the gates"):
            layouts.cudnn_to_torch_rnn(m)
    for size, mode in ((4, "linear_input"), (3, "auto_select")):
        ref = torch.nn.LSTM(size, 4)
        m = modules.CudnnLSTM(1, 4, size, input_mode=mode)
        sd = {n[:-3]: p.detach() for n, p in ref.named_parameters()}
        with torch.no_grad():
            m.set_canonical_weights(*layouts.torch_to_canonical(**sd, rnn_mode="lstm"))
        back = layouts.cudnn_to_torch_rnn(m).state_dict()
        assert back.keys() == ref.state_dict().keys()
        assert all(torch.equal(back[k], v) for k, v in ref.state_dict().items())


def _keras2_loader_conversion(kernel, recurrent_kernel, bias, n_gates, lstm):
    """What Keras 2's HDF5 loader does to CuDNNLSTM / CuDNNGRU weights to load them into LSTM /
    GRU(reset_after=True) (tf_keras `_convert_rnn_weights`, from_cudnn=True), in numpy:
    kernel blocks `k.T.reshape(k.shape, order="F")`, recurrent blocks transposed, the bias
    reshaped (2, -1) and, for the LSTM, summed."""
    import numpy as np

    k = np.hstack([b.T.reshape(b.shape, order="F") for b in np.hsplit(kernel, n_gates)])
    r = np.hstack([b.T for b in np.hsplit(recurrent_kernel, n_gates)])
    b = bias.reshape(2, -1)
    return k, r, b.sum(axis=0) if lstm else b


@pytest.mark.parametrize("n_gates", [4, 3])
def test_layouts_keras2_cudnn_weights_vs_the_loaders_conversion(n_gates):
    """keras_cudnn_to_keras with I != U != number of gates (the fixture's CuDNNLSTM has I = 4
    gates, its CuDNNGRU I = 3): Keras 2's loader conversion, bit for bit."""
    I, U = 2, 5  # noqa: E741
    w = [torch.randn(I, n_gates * U, dtype=torch.float64),
         torch.randn(U, n_gates * U, dtype=torch.float64),
         torch.randn(2 * n_gates * U, dtype=torch.float64)]  # fmt: skip
    want = _keras2_loader_conversion(*(t.numpy() for t in w), n_gates, n_gates == 4)
    got = layouts.keras_cudnn_to_keras(*w)
    for g, e in zip(got, want, strict=True):
        assert torch.equal(g, torch.from_numpy(e))


# -- porting/describe_tf1.py ----------------------------------------------------------------------


def _describe_tf1(variables, **statements):
    from torch_lstm_grad.porting.describe.statements import Statements
    from torch_lstm_grad.porting.describe.tf1_cells import describe_tf1
    from torch_lstm_grad.porting.source import Source, Writer

    source = Source("ckpt", "TF1 checkpoint", Writer("tf1"), variables)
    return describe_tf1(source, Statements.from_args(**statements))


def _lstm_variables(scope, I=2, H=3):  # noqa: E741
    return {f"{scope}/kernel": np.zeros((I + H, 4 * H), np.float32),
            f"{scope}/bias": np.zeros(4 * H, np.float32)}  # fmt: skip


@needs_tf
def test_describe_tf1_assume_defaults_are_tf1s():
    """A checkpoint without a meta graph stores no cell arguments: `--assume-defaults` takes
    TF1's LSTMCell's own defaults (forget_bias 1.0, no cell_clip, tanh; read from TF's
    signature), marked as not stored in the file; a nested scope's leaf names the class
    (basic_lstm_cell: BasicLSTMCell; cudnn_compatible_lstm_cell: forget bias 0, as TF1 contrib's
    CudnnCompatibleLSTMCell, an LSTMBlockCell with forget_bias=0)."""
    import inspect

    from tf_oracle import tf_module

    tf_module()
    from tensorflow.python.keras.layers.legacy_rnn import rnn_cell_impl  # TF1's cells

    sig = inspect.signature(rnn_cell_impl.LSTMCell.__init__).parameters
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), assume_defaults=True)
    assert not refusals
    assert d.kind == "tf1.LSTMCell" and d.value("gate_activation") == "sigmoid"
    assert d.value("forget_bias") == sig["forget_bias"].default == 1.0
    assert d.value("cell_clip") is sig["cell_clip"].default is None
    assert d.value("activation") == "tanh" and sig["activation"].default is None  # None: tanh
    assert not any(d.attrs[k].stored for k in ("forget_bias", "cell_clip", "activation"))
    (d,), _ = _describe_tf1(_lstm_variables("rnn/basic_lstm_cell"), assume_defaults=True)
    assert d.kind == "tf1.BasicLSTMCell"
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/cudnn_compatible_lstm_cell"))
    assert d.kind == "tf1.CudnnCompatibleLSTMCell" and not refusals
    assert {k: d.attrs[k].value for k in ("forget_bias", "cell_clip", "activation")} == {
        "forget_bias": 0.0, "cell_clip": None, "activation": "tanh"}  # fmt: skip


def test_describe_tf1_refuses_unstored_arguments_without_approximation():
    """Without a graph, `--set` or `--assume-defaults`, the cell is refused naming what is
    missing and why; the refusal offers no approximation (so `--approximate` cannot let it
    through)."""
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"))
    (r,) = refusals
    assert r.attribute == "forget_bias, cell_clip, activation" and r.approximation is None
    assert r.reason.startswith("no meta graph next to the checkpoint: checkpoints store weights")
    assert "--assume-defaults" in r.reason


def test_describe_tf1_refuses_misshapen_projection_and_peepholes():
    """An LSTM scope whose projection/kernel is not [H, P], or whose w_*_diag is not [H], is
    refused naming the layer, the variable and its shape."""
    v = _lstm_variables("rnn/lstm_cell", I=2, H=3)
    v["rnn/lstm_cell/kernel"] = np.zeros((2 + 2, 12), np.float32)  # I + P rows, P = 2
    v["rnn/lstm_cell/projection/kernel"] = np.zeros((4, 2), np.float32)  # [4, P]: H is 3
    descriptions, refusals = _describe_tf1(v, assume_defaults=True)
    assert not descriptions
    assert [(r.layer, r.attribute, r.value, r.reason) for r in refusals] == [
        ("rnn.lstm_cell", "projection/kernel", [4, 2], "expected [3, P]")]  # fmt: skip
    v = _lstm_variables("rnn/lstm_cell", I=2, H=3)
    v |= {f"rnn/lstm_cell/w_{g}_diag": np.zeros(3, np.float32) for g in "ifo"}
    v["rnn/lstm_cell/w_f_diag"] = np.zeros(4, np.float32)
    _, refusals = _describe_tf1(v, assume_defaults=True)
    assert [(r.layer, r.attribute, r.value, r.reason) for r in refusals] == [
        ("rnn.lstm_cell", "w_f_diag", [4], "expected [3]")]  # fmt: skip


def test_describe_tf1_clip_gradient_without_a_graph():
    """Without a graph, a clipping cell's gradient rule comes from `--set clip_gradient` (the
    layer named either way: its module name or its scope), from the class when the scope names
    it (lstm_fused_cell: LSTMBlockFusedCell's kernel passes the gradient through), else the cell
    is refused: LSTMCell's clip_by_value and LSTMBlockCell's kernel differ, and the checkpoint
    does not say which wrote it."""
    sets = ["rnn.lstm_cell:cell_clip=3.0", "rnn.lstm_cell:clip_gradient=zero"]
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), sets=sets,
                                   assume_defaults=True)  # fmt: skip
    assert not refusals and d.value("cell_clip") == 3.0
    assert d.value("clip_gradient") == "zero" and not d.attrs["clip_gradient"].stored
    (d,), refusals = _describe_tf1(_lstm_variables("lstm_fused_cell"), sets=["cell_clip=3.0"],
                                   assume_defaults=True)  # fmt: skip
    assert not refusals and d.kind == "tf1.LSTMBlockFusedCell"
    assert d.value("clip_gradient") == "straight_through"
    (d,), refusals = _describe_tf1(_lstm_variables("rnn/lstm_cell"), sets=["cell_clip=3.0"],
                                   assume_defaults=True)  # fmt: skip
    (r,) = refusals
    assert (r.layer, r.attribute, r.value) == ("rnn.lstm_cell", "clip_gradient", "(not stored)")
    assert "give --set clip_gradient=zero (LSTMCell) or straight_through" in r.reason
    assert r.approximation is None


@needs_tf
def test_tf1_graph_fused_ops_without_stored_attributes_take_tfs_defaults():
    """A fused LSTM node without forget_bias / cell_clip / use_peephole (a graph saved with
    strip_default_attrs=True, as TF1's SavedModelBuilder can write it) computes with the op's
    registered defaults, as TF runs it: the cell read from it carries TF's op registry's
    defaults (BlockLSTM, LSTMBlockCell: forget bias 1, clip 3; BlockLSTMV2: clip 0), and such a
    node and one storing the same values are one configuration."""
    from tf_oracle import tf_module

    tf_module()
    from tensorflow.python.framework import op_def_registry

    from torch_lstm_grad.porting.graphs import graph_def as tf1_graph
    from torch_lstm_grad.porting.graphs import tf1_cells

    for op in ("BlockLSTM", "LSTMBlockCell", "BlockLSTMV2"):
        want = {a.name: a.default_value.f if a.type == "float" else a.default_value.b
                for a in op_def_registry.get(op).attr
                if a.name in ("forget_bias", "cell_clip", "use_peephole")}  # fmt: skip
        n_in = 9 if op != "LSTMBlockCell" else 8
        stripped = tf1_graph.Node("a", op, [("in", k) for k in range(n_in)], {})
        stored = tf1_graph.Node("b", op, [("in", k) for k in range(n_in)], dict(want))
        graph = tf1_graph.Graph({})  # the inputs' producers: not in it, taken as named
        cell = tf1_cells._fused_cell(graph, [stripped, stored], "w", "rnn/cell")
        assert cell.problem is None and cell.cls == op
        if op == "BlockLSTMV2":
            want["forget_bias"] = 0.0  # it has no forget bias (Keras' LSTM math)
        assert cell.attrs == want
        # and the description's origin says they were not stored (the first use is read)
        names = (
            "cell_clip, use_peephole"
            if op == "BlockLSTMV2"
            else "cell_clip, forget_bias, use_peephole"
        )
        assert cell.where.endswith(f"not stored: {names} = {op}'s registered defaults")
        assert "not stored" not in tf1_cells._fused_cell(graph, [stored], "w", "rnn/cell").where


def _describe_with_graph_cell(variables, cell):
    """describe_tf1 with a meta graph whose op at every scope is `cell` (tf1_cells.GraphCell)."""
    from types import SimpleNamespace
    from unittest import mock

    from torch_lstm_grad.porting.describe import tf1_cells as describe
    from torch_lstm_grad.porting.describe.statements import Statements
    from torch_lstm_grad.porting.source import Source, Writer

    graph = SimpleNamespace(label="meta graph")
    source = Source("ckpt", "TF1 checkpoint", Writer("tf1"), variables, graph=graph)
    with mock.patch.multiple(
        describe, cell_at=lambda g, scope, kind: cell, cell_notes=lambda g, scope, c: []
    ):
        return describe.describe_tf1(source, Statements())


def test_describe_tf1_fused_ops_attributes():
    """A fused LSTM op read from the graph: its forget_bias and cell_clip as stored (a clip
    <= 0 clips nothing), TF's straight-through clip gradient (BlockLSTMGrad) when it clips,
    BlockLSTMV2's Keras gate order; refused when the op's use_peephole and the w_*_diag
    variables disagree, or when the scope holds a projection the op cannot apply."""
    from torch_lstm_grad.porting.graphs.tf1_cells import GraphCell

    v = _lstm_variables("rnn/lstm_fused_cell")
    attrs = {"forget_bias": 0.7, "cell_clip": 0.5, "use_peephole": False}
    (d,), refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTM", attrs, "op x"))
    assert not refusals and d.kind == "tf1.LSTMBlockFusedCell"
    got = {k: d.value(k) for k in ("forget_bias", "cell_clip", "clip_gradient", "gate_order")}
    assert got == {"forget_bias": 0.7, "cell_clip": 0.5, "clip_gradient": "straight_through",
                   "gate_order": None}  # fmt: skip
    attrs = {"forget_bias": 0.0, "cell_clip": 0.0, "use_peephole": False}
    (d,), refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTMV2", attrs, "op x"))
    assert not refusals and d.value("cell_clip") is None and d.value("gate_order") == "ifco"
    assert "clip_gradient" not in d.attrs
    attrs = {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": True}  # no w_*_diag
    _, refusals = _describe_with_graph_cell(v, GraphCell("LSTMBlockCell", attrs, "op x"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [
        ("rnn.lstm_fused_cell", "use_peepholes", True)]  # fmt: skip
    v = _lstm_variables("rnn/lstm_fused_cell", I=2, H=3)
    v["rnn/lstm_fused_cell/kernel"] = np.zeros((2 + 2, 12), np.float32)
    v["rnn/lstm_fused_cell/projection/kernel"] = np.zeros((3, 2), np.float32)
    attrs = {"forget_bias": 1.0, "cell_clip": 3.0, "use_peephole": False}
    _, refusals = _describe_with_graph_cell(v, GraphCell("BlockLSTM", attrs, "op x"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [
        ("rnn.lstm_fused_cell", "projection/kernel", [3, 2])]  # fmt: skip


def test_describe_tf1_gru_cells():
    """GRU scopes: TF1 GRUCell's names (layer named with dots; sigmoid gates; refused when a
    weight's shape is wrong, or without a graph when its activation is not stated, saying
    why); contrib v1 GRUBlockCell's w_ru, w_c, b_ru, b_c told apart by shape whichever name
    holds which (§5.4); a graph op the converter cannot read refused."""
    I, H = 2, 3  # noqa: E741
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    gru = {
        "rnn/gru_cell/gates/kernel": z(I + H, 2 * H),
        "rnn/gru_cell/gates/bias": z(2 * H),
        "rnn/gru_cell/candidate/kernel": z(I + H, H),
        "rnn/gru_cell/candidate/bias": z(H),
    }
    (d,), refusals = _describe_tf1(gru, sets=["activation=tanh"])
    assert not refusals and d.name == "rnn.gru_cell" and d.value("gate_activation") == "sigmoid"
    _, (r,) = _describe_tf1(gru)
    assert (r.layer, r.attribute) == ("rnn.gru_cell", "activation")
    assert r.reason.startswith("no meta graph next to the checkpoint")
    _, refusals = _describe_tf1({**gru, "rnn/gru_cell/gates/bias": z(H)}, sets=["activation=tanh"])
    assert [(r.attribute, r.value, r.reason) for r in refusals] == [
        ("gates/bias", [H], f"expected [{2 * H}]")]  # fmt: skip
    for swapped in (False, True):
        a, b = (z(I + H, H), z(I + H, 2 * H)) if swapped else (z(I + H, 2 * H), z(I + H, H))
        ba, bb = (z(H), z(2 * H)) if swapped else (z(2 * H), z(H))
        v1 = {"g/w_ru": a, "g/w_c": b, "g/b_ru": ba, "g/b_c": bb}
        (d,), refusals = _describe_tf1(v1)
        assert not refusals and d.kind == "tf1.GRUBlockCell" and d.value("activation") == "tanh"
        gates, cand = ("g/w_c", "g/w_ru") if swapped else ("g/w_ru", "g/w_c")
        gb, cb = ("g/b_c", "g/b_ru") if swapped else ("g/b_ru", "g/b_c")
        assert d.weights == {"gates/kernel": gates, "gates/bias": gb, "candidate/kernel": cand,
                             "candidate/bias": cb}  # fmt: skip
        assert (d.value("units"), d.value("input_size")) == (H, I)
    from torch_lstm_grad.porting.graphs.tf1_cells import GraphCell

    _, refusals = _describe_with_graph_cell(gru, GraphCell(None, problem="no pattern", where="w"))
    assert [(r.layer, r.attribute, r.value) for r in refusals] == [("rnn.gru_cell", "graph", "w")]


def test_describe_tf1_cudnn_names_refusals():
    """TF1 CudnnLSTM canonical names: layers with a gap (cell_1 without cell_0) or a cell
    missing a canonical variable are refused, naming what was found or is missing; an
    opaque_kernel alone is refused (its model is not stored), its shape named."""
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    pre = "cudnn_lstm/rnn/multi_rnn_cell/cell_{}/cudnn_compatible_lstm_cell/"
    _, (r,) = _describe_tf1({pre.format(1) + "kernel": z(5, 12), pre.format(1) + "bias": z(12)})
    assert (r.layer, r.attribute, r.value) == ("cudnn_lstm", "cells", "cell_1")
    _, (r,) = _describe_tf1({pre.format(0) + "kernel": z(5, 12)})
    assert (r.layer, r.attribute, r.value) == ("cudnn_lstm", "variables",
                                               "cell_0 missing ['bias']")  # fmt: skip
    _, (r,) = _describe_tf1({"m/opaque_kernel": z(40)})
    assert (r.layer, r.attribute, r.value) == ("m", "opaque_kernel", [40])


_CELL_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def _cell_values(dtype=np.float32):
    rng = np.random.default_rng(34)
    shapes = {"x": (B, I), "cs_prev": (B, H), "h_prev": (B, H), "w": (I + H, 4 * H),
              "wci": (H,), "wcf": (H,), "wco": (H,), "b": (4 * H,)}  # fmt: skip
    return {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}


def _as_given(values, given):
    """Each input as `given[name]` says: "torch" (a tensor of the array's dtype), "numpy" (the
    array), "list" (nested Python floats), "f64" (the array as a float64 numpy array) or
    "scalar" (a numpy float32 scalar: a 0-d input)."""
    out = {}
    for k, v in values.items():
        how = given.get(k, "torch")
        out[k] = {"torch": lambda v: torch.from_numpy(v.copy()), "numpy": lambda v: v,
                  "list": lambda v: v.tolist(), "f64": lambda v: v.astype(np.float64),
                  "scalar": lambda v: np.float32(v.reshape(-1)[0])}[how](v)  # fmt: skip
    return out


@pytest.mark.skipif(not _tf_available(), reason="TensorFlow is not installed")
@pytest.mark.parametrize(
    "given",
    [{k: "list" for k in _CELL_INPUTS[1:]}, {"x": "list"}, {k: "numpy" for k in _CELL_INPUTS},
     {"cs_prev": "f64", "w": "f64"}, {"x": "list", "b": "scalar"},
     {k: "list" for k in _CELL_INPUTS}],
    ids=["lists", "x_list", "all_numpy", "numpy_float64_among_float32", "numpy_scalar_bias",
         "all_lists"],
)  # fmt: skip
def test_raw_ops_convert_numpy_and_python_inputs_as_tf(given):
    """raw_ops.LSTMBlockCell given numpy arrays (float64 ones among float32 tensors), Python
    lists (x among them) or a numpy scalar converts them as TF's eager op does (to the dtype of
    the first tensor, else of the first input): the outputs are TF's, float32 like TF's, or both
    refuse (a 0-d bias)."""
    from tf_oracle import tf_module

    from torch_lstm_grad import raw_ops

    tf = tf_module()
    values = _cell_values()
    ours, theirs = _as_given(values, given), _as_given(values, given)
    theirs = {k: tf.constant(v.numpy()) if isinstance(v, torch.Tensor) else v
              for k, v in theirs.items()}  # fmt: skip
    try:
        want = tf.raw_ops.LSTMBlockCell(**theirs, forget_bias=1.0, cell_clip=3.0)
    except (tf.errors.InvalidArgumentError, ValueError, TypeError):
        want = None
    if want is None:
        with pytest.raises((ValueError, TypeError, RuntimeError), match="b"):
            raw_ops.LSTMBlockCell(**ours)
        return
    got = raw_ops.LSTMBlockCell(**ours)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float32 and w.dtype == tf.float32
        torch.testing.assert_close(g, torch.from_numpy(w.numpy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "given, float64_tensor",
    [({k: "list" for k in _CELL_INPUTS} | {"x": "f64"}, None),
     ({k: "numpy" for k in _CELL_INPUTS} | {"x": "list"}, "cs_prev")],
    ids=["no_tensor_x_float64_numpy", "x_list_cs_prev_float64_tensor"],
)  # fmt: skip
def test_raw_ops_take_float64_where_tf_infers_it(given, float64_tensor):
    """T is float64 where TF infers it: from the first tensor (cs_prev a float64 tensor, x a
    Python list, the rest float32 numpy arrays), or with no tensor from the first input
    converted alone (x a float64 numpy array, the rest lists); every input is converted to it
    and the outputs are the float64 reference's. (TF's own LSTMBlockCell has no float64 kernel
    on CPU.)"""
    from torch_lstm_grad import raw_ops

    values = _cell_values()
    given = _as_given(values, given)
    if float64_tensor:
        given[float64_tensor] = torch.from_numpy(values[float64_tensor].astype(np.float64))
    got = raw_ops.LSTMBlockCell(**given)
    f64 = {k: torch.from_numpy(v.astype(np.float64)) for k, v in values.items()}
    want = reference.lstm_block_cell(**f64)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def _lstm_inputs_beyond_the_clips(T=3, B=2, I=3, H=4, P=None):  # noqa: E741
    """float64 LSTM inputs whose cells pass ±4 and whose peepholes are not zero, so a default
    clip or peephole changes the outputs; h_prev [B, P] and w [I + P, 4H] with a projection."""
    g = torch.Generator().manual_seed(61)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    n = P or H
    return (torch.tensor(T), r(T, B, I), 6 * r(B, H).sign(), r(B, n), r(I + n, 4 * H), r(H),
            r(H), r(H), r(4 * H))  # fmt: skip


def test_autograd_functions_defaults_are_the_ops():
    """Each public Function applied with its defaults computes what the op computes with TF's
    defaults (the float64 reference): LSTMBlockCell and BlockLSTM forget_bias 1, cell_clip 3, no
    peepholes; BlockLSTMV2 no clip, no peepholes; block_lstm_ex forget_bias 1, no cell or
    projection clip, no peepholes (its projection's outputs pass ±1)."""
    from torch_lstm_grad import autograd as ag

    seq, x, cs, h, w, wci, wcf, wco, b = _lstm_inputs_beyond_the_clips()
    cases = [
        (ag.BlockLSTMFunction.apply(seq, x, cs, h, w, wci, wcf, wco, b),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b)),
        (ag.BlockLSTMV2Function.apply(seq, x, cs, h, w, wci, wcf, wco, b),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, forget_bias=0.0,
                              cell_clip=0.0, gate_order="ifco")),
        (ag.LSTMBlockCellFunction.apply(x[0], cs, h, w, wci, wcf, wco, b),
         reference.lstm_block_cell(x[0], cs, h, w, wci, wcf, wco, b)),
    ]  # fmt: skip
    seq, x, cs, h, w, wci, wcf, wco, b = _lstm_inputs_beyond_the_clips(P=2)
    w_proj = 4 * torch.ones(4, 2, dtype=torch.float64)
    cases.append(
        (ag.BlockLSTMExFunction.apply(seq, x, cs, h, w, wci, wcf, wco, b, w_proj),
         reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, cell_clip=0.0, w_proj=w_proj))
    )  # fmt: skip
    for got, want in cases:
        for g, w_ in zip(got, want, strict=True):
            torch.testing.assert_close(g, w_, rtol=1e-12, atol=1e-12)
    # The unclipped cells pass ±4 (and the projected outputs ±1): every clip would show.
    unclipped = reference.block_lstm(seq, x, cs, h, w, wci, wcf, wco, b, cell_clip=0.0,
                                     w_proj=w_proj)  # fmt: skip
    assert unclipped[1].abs().max() > 4 and unclipped[6].abs().max() > 1
    assert cases[0][1][1].abs().max() == 3  # BlockLSTM's default clip reached


def _keras_gru_inputs(T=3, B=2, I=3, H=4):  # noqa: E741
    g = torch.Generator().manual_seed(62)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) * 2 - 1  # noqa: E731
    return torch.tensor(T), r(T, B, I), r(B, H), r(I, 3 * H), r(H, 3 * H), r(2, 3 * H)


def test_keras_gru_function_defaults_and_gates():
    """KerasGRUFunction with its defaults is Keras' GRU default (reset_after, sigmoid, tanh; the
    float64 reference); its gate outputs z, r, hh, hr are not differentiable (a loss on one is
    an error, as for the LSTM gates), h is, to every input."""
    from torch_lstm_grad import autograd as ag

    inputs = [t.requires_grad_() if t.is_floating_point() else t for t in _keras_gru_inputs()]
    got = ag.KerasGRUFunction.apply(*inputs)
    want = reference.keras_gru(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    for k, name in enumerate(("z", "r", "hh", "hr")):
        assert not got[k].requires_grad, name
        with pytest.raises(RuntimeError):
            got[k].sum().backward(retain_graph=True)
    grads = torch.autograd.grad(got[4].sum(), inputs[1:])
    assert all(g.abs().sum() > 0 for g in grads)


def test_cudnn_rnn_function_defaults_are_cudnn_rnn_v3s():
    """CudnnRNNFunction with its defaults is CudnnRNNV3 with TF's (lstm, linear_input,
    unidirectional, no dropout, no projection, training, time-major): the same outputs and
    reserve; given only a dropout, its masks come from torch's generator (seeds 0), as the
    raw op's after the same manual_seed."""
    from torch_lstm_grad import autograd as ag
    from torch_lstm_grad import raw_ops

    g = torch.Generator().manual_seed(63)
    T, B, I, H, L = 3, 2, 4, 4, 2  # noqa: E741
    size = int(raw_ops.CudnnRNNParamsSize(L, H, I, T=torch.float64, S=torch.int64)[0])
    x, h0, c0, params = (torch.rand(*s, generator=g, dtype=torch.float64) - 0.5
                         for s in ((T, B, I), (L, B, H), (L, B, H), (size,)))  # fmt: skip
    got = ag.CudnnRNNFunction.apply(x, h0, c0, params)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, None)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    torch.manual_seed(64)
    got = ag.CudnnRNNFunction.apply(x, h0, c0, params, None, "lstm", "linear_input",
                                    "unidirectional", 0.5)  # fmt: skip
    torch.manual_seed(64)
    want = raw_ops.CudnnRNNV3(x, h0, c0, params, None, dropout=0.5)
    assert torch.equal(got[0], want.output)
    assert not torch.equal(want.output, raw_ops.CudnnRNNV3(x, h0, c0, params, None).output)


def test_cudnn_inference_name_does_not_outlive_its_call():
    """The op name TF's is_training error gives is the raw op's only within that call: the op
    called directly afterwards names CudnnRNNV3."""
    from torch_lstm_grad import raw_ops

    T, B, I, H = 2, 2, 3, 3  # noqa: E741
    size = int(raw_ops.CudnnRNNParamsSize(1, H, I, T=torch.float64, S=torch.int64)[0])
    x = torch.rand(T, B, I, dtype=torch.float64, requires_grad=True)
    h0, c0 = torch.zeros(1, B, H, dtype=torch.float64), torch.zeros(1, B, H, dtype=torch.float64)
    params = torch.rand(size, dtype=torch.float64)
    for name, run in (
        ("CudnnRNN", lambda: raw_ops.CudnnRNN(x, h0, c0, params, is_training=False).output),
        ("CudnnRNNV3", lambda: torch.ops.torch_lstm_grad.cudnn_rnn(
            x, h0, c0, params, None, "lstm", "linear_input", "unidirectional", 0.0, 0, 0, 0,
            False, True)[0]),
    ):  # fmt: skip
        with pytest.raises(ValueError) as info:
            run().sum().backward()
        assert str(info.value) == f"To use {name} in gradients, is_training must be set to True."


def test_raw_ops_under_vmap_without_grad_run_the_op_per_sample():
    """torch.func.vmap over a raw op, no gradient recorded: PyTorch's batching fallback runs the
    op per sample (the numbers of the loop). Under functorch the raw ops take the dispatcher's
    path, not the eager fast path."""
    import warnings

    from torch_lstm_grad import raw_ops

    g = torch.Generator().manual_seed(65)
    r = lambda *s: torch.rand(*s, generator=g, dtype=torch.float64) - 0.5  # noqa: E731
    x, rest = r(5, 2, 3), (r(2, 4), r(2, 4), r(7, 16), r(4), r(4), r(4), r(16))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's performance warning
        got = torch.func.vmap(lambda x: raw_ops.LSTMBlockCell(x, *rest).h)(x)
    want = torch.stack([raw_ops.LSTMBlockCell(x[k], *rest).h for k in range(5)])
    assert torch.equal(got, want)


def test_set_statements_allow_spaces_around_their_parts():
    """`--set` as a shell user writes it: spaces around the layer, the key and the value are
    not part of them; a value that is JSON is read as JSON, any other as text."""
    from torch_lstm_grad.porting.describe.statements import parse_set

    assert parse_set(' lstm : recurrent_activation = "sigmoid" ') == (
        "lstm",
        "recurrent_activation",
        "sigmoid",
    )
    assert parse_set("unit_forget_bias= true") == (None, "unit_forget_bias", True)
    assert parse_set("gru:reset_after=tanh") == ("gru", "reset_after", "tanh")
    with pytest.raises(ValueError, match=r"--set 'lstm: = 1': no KEY before '='"):
        parse_set("lstm: = 1")
