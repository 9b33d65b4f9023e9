"""Explicit converters between TF, Keras, cuDNN-canonical and `torch.nn` RNN weight layouts.

Layouts (one layer, one direction; H units, I inputs; `[a, b]` is a tensor shape):

* **block LSTM** (TF1 `LSTMCell`, `LSTMBlockCell`, `LSTMBlockFusedCell`, our `LSTMBlockCell`):
  `kernel [I + H, 4H]` (rows x then h), `bias [4H]`, column blocks **ICFO** (input, cell
  input, forget, output); a `forget_bias` float is added to the f gate at run time.
* **Keras LSTM**: `kernel [I, 4H]`, `recurrent_kernel [H, 4H]`, `bias [4H]`, blocks **IFCO**;
  the forget bias lives in `bias` (docs/tf-semantics.md §8.1).
* **torch.nn.LSTM**: `weight_ih [4H, I]`, `weight_hh [4H, H]`, `bias_ih [4H]`, `bias_hh [4H]`,
  row blocks i, f, g, o (= IFCO); `weight_hr [P, H]` with `proj_size`.
* **cuDNN canonical** (docs/tf-semantics.md §7.1): per pseudo-layer `weights = [W_0..W_{G-1},
  R_0..R_{G-1}(, W_proj)]` (`[H, in]`, `[H, P]`, `[P, H]`) and `biases = [bW_0..bW_{G-1},
  bR_0..bR_{G-1}]` (`[H]`); gates lstm i, f, c, o; gru r, z, h; rnn_* one. These are exactly
  torch.nn's row blocks, so torch ⇄ canonical is a split / concatenation.
* **Keras GRU**: `kernel [I, 3H]`, `recurrent_kernel [H, 3H]`, blocks **z, r, h**; bias
  `[2, 3H]` (input row, recurrent row) with `reset_after=True` (cuDNN's and torch.nn.GRU's
  math), `[3H]` with `reset_after=False` (GRUBlockCell's math).
* **block GRU** (TF `GRUBlockCell`/`GRUCell`, our `GRUBlockCell`): `gates_kernel [I + H, 2H]`
  (blocks r, u = z), `gates_bias [2H]`, `candidate_kernel [I + H, H]`, `candidate_bias [H]`.

Single TF bias vs two torch/cuDNN biases: going to torch/cuDNN, the whole TF bias goes into the
**input** bias (`bias_ih` / `bW`) and the recurrent bias (`bias_hh` / `bR`) is zero (Keras' own
cuDNN path puts it in `bR` instead; only the sum enters the math). Coming back, the two are
summed. So TF → torch → TF is exact (b + 0), torch → TF → torch is exact when `bias_hh` is zero.
Folding `forget_bias` into a Keras/torch bias (and subtracting it on the way back) rounds once:
round trips through it are exact when `forget_bias == 0`, within 1 ulp of the bias otherwise.

Reset-before (GRUBlockCell, Keras `reset_after=False`) and reset-after (cuDNN, torch.nn.GRU,
Keras `reset_after=True`) GRUs compute different functions of the same weights: converting
between them raises ValueError. All functions return new tensors (never views of the inputs).
"""

from __future__ import annotations

import torch

__all__ = [
    "block_gru_to_canonical",
    "block_gru_to_keras",
    "block_gru_to_torch",
    "block_lstm_to_canonical",
    "block_lstm_to_keras",
    "block_lstm_to_torch",
    "canonical_to_block_lstm",
    "canonical_to_keras_gru",
    "canonical_to_keras_lstm",
    "canonical_to_params",
    "cudnn_to_torch_rnn",
    "canonical_to_torch",
    "keras_gru_to_block",
    "keras_gru_to_canonical",
    "keras_gru_to_torch",
    "keras_cudnn_to_keras",
    "keras_lstm_to_block",
    "keras_lstm_to_canonical",
    "keras_lstm_to_torch",
    "params_to_canonical",
    "torch_gru_to_block",
    "torch_gru_to_keras",
    "torch_lstm_to_block",
    "torch_lstm_to_keras",
    "torch_rnn_to_cudnn",
    "torch_to_canonical",
]

_ICFO_IFCO = (0, 2, 1, 3)  # picks IFCO blocks from ICFO and ICFO from IFCO (an involution)
_ZRH_RZH = (1, 0, 2)  # Keras GRU z, r, h <-> torch/cuDNN r, z, h (an involution)
_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_NO_RESET_MAP = (
    "GRUBlockCell and Keras GRU(reset_after=False) apply the reset gate before the recurrent "
    "matrix product (tanh(x·K_h + b_h + (r ⊙ h)·R_h)), while cuDNN, torch.nn.GRU and Keras "
    "GRU(reset_after=True) apply it after (tanh(x·W_h + bW_h + r ⊙ (h·R_h + bR_h))); no choice "
    "of weights makes the two equal for every input, so there is no exact conversion"
)


def _blocks(t: torch.Tensor, n: int, dim: int, name: str) -> list[torch.Tensor]:
    if t.shape[dim] % n:
        raise ValueError(
            f"{name}: dimension {dim} of shape {list(t.shape)} is not divisible "
            f"into {n} gate blocks"
        )
    return list(t.chunk(n, dim))


def _permute(t: torch.Tensor, order, dim: int, name: str) -> torch.Tensor:
    blocks = _blocks(t, len(order), dim, name)
    return torch.cat([blocks[k] for k in order], dim)


def _add_forget(bias_ifco: torch.Tensor, forget_bias: float) -> torch.Tensor:
    if not forget_bias:
        return bias_ifco.clone()
    i, f, c, o = _blocks(bias_ifco, 4, 0, "bias")
    return torch.cat([i, f + forget_bias, c, o])


def _check_2d(name: str, t: torch.Tensor, cols: int | None = None) -> None:
    if t.dim() != 2 or (cols is not None and t.shape[1] != cols):
        want = "[rows, " + (str(cols) if cols is not None else "cols") + "]"
        raise ValueError(f"{name}: expected a matrix {want}, got shape {list(t.shape)}")


# -- LSTM -------------------------------------------------------------------------------------


def block_lstm_to_keras(kernel: torch.Tensor, bias: torch.Tensor, forget_bias: float = 1.0):
    """Block LSTM `kernel [I + H, 4H]`, `bias [4H]` (ICFO, `forget_bias` added at run time) →
    Keras `(kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H])` (IFCO, `forget_bias` folded
    into the f block of the bias: docs/tf-semantics.md §8.3). Peepholes have no Keras equivalent."""
    _check_2d("kernel", kernel)
    H = kernel.shape[1] // 4
    if bias.shape != (4 * H,) or kernel.shape[1] != 4 * H or kernel.shape[0] < H:
        raise ValueError(
            f"kernel/bias: expected [I + H, 4H] and [4H], got {list(kernel.shape)} "
            f"and {list(bias.shape)}"
        )
    k = _permute(kernel, _ICFO_IFCO, 1, "kernel")
    I = kernel.shape[0] - H
    b = _add_forget(_permute(bias, _ICFO_IFCO, 0, "bias"), forget_bias)
    return k[:I].clone(), k[I:].clone(), b


def keras_lstm_to_block(
    kernel: torch.Tensor,
    recurrent_kernel: torch.Tensor,
    bias: torch.Tensor,
    forget_bias: float = 1.0,
):
    """Keras `kernel [I, 4H]`, `recurrent_kernel [H, 4H]`, `bias [4H]` (IFCO) → block
    `(kernel [I + H, 4H], bias [4H])` (ICFO) for a cell that adds `forget_bias` at run time (so
    it is subtracted from the f block). Use `forget_bias=0.0` for an exact copy."""
    H = recurrent_kernel.shape[0]
    _check_2d("kernel", kernel, 4 * H)
    _check_2d("recurrent_kernel", recurrent_kernel, 4 * H)
    b = _add_forget(bias, -forget_bias)
    k = torch.cat([kernel, recurrent_kernel], 0)
    return _permute(k, _ICFO_IFCO, 1, "kernel"), _permute(b, _ICFO_IFCO, 0, "bias")


def keras_lstm_to_torch(
    kernel: torch.Tensor, recurrent_kernel: torch.Tensor, bias: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Keras LSTM (IFCO, `kernel [I, 4H]`, `recurrent_kernel [H, 4H]`, `bias [4H]`) → torch.nn.LSTM
    layer `{"weight_ih": [4H, I], "weight_hh": [4H, H], "bias_ih": bias, "bias_hh": zeros}`
    (i, f, g, o: the same order, transposed)."""
    return {
        "weight_ih": kernel.t().contiguous(),
        "weight_hh": recurrent_kernel.t().contiguous(),
        "bias_ih": bias.clone(),
        "bias_hh": torch.zeros_like(bias),
    }


def torch_lstm_to_keras(
    weight_ih: torch.Tensor, weight_hh: torch.Tensor, bias_ih: torch.Tensor, bias_hh: torch.Tensor
):
    """torch.nn.LSTM layer (`weight_ih [4H, I]`, `weight_hh [4H, H]`, biases `[4H]`, i, f, g, o)
    → Keras `(kernel [I, 4H], recurrent_kernel [H, 4H], bias = bias_ih + bias_hh)` (IFCO).
    Without projection only (Keras has none)."""
    if weight_hh.shape[0] != 4 * weight_hh.shape[1]:
        raise ValueError(
            f"weight_hh: expected [4H, H] (no projection: Keras LSTM has none), got "
            f"{list(weight_hh.shape)}"
        )
    return weight_ih.t().contiguous(), weight_hh.t().contiguous(), bias_ih + bias_hh


def block_lstm_to_torch(
    kernel: torch.Tensor, bias: torch.Tensor, forget_bias: float = 1.0
) -> dict[str, torch.Tensor]:
    """Block LSTM (ICFO `kernel [I + H, 4H]`, `bias [4H]`) → torch.nn.LSTM layer dict (see
    `keras_lstm_to_torch`); `forget_bias` is folded into `bias_ih`'s f block."""
    return keras_lstm_to_torch(*block_lstm_to_keras(kernel, bias, forget_bias))


def torch_lstm_to_block(weight_ih, weight_hh, bias_ih, bias_hh, forget_bias: float = 1.0):
    """torch.nn.LSTM layer → block `(kernel [I + H, 4H], bias [4H])` (ICFO) for a cell adding
    `forget_bias` at run time (`bias = bias_ih + bias_hh - forget_bias` on the f block)."""
    return keras_lstm_to_block(
        *torch_lstm_to_keras(weight_ih, weight_hh, bias_ih, bias_hh), forget_bias=forget_bias
    )


def torch_to_canonical(
    weight_ih: torch.Tensor,
    weight_hh: torch.Tensor,
    bias_ih: torch.Tensor,
    bias_hh: torch.Tensor,
    rnn_mode: str,
    weight_hr: torch.Tensor | None = None,
):
    """One torch.nn.LSTM/GRU/RNN layer and direction → its cuDNN canonical `(weights, biases)`
    lists: `[W_0..W_{G-1}] + [R_0..R_{G-1}] (+ [W_proj = weight_hr])`, `[bW_0..] + [bR_0..]`.
    torch's row blocks are already cuDNN's gate order (lstm i, f, g=c, o; gru r, z, n=h)."""
    G = _GATES[rnn_mode]
    weights = [w.clone() for w in _blocks(weight_ih, G, 0, "weight_ih")]
    weights += [w.clone() for w in _blocks(weight_hh, G, 0, "weight_hh")]
    if weight_hr is not None:
        weights.append(weight_hr.clone())
    biases = [
        b.clone() for b in _blocks(bias_ih, G, 0, "bias_ih") + _blocks(bias_hh, G, 0, "bias_hh")
    ]
    return weights, biases


def canonical_to_torch(weights, biases, rnn_mode: str) -> dict[str, torch.Tensor]:
    """One pseudo-layer's canonical lists (2G or 2G + 1 weights, 2G biases) → torch layer dict
    `weight_ih [G·H, in]`, `weight_hh [G·H, P]`, `bias_ih`, `bias_hh` (+ `weight_hr [P, H]`)."""
    G = _GATES[rnn_mode]
    if len(weights) not in (2 * G, 2 * G + 1) or len(biases) != 2 * G:
        raise ValueError(
            f"weights/biases: expected {2 * G} (or {2 * G + 1} with projection) "
            f"weights and {2 * G} biases for rnn_mode={rnn_mode!r}, got "
            f"{len(weights)} and {len(biases)}"
        )
    out = {
        "weight_ih": torch.cat(list(weights[:G])),
        "weight_hh": torch.cat(list(weights[G : 2 * G])),
        "bias_ih": torch.cat(list(biases[:G])),
        "bias_hh": torch.cat(list(biases[G:])),
    }
    if len(weights) == 2 * G + 1:
        out["weight_hr"] = weights[-1].clone()
    return out


def keras_lstm_to_canonical(kernel, recurrent_kernel, bias):
    """Keras LSTM → cuDNN canonical `(weights [8 × [H, ·]], biases [8 × [H]])`, `bW = bias`,
    `bR = 0` (the module-wide bias rule above)."""
    return torch_to_canonical(
        **keras_lstm_to_torch(kernel, recurrent_kernel, bias), rnn_mode="lstm"
    )


def canonical_to_keras_lstm(weights, biases):
    """cuDNN canonical LSTM (8 weights, 8 biases) → Keras `(kernel, recurrent_kernel, bias =
    bW + bR)`."""
    return torch_lstm_to_keras(**canonical_to_torch(weights, biases, "lstm"))


def block_lstm_to_canonical(kernel, bias, forget_bias: float = 1.0, split: str = "input"):
    """Block LSTM (ICFO) → cuDNN canonical lists, `forget_bias` folded into the f gate.
    `split="input"`: `bW = bias`, `bR = 0`; `split="half"`: `bW = bR = bias / 2`, what TF1's
    CudnnLSTM restore does with a `cudnn_compatible_lstm_cell` checkpoint
    (docs/tf-semantics.md §7.5)."""
    weights, biases = keras_lstm_to_canonical(*block_lstm_to_keras(kernel, bias, forget_bias))
    if split == "half":
        total = biases[:4]
        biases = [b * 0.5 for b in total] + [b * 0.5 for b in total]
    elif split != "input":
        raise ValueError(f"split: expected 'input' or 'half', got {split!r}")
    return weights, biases


def canonical_to_block_lstm(weights, biases, forget_bias: float = 0.0):
    """cuDNN canonical LSTM → block `(kernel [I + H, 4H], bias [4H])` (ICFO, `bias = bW + bR`
    minus `forget_bias`): the `cudnn_compatible_lstm_cell/{kernel,bias}` of TF1's CudnnLSTM
    checkpoints when `forget_bias=0` (the default; that cell adds none)."""
    return keras_lstm_to_block(*canonical_to_keras_lstm(weights, biases), forget_bias=forget_bias)


# -- GRU --------------------------------------------------------------------------------------


def _keras_gru_bias(bias: torch.Tensor, reset_after: bool) -> None:
    if reset_after and bias.dim() != 2:
        raise ValueError(
            f"bias: shape {list(bias.shape)} is Keras GRU(reset_after=False), but "
            f"this target needs reset_after=True: {_NO_RESET_MAP}"
        )
    if not reset_after and bias.dim() != 1:
        raise ValueError(
            f"bias: shape {list(bias.shape)} is Keras GRU(reset_after=True), but "
            f"this target needs reset_after=False: {_NO_RESET_MAP}"
        )


def keras_gru_to_torch(kernel, recurrent_kernel, bias) -> dict[str, torch.Tensor]:
    """Keras GRU(reset_after=True) `kernel [I, 3H]`, `recurrent_kernel [H, 3H]` (z, r, h), `bias
    [2, 3H]` → torch.nn.GRU layer `weight_ih [3H, I]`, `weight_hh [3H, H]` (r, z, n),
    `bias_ih = bias[0]`, `bias_hh = bias[1]` (reordered). reset_after=False: ValueError."""
    _keras_gru_bias(bias, reset_after=True)
    perm = lambda t, name: _permute(t, _ZRH_RZH, 1, name)  # noqa: E731
    return {
        "weight_ih": perm(kernel, "kernel").t().contiguous(),
        "weight_hh": perm(recurrent_kernel, "recurrent_kernel").t().contiguous(),
        "bias_ih": _permute(bias[0], _ZRH_RZH, 0, "bias"),
        "bias_hh": _permute(bias[1], _ZRH_RZH, 0, "bias"),
    }


def torch_gru_to_keras(weight_ih, weight_hh, bias_ih, bias_hh):
    """torch.nn.GRU layer (r, z, n) → Keras GRU(reset_after=True) `(kernel [I, 3H],
    recurrent_kernel [H, 3H], bias [2, 3H])` (z, r, h)."""
    k = _permute(weight_ih, _ZRH_RZH, 0, "weight_ih").t().contiguous()
    r = _permute(weight_hh, _ZRH_RZH, 0, "weight_hh").t().contiguous()
    b = torch.stack(
        [_permute(bias_ih, _ZRH_RZH, 0, "bias_ih"), _permute(bias_hh, _ZRH_RZH, 0, "bias_hh")]
    )
    return k, r, b


def keras_gru_to_canonical(kernel, recurrent_kernel, bias):
    """Keras GRU(reset_after=True) → cuDNN canonical (weights W_r, W_z, W_h, R_r, R_z, R_h
    `[H, ·]`; biases bW_r.., bR_r.. `[H]`): Keras' own cuDNN mapping (docs/tf-semantics.md §8.2)."""
    return torch_to_canonical(**keras_gru_to_torch(kernel, recurrent_kernel, bias), rnn_mode="gru")


def canonical_to_keras_gru(weights, biases):
    """cuDNN canonical GRU (6 weights, 6 biases) → Keras GRU(reset_after=True) triple."""
    return torch_gru_to_keras(**canonical_to_torch(weights, biases, "gru"))


def keras_gru_to_block(kernel, recurrent_kernel, bias):
    """Keras GRU(reset_after=False) `kernel [I, 3H]`, `recurrent_kernel [H, 3H]`, `bias [3H]`
    (z, r, h) → block `(gates_kernel [I + H, 2H] (r, u=z), gates_bias [2H], candidate_kernel
    [I + H, H], candidate_bias [H])` (docs/tf-semantics.md §8.3). reset_after=True: ValueError."""
    _keras_gru_bias(bias, reset_after=False)
    kz, kr, kh = _blocks(kernel, 3, 1, "kernel")
    rz, rr, rh = _blocks(recurrent_kernel, 3, 1, "recurrent_kernel")
    bz, br, bh = _blocks(bias, 3, 0, "bias")
    gates_kernel = torch.cat([torch.cat([kr, kz], 1), torch.cat([rr, rz], 1)], 0)
    return gates_kernel, torch.cat([br, bz]), torch.cat([kh, rh], 0), bh.clone()


def block_gru_to_keras(gates_kernel, gates_bias, candidate_kernel, candidate_bias):
    """Block GRU (`gates_kernel [I + H, 2H]` r, u; `candidate_kernel [I + H, H]`; biases) →
    Keras GRU(reset_after=False) `(kernel [I, 3H], recurrent_kernel [H, 3H], bias [3H])`."""
    H = candidate_kernel.shape[1]
    I = candidate_kernel.shape[0] - H
    if gates_kernel.shape != (I + H, 2 * H) or gates_bias.shape != (2 * H,):
        raise ValueError(
            f"gates_kernel/gates_bias: expected [{I + H}, {2 * H}] and [{2 * H}], "
            f"got {list(gates_kernel.shape)} and {list(gates_bias.shape)}"
        )
    r, z = _blocks(gates_kernel, 2, 1, "gates_kernel")
    br, bz = _blocks(gates_bias, 2, 0, "gates_bias")
    k = torch.cat([z[:I], r[:I], candidate_kernel[:I]], 1)
    rk = torch.cat([z[I:], r[I:], candidate_kernel[I:]], 1)
    return k, rk, torch.cat([bz, br, candidate_bias])


def block_gru_to_torch(*args, **kwargs):
    """Always raises ValueError: GRUBlockCell (reset before) has no torch.nn.GRU equivalent."""
    raise ValueError(f"GRUBlockCell → torch.nn.GRU: {_NO_RESET_MAP}")


def torch_gru_to_block(*args, **kwargs):
    """Always raises ValueError: torch.nn.GRU (reset after) has no GRUBlockCell equivalent."""
    raise ValueError(f"torch.nn.GRU → GRUBlockCell: {_NO_RESET_MAP}")


def block_gru_to_canonical(*args, **kwargs):
    """Always raises ValueError: cuDNN's GRU (reset after) is not GRUBlockCell's."""
    raise ValueError(f"GRUBlockCell → cuDNN canonical GRU: {_NO_RESET_MAP}")


# -- Keras 2's legacy CuDNNLSTM / CuDNNGRU --------------------------------------------------------


def keras_cudnn_to_keras(kernel, recurrent_kernel, bias):
    """Keras 2's `CuDNNLSTM` / `CuDNNGRU` weights (`kernel [I, G·U]` whose gate blocks hold
    cuDNN's `[U, I]` matrices in row order, `recurrent_kernel [U, G·U]` with each gate block
    transposed, `bias [2·G·U]` = bW then bR) → Keras `LSTM` (`bias = bW + bR`) or
    `GRU(reset_after=True)` (`bias [2, 3U]`) weights: what Keras' HDF5 loader does to load them
    into those layers (`_convert_rnn_weights`, docs/tf-semantics.md §7.6), the layers Keras
    defines them to equal."""
    U = recurrent_kernel.shape[0]
    G = recurrent_kernel.shape[1] // U if U else 0
    if (
        G not in (3, 4)
        or recurrent_kernel.shape != (U, G * U)
        or kernel.dim() != 2
        or (kernel.shape[1] != G * U)
        or bias.shape != (2 * G * U,)
    ):
        raise ValueError(
            f"kernel, recurrent_kernel, bias: shapes {list(kernel.shape)}, "
            f"{list(recurrent_kernel.shape)}, {list(bias.shape)} are not a CuDNNLSTM's "
            "([I, 4U], [U, 4U], [8U]) nor a CuDNNGRU's ([I, 3U], [U, 3U], [6U])"
        )
    I = kernel.shape[0]
    # Keras: block.T.reshape(block.shape, order="F") per gate = the block's memory read as [U, I]
    k = torch.cat([b.contiguous().reshape(U, I).t() for b in _blocks(kernel, G, 1, "kernel")], 1)
    r = torch.cat([b.t() for b in _blocks(recurrent_kernel, G, 1, "recurrent_kernel")], 1)
    b = bias[: G * U] + bias[G * U :] if G == 4 else bias.reshape(2, G * U).clone()
    return k.contiguous(), r.contiguous(), b.contiguous()


# -- opaque params ----------------------------------------------------------------------------


def params_to_canonical(
    params,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    direction: str = "unidirectional",
    input_mode: str = "linear_input",
    num_proj: int = 0,
):
    """Opaque params → `(weights, biases)` canonical lists for the whole model (every pseudo-layer
    k = layer·D + direction in order), via `raw_ops.CudnnRNNParamsToCanonicalV2`."""
    from . import raw_ops

    D, G = (2 if direction == "bidirectional" else 1), _GATES[rnn_mode]
    n = num_layers * D * 2 * G
    out = raw_ops.CudnnRNNParamsToCanonicalV2(
        num_layers,
        num_units,
        input_size,
        params,
        n + (num_layers * D if num_proj else 0),
        n,
        rnn_mode=rnn_mode,
        input_mode=input_mode,
        direction=direction,
        num_proj=num_proj,
    )
    return list(out.weights), list(out.biases)


def canonical_to_params(
    weights,
    biases,
    rnn_mode: str,
    num_layers: int,
    num_units: int,
    input_size: int,
    direction: str = "unidirectional",
    input_mode: str = "linear_input",
    num_proj: int = 0,
) -> torch.Tensor:
    """Whole-model canonical lists → one opaque params buffer (`CudnnRNNCanonicalToParamsV2`)."""
    from . import raw_ops

    return raw_ops.CudnnRNNCanonicalToParamsV2(
        num_layers,
        num_units,
        input_size,
        weights,
        biases,
        rnn_mode=rnn_mode,
        input_mode=input_mode,
        direction=direction,
        num_proj=num_proj,
    )


# -- whole models: torch.nn.LSTM/GRU/RNN <-> our Cudnn* modules --------------------------------


def _torch_mode(module: torch.nn.RNNBase) -> str:
    if module.mode == "LSTM":
        return "lstm"
    if module.mode == "GRU":
        return "gru"
    return {"RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}[module.mode]


def torch_rnn_to_cudnn(module: torch.nn.RNNBase):
    """A `torch.nn.LSTM`/`GRU`/`RNN` → the matching `CudnnLSTM`/`CudnnGRU`/`CudnnRNNTanh`/
    `CudnnRNNRelu` (same layers, directions, `proj_size` → `num_proj`, dtype, device; dropout
    copied) computing the same function: each layer's weights go through `torch_to_canonical`
    and the lists into `opaque_kernel` (CudnnRNNCanonicalToParamsV2). `bias=False` → zero
    biases. `batch_first` is a call-time choice (`time_major=False`), not a weight layout."""
    from . import modules

    mode = _torch_mode(module)
    cls = {
        "lstm": modules.CudnnLSTM,
        "gru": modules.CudnnGRU,
        "rnn_tanh": modules.CudnnRNNTanh,
        "rnn_relu": modules.CudnnRNNRelu,
    }[mode]
    ref = next(module.parameters())
    extra = {"num_proj": module.proj_size} if mode == "lstm" and module.proj_size else {}
    out = cls(
        module.num_layers,
        module.hidden_size,
        module.input_size,
        direction="bidirectional" if module.bidirectional else "unidirectional",
        dropout=module.dropout,
        device=ref.device,
        dtype=ref.dtype,
        **extra,
    )
    weights, biases = [], []
    with torch.no_grad():
        for layer in range(module.num_layers):
            for suffix in ("", "_reverse")[: 2 if module.bidirectional else 1]:
                p = {
                    n: getattr(module, f"{n}_l{layer}{suffix}", None)
                    for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")
                }
                G, H = _GATES[mode], module.hidden_size
                zeros = p["weight_ih"].new_zeros(G * H)
                w, b = torch_to_canonical(
                    p["weight_ih"],
                    p["weight_hh"],
                    zeros if p["bias_ih"] is None else p["bias_ih"],
                    zeros if p["bias_hh"] is None else p["bias_hh"],
                    mode,
                    p["weight_hr"],
                )
                weights += w
                biases += b
        out.set_canonical_weights(weights, biases)
    return out


def cudnn_to_torch_rnn(module):
    """One of our `Cudnn*` modules → the matching `torch.nn.LSTM`/`GRU`/`RNN` (`batch_first=False`,
    `bias=True`, `proj_size = num_proj`) with the same weights (exact copies of the canonical
    tensors). `skip_input` models have no torch equivalent (ValueError)."""
    if module.input_mode == "skip_input" or (
        module.input_mode == "auto_select"
        and module.input_size == (module.num_proj or module.num_units)
    ):
        raise ValueError(
            "input_mode: skip_input feeds x to the gates without an input matrix; "
            "torch.nn RNNs always have one (weight_ih_l0)"
        )
    mode = module._rnn_mode
    p = module.opaque_kernel
    kw = {
        "num_layers": module.num_layers,
        "bidirectional": module.num_dirs == 2,
        "dropout": module.dropout,
        "device": p.device,
        "dtype": p.dtype,
    }
    if mode == "lstm":
        out = torch.nn.LSTM(module.input_size, module.num_units, proj_size=module.num_proj, **kw)
    elif mode == "gru":
        out = torch.nn.GRU(module.input_size, module.num_units, **kw)
    else:
        out = torch.nn.RNN(module.input_size, module.num_units, nonlinearity=mode[4:], **kw)
    weights, biases = module.canonical_weights()
    G = _GATES[mode]
    nw, nb = 2 * G + (1 if module.num_proj else 0), 2 * G
    with torch.no_grad():
        for k in range(module.num_layers * module.num_dirs):
            layer, d = divmod(k, module.num_dirs)
            tensors = canonical_to_torch(
                weights[k * nw : (k + 1) * nw], biases[k * nb : (k + 1) * nb], mode
            )
            for name, t in tensors.items():
                getattr(out, f"{name}_l{layer}{'_reverse' if d else ''}").copy_(t)
    return out
