"""The Keras modules' call against Keras 3 itself (TF 2.21 backend) where the states matter:
non-zero initial states, every final state (`return_state`), `stateful` across calls and after
`reset_states`, `go_backwards`, masks (holes anywhere, padding, a fully masked row) with initial
states, both `zero_output_for_mask`, `time_major`; for LSTM (both kernels: BlockLSTMV2 and the
variant op), GRU (both reset positions), SimpleRNN and Bidirectional (every merge mode). Each
case compares the outputs, every state and the gradients of one loss using all of them with
respect to the input, the initial states and every weight: h0 passed as c0, or the final h
returned as c, shows only with non-zero initial states and every state returned. Also the
modules' defaults (Keras 3's), their refusals and their initialisers. Every expectation here is
Keras' own numbers, from the Keras layer built in the test."""

import numpy as np
import pytest
import torch

from tests.helpers import STATES_B as B
from tests.helpers import STATES_I as I
from tests.helpers import STATES_T as T
from tests.helpers import (
    assert_close,
    keras_module,
    keras_run,
    needs_tf,
    random_states,
    randomize,
    torch_loss,
)
from torch_lstm_grad import keras_layers

# Row 0 full, row 1 right-padded, row 2 holes anywhere (first step masked), row 3 masked
# throughout (its states stay the initial ones, its outputs zero).
MASK = np.array(
    [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [0, 1, 0, 1, 1, 0], [0, 0, 0, 0, 0, 0]], bool
)
_ACT = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "linear": "linear",
        "hard_sigmoid": "hard_sigmoid_keras3"}  # fmt: skip
_CLASSES = {
    "LSTM": keras_layers.KerasLSTM,
    "GRU": keras_layers.KerasGRU,
    "SimpleRNN": keras_layers.KerasSimpleRNN,
}


def _ours_like(layer, input_size: int, **override):
    """Our module for a Keras RNN layer: its config, its weights (copied)."""
    kind = type(layer).__name__
    cfg = layer.get_config()
    kw = {
        "activation": _ACT[cfg["activation"]],
        "use_bias": cfg["use_bias"],
        "return_sequences": cfg["return_sequences"],
        "return_state": cfg["return_state"],
        "go_backwards": cfg["go_backwards"],
        "stateful": cfg["stateful"],
        # Bidirectional sets the attribute on its layers, not their config.
        "zero_output_for_mask": layer.zero_output_for_mask,
    }
    if kind != "SimpleRNN":
        kw["recurrent_activation"] = _ACT[cfg["recurrent_activation"]]
    if kind == "GRU":
        kw["reset_after"] = cfg["reset_after"]
    kw.update(override)
    module = _CLASSES[kind](cfg["units"], input_size, **kw)
    with torch.no_grad():
        for w in layer.trainable_weights:
            getattr(module, w.path.rsplit("/", 1)[1]).copy_(torch.from_numpy(w.numpy()))
    return module


def _bidirectional_like(layer, input_size: int, **override):
    return keras_layers.KerasBidirectional(
        _ours_like(layer.forward_layer, input_size, **override),
        _ours_like(layer.backward_layer, input_size, **override),
        layer.merge_mode,
    )


def _param(module, path: str):
    """Our parameter for a Keras weight path (`bidirectional/forward_lstm/lstm_cell/kernel`)."""
    if isinstance(module, keras_layers.KerasBidirectional):
        module = module.forward_layer if "/forward_" in path else module.backward_layer
    return getattr(module, path.rsplit("/", 1)[1])


def _model(keras, layer, n_states: int, mask: bool, batch=None):
    """A functional model around one layer: inputs x (then the mask, then the initial states),
    outputs everything the layer returns."""
    shape = {"batch_shape": (batch, T, I)} if batch else {"shape": (T, I)}
    x_in = keras.Input(name="x", **shape)
    inputs, kwargs = [x_in], {}
    if mask:
        m_shape = {"batch_shape": (batch, T)} if batch else {"shape": (T,)}
        kwargs["mask"] = keras.Input(dtype="bool", name="m", **m_shape)
        inputs.append(kwargs["mask"])
    if n_states:
        kwargs["initial_state"] = [keras.Input(shape=(layer_units(layer),), name=f"s{k}")
                                   for k in range(n_states)]  # fmt: skip
        inputs += kwargs["initial_state"]
    out = layer(x_in, **kwargs)
    return keras.Model(inputs, out if isinstance(out, (list, tuple)) else [out])


def layer_units(layer) -> int:
    inner = getattr(layer, "forward_layer", layer)
    return inner.units


def _compare(model, ours, x, mask, states, seed, time_major=False):
    """Keras' outputs and gradients (input, initial states, weights) against ours."""
    inputs = [x] + ([mask] if mask is not None else []) + list(states)
    want, rs, d_inputs, d_weights = keras_run(model, inputs, seed)
    x_t = torch.from_numpy(x).requires_grad_()
    s_t = [torch.from_numpy(s).requires_grad_() for s in states]
    m_t = None if mask is None else torch.from_numpy(mask)
    got = ours(x_t.transpose(0, 1) if time_major else x_t, mask=m_t,
               initial_state=s_t or None)  # fmt: skip
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    if time_major:  # the sequence outputs (3-D; states are 2-D) back to batch-major
        got = [g.transpose(0, 1) if g.dim() == 3 else g for g in got]
    assert len(got) == len(want)
    params = {p: _param(ours, p) for p in d_weights}
    grads = torch.autograd.grad(torch_loss(got, rs), [x_t, *s_t, *params.values()])
    pairs = {f"output {k}": (g, w) for k, (g, w) in enumerate(zip(got, want, strict=True))}
    pairs["d x"] = (grads[0], d_inputs[0])
    for k in range(len(s_t)):
        pairs[f"d initial_state {k}"] = (grads[1 + k], d_inputs[1 + k])
    for (p, _), g in zip(params.items(), grads[1 + len(s_t) :], strict=True):
        pairs[f"d {p}"] = (g, d_weights[p])
    assert_close(pairs)


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, T, I)).astype(np.float32)


_KINDS = {
    "lstm": lambda k, **kw: k.layers.LSTM(5, **kw),
    "lstm_variant": lambda k, **kw: k.layers.LSTM(
        4, recurrent_activation="hard_sigmoid", activation="relu", **kw
    ),
    "gru_after": lambda k, **kw: k.layers.GRU(4, **kw),
    "gru_before": lambda k, **kw: k.layers.GRU(3, reset_after=False, **kw),
    "rnn_tanh": lambda k, **kw: k.layers.SimpleRNN(4, **kw),
    "rnn_relu": lambda k, **kw: k.layers.SimpleRNN(3, activation="relu", **kw),
}
_N_STATES = {"lstm": 2, "lstm_variant": 2}
# (return_sequences, go_backwards, mask, zero_output_for_mask, time_major of ours)
_CALLS = {
    "seq_mask": (True, False, True, False, False),
    "last_backwards_mask": (False, True, True, False, False),
    "seq_backwards_mask_zeros": (True, True, True, True, False),
    "seq_backwards_time_major": (True, True, False, False, True),
}


@needs_tf
@pytest.mark.parametrize("call", list(_CALLS))
@pytest.mark.parametrize("kind", list(_KINDS))
def test_initial_and_final_states_vs_keras(kind, call):
    """A non-zero initial state (each state its own), return_state: the output, every final
    state and every gradient as Keras', with masks and go_backwards."""
    keras = keras_module()
    seqs, backwards, mask, zeros, time_major = _CALLS[call]
    layer = _KINDS[kind](keras, return_sequences=seqs, return_state=True,
                         go_backwards=backwards, zero_output_for_mask=zeros)  # fmt: skip
    n = _N_STATES.get(kind, 1)
    model = _model(keras, layer, n, mask)
    randomize(model.trainable_weights, 7)
    ours = _ours_like(layer, I, time_major=time_major)
    _compare(model, ours, _x(1), MASK if mask else None, random_states(n, layer.units, 2), seed=3,
             time_major=time_major)  # fmt: skip


@needs_tf
@pytest.mark.parametrize("kind", ["lstm", "gru_before"])
def test_long_sequence_with_holes_vs_keras(kind):
    """40 steps with holes anywhere: the unmasked steps are gathered in order (the sort keeping
    equal keys in place, which from 17 keys on an unstable CPU sort does not), a numpy mask as
    Keras takes it."""
    keras = keras_module()
    steps = 40
    layer = _KINDS[kind](keras, return_sequences=True, return_state=True)
    n = _N_STATES.get(kind, 1)
    r = np.random.default_rng(18)
    x = r.standard_normal((B, steps, I)).astype(np.float32)
    mask = r.uniform(size=(B, steps)) < 0.6
    states = random_states(n, layer.units, 19)
    layer.build((B, steps, I))
    randomize(layer.trainable_weights, 20)
    want = layer(x, mask=mask, initial_state=list(states), training=False)
    ours = _ours_like(layer, I)
    got = ours(torch.from_numpy(x), mask=mask, initial_state=[torch.from_numpy(s) for s in states])
    pairs = zip(got, want, strict=True)
    assert_close({f"output {k}": (g, w.numpy()) for k, (g, w) in enumerate(pairs)})


# Padding as `pad_sequences` writes it: each row's steps then zeros ("post") or zeros then its
# steps ("pre"); a full row and a fully masked row. Read in the direction whose padding comes
# last (post forwards, pre backwards) the unmasked steps already come first and run without a
# gather; in the other, each row is rotated by its padding instead of sorted (`_padding`).
POST = np.array(
    [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], bool
)
_PADDED = {
    "post": (POST, False, (True, False)),
    "pre_backwards": (POST[:, ::-1].copy(), True, (True, False)),
    "pre": (POST[:, ::-1].copy(), False, (False, True)),
    "post_backwards": (POST, True, (False, True)),
}


@needs_tf
@pytest.mark.parametrize("zeros", [True, False], ids=["zeros", "previous"])
@pytest.mark.parametrize("padding", list(_PADDED))
@pytest.mark.parametrize("kind", ["lstm", "gru_after", "gru_before", "rnn_tanh"])
def test_padded_masks_vs_keras(kind, padding, zeros):
    """Padded masks, read either way: outputs, final states and every gradient as Keras', and
    a masked step's output +0.0 as Keras' `where` gives it (where the kernel ran those steps on
    the padding, a product with the mask would give -0.0 or NaN)."""
    keras = keras_module()
    mask, backwards, form = _PADDED[padding]
    run_order = torch.from_numpy(mask).t()
    assert keras_layers.recurrent._padding(run_order.flip(0) if backwards else run_order) == form
    layer = _KINDS[kind](keras, return_sequences=True, return_state=True,
                         go_backwards=backwards, zero_output_for_mask=zeros)  # fmt: skip
    n = _N_STATES.get(kind, 1)
    model = _model(keras, layer, n, mask=True)
    randomize(model.trainable_weights, 8)
    ours = _ours_like(layer, I)
    x, states = _x(9), random_states(n, layer.units, 10)
    _compare(model, ours, x, mask, states, seed=11)
    want = model([x, mask, *states])[0].numpy()
    with torch.no_grad():
        got = ours(torch.from_numpy(x), mask=torch.from_numpy(mask),
                   initial_state=[torch.from_numpy(s) for s in states])[0].numpy()  # fmt: skip
    run_mask = mask[:, ::-1] if backwards else mask  # the outputs' order
    masked = ~run_mask if zeros else np.cumsum(run_mask, 1) == 0
    assert masked.any() and (want[masked] == 0).all()
    np.testing.assert_array_equal(np.signbit(got[masked]), np.signbit(want[masked]))


@needs_tf
@pytest.mark.parametrize("kind", ["lstm", "gru_before", "rnn_tanh"])
def test_masked_steps_give_the_previous_state_as_keras_2_2(kind):
    """`masked_outputs="previous_state"` (what the converter sets for Keras <= 2.2's files):
    those backends' `rnn` gave a masked step `states[0]`, the state carried so far, where Keras
    >= 2.3 gives the previous output. They differ only before a row's first unmasked step: the
    initial h, not zeros. Expected: Keras 3's numbers, with those steps set to the initial h."""
    keras = keras_module()
    layer = _KINDS[kind](keras, return_sequences=True, return_state=True)
    n = _N_STATES.get(kind, 1)
    x = _x(4)
    states = random_states(n, layer.units, 5)
    layer.build(x.shape)
    randomize(layer.trainable_weights, 6)
    want = [w.numpy() for w in layer(x, mask=MASK, initial_state=list(states), training=False)]
    before_first = np.cumsum(MASK, axis=1) == 0  # (B, T)
    want[0] = np.where(before_first[..., None], states[0][:, None, :], want[0])
    assert before_first[:, 0].any() and not np.allclose(states[0], 0)  # the case is exercised
    ours = _ours_like(layer, I, masked_outputs="previous_state")
    got = ours(torch.from_numpy(x), mask=MASK, initial_state=[torch.from_numpy(s) for s in states])
    assert_close({f"output {k}": (g, w) for k, (g, w) in enumerate(zip(got, want, strict=True))})


# (inner layer, merge_mode, return_sequences, mask, time_major of ours)
_BIDI = {
    "lstm_concat_seq_mask": ("LSTM", "concat", True, True, False),
    "lstm_list_last_mask": ("LSTM", None, False, True, False),
    "lstm_list_seq_time_major": ("LSTM", None, True, True, True),
    "gru_ave_seq": ("GRU", "ave", True, False, False),
    "gru_before_mul_last_mask": ("GRU_before", "mul", False, True, False),
    "rnn_sum_seq_mask_time_major": ("SimpleRNN", "sum", True, True, True),
}


def _inner(keras, kind, **kw):
    if kind == "GRU_before":
        return keras.layers.GRU(3, reset_after=False, **kw)
    return getattr(keras.layers, kind)(3, **kw)


@needs_tf
@pytest.mark.parametrize("case", list(_BIDI))
def test_bidirectional_states_vs_keras(case):
    """Bidirectional with initial states (forward's then backward's), return_state (every
    state of both directions), masks, each merge mode."""
    keras = keras_module()
    kind, merge, seqs, mask, time_major = _BIDI[case]
    layer = keras.layers.Bidirectional(
        _inner(keras, kind, return_sequences=seqs, return_state=True), merge_mode=merge
    )
    n = 4 if kind == "LSTM" else 2
    model = _model(keras, layer, n, mask)
    randomize(model.trainable_weights, 8)
    ours = _bidirectional_like(layer, I, time_major=time_major)
    _compare(model, ours, _x(4), MASK if mask else None, random_states(n, 3, 5), seed=6,
             time_major=time_major)  # fmt: skip


@needs_tf
@pytest.mark.parametrize("kind", ["lstm", "gru_after", "rnn_tanh", "bidirectional"])
def test_stateful_across_calls_vs_keras(kind):
    """A stateful layer (go_backwards, a mask) starts each call from the last call's final
    states, a call given initial states starts from those, `reset_states` returns to zeros; the
    states it returns are Keras' at every call."""
    keras = keras_module()
    flags = dict(return_sequences=True, return_state=True, go_backwards=True, stateful=True)
    if kind == "bidirectional":
        # Keras' backward copy reverses it; Keras 3.15's stateful Bidirectional fails with
        # return_state (its compute_mask multiplies a generator): the output alone (it depends
        # on the kept states).
        flags.update(go_backwards=False, return_state=False)
        layer = keras.layers.Bidirectional(keras.layers.LSTM(3, **flags), merge_mode="sum")
        n = 4
    else:
        layer = _KINDS[kind](keras, **flags)
        n = _N_STATES.get(kind, 1)
    layer.build((B, T, I))
    randomize(layer.trainable_weights, 9)
    ours = _bidirectional_like(layer, I) if kind == "bidirectional" else _ours_like(layer, I)
    given = random_states(n, layer_units(layer), 10)
    mask, m = MASK, torch.from_numpy(MASK)
    for call in range(4):
        x = _x(20 + call)
        if call == 1:  # initial states given to a stateful layer replace the kept ones
            want = layer(x, mask=mask, initial_state=list(given), training=False)
            got = ours(torch.from_numpy(x), mask=m,
                       initial_state=[torch.from_numpy(s) for s in given])  # fmt: skip
        else:
            if call == 3:  # (a Bidirectional's resets both halves, as Keras')
                layer.reset_states()
                ours.reset_states()
            want = layer(x, mask=mask, training=False)
            got = ours(torch.from_numpy(x), mask=m)
        got, want = (list(v) if isinstance(v, (list, tuple)) else [v] for v in (got, want))
        assert len(got) == len(want) == (1 if kind == "bidirectional" else 1 + n)
        assert_close({f"call {call} output {k}": (g, w.numpy())
                      for k, (g, w) in enumerate(zip(got, want, strict=True))})  # fmt: skip


@needs_tf
def test_stateful_states_are_detached_and_gradients_flow_in_the_call():
    """The kept states carry no graph from the last call (as Keras' assigned variables): a
    second call's backward does not reach into the first call, and its gradients with respect
    to the weights are Keras' for a layer starting from those states."""
    keras = keras_module()
    layer = keras.layers.LSTM(4, return_sequences=True, return_state=True, stateful=True)
    model = _model(keras, layer, 0, False, batch=B)
    randomize(model.trainable_weights, 11)
    ours = _ours_like(layer, I)
    x1, x2 = _x(30), _x(31)
    model([x1], training=False)
    first = ours(torch.from_numpy(x1))
    assert not any(s.requires_grad for s in ours._states)
    # Keras' second call, differentiated: the same as a non-stateful layer given the states.
    plain = keras.layers.LSTM(4, return_sequences=True, return_state=True)
    plain_model = _model(keras, plain, 2, False)
    for w_plain, w in zip(plain_model.trainable_weights, model.trainable_weights, strict=True):
        w_plain.assign(w.numpy())
    h, c = (s.detach().numpy() for s in first[1:])
    want, rs, d_in, d_w = keras_run(plain_model, [x2, h, c], 12)
    x_t = torch.from_numpy(x2).requires_grad_()
    got = list(ours(x_t))
    grads = torch.autograd.grad(torch_loss(got, rs), [x_t, ours.kernel, ours.recurrent_kernel,
                                                      ours.bias])  # fmt: skip
    pairs = {f"output {k}": (g, w) for k, (g, w) in enumerate(zip(got, want, strict=True))}
    pairs["d x"] = (grads[0], d_in[0])
    for name, g in zip(("kernel", "recurrent_kernel", "bias"), grads[1:], strict=True):
        pairs[f"d {name}"] = (g, next(v for k, v in d_w.items() if k.endswith("/" + name)))
    assert_close(pairs)


@needs_tf
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_defaults_are_keras_defaults(kind):
    """Built with only units and input size, a module computes the Keras layer built with
    only units (Keras 3's defaults: sigmoid/tanh, a bias, reset_after, batch-major, the last
    output alone, no states returned, not stateful, the previous output at masked steps): over
    two calls, the second with a mask. Its initial bias is Keras' (the LSTM's forget block 1)."""
    keras = keras_module()
    layer = getattr(keras.layers, kind)(4)
    model = _model(keras, layer, 0, True)
    ours = _CLASSES[kind](4, I)
    keras_bias = layer.cell.bias.numpy()
    assert_close({"initial bias": (ours.bias, keras_bias)}, tol=0.0)
    randomize(model.trainable_weights, 13)
    with torch.no_grad():
        for w in layer.trainable_weights:
            getattr(ours, w.path.rsplit("/", 1)[1]).copy_(torch.from_numpy(w.numpy()))
    full = np.ones((B, T), bool)
    _compare(model, ours, _x(14), full, [], seed=15)
    _compare(model, ours, _x(16), MASK, [], seed=17)


@needs_tf
def test_refusals():
    """What Keras refuses, or what the module cannot know, raises (and a valid call does not)."""
    for units, size in ((0, 3), (-1, 3), (3, -1)):
        with pytest.raises(ValueError, match="units, input_size"):
            keras_layers.KerasGRU(units, size)
    keras_layers.KerasGRU(1, 0)  # no input features is a shape Keras accepts
    lstm = keras_layers.KerasLSTM(3, I)
    x = torch.randn(B, T, I)
    with pytest.raises(ValueError, match="inputs: expected"):
        lstm(x[0])
    with pytest.raises(ValueError, match="inputs: expected"):
        lstm(torch.randn(B, T, I + 1))
    with pytest.raises(ValueError, match="a sequence of 0 steps"):
        lstm(x[:, :0])
    with pytest.raises(ValueError, match=r"expected 2 tensor\(s\)"):
        lstm(x, initial_state=[torch.zeros(B, 3)])
    with pytest.raises(ValueError, match=r"initial_state\[1\]: expected shape"):
        lstm(x, initial_state=[torch.zeros(B, 3), torch.zeros(B, 4)])
    with pytest.raises(ValueError, match="mask: expected shape"):
        lstm(x, mask=torch.ones(T, B, dtype=torch.bool))
    gru = keras_layers.KerasGRU(3, I, zero_output_for_mask=None)
    gru(x)  # without a mask, what Keras <= 2.2 returned at masked steps does not matter
    with pytest.raises(NotImplementedError, match="called with a mask"):
        gru(x, mask=torch.ones(B, T, dtype=torch.bool))
    assert gru(x, initial_state=torch.zeros(B, 3)).shape == (B, 3)  # one tensor, not a list
    fw, bw = keras_layers.KerasGRU(3, I), keras_layers.KerasGRU(3, I, go_backwards=True)
    with pytest.raises(ValueError, match="merge_mode"):
        keras_layers.KerasBidirectional(fw, bw, "max")
    with pytest.raises(ValueError, match="must agree"):
        keras_layers.KerasBidirectional(fw, keras_layers.KerasGRU(3, I, return_state=True))
    with pytest.raises(ValueError, match="must agree"):
        keras_layers.KerasBidirectional(fw, keras_layers.KerasGRU(3, I, return_sequences=True))
    with pytest.raises(ValueError, match="expected 2 tensors"):
        keras_layers.KerasBidirectional(fw, bw)(x, initial_state=[torch.zeros(B, 3)])


@needs_tf
@pytest.mark.parametrize("kind", ["LSTM", "GRU", "SimpleRNN"])
def test_initialisers(kind):
    """What reset_parameters promises (Keras' initialisers): a glorot-uniform kernel (within
    its limit, not all equal), each gate block of the recurrent kernel orthogonal, the bias
    Keras' initial bias."""
    cls = _CLASSES[kind]
    ours = cls(5, 3)
    G, U = ours.gates, 5
    limit = (6.0 / (3 + G * U)) ** 0.5
    assert ours.kernel.abs().max() <= limit and ours.kernel.std() > limit / 4
    for g in range(G):
        block = ours.recurrent_kernel[:, g * U : (g + 1) * U].detach()
        torch.testing.assert_close(block.t() @ block, torch.eye(U), atol=1e-5, rtol=0)
    keras = keras_module()
    layer = getattr(keras.layers, kind)(5)
    layer.build((None, T, 3))
    assert_close({"initial bias": (ours.bias, layer.cell.bias.numpy())}, tol=0.0)
    if kind == "LSTM":
        no_bias = cls(5, 3, use_bias=False)
        assert "bias" not in dict(no_bias.named_parameters())
        assert torch.equal(no_bias.bias, torch.zeros(20))
