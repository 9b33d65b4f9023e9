"""`nn.Module`s mirroring the TF1 layers people port (docs/porting.md), over `raw_ops`.

Parameters keep TF's names (where TF's are legal attribute names), shapes and gate orders, so a
TF checkpoint's tensors load without reshuffling (`porting`); conversions to Keras and
`torch.nn` layouts are explicit functions in `layouts.py`. Defaults follow TF1's Python layers,
not the raw ops: `cell_clip=None` means no clipping (the raw ops' default clips at ±3).

Initialisation follows TF1: `tf.get_variable`'s default glorot-uniform for kernels and peephole
vectors, zeros for LSTM biases, ones for GRU gate biases; the cuDNN layers initialise each
canonical `[out, in]` matrix glorot-uniform and every bias with zeros.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import ops, raw_ops
from ._library import cudnn_rnn_config
from ._library.checks import LSTM_EX_CHOICES, check_choice
from .autograd import call_no_grad
from .packed_weights import PANEL_MAX_ROWS, PackedWeights, records_grad

__all__ = [
    "CudnnGRU",
    "CudnnLSTM",
    "CudnnRNNRelu",
    "CudnnRNNTanh",
    "GRUBlockCell",
    "GRUBlockFusedCell",
    "LSTMBlockCell",
    "LSTMBlockFusedCell",
]


def _glorot_(t: torch.Tensor) -> torch.Tensor:
    """TF's glorot_uniform: limit sqrt(6 / (fan_in + fan_out)); a vector [n] has fan_in =
    fan_out = n (TF's `_compute_fans`), a matrix [a, b] fans a and b."""
    fans = (t.shape[0], t.shape[0]) if t.dim() == 1 else (t.shape[0], t.shape[1])
    limit = math.sqrt(6.0 / max(1, sum(fans)))
    with torch.no_grad():
        return t.uniform_(-limit, limit)


def _clip(cell_clip: float | None) -> float:
    return -1.0 if cell_clip is None else float(cell_clip)


_LSTM_VARIANT_DEFAULTS = {
    "gate_activation": "sigmoid",
    "activation": "tanh",
    "clip_gradient": "straight_through",
    "gate_order": "icfo",
}


class _LSTMBlockBase(nn.Module):
    def __init__(
        self,
        num_units: int,
        input_size: int,
        forget_bias: float = 1.0,
        cell_clip: float | None = None,
        use_peephole: bool = False,
        *,
        gate_activation: str = "sigmoid",
        activation: str = "tanh",
        clip_gradient: str = "straight_through",
        num_proj: int | None = None,
        proj_clip: float | None = None,
        gate_order: str = "icfo",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.num_units, self.input_size = int(num_units), int(input_size)
        self.forget_bias, self.cell_clip = float(forget_bias), cell_clip
        self.use_peephole = bool(use_peephole)
        variants = {
            "gate_activation": gate_activation,
            "activation": activation,
            "clip_gradient": clip_gradient,
            "gate_order": gate_order,
        }
        for name, value in variants.items():
            check_choice(value, name, LSTM_EX_CHOICES[name])
        self.gate_activation, self.activation = gate_activation, activation
        self.clip_gradient, self.gate_order = clip_gradient, gate_order
        if num_proj is not None and int(num_proj) < 1:
            raise ValueError(f"num_proj: expected None or an int >= 1, got {num_proj!r}")
        if proj_clip is not None and num_proj is None:
            raise ValueError("proj_clip: needs num_proj (TF1 LSTMCell ignores it without one)")
        self.num_proj = None if num_proj is None else int(num_proj)
        self.proj_clip = proj_clip
        H = self.num_units
        P = H if self.num_proj is None else self.num_proj
        self.kernel = nn.Parameter(torch.empty(self.input_size + P, 4 * H, **factory))
        self.bias = nn.Parameter(torch.empty(4 * H, **factory))
        if self.use_peephole:
            self.w_i_diag = nn.Parameter(torch.empty(H, **factory))
            self.w_f_diag = nn.Parameter(torch.empty(H, **factory))
            self.w_o_diag = nn.Parameter(torch.empty(H, **factory))
        if self.num_proj is not None:
            self.projection_kernel = nn.Parameter(torch.empty(H, self.num_proj, **factory))
        self._packed = PackedWeights()
        self.reset_parameters()

    def _prepared(self) -> PackedWeights:
        found = self.__dict__.get("_packed")  # absent from modules pickled before it existed
        if found is None:
            found = self._packed = PackedWeights()
        return found

    def release_prepared_weights(self) -> None:
        """Drops the packed copies of the weights kept for calls without gradient
        (rebuilt on the next such call). Needed only after writing the parameters through
        `.data`, which does not advance their version; any other in-place write is seen."""
        self._prepared().clear()

    @property
    def output_size(self) -> int:
        """Width of h: num_proj with a projection, else num_units."""
        return self.num_units if self.num_proj is None else self.num_proj

    def _uses_variant_op(self) -> bool:
        # Every attribute at its default: TF's own block ops (same numbers and speed as before).
        return self.num_proj is not None or any(
            getattr(self, k) != v for k, v in _LSTM_VARIANT_DEFAULTS.items()
        )

    def _cell_attrs(self) -> dict:
        """The cell's attributes as block_lstm_ex and block_lstm_inference take them."""
        return dict(
            w_proj=self.projection_kernel if self.num_proj is not None else None,
            forget_bias=self.forget_bias,
            cell_clip=_clip(self.cell_clip),
            proj_clip=0.0 if self.proj_clip is None else float(self.proj_clip),
            use_peephole=self.use_peephole,
            gate_order=self.gate_order,
            gate_activation=self.gate_activation,
            activation=self.activation,
        )

    def _ex(self, inputs, cs0, h0, wci, wcf, wco, seq_len_max):
        return ops.block_lstm_ex(
            inputs,
            cs0,
            h0,
            self.kernel,
            self.bias,
            seq_len_max=seq_len_max,
            wci=wci,
            wcf=wcf,
            wco=wco,
            clip_gradient=self.clip_gradient,
            **self._cell_attrs(),
        )

    def reset_parameters(self) -> None:
        _glorot_(self.kernel)
        nn.init.zeros_(self.bias)
        if self.use_peephole:
            for p in (self.w_i_diag, self.w_f_diag, self.w_o_diag):
                _glorot_(p)
        if self.num_proj is not None:
            _glorot_(self.projection_kernel)

    def _peepholes(self, like: torch.Tensor):
        if self.use_peephole:
            return self.w_i_diag, self.w_f_diag, self.w_o_diag
        zero = like.new_zeros(self.num_units)  # ignored by the op; BlockLSTM wants [H]
        return zero, zero, zero

    def _zero_state(self, batch: int, like: torch.Tensor):
        return like.new_zeros(batch, self.num_units), like.new_zeros(batch, self.output_size)

    def extra_repr(self) -> str:
        out = (
            f"num_units={self.num_units}, input_size={self.input_size}, "
            f"forget_bias={self.forget_bias}, cell_clip={self.cell_clip}, "
            f"use_peephole={self.use_peephole}"
        )
        for k, v in _LSTM_VARIANT_DEFAULTS.items():
            if getattr(self, k) != v:
                out += f", {k}={getattr(self, k)!r}"
        if self.num_proj is not None:
            out += f", num_proj={self.num_proj}, proj_clip={self.proj_clip}"
        return out


_VARIANT_DOC = """
    Keyword-only variants (`torch_lstm_grad.ops.block_lstm_ex` has the math):
    `gate_activation` ("sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3") for i, f, o;
    `activation` ("tanh", "relu", "linear") for ci and co; `clip_gradient` ("straight_through",
    TF's block ops, or "zero", TF1 LSTMCell's clip_by_value); `num_proj` / `proj_clip` (TF1
    LSTMCell's projection: parameter `projection_kernel [H, P]` = TF's `projection/kernel`,
    `kernel` then `[I + P, 4H]`, h and the state's h `[.., P]`); `gate_order` ("icfo", or "ifco"
    for Keras' column order). With every one at its default the module runs TF's own raw op
    (same numbers and speed as without them); otherwise the `block_lstm_ex` op.
"""


class LSTMBlockCell(_LSTMBlockBase):
    """TF1 `tf.contrib.rnn.LSTMBlockCell` (one step of `LSTMBlockCell` the raw op).

    Parameters (TF variable names under `<scope>/lstm_cell/`): `kernel [I + H, 4H]` (rows: x
    then h; column blocks ICFO: input, cell input, forget, output), `bias [4H]` (ICFO), and with
    `use_peephole` `w_i_diag, w_f_diag, w_o_diag [H]`. `forget_bias` is added at run time (it is
    not in `bias`); `cell_clip=None` (TF1's default) disables the clip.

    `forward(x [B, I], state=(cs [B, H], h [B, H]) or None (zeros))` returns
    `(h, (cs, h))`: the output and the new state, as TF's `cell(x, state)` with an
    `LSTMStateTuple(c, h)` (h [B, P] with num_proj). With a variant it is one step of
    `block_lstm_ex` (T = 1).
    """

    __doc__ += _VARIANT_DOC

    def forward(self, x: torch.Tensor, state=None):
        cs_prev, h_prev = self._zero_state(x.shape[0], x) if state is None else state
        wci, wcf, wco = self._peepholes(x)
        if self._uses_variant_op():
            out = self._ex(x.unsqueeze(0), cs_prev, h_prev, wci, wcf, wco, None)
            return out.h[0], (out.cs[0], out.h[0])
        out = raw_ops.LSTMBlockCell(
            x,
            cs_prev,
            h_prev,
            self.kernel,
            wci,
            wcf,
            wco,
            self.bias,
            forget_bias=self.forget_bias,
            cell_clip=_clip(self.cell_clip),
            use_peephole=self.use_peephole,
        )
        return out.h, (out.cs, out.h)


class LSTMBlockFusedCell(_LSTMBlockBase):
    """TF1 `tf.contrib.rnn.LSTMBlockFusedCell` (the `BlockLSTM` raw op over a whole sequence).

    Parameters as `LSTMBlockCell` (TF scope `lstm_fused_cell/`): `kernel [I + H, 4H]` ICFO,
    `bias [4H]`, peepholes `w_i_diag, w_f_diag, w_o_diag [H]` with `use_peephole`.

    `forward(inputs [T, B, I] (time-major), initial_state=(cs, h) [B, H] or None (zeros),
    sequence_length=[B] ints or None)` returns `(outputs [T, B, H], (cs, h))`. With
    `sequence_length`, exactly as TF1's fused cell: BlockLSTM runs `max(sequence_length)` steps
    for every row, the `h` outputs are multiplied by the sequence mask (zero at t >= length; the
    cell states are not masked), and each row's final `(cs, h)` is taken at its own
    `length - 1`, the initial state for length 0. Without it the final state is step T - 1.
    With num_proj, outputs and the state's h are `[.., P]`.
    """

    __doc__ += _VARIANT_DOC

    def forward(self, inputs: torch.Tensor, initial_state=None, sequence_length=None):
        T, B = inputs.shape[0], inputs.shape[1]
        cs0, h0 = self._zero_state(B, inputs) if initial_state is None else initial_state
        wci, wcf, wco = self._peepholes(inputs)
        if not records_grad(inputs, cs0, h0, *self.parameters()):
            return self._inference(inputs, cs0, h0, wci, wcf, wco, sequence_length)
        if sequence_length is None:
            seq_len_max = T
        else:
            sequence_length = torch.as_tensor(sequence_length, device=inputs.device)
            seq_len_max = int(sequence_length.max()) if B > 0 else 0
        if self._uses_variant_op():
            out = self._ex(inputs, cs0, h0, wci, wcf, wco, seq_len_max)
        else:
            out = raw_ops.BlockLSTM(
                torch.tensor(seq_len_max, dtype=torch.int64),
                inputs,
                cs0,
                h0,
                self.kernel,
                wci,
                wcf,
                wco,
                self.bias,
                forget_bias=self.forget_bias,
                cell_clip=_clip(self.cell_clip),
                use_peephole=self.use_peephole,
            )
        cs, h = out.cs, out.h
        if sequence_length is None:
            if T == 0:
                return h, (cs0, h0)
            return h, (cs[-1], h[-1])
        lengths = sequence_length.to(torch.int64)
        mask = torch.arange(T, device=inputs.device)[:, None] < lengths[None, :]  # [T, B]
        h = h * mask.unsqueeze(-1).to(h.dtype)
        # Index length (not length - 1) into [initial, step 0, ...]: length 0 = initial state.
        index = lengths.view(1, B, 1)
        final_cs = (
            torch.cat([cs0.unsqueeze(0), cs])
            .gather(0, index.expand(1, B, self.num_units))
            .squeeze(0)
        )
        final_h = (
            torch.cat([h0.unsqueeze(0), h])
            .gather(0, index.expand(1, B, self.output_size))
            .squeeze(0)
        )
        return h, (final_cs, final_h)

    def _inference(self, inputs, cs0, h0, wci, wcf, wco, sequence_length):
        # The same numbers through block_lstm_inference: only h and the final state are
        # written, and the recurrent weight is read in its packed form (see PackedWeights).
        if sequence_length is not None:
            sequence_length = torch.as_tensor(sequence_length, device=inputs.device)
        packed_w, packed_x = self._prepared().get(self.kernel, self.input_size, inputs)
        out = ops.block_lstm_inference(
            inputs,
            cs0,
            h0,
            self.kernel,
            self.bias,
            wci=wci,
            wcf=wcf,
            wco=wco,
            packed_w=packed_w,
            packed_x=packed_x,
            sequence_length=sequence_length,
            **self._cell_attrs(),
        )
        return out.h, (out.cs, out.h_last)


class GRUBlockCell(nn.Module):
    """TF1 `tf.contrib.rnn.GRUBlockCellV2` (one step of the `GRUBlockCell` raw op; TF's
    reset-before GRU, the math of `tf.nn.rnn_cell.GRUCell` and Keras `GRU(reset_after=False)`).

    Parameters (TF's `/` is not legal in a parameter name): `gates_kernel [I + H, 2H]` = TF
    `gates/kernel` (= the op's `w_ru`; column blocks r, u), `gates_bias [2H]` = `gates/bias`
    (`b_ru`, initialised to 1.0), `candidate_kernel [I + H, H]` = `candidate/kernel` (`w_c`),
    `candidate_bias [H]` = `candidate/bias` (`b_c`, zeros). Rows are x then h. (Contrib's v1
    `GRUBlockCell` stored the gate kernel as `w_c` and the candidate kernel as `w_ru`:
    docs/tf-semantics.md §5.4; `porting` maps both.)

    `forward(x [B, I], h [B, H] or None (zeros))` returns `(h_new, h_new)` (output, state).

    Keyword-only variants: `gate_activation` ("sigmoid", "hard_sigmoid_keras2",
    "hard_sigmoid_keras3") for r and u, `activation` ("tanh", "relu", "linear") for the
    candidate. At their defaults the module runs TF's `GRUBlockCell` raw op; otherwise one step
    of the `keras_gru` op (reset_after=False) on the same parameters, which computes
    `h = u ⊙ h_prev + (1 − u) ⊙ c` in Keras' form (TF's op: `u ⊙ (h_prev − c) + c`).
    """

    def __init__(
        self,
        num_units: int,
        input_size: int,
        *,
        gate_activation: str = "sigmoid",
        activation: str = "tanh",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_choice(gate_activation, "gate_activation", LSTM_EX_CHOICES["gate_activation"])
        check_choice(activation, "activation", LSTM_EX_CHOICES["activation"])
        self.gate_activation, self.activation = gate_activation, activation
        factory = {"device": device, "dtype": dtype}
        self.num_units, self.input_size = int(num_units), int(input_size)
        H, I = self.num_units, self.input_size
        self.gates_kernel = nn.Parameter(torch.empty(I + H, 2 * H, **factory))
        self.gates_bias = nn.Parameter(torch.empty(2 * H, **factory))
        self.candidate_kernel = nn.Parameter(torch.empty(I + H, H, **factory))
        self.candidate_bias = nn.Parameter(torch.empty(H, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _glorot_(self.gates_kernel)
        _glorot_(self.candidate_kernel)
        nn.init.ones_(self.gates_bias)
        nn.init.zeros_(self.candidate_bias)

    def forward(self, x: torch.Tensor, h=None):
        h_prev = x.new_zeros(x.shape[0], self.num_units) if h is None else h
        if self.gate_activation != "sigmoid" or self.activation != "tanh":
            # The block layout as Keras' (z = u, r, h columns; rows x then h), differentiably.
            I, H = self.input_size, self.num_units
            gk, ck = self.gates_kernel, self.candidate_kernel
            w = torch.cat([gk[:, H:], gk[:, :H], ck], dim=1)  # [I + H, 3H]: u, r, c
            bias = torch.cat([self.gates_bias[H:], self.gates_bias[:H], self.candidate_bias])
            out = ops.keras_gru(x.unsqueeze(0), h_prev, w[:I], w[I:], bias, reset_after=False,
                                gate_activation=self.gate_activation,
                                activation=self.activation)  # fmt: skip
            h_new = out.h[0]
            return h_new, h_new
        out = raw_ops.GRUBlockCell(
            x,
            h_prev,
            self.gates_kernel,
            self.candidate_kernel,
            self.gates_bias,
            self.candidate_bias,
        )
        return out.h, out.h

    def extra_repr(self) -> str:
        out = f"num_units={self.num_units}, input_size={self.input_size}"
        if self.gate_activation != "sigmoid":
            out += f", gate_activation={self.gate_activation!r}"
        if self.activation != "tanh":
            out += f", activation={self.activation!r}"
        return out


class GRUBlockFusedCell(nn.Module):
    """Keras' `GRU` layer over a whole sequence, as one fused op (`keras_gru`; the GRU
    counterpart of `LSTMBlockFusedCell`, with Keras' parameters).

    Parameters (Keras' names and layouts, gate order z, r, h): `kernel [I, 3H]`,
    `recurrent_kernel [H, 3H]`, `bias` (`use_bias=True`): `[2, 3H]` with `reset_after=True`
    (row 0 the input bias, row 1 the recurrent bias; cuDNN's GRU, Keras 3's default) or `[3H]`
    with `reset_after=False` (TF's GRUBlockCell math). `gate_activation` is Keras'
    `recurrent_activation` ("sigmoid", "hard_sigmoid_keras2" for Keras 2.x's "hard_sigmoid",
    "hard_sigmoid_keras3" for Keras 3's), `activation` ("tanh", "relu", "linear"). Initialised as
    Keras does: glorot-uniform kernel, orthogonal recurrent kernel, zero bias.

    `forward(inputs [T, B, I] (time-major), initial_state=h [B, H] or None (zeros),
    sequence_length=[B] ints or None)` returns `(outputs [T, B, H], h [B, H])`. With
    `sequence_length` (right-padded rows): the op runs `max(sequence_length)` steps, outputs are
    zero at t >= length (as cuDNN's lengths and Keras' `zero_output_for_mask=True`; Keras'
    default non-cuDNN path repeats the last valid output there instead) and each row's final
    state is the one at its own length (the initial state for length 0), as both.
    """

    def __init__(
        self,
        num_units: int,
        input_size: int,
        *,
        reset_after: bool = True,
        use_bias: bool = True,
        gate_activation: str = "sigmoid",
        activation: str = "tanh",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        check_choice(gate_activation, "gate_activation", LSTM_EX_CHOICES["gate_activation"])
        check_choice(activation, "activation", LSTM_EX_CHOICES["activation"])
        factory = {"device": device, "dtype": dtype}
        self.num_units, self.input_size = int(num_units), int(input_size)
        self.reset_after, self.use_bias = bool(reset_after), bool(use_bias)
        self.gate_activation, self.activation = gate_activation, activation
        H, I = self.num_units, self.input_size
        self.kernel = nn.Parameter(torch.empty(I, 3 * H, **factory))
        self.recurrent_kernel = nn.Parameter(torch.empty(H, 3 * H, **factory))
        if self.use_bias:
            shape = (2, 3 * H) if self.reset_after else (3 * H,)
            self.bias = nn.Parameter(torch.empty(shape, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _glorot_(self.kernel)
        with torch.no_grad():
            nn.init.orthogonal_(self.recurrent_kernel)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, inputs: torch.Tensor, initial_state=None, sequence_length=None):
        T, B = inputs.shape[0], inputs.shape[1]
        h0 = inputs.new_zeros(B, self.num_units) if initial_state is None else initial_state
        if sequence_length is None:
            seq_len_max = T
        else:
            sequence_length = torch.as_tensor(sequence_length, device=inputs.device)
            seq_len_max = int(sequence_length.max()) if B > 0 else 0
        h = ops.keras_gru(
            inputs,
            h0,
            self.kernel,
            self.recurrent_kernel,
            self.bias,
            seq_len_max=seq_len_max,
            reset_after=self.reset_after,
            gate_activation=self.gate_activation,
            activation=self.activation,
        ).h
        if sequence_length is None:
            return h, (h[-1] if T > 0 else h0)
        lengths = sequence_length.to(torch.int64)
        mask = torch.arange(T, device=inputs.device)[:, None] < lengths[None, :]
        h = h * mask.unsqueeze(-1).to(h.dtype)
        index = lengths.view(1, B, 1).expand(1, B, self.num_units)
        return h, torch.cat([h0.unsqueeze(0), h]).gather(0, index).squeeze(0)

    def extra_repr(self) -> str:
        return (
            f"num_units={self.num_units}, input_size={self.input_size}, "
            f"reset_after={self.reset_after}, use_bias={self.use_bias}, "
            f"gate_activation={self.gate_activation!r}, activation={self.activation!r}"
        )


class _CudnnRNN(nn.Module):
    _rnn_mode = ""

    def __init__(
        self,
        num_layers: int,
        num_units: int,
        input_size: int,
        input_mode: str = "linear_input",
        direction: str = "unidirectional",
        dropout: float = 0.0,
        seed: int | None = None,
        *,
        num_proj: int | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.num_layers, self.num_units = int(num_layers), int(num_units)
        self.input_size, self.input_mode, self.direction = int(input_size), input_mode, direction
        self.dropout, self.seed = float(dropout), seed
        self.num_proj = int(num_proj or 0)
        self.num_dirs = 2 if direction == "bidirectional" else 1
        dtype = torch.get_default_dtype() if dtype is None else dtype
        size = raw_ops.CudnnRNNParamsSize(**self._attrs(), T=dtype, S=torch.int64)
        self.opaque_kernel = nn.Parameter(torch.empty(int(size[0]), device=device, dtype=dtype))
        self.reset_parameters()

    def _attrs(self, proj: bool = True) -> dict:
        attrs = dict(
            num_layers=self.num_layers,
            num_units=self.num_units,
            input_size=self.input_size,
            rnn_mode=self._rnn_mode,
            input_mode=self.input_mode,
            direction=self.direction,
        )
        if proj:
            attrs["num_proj"] = self.num_proj
        return attrs

    def canonical_weights(self):
        """`(weights, biases)`: the opaque params as TF's canonical lists (docs/tf-semantics.md
        §7.1), copies that are differentiable into `opaque_kernel` (CudnnRNNParamsToCanonicalV2)."""
        G = {"lstm": 4, "gru": 3}.get(self._rnn_mode, 1)
        n = self.num_layers * self.num_dirs * 2 * G
        out = raw_ops.CudnnRNNParamsToCanonicalV2(
            params=self.opaque_kernel,
            num_params_weights=n + (n // (2 * G) if self.num_proj else 0),
            num_params_biases=n,
            **self._attrs(),
        )
        return out.weights, out.biases

    @torch.no_grad()
    def set_canonical_weights(self, weights, biases) -> None:
        """Writes the canonical lists (CudnnRNNCanonicalToParamsV2) into `opaque_kernel`."""
        params = raw_ops.CudnnRNNCanonicalToParamsV2(
            weights=weights, biases=biases, **self._attrs()
        )
        self.opaque_kernel.copy_(params)

    def reset_parameters(self) -> None:
        weights, biases = self.canonical_weights()
        weights = [_glorot_(w.detach().clone()) if w.numel() else w for w in weights]
        self.set_canonical_weights(weights, [torch.zeros_like(b) for b in biases])

    def forward(
        self,
        inputs: torch.Tensor,
        initial_state=None,
        sequence_lengths=None,
        time_major: bool = True,
        training: bool | None = None,
    ):
        """`inputs [T, B, I]` (`[B, T, I]` when not time_major); `initial_state` `(h, c)` for
        LSTM, `(h,)` otherwise, each `[L·D, B, n]` (batch-major: `[B, L·D, n]`, whose memory
        TF reads as `[L·D, B, n]`, docs/differences.md), zeros when None; `sequence_lengths [B]`
        or None (all T). `training=None` follows `self.training`; dropout applies only in training.
        Returns `(outputs [T, B, D·P], (h, c))` for LSTM and `(outputs, (h,))` otherwise."""
        training = self.training if training is None else bool(training)
        B = inputs.shape[1] if time_major else inputs.shape[0]
        LD, P = self.num_layers * self.num_dirs, self.num_proj or self.num_units

        def zeros(n):
            shape = (LD, B, n) if time_major else (B, LD, n)
            return inputs.new_zeros(shape)

        if initial_state is None:
            h0, c0 = zeros(P), zeros(self.num_units)
        else:
            h0 = initial_state[0]
            c0 = initial_state[1] if self._rnn_mode == "lstm" else inputs.new_zeros(())
        if self._rnn_mode != "lstm":
            c0 = inputs.new_zeros(())
        if not records_grad(inputs, h0, c0, self.opaque_kernel) and (
            not training or self.dropout == 0 or self.num_layers == 1
        ):
            # Nothing to differentiate and no dropout to draw: the inference forward, with the
            # same numbers (cudnn_rnn's with is_training=False).
            return self._inference(inputs, h0, c0, sequence_lengths, time_major, B)
        seed, seed2 = (0, 0) if self.seed is None else (0, int(self.seed))
        out = raw_ops.CudnnRNNV3(
            inputs,
            h0,
            c0,
            self.opaque_kernel,
            sequence_lengths,
            rnn_mode=self._rnn_mode,
            input_mode=self.input_mode,
            direction=self.direction,
            dropout=self.dropout,
            seed=seed,
            seed2=seed2,
            num_proj=self.num_proj,
            is_training=training,
            time_major=time_major,
        )
        if self._rnn_mode == "lstm":
            return out.output, (out.output_h, out.output_c)
        return out.output, (out.output_h,)

    def _inference(self, inputs, h0, c0, sequence_lengths, time_major, batch):
        if sequence_lengths is not None and not isinstance(sequence_lengths, torch.Tensor):
            sequence_lengths = torch.as_tensor(sequence_lengths, dtype=torch.int32)
        packed_r, packed_x = self._prepared(inputs, batch)
        out = call_no_grad(
            torch.ops.torch_lstm_grad.cudnn_rnn_inference.default,
            inputs,
            h0,
            c0,
            self.opaque_kernel,
            sequence_lengths,
            packed_r,
            packed_x,
            self._rnn_mode,
            self.input_mode,
            self.direction,
            self.num_proj,
            bool(time_major),
        )
        output, output_h, output_c = out
        if self._rnn_mode == "lstm":
            return output, (output_h, output_c)
        return output, (output_h,)

    def _prepared(self, inputs, batch):
        """(packed_r, packed_x) of cudnn_rnn_inference, per version of opaque_kernel: Rᵀ of each
        pseudo-layer packed (pack_recurrent_weight) for the LSTM steps of batches the panels
        take, and Wᵀ for the input projections (any batch: its rows are T·B; not under
        skip_input, where layer 0 has no W); [] where not prepared."""
        found = self.__dict__.get("_packed")
        if found is None:
            found = self._packed = PackedWeights()
        recurrent = self._rnn_mode == "lstm" and batch <= PANEL_MAX_ROWS

        def make(params):
            layout = cudnn_rnn_config.params_layout(**self._attrs())
            G, GH, P = layout.gates, layout.gates * self.num_units, layout.proj_units

            def packed(offset, cols):  # the [GH, cols] matrix at offset, transposed
                matrix = params[offset : offset + GH * cols].view(GH, cols)
                return ops.pack_recurrent_weight(matrix.t(), G)

            skip_input = any(p.w is None for p in layout.layers)
            return [
                [packed(p.r, P) for p in layout.layers] if recurrent else [],
                [] if skip_input else [packed(p.w, p.in_size) for p in layout.layers],
            ]

        found = found.lookup(self.opaque_kernel, make, inputs, recurrent)
        return ([], []) if found is None else tuple(found)

    def release_prepared_weights(self) -> None:
        """Drops the packed copies of the weights kept for calls without gradient
        (rebuilt on the next such call). Needed only after writing `opaque_kernel` through
        `.data`, which does not advance its version; any other in-place write is seen."""
        found = self.__dict__.get("_packed")
        if found is not None:
            found.clear()

    def extra_repr(self) -> str:
        proj = f", num_proj={self.num_proj}" if self.num_proj else ""
        return (
            f"num_layers={self.num_layers}, num_units={self.num_units}, "
            f"input_size={self.input_size}, input_mode={self.input_mode!r}, "
            f"direction={self.direction!r}, dropout={self.dropout}{proj}"
        )


class CudnnLSTM(_CudnnRNN):
    """TF1 `tf.contrib.cudnn_rnn.CudnnLSTM` (the `CudnnRNNV3` raw op, rnn_mode="lstm").

    One parameter `opaque_kernel` = TF's `<scope>/opaque_kernel`: the params buffer of
    `CudnnRNNParamsSize` elements, layout of docs/tf-semantics.md §7 (canonical gate order i, f,
    c, o; matrices `[out, in]`; double biases). `num_proj` (TF 1.15) adds a projection `[P, H]` per
    layer and direction. Canonical views: `canonical_weights()`; conversions: `layouts.py`.
    """

    _rnn_mode = "lstm"


class CudnnGRU(_CudnnRNN):
    """TF1 `tf.contrib.cudnn_rnn.CudnnGRU` (`CudnnRNNV3`, rnn_mode="gru": cuDNN's reset-after
    GRU, canonical gates r, z, h). Parameter `opaque_kernel` as in `CudnnLSTM`; no num_proj."""

    _rnn_mode = "gru"


class CudnnRNNTanh(_CudnnRNN):
    """TF1 `tf.contrib.cudnn_rnn.CudnnRNNTanh` (`CudnnRNNV3`, rnn_mode="rnn_tanh"): h' =
    tanh(W x + bW + R h + bR). Parameter `opaque_kernel` as in `CudnnLSTM`; no num_proj."""

    _rnn_mode = "rnn_tanh"


class CudnnRNNRelu(_CudnnRNN):
    """TF1 `tf.contrib.cudnn_rnn.CudnnRNNRelu` (`CudnnRNNV3`, rnn_mode="rnn_relu"): h' =
    max(0, W x + bW + R h + bR). Parameter `opaque_kernel` as in `CudnnLSTM`; no num_proj."""

    _rnn_mode = "rnn_relu"
