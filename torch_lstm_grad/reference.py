"""Pure-PyTorch reference ("oracle") for TensorFlow's fused RNN raw ops.

Readable and slow: it loops over time in Python and is differentiable with torch autograd. It
computes in whatever dtype it is given (the tests use float64). It imports nothing but torch, so it
can be loaded by file path without the compiled extension. Semantics: ``docs/tf-semantics.md``
§1-§5.

* LSTM gate layout of ``w [I+H, 4H]`` / ``b [4H]``: ``gate_order="icfo"`` (BlockLSTM V1,
  LSTMBlockCell: column blocks i, ci, f, o) or ``"ifco"`` (BlockLSTMV2 / Keras: i, f, ci, o).
* ``cell_clip`` applies only when > 0, before ``co`` and the output peephole; it is straight-through
  for autograd, because TF's gradient kernels ignore the clip.
* ``block_lstm`` returns zeros in all seven outputs for ``t >= seq_len_max`` (TF zeroes only
  ``cs``/``h`` and leaves ``i, f, o, ci, co`` uninitialised there: a deliberate, documented
  difference).
* The variants of ``block_lstm_ex``: ``gate_activation`` (i, f, o) ``"sigmoid"``,
  ``"hard_sigmoid_keras2"`` (``clip(0.2*x + 0.5, 0, 1)``), ``"hard_sigmoid_keras3"``
  (``relu6(x + 3) / 6``); ``activation`` (ci, co) ``"tanh"``, ``"relu"``, ``"linear"``;
  ``clip_gradient="zero"``: the cell clip is a real clamp (TF1 LSTMCell's clip_by_value);
  ``w_proj [H, P]``: ``h = clamp(o*act(cs) . w_proj, -proj_clip, proj_clip)`` (clamp only when
  ``proj_clip > 0``), the recurrent input; ``w`` is then ``[I+P, 4H]``. torch's clamp passes
  the gradient at the bounds, as TF's clip_by_value does.
* GRU is TF's reset-before GRUBlockCell: ``c = tanh([x, r*h_prev] . w_c + b_c)``,
  ``h = u*(h_prev - c) + c``.
"""

import torch

# Position of each gate's column block in w / b for each supported layout.
_GATE_ORDERS = {"icfo": ("i", "c", "f", "o"), "ifco": ("i", "f", "c", "o")}


def _gate_names(gate_order):
    try:
        return _GATE_ORDERS[gate_order]
    except KeyError:
        raise ValueError(
            f"gate_order must be one of {sorted(_GATE_ORDERS)}, got {gate_order!r}"
        ) from None


_GATE_ACTIVATIONS = {
    "sigmoid": torch.sigmoid,
    "hard_sigmoid_keras2": lambda x: torch.clamp(x * 0.2 + 0.5, 0.0, 1.0),
    "hard_sigmoid_keras3": lambda x: torch.nn.functional.relu6(x + 3.0) / 6.0,
}
_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "linear": lambda x: x}
_CLIP_GRADIENTS = ("straight_through", "zero")


def _choice(table, value, name):
    if value not in table:
        allowed = ", ".join(repr(k) for k in table)
        raise ValueError(f"{name}: expected one of {allowed}, got {value!r}")
    return table[value] if isinstance(table, dict) else value


def _clip_straight_through(cs, cell_clip):
    """min(max(cs, -clip), clip) in value, identity for autograd (TF's grads ignore the clip)."""
    if cell_clip <= 0:
        return cs
    return cs.detach().clamp(-cell_clip, cell_clip) + (cs - cs.detach())


def preactivation(x, h_prev, w, b):
    """G = [x, h_prev] . w + b, shape [B, 4H] in the op's column layout."""
    return torch.cat([x, h_prev], dim=1) @ w + b


def gates_from_preactivation(
    G,
    cs_prev,
    wci,
    wcf,
    wco,
    forget_bias=1.0,
    cell_clip=3.0,
    use_peephole=False,
    gate_order="icfo",
    gate_activation="sigmoid",
    activation="tanh",
    clip_gradient="straight_through",
    w_proj=None,
    proj_clip=0.0,
):
    """The element-wise part of one LSTM step, from the pre-activation gates G [B, 4H].

    Returns ``(i, cs, f, o, ci, co, h)``, each [B, H] (h [B, P] with ``w_proj``). ``wci``/``wcf``
    peep at ``cs_prev``, ``wco`` at the new, clipped ``cs``; they are not read at all when
    ``use_peephole`` is False.
    """
    sig = _choice(_GATE_ACTIVATIONS, gate_activation, "gate_activation")
    act = _choice(_ACTIVATIONS, activation, "activation")
    _choice(_CLIP_GRADIENTS, clip_gradient, "clip_gradient")
    g = dict(zip(_gate_names(gate_order), G.chunk(4, dim=1), strict=True))
    g_i, g_f, g_o = g["i"], g["f"] + forget_bias, g["o"]
    if use_peephole:
        g_i = g_i + cs_prev * wci
        g_f = g_f + cs_prev * wcf
    i = sig(g_i)
    ci = act(g["c"])
    f = sig(g_f)
    cs = i * ci + f * cs_prev
    if clip_gradient == "zero" and cell_clip > 0:
        cs = cs.clamp(-cell_clip, cell_clip)
    else:
        cs = _clip_straight_through(cs, cell_clip)
    co = act(cs)
    o = sig(g_o + cs * wco if use_peephole else g_o)
    h = o * co
    if w_proj is not None:
        h = h @ w_proj
        if proj_clip > 0:
            h = h.clamp(-proj_clip, proj_clip)
    return i, cs, f, o, ci, co, h


def lstm_block_cell(
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    forget_bias=1.0,
    cell_clip=3.0,
    use_peephole=False,
    gate_order="icfo",
    **variants,
):
    """One LSTMBlockCell step.

    Shapes: x [B, I], cs_prev/h_prev [B, H], w [I+H, 4H], wci/wcf/wco [H], b [4H].
    Returns ``(i, cs, f, o, ci, co, h)``, each [B, H]. The defaults are the raw op's
    (forget_bias=1, cell_clip=3). ``variants``: ``gate_activation``, ``activation``,
    ``clip_gradient``, ``w_proj``, ``proj_clip`` of :func:`gates_from_preactivation` (with
    ``w_proj [H, P]``, h_prev is [B, P] and w [I+P, 4H]).
    """
    return gates_from_preactivation(
        preactivation(x, h_prev, w, b),
        cs_prev,
        wci,
        wcf,
        wco,
        forget_bias,
        cell_clip,
        use_peephole,
        gate_order,
        **variants,
    )


def block_lstm(
    seq_len_max,
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    forget_bias=1.0,
    cell_clip=3.0,
    use_peephole=False,
    gate_order="icfo",
    **variants,
):
    """BlockLSTM (gate_order="icfo") or BlockLSTMV2 (gate_order="ifco", forget_bias=0, cell_clip=0);
    with ``variants`` (see :func:`lstm_block_cell`), block_lstm_ex.

    Shapes: x [T, B, I] time-major, cs_prev/h_prev [B, H], w [I+H, 4H], wci/wcf/wco [H], b [4H];
    seq_len_max is an int in [0, T]. Returns ``(i, cs, f, o, ci, co, h)``, each [T, B, H]; steps
    ``t < seq_len_max`` run :func:`lstm_block_cell`, and all seven outputs are zero for
    ``t >= seq_len_max``.
    """
    T = x.shape[0]
    seq_len_max = int(seq_len_max)
    if not 0 <= seq_len_max <= T:
        raise ValueError(f"seq_len_max must be between 0 and T={T}, got {seq_len_max}")
    zero = torch.zeros_like(cs_prev)
    steps, cs, h = [], cs_prev, h_prev
    for t in range(T):
        if t < seq_len_max:
            out = lstm_block_cell(
                x[t], cs, h, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole, gate_order,
                **variants,
            )  # fmt: skip
            cs, h = out[1], out[6]
        else:
            out = (zero,) * 6 + (torch.zeros_like(h_prev),)
        steps.append(out)
    return tuple(torch.stack(seq) for seq in zip(*steps, strict=True))


def _vjp(outputs, output_grads, inputs):
    """Gradients of sum(output * output_grad) w.r.t. inputs; zeros where an input is unused."""
    pairs = [(o, g) for o, g in zip(outputs, output_grads, strict=True) if o.requires_grad]
    grads = [None] * len(inputs)
    if pairs:
        grads = torch.autograd.grad(
            [o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True
        )
    return tuple(
        torch.zeros_like(v) if g is None else g for v, g in zip(inputs, grads, strict=True)
    )


def _leaves(*tensors):
    return [t.detach().requires_grad_() for t in tensors]


def block_lstm_grad(
    seq_len_max,
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    cs_grad,
    h_grad,
    forget_bias=1.0,
    cell_clip=3.0,
    use_peephole=False,
    gate_order="icfo",
    **variants,
):
    """BlockLSTMGrad / BlockLSTMGradV2 by autograd through :func:`block_lstm` (recomputed).
    With ``variants`` (block_lstm_ex_grad), a ninth gradient, ``w_proj``'s (when given).

    cs_grad/h_grad [T, B, H] are the upstream gradients of the ``cs`` and ``h`` outputs (those at
    ``t >= seq_len_max`` have no effect). Returns ``(x_grad, cs_prev_grad, h_prev_grad, w_grad,
    wci_grad, wcf_grad, wco_grad, b_grad)`` with the shapes of the inputs; the peephole grads are
    zero without peepholes.
    """
    inputs = _leaves(x, cs_prev, h_prev, w, wci, wcf, wco, b)
    if variants.get("w_proj") is not None:
        variants = {**variants, "w_proj": _leaves(variants["w_proj"])[0]}
        inputs.append(variants["w_proj"])
    with torch.enable_grad():
        out = block_lstm(
            seq_len_max, *inputs[:8], forget_bias, cell_clip, use_peephole, gate_order, **variants
        )
        return _vjp((out[1], out[6]), (cs_grad, h_grad), inputs)


def lstm_block_cell_grad(
    x,
    cs_prev,
    h_prev,
    w,
    wci,
    wcf,
    wco,
    b,
    cs_grad,
    h_grad,
    forget_bias,
    cell_clip,
    use_peephole,
    gate_order="icfo",
):
    """LSTMBlockCellGrad: ``(cs_prev_grad [B,H], dicfo [B,4H], wci_grad, wcf_grad, wco_grad)``.

    ``dicfo`` is the gradient w.r.t. the pre-activation gates G = [x, h_prev] . w + b, in the op's
    column layout (``gate_order``). cs_grad/h_grad [B, H] are the upstream gradients of the ``cs``
    and ``h`` outputs.
    """
    G, cs_prev, wci, wcf, wco = _leaves(preactivation(x, h_prev, w, b), cs_prev, wci, wcf, wco)
    with torch.enable_grad():
        out = gates_from_preactivation(
            G, cs_prev, wci, wcf, wco, forget_bias, cell_clip, use_peephole, gate_order
        )
        cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = _vjp(
            (out[1], out[6]), (cs_grad, h_grad), (cs_prev, G, wci, wcf, wco)
        )
    return cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad


def _gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c):
    """(r, u, c, h, ru_bar, c_bar); the last two are the pre-activations of sigmoid and tanh."""
    ru_bar = torch.cat([x, h_prev], dim=1) @ w_ru + b_ru
    r, u = torch.sigmoid(ru_bar).chunk(2, dim=1)
    c_bar = torch.cat([x, r * h_prev], dim=1) @ w_c + b_c
    c = torch.tanh(c_bar)
    h = u * (h_prev - c) + c
    return r, u, c, h, ru_bar, c_bar


def gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c):
    """GRUBlockCell (reset-before GRU).

    Shapes: x [B, I], h_prev [B, H], w_ru [I+H, 2H] (column blocks r, u), w_c [I+H, H],
    b_ru [2H], b_c [H].
    Returns ``(r, u, c, h)``, each [B, H].
    """
    return _gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c)[:4]


def gru_block_cell_grad(x, h_prev, w_ru, w_c, b_ru, b_c, d_h):
    """GRUBlockCellGrad: ``(d_x [B,I], d_h_prev [B,H], d_c_bar [B,H], d_r_bar_u_bar [B,2H])``.

    d_h [B, H] is the upstream gradient of ``h``. d_c_bar / d_r_bar_u_bar are the gradients w.r.t.
    the arguments of tanh / sigmoid (total derivatives: d_r_bar_u_bar includes the path through c).
    """
    x, h_prev = _leaves(x, h_prev)
    with torch.enable_grad():
        _, _, _, h, ru_bar, c_bar = _gru_block_cell(x, h_prev, w_ru, w_c, b_ru, b_c)
        return _vjp((h,), (d_h,), (x, h_prev, c_bar, ru_bar))


def keras_gru(
    seq_len_max,
    x,
    h_prev,
    kernel,
    recurrent_kernel,
    bias=None,
    reset_after=True,
    gate_activation="sigmoid",
    activation="tanh",
):
    """Keras' GRU layer (keras/src/layers/rnn/gru.py), time-major: the keras_gru op.

    Shapes: x [T, B, I], h_prev [B, H], kernel [I, 3H], recurrent_kernel [H, 3H] (gate order
    z, r, h), bias [2, 3H] (reset_after: input row, recurrent row) or [3H] or None. Returns
    ``(z, r, hh, hr, h)``, each [T, B, H], all zero for ``t >= seq_len_max``; ``hr`` is what the
    reset multiplies (``h_prev . R_h + b_rec_h`` with reset_after, else ``r * h_prev``).
    """
    sig = _choice(_GATE_ACTIVATIONS, gate_activation, "gate_activation")
    act = _choice(_ACTIVATIONS, activation, "activation")
    T, H = x.shape[0], h_prev.shape[1]
    b_in = b_rec = None
    if bias is not None:
        b_in, b_rec = (bias[0], bias[1]) if reset_after else (bias, None)
    steps, h = [], h_prev
    zero = torch.zeros_like(h_prev)
    for t in range(T):
        if t >= int(seq_len_max):
            steps.append((zero,) * 5)
            continue
        xp = x[t] @ kernel
        if b_in is not None:
            xp = xp + b_in
        x_z, x_r, x_h = xp.split(H, dim=1)
        if reset_after:
            inner = h @ recurrent_kernel
            if b_rec is not None:
                inner = inner + b_rec
            i_z, i_r, i_h = inner.split(H, dim=1)
            z, r = sig(x_z + i_z), sig(x_r + i_r)
            hr = i_h
            hh = act(x_h + r * hr)
        else:
            i_z, i_r = (h @ recurrent_kernel[:, : 2 * H]).split(H, dim=1)
            z, r = sig(x_z + i_z), sig(x_r + i_r)
            hr = r * h
            hh = act(x_h + hr @ recurrent_kernel[:, 2 * H :])
        h = z * h + (1 - z) * hh
        steps.append((z, r, hh, hr, h))
    return tuple(torch.stack(seq) for seq in zip(*steps, strict=True))


def keras_gru_grad(
    seq_len_max,
    x,
    h_prev,
    kernel,
    recurrent_kernel,
    bias,
    h_grad,
    reset_after=True,
    gate_activation="sigmoid",
    activation="tanh",
):
    """Gradients of sum(h * h_grad) through :func:`keras_gru`: ``(x, h_prev, kernel,
    recurrent_kernel, bias)`` (bias's is None without a bias)."""
    inputs = _leaves(x, h_prev, kernel, recurrent_kernel)
    b = None if bias is None else _leaves(bias)[0]
    with torch.enable_grad():
        out = keras_gru(seq_len_max, *inputs, b, reset_after, gate_activation, activation)
        grads = _vjp((out[4],), (h_grad,), inputs + ([] if b is None else [b]))
    return (*grads[:4], grads[4] if b is not None else None)
