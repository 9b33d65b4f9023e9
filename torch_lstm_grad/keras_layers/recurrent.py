"""Keras' recurrent layers as `nn.Module`s: Keras' weights, Keras' call, the fused kernels.

`KerasLSTM`, `KerasGRU`, `KerasSimpleRNN` hold Keras' own parameters (`kernel [I, G·U]`,
`recurrent_kernel [U, G·U]`, `bias`; gate orders i, f, c, o and z, r, h as Keras stores them),
so a Keras file's weights load as they are and their gradients are Keras' gradients. A call
does what the Keras layer's call does (Keras 3 and tf.keras 2, `keras/src/layers/rnn/rnn.py` and
the TF backend's `rnn`), on the CPU path (the only one without cuDNN's restrictions):

* `inputs [B, T, I]` (`[T, B, I]` with `time_major`), optional `initial_state` (LSTM `[h, c]`,
  GRU/SimpleRNN `[h]`, each `[B, U]`), optional `mask [B, T]` (bool: True = a real step).
* `go_backwards`: the sequence (and mask) is read in reverse and the outputs are returned in that
  reversed order, as Keras returns them.
* a mask skips steps: a masked step leaves the states as they were; its output is zero
  (`zero_output_for_mask`) or the last unmasked step's output (zeros before the first one). Any
  mask pattern is exact: the unmasked steps of each row are gathered to the front, the kernel
  runs them with per-row lengths, and the outputs are scattered back.
* returns `output` (`[B, T, U]` with `return_sequences`, else the last step's output `[B, U]`),
  followed by the final states with `return_state`; `stateful` keeps the final states for the
  next call (`reset_states()` clears them), as Keras' stateful layers do.

The cores are the fused ops: LSTM = `BlockLSTMV2` (Keras' i, f, c, o order, no forget bias, no
clip; docs/tf-semantics.md §8.3) with sigmoid gates and tanh, else `ops.block_lstm_ex` (gate_order
"ifco"); GRU = `ops.keras_gru` (both reset positions, Keras' layout as it is); SimpleRNN =
`CudnnRNNV3` rnn_tanh / rnn_relu. Activation names are `torch_lstm_grad`'s own, unambiguous
ones (`porting` maps a file's strings to them): gates (Keras `recurrent_activation`)
"sigmoid", "hard_sigmoid_keras2" (Keras 2's `clip(0.2·x + 0.5, 0, 1)`), "hard_sigmoid_keras3"
(Keras 3's `relu6(x + 3) / 6`); candidate and cell output (`activation`) "tanh", "relu",
"linear" (SimpleRNN: tanh, relu). Anything else raises NotImplementedError at construction.
Keras' dropout and recurrent_dropout are training-time noise and are not applied (the modules
compute Keras' `training=False` function).

`KerasBidirectional(forward, backward, merge_mode)` is Keras' `Bidirectional` around two of them.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import ops, raw_ops
from ..packed_weights import PackedWeights, records_grad

__all__ = ["KerasBidirectional", "KerasGRU", "KerasLSTM", "KerasRNN", "KerasSimpleRNN"]

ACTIVATIONS = ("sigmoid", "tanh", "relu", "linear", "hard_sigmoid_keras2", "hard_sigmoid_keras3")
MASKED_OUTPUTS = ("previous", "zeros")


def _check_choice(name: str, value: str, allowed, cls: str) -> None:
    """NotImplementedError (naming the argument) for an activation the kernels do not compute:
    an unknown name as much as a known one not built, so a port of it is refused rather than
    approximated."""
    if value not in allowed:
        known = "" if value in ACTIVATIONS else " (not an activation this package knows)"
        raise NotImplementedError(
            f"{cls}: {name}={value!r}{known} is not computed by this version's kernels (they "
            f"compute {name} in {{{', '.join(allowed)}}})"
        )


GATE_ACTIVATIONS = ("sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3")
CANDIDATE_ACTIVATIONS = ("tanh", "relu", "linear")


def _check_gated(kwargs: dict, cls: str) -> None:
    """The activations the fused LSTM/GRU kernels compute (`ops.block_lstm_ex`,
    `ops.keras_gru`)."""
    _check_choice("recurrent_activation", kwargs.get("recurrent_activation", "sigmoid"),
                  GATE_ACTIVATIONS, cls)  # fmt: skip
    _check_choice("activation", kwargs.get("activation", "tanh"), CANDIDATE_ACTIVATIONS, cls)


class KerasRNN(nn.Module):
    """Keras' RNN call around a core `_run(x [T, B, I] time-major, states, lengths or None) ->
    (outputs [T, B, U], final states)`; subclasses define the weights and the core."""

    gates = 1
    num_states = 1

    def __init__(
        self,
        units: int,
        input_size: int,
        *,
        activation: str = "tanh",
        recurrent_activation: str = "sigmoid",
        use_bias: bool = True,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        time_major: bool = False,
        zero_output_for_mask: bool | None = False,
        masked_outputs: str = "previous_output",
        cudnn_mask: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.units, self.input_size = int(units), int(input_size)
        if self.units <= 0 or self.input_size < 0:
            raise ValueError(
                f"units, input_size: expected units > 0 and input_size >= 0, got "
                f"{self.units} and {self.input_size}"
            )
        self.activation, self.recurrent_activation = activation, recurrent_activation
        self.use_bias = bool(use_bias)
        self.return_sequences, self.return_state = bool(return_sequences), bool(return_state)
        self.go_backwards, self.stateful = bool(go_backwards), bool(stateful)
        self.time_major = bool(time_major)
        # None: the masked-step outputs of the Keras that wrote the layer are not known here
        # (Keras <= 2.2); a call with a mask then raises instead of guessing.
        self.zero_output_for_mask = None if zero_output_for_mask is None else bool(
            zero_output_for_mask
        )
        # A masked step's output (without zero_output_for_mask): the previous step's output
        # with zeros before the first unmasked step (Keras >= 2.3 and Keras 3), or the previous
        # state with the initial state before it (Keras <= 2.2's backends: `states[0]`).
        if masked_outputs not in ("previous_output", "previous_state"):
            raise ValueError(
                f"masked_outputs: 'previous_output' or 'previous_state', got {masked_outputs!r}"
            )
        self.masked_outputs = masked_outputs
        # The layer as Keras runs it on cuDNN's kernel (a SavedModel traced where a GPU was
        # visible: docs/cudnn.md): the graph takes a mask only right-padded, no row empty.
        self.cudnn_mask = bool(cudnn_mask)
        G, U = self.gates, self.units
        self.kernel = nn.Parameter(torch.empty(self.input_size, G * U, **factory))
        self.recurrent_kernel = nn.Parameter(torch.empty(U, G * U, **factory))
        if self.use_bias:
            self.bias = nn.Parameter(torch.empty(self._bias_shape(), **factory))
        else:
            self.register_buffer("bias", torch.zeros(self._bias_shape(), **factory))
        self._states: list[torch.Tensor] | None = None
        self.reset_parameters()

    def _bias_shape(self) -> tuple[int, ...]:
        return (self.gates * self.units,)

    def reset_parameters(self) -> None:
        """Keras' initialisers: glorot-uniform kernel, orthogonal recurrent kernel, zero bias
        (the LSTM's forget block 1, `unit_forget_bias`)."""
        nn.init.xavier_uniform_(self.kernel)
        with torch.no_grad():
            for g in range(self.gates):
                block = self.recurrent_kernel[:, g * self.units : (g + 1) * self.units]
                block.copy_(nn.init.orthogonal_(torch.empty_like(block)))
            self.bias.zero_()

    def reset_states(self) -> None:
        """Forget the states a stateful layer kept from its last call."""
        self._states = None

    # -- Keras' call ---------------------------------------------------------------------------

    def _initial_states(self, initial_state, B: int, like: torch.Tensor) -> list[torch.Tensor]:
        if initial_state is None:
            if self.stateful and self._states is not None:
                return self._states
            return [like.new_zeros(B, self.units) for _ in range(self.num_states)]
        states = [initial_state] if torch.is_tensor(initial_state) else list(initial_state)
        if len(states) != self.num_states:
            raise ValueError(
                f"initial_state: expected {self.num_states} tensor(s) of shape [{B}, "
                f"{self.units}], got {len(states)}"
            )
        for k, s in enumerate(states):
            if tuple(s.shape) != (B, self.units):
                raise ValueError(
                    f"initial_state[{k}]: expected shape [{B}, {self.units}], got {list(s.shape)}"
                )
        return states

    def forward(self, inputs: torch.Tensor, mask=None, initial_state=None):
        if inputs.dim() != 3 or inputs.shape[2] != self.input_size:
            layout = "[T, B, I]" if self.time_major else "[B, T, I]"
            raise ValueError(
                f"inputs: expected {layout} with I = {self.input_size}, got {list(inputs.shape)}"
            )
        x = inputs if self.time_major else inputs.transpose(0, 1)
        T, B = x.shape[0], x.shape[1]
        states = self._initial_states(initial_state, B, x)
        if mask is not None:
            if self.zero_output_for_mask is None:
                raise NotImplementedError(
                    f"{type(self).__name__}: called with a mask, but what the Keras layer it "
                    "ports returns at masked steps is not known (Keras <= 2.2, a file that "
                    "does not say its Keras version: convert with --keras-version) or not "
                    "defined (Keras' CuDNN layers take no mask)"
                )
            mask = torch.as_tensor(mask, device=x.device)
            if tuple(mask.shape) != (B, T):
                raise ValueError(
                    f"mask: expected shape [{B}, {T}] (batch, time), got {list(mask.shape)}"
                )
            mask = mask.to(torch.bool).t()  # [T, B]
            if self.cudnn_mask:
                _check_right_padded(mask, type(self).__name__)
        if T == 0:
            raise ValueError("inputs: a sequence of 0 steps (Keras refuses it too)")
        if mask is None:
            outputs, finals = self._run(x.flip(0) if self.go_backwards else x, states, None)
        else:  # the mask in the order the steps run; x as it came (gathered in that order)
            mask = mask.flip(0) if self.go_backwards else mask
            outputs, finals = self._run_masked(x, states, mask, reversed_x=self.go_backwards)
        if self.stateful:
            self._states = [s.detach() for s in finals]
        if self.return_sequences:
            output = outputs if self.time_major else outputs.transpose(0, 1)
        else:
            output = outputs[-1]
        return (output, *finals) if self.return_state else output

    def compute_mask(self, inputs, mask):
        """Keras' output masks: the input mask on the sequence output (none on a last-step
        output), none on the states."""
        if isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        out = mask if self.return_sequences else None
        return [out] + [None] * self.num_states if self.return_state else out

    def _run_masked(self, x, states, mask, reversed_x: bool):
        """`mask [T, B]` in the order the steps run; `x` in time order, to be read from its
        last step back where `reversed_x` (go_backwards)."""
        T, B = mask.shape
        counts = mask.to(torch.int64).cumsum(0)  # unmasked steps up to and including t
        lengths = counts[-1]
        steps_first, padding_first = _padding(mask)
        if steps_first:
            # Each row's unmasked steps already come first (post-padding read forwards,
            # pre-padding read backwards): no gather.
            outputs, finals = self._run(x.flip(0) if reversed_x else x, states, lengths)
        else:
            # Each row's unmasked steps first, in order: the stable sort of "masked" keys, which
            # for padding then steps (pre-padding read forwards, post-padding read backwards) is
            # a rotation of each row by its padding.
            if padding_first:
                t = torch.arange(T, device=mask.device).unsqueeze(1)
                order = (t + (T - lengths)) % T
            else:
                order = torch.sort((~mask).to(torch.int8), dim=0, stable=True).indices
            outputs, finals = self._run(
                _take_steps(x, T - 1 - order if reversed_x else order), states, lengths
            )
        if steps_first and self.zero_output_for_mask:
            out = outputs  # each unmasked step's own output in place; the rest zeroed below
        else:  # each step's output: that of the row's last unmasked step up to it
            out = _take_steps(outputs, (counts - 1).clamp(min=0))
        if self.zero_output_for_mask:
            return _zero_steps(out, mask), finals
        started = counts > 0
        if self.masked_outputs == "previous_state":  # the initial h before the first step
            return torch.where(started.unsqueeze(-1), out, states[0].unsqueeze(0)), finals
        return _zero_steps(out, started), finals

    @staticmethod
    def _final(seq: torch.Tensor, initial: torch.Tensor, lengths) -> torch.Tensor:
        """Each row's state after its own `lengths[b]` steps (the initial state for 0)."""
        if lengths is None:
            return seq[-1]
        index = (lengths - 1).clamp(min=0).view(1, -1, 1).expand(1, -1, seq.shape[2])
        last = seq.gather(0, index).squeeze(0)
        return torch.where((lengths > 0).unsqueeze(-1), last, initial)

    def extra_repr(self) -> str:
        flags = [
            f"{k}={getattr(self, k)}"
            for k in (
                "use_bias",
                "return_sequences",
                "return_state",
                "go_backwards",
                "stateful",
                "time_major",
                "zero_output_for_mask",
                "cudnn_mask",
            )
            if getattr(self, k) != (k == "use_bias")
        ]
        return ", ".join(
            [
                f"units={self.units}",
                f"input_size={self.input_size}",
                f"activation={self.activation!r}",
                f"recurrent_activation={self.recurrent_activation!r}",
                *flags,
            ]
        )


_NOT_RIGHT_PADDED = (
    "mask: the layer runs cuDNN's kernel, as Keras saved it where a GPU was visible, and takes "
    "a mask only right-padded (each row's steps first, then its padding) with at least one step "
    "a row; the saved graph asserts the same"
)


def _check_right_padded(mask: torch.Tensor, cls: str) -> None:
    """Raises unless `mask [T, B]` is each row's first steps, at least one."""
    ok = mask[0].all() & _steps_first(mask)
    if torch.compiler.is_compiling():
        torch._assert_async(ok, f"{cls} {_NOT_RIGHT_PADDED}")
    elif not bool(ok):
        raise ValueError(f"{cls} {_NOT_RIGHT_PADDED}")


def _padding(mask: torch.Tensor) -> tuple[bool, bool]:
    """Whether every row of `mask [T, B]` is its unmasked steps then its masked ones, and
    whether every row is its masked steps then its unmasked ones (a full or an empty row is
    both), in one read of the mask. Under torch.compile (False, False): the general path is
    exact for every mask, without a data-dependent branch."""
    if torch.compiler.is_compiling():
        return False, False
    return tuple(torch.stack([_steps_first(mask), _steps_first(mask.flip(0))]).tolist())


def _steps_first(mask: torch.Tensor) -> torch.Tensor:
    """Whether every row of `mask [T, B]` is its unmasked steps then its masked ones (a 0-d
    bool tensor: no host sync): no step unmasked after a masked one."""
    return (mask[1:] <= mask[:-1]).all()


def _zero_steps(seq: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """`seq [T, B, F]` with +0.0 at the steps where `keep [T, B]` is False, as Keras' `where`
    gives them (a product with the mask would give -0.0, or NaN past a row's length where the
    kernel ran on padding). Filling the masked rows is a copy and a fill, where `torch.where`
    is several times slower on the CPU at these sizes."""
    if torch.compiler.is_compiling():
        return torch.where(keep.unsqueeze(-1), seq, 0.0)
    T, B, F = seq.shape
    masked = (~keep).reshape(-1).nonzero().squeeze(1)
    return seq.reshape(T * B, F).index_fill(0, masked, 0.0).view(T, B, F)


def _take_steps(seq: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """`out[t, b] = seq[steps[t, b], b]` for `seq [T, B, F]`, `steps [T', B]`: one row index
    per (step, batch row) into the flattened sequence, where a `gather` would read an index
    as large as the sequence itself."""
    T, B, F = seq.shape
    rows = steps * B + torch.arange(B, device=steps.device)
    return seq.reshape(T * B, F).index_select(0, rows.reshape(-1)).view(-1, B, F)


class KerasLSTM(KerasRNN):
    """Keras `LSTM` (Keras 2 and 3): `kernel [I, 4U]`, `recurrent_kernel [U, 4U]`, `bias [4U]`
    in Keras' i, f, c, o order (the forget bias is in `bias`). States `[h, c]`."""

    gates = 4
    num_states = 2

    def __init__(self, units: int, input_size: int, **kwargs) -> None:
        _check_gated(kwargs, "KerasLSTM")
        super().__init__(units, input_size, **kwargs)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.use_bias:  # unit_forget_bias; without a bias there is nothing to initialise
            with torch.no_grad():
                self.bias[self.units : 2 * self.units] = 1.0

    def _run(self, x, states, lengths):
        h0, c0 = states
        if not records_grad(x, h0, c0, self.kernel, self.recurrent_kernel, self.bias):
            return self._inference(x, h0, c0, lengths)
        w = torch.cat([self.kernel, self.recurrent_kernel], 0)
        if (self.recurrent_activation, self.activation) == ("sigmoid", "tanh"):
            # Keras' LSTM is BlockLSTMV2 exactly: IFCO, no forget bias, no clip (§8.3).
            no_peep = x.new_zeros(self.units)
            out = raw_ops.BlockLSTMV2(
                torch.tensor(x.shape[0], dtype=torch.int64), x, c0, h0, w, no_peep, no_peep,
                no_peep, self.bias, cell_clip=0.0, use_peephole=False,
            )  # fmt: skip
        else:
            out = ops.block_lstm_ex(
                x, c0, h0, w, self.bias, forget_bias=0.0, gate_order="ifco",
                gate_activation=self.recurrent_activation, activation=self.activation,
            )  # fmt: skip
        return out.h, [self._final(out.h, h0, lengths), self._final(out.cs, c0, lengths)]

    def _inference(self, x, h0, c0, lengths):
        # Where no gradient is recorded: block_lstm_inference, the same numbers, writing only
        # h and the final states, with the weights packed once per version (packed_weights.py).
        prepared = self.__dict__.get("_prepared_weights")
        if prepared is None:
            prepared = self._prepared_weights = PackedWeights()
        w, packed_w, packed_x = prepared.keras_lstm(self.kernel, self.recurrent_kernel, x)
        if w is None:
            w = torch.cat([self.kernel, self.recurrent_kernel], 0)
        out = ops.block_lstm_inference(
            x, c0, h0, w, self.bias, packed_w=packed_w, packed_x=packed_x,
            sequence_length=lengths, forget_bias=0.0, gate_order="ifco",
            gate_activation=self.recurrent_activation, activation=self.activation,
        )  # fmt: skip
        return out.h, [out.h_last, out.cs]


class KerasGRU(KerasRNN):
    """Keras `GRU`: `kernel [I, 3U]`, `recurrent_kernel [U, 3U]` (z, r, h); `reset_after=True`
    (Keras 3's and tf.keras 2's default, cuDNN's GRU) has `bias [2, 3U]` (input row, recurrent
    row), `reset_after=False` (Keras <= 2.2's default, TF's GRUBlockCell) `bias [3U]`."""

    gates = 3

    def __init__(self, units: int, input_size: int, *, reset_after: bool = True, **kwargs) -> None:
        self.reset_after = bool(reset_after)
        _check_gated(kwargs, "KerasGRU")
        super().__init__(units, input_size, **kwargs)

    def _bias_shape(self) -> tuple[int, ...]:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)

    def _run(self, x, states, lengths):
        (h0,) = states
        if not records_grad(x, h0, self.kernel, self.recurrent_kernel, self.bias):
            # keras_gru's numbers without its gates kept for a backward (keras_gru_inference)
            h = ops.keras_gru_inference(
                x, h0, self.kernel, self.recurrent_kernel, self.bias if self.use_bias else None,
                reset_after=self.reset_after, gate_activation=self.recurrent_activation,
                activation=self.activation,
            )  # fmt: skip
            return h, [self._final(h, h0, lengths)]
        out = ops.keras_gru(
            x, h0, self.kernel, self.recurrent_kernel, self.bias if self.use_bias else None,
            reset_after=self.reset_after, gate_activation=self.recurrent_activation,
            activation=self.activation,
        )  # fmt: skip
        return out.h, [self._final(out.h, h0, lengths)]

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reset_after={self.reset_after}"


class KerasSimpleRNN(KerasRNN):
    """Keras `SimpleRNN`: `kernel [I, U]`, `recurrent_kernel [U, U]`, `bias [U]`;
    `h' = activation(x·kernel + bias + h·recurrent_kernel)`, activation tanh or relu."""

    def __init__(self, units: int, input_size: int, **kwargs) -> None:
        _check_choice(
            "activation", kwargs.get("activation", "tanh"), ("tanh", "relu"), "KerasSimpleRNN"
        )
        kwargs.setdefault("recurrent_activation", "sigmoid")  # unused: no gates
        super().__init__(units, input_size, **kwargs)

    def _run(self, x, states, lengths):
        (h0,) = states
        weights = [self.kernel.t(), self.recurrent_kernel.t()]
        biases = [self.bias, torch.zeros_like(self.bias)]
        mode = "rnn_tanh" if self.activation == "tanh" else "rnn_relu"
        return _cudnn_core(self, mode, x, h0, lengths, weights, biases)


def _cudnn_core(layer: KerasRNN, mode: str, x, h0, lengths, weights, biases):
    """One layer, one direction of `CudnnRNNV3` from canonical lists (differentiable into them),
    with per-row lengths: outputs past a row's length are zero (overwritten by the masked
    call's scatter), the final state is the row's own."""
    params = raw_ops.CudnnRNNCanonicalToParams(
        1, layer.units, layer.input_size, weights, biases, rnn_mode=mode
    )
    out = raw_ops.CudnnRNNV3(
        x,
        h0.unsqueeze(0),
        x.new_zeros(()),
        params,
        lengths,
        rnn_mode=mode,
        is_training=torch.is_grad_enabled(),
    )
    return out.output, [out.output_h.squeeze(0)]


class KerasBidirectional(nn.Module):
    """Keras `Bidirectional(layer, merge_mode)`: `forward` reads the sequence as it is,
    `backward` (a copy with `go_backwards`) in reverse; with `return_sequences` the backward
    outputs are flipped back into time order before merging ("concat" on the last axis, "sum",
    "mul", "ave", or None: the two outputs as a list). With `return_state`, the forward layer's
    states then the backward layer's follow the output. Keras forces `zero_output_for_mask =
    return_sequences` on both layers; the converter builds them so."""

    MERGE_MODES = ("concat", "sum", "mul", "ave", None)

    def __init__(self, forward: KerasRNN, backward: KerasRNN, merge_mode="concat") -> None:
        super().__init__()
        if merge_mode not in self.MERGE_MODES:
            raise ValueError(f"merge_mode: expected one of {self.MERGE_MODES}, got {merge_mode!r}")
        if forward.return_sequences != backward.return_sequences or (
            forward.return_state != backward.return_state
        ):
            raise ValueError("forward, backward: return_sequences and return_state must agree")
        self.forward_layer, self.backward_layer, self.merge_mode = forward, backward, merge_mode

    def reset_states(self) -> None:
        """Forget the states stateful halves kept from their last call (Keras' reset_states)."""
        self.forward_layer.reset_states()
        self.backward_layer.reset_states()

    def forward(self, inputs: torch.Tensor, mask=None, initial_state=None):
        fw, bw = self.forward_layer, self.backward_layer
        init_f = init_b = None
        if initial_state is not None:
            n = fw.num_states
            if len(initial_state) != 2 * n:
                raise ValueError(
                    f"initial_state: expected {2 * n} tensors (forward states then "
                    f"backward states), got {len(initial_state)}"
                )
            init_f, init_b = list(initial_state[:n]), list(initial_state[n:])
        y = fw(inputs, mask=mask, initial_state=init_f)
        y_rev = bw(inputs, mask=mask, initial_state=init_b)
        states: list[torch.Tensor] = []
        if fw.return_state:
            y, *sf = y
            y_rev, *sb = y_rev
            states = [*sf, *sb]
        if fw.return_sequences:
            y_rev = y_rev.flip(0 if bw.time_major else 1)
        if self.merge_mode == "concat":
            out = torch.cat([y, y_rev], -1)
        elif self.merge_mode == "sum":
            out = y + y_rev
        elif self.merge_mode == "mul":
            out = y * y_rev
        elif self.merge_mode == "ave":
            out = (y + y_rev) / 2
        else:
            out = [y, y_rev]
        if fw.return_state:
            return (*out, *states) if isinstance(out, list) else (out, *states)
        return out

    def compute_mask(self, inputs, mask):
        """Keras' output masks: the input mask on each sequence output, none on a last-step
        output or a state."""
        if isinstance(mask, (list, tuple)):
            mask = mask[0] if mask else None
        seq = self.forward_layer.return_sequences
        out = [mask if seq else None] * (1 if self.merge_mode else 2)
        states = self.forward_layer.num_states + self.backward_layer.num_states
        if self.forward_layer.return_state:
            return out + [None] * states
        return out[0] if self.merge_mode else out

    def extra_repr(self) -> str:
        return f"merge_mode={self.merge_mode!r}"
