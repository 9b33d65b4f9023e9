"""Weights prepared for the inference kernels, and when those run: where no gradient would be
recorded, the modules call the inference forwards (`ops.block_lstm_inference`, the op
`cudnn_rnn_inference`), which read the recurrent weight packed for the small-batch CPU products
(`csrc/cpu/small_batch.h`) and the input weights packed for the input projection. The packed
copies are kept per parameter version, so a module packs them once, not per call
(docs/api.md, "Inference")."""

from __future__ import annotations

import torch

from . import ops

__all__ = ["PANEL_MAX_ROWS", "PackedWeights", "records_grad"]


def records_grad(*tensors) -> bool:
    """Whether autograd would record a graph through an op on these tensors."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# The panel kernels of the small-batch CPU products (csrc/cpu/small_batch.h: kMaxPanelRows)
# take up to this many rows; only then is a packed recurrent weight worth preparing.
PANEL_MAX_ROWS = 64


class PackedWeights:
    """Weights in pack_recurrent_weight's layout, prepared once per version of the parameter
    they come from (keyed by its data_ptr and its `_version`, which every in-place write
    through the parameter or a view of it (optimizer steps, `copy_`, `load_state_dict`,
    `torch.nn.init`) advances; writes through `.data` bypass the version counter as they
    bypass autograd, so after one call `clear()`). Only for what the kernels use them for:
    float32 on the CPU (recurrent weights: batches of at most PANEL_MAX_ROWS rows); not while
    compiling (the kernels pack per call there)."""

    def __init__(self) -> None:
        self._key = None
        self._packed: list[torch.Tensor] = []

    def clear(self) -> None:
        self._key, self._packed = None, []

    def lookup(self, params, make, like: torch.Tensor, what=None):
        """make(*params) once per version of `params` (a tensor or a tuple of them; and per
        `what`: which of their parts)."""
        params = params if isinstance(params, tuple) else (params,)
        if (
            like.device.type != "cpu"
            or params[0].dtype != torch.float32
            or torch.compiler.is_compiling()
        ):
            return None
        key = (tuple((p.data_ptr(), p._version, p.shape, p.device) for p in params), what)
        if self._key != key:
            with torch.no_grad():
                self._packed = make(*(p.detach() for p in params))
            self._key = key
        return self._packed

    def get(self, kernel: torch.Tensor, input_size: int, inputs: torch.Tensor):
        """(packed_w, packed_x) of block_lstm_inference for a block LSTM kernel [I + P, 4H]:
        its recurrent rows packed (batches the panels take) and its input rows (any batch: the
        input projection's rows are T·B), or None each."""
        small = inputs.shape[1] <= PANEL_MAX_ROWS
        found = self.lookup(
            kernel,
            lambda w: [ops.pack_recurrent_weight(w[input_size:], 4) if small else None,
                       ops.pack_recurrent_weight(w[:input_size], 4)],
            inputs,
            small,
        )  # fmt: skip
        return (None, None) if found is None else tuple(found)

    def keras_lstm(self, kernel: torch.Tensor, recurrent_kernel: torch.Tensor, inputs):
        """(w, packed_w, packed_x) of block_lstm_inference for a Keras LSTM's `kernel [I, 4U]`
        and `recurrent_kernel [U, 4U]`: their concatenation (the block layout `[I + U, 4U]`,
        gate order i, f, c, o) and its packed parts, or None (then the caller concatenates)."""
        small = inputs.shape[1] <= PANEL_MAX_ROWS
        found = self.lookup(
            (kernel, recurrent_kernel),
            lambda k, r: [torch.cat([k, r], 0), ops.pack_recurrent_weight(r, 4) if small else None,
                          ops.pack_recurrent_weight(k, 4)],
            inputs,
            small,
        )  # fmt: skip
        return (None, None, None) if found is None else tuple(found)
