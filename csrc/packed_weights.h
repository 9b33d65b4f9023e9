// Checks of the prepared recurrent weights the inference ops take (pack_recurrent_weight's
// layout, csrc/cpu/small_batch.h), shared by the kernels of every device (and mirrored by the
// fake kernels in torch_lstm_grad/_registrations.py). A device whose kernels do not read them
// still checks them, so a call fails the same way everywhere.
#pragma once

#include <ATen/ATen.h>

#include "checks.h"
#include "cudnn_rnn_config.h"

namespace torch_lstm_grad {

// `what`: the weight packed, for the message. Expected: [ceil(H / 16), G, K, 16], of ref's
// dtype and device, contiguous.
inline void check_packed(const at::Tensor& packed, const char* name, const at::Tensor& ref,
                         const char* ref_name, int64_t K, int64_t H, int64_t G,
                         const char* layout) {
  check_like(packed, name, ref, ref_name);
  check_shape(packed, name, {(H + 15) / 16, G, K, 16}, layout);
  TORCH_CHECK_VALUE(packed.is_contiguous(), name,
                    ": expected a contiguous tensor (as pack_recurrent_weight returns it)");
}

// block_lstm_inference's packed_w: pack_recurrent_weight(w[I:], 4), K = P rows.
inline void check_packed_weight(const at::Tensor& packed, const at::Tensor& w, int64_t P,
                                int64_t H) {
  check_packed(packed, "packed_w", w, "w", P, H, 4,
               "[ceil(H / 16), 4, P, 16] (pack_recurrent_weight of w's recurrent rows)");
}

// block_lstm_inference's packed_x: pack_recurrent_weight(w[:I], 4), K = I rows.
inline void check_packed_input_weight(const at::Tensor& packed, const at::Tensor& w, int64_t I,
                                      int64_t H) {
  check_packed(packed, "packed_x", w, "w", I, H, 4,
               "[ceil(H / 16), 4, I, 16] (pack_recurrent_weight of w's input rows)");
}

// A list cudnn_rnn_inference takes, given: one tensor per pseudo-layer.
inline void check_packed_count(const RNNConfig& c, at::TensorList packed, const char* name) {
  TORCH_CHECK_VALUE(static_cast<int64_t>(packed.size()) == c.L * c.D, name,
                    ": expected none or one tensor per layer and direction (", c.L * c.D,
                    "), got ", packed.size());
}

// cudnn_rnn_inference's packed_r: none, or one per pseudo-layer (layer-major, then direction):
// pack_recurrent_weight(Rᵀ, G) of its recurrent matrix R [G·H, P].
inline void check_packed_recurrent(const RNNConfig& c, at::TensorList packed,
                                   const at::Tensor& input) {
  if (packed.empty()) return;
  check_packed_count(c, packed, "packed_r");
  for (const at::Tensor& t : packed) {
    check_packed(t, "packed_r", input, "input", c.P, c.H, c.G,
                 "[ceil(H / 16), G, P, 16] (pack_recurrent_weight of Rᵀ)");
  }
}

// cudnn_rnn_inference's packed_x: none, or one per pseudo-layer: pack_recurrent_weight(Wᵀ, G)
// of its input matrix W [G·H, in_l]. Under skip_input layer 0 has no W: none.
inline void check_packed_input(const RNNConfig& c, at::TensorList packed,
                               const at::Tensor& input) {
  if (packed.empty()) return;
  TORCH_CHECK_VALUE(!c.skip_input,
                    "packed_x: expected none with input_mode skip_input (layer 0 has no input "
                    "weights), got ", packed.size(), " tensors");
  check_packed_count(c, packed, "packed_x");
  for (int64_t k = 0; k < c.L * c.D; ++k) {
    check_packed(packed[k], "packed_x", input, "input", c.layer_input(k / c.D), c.H, c.G,
                 "[ceil(H / 16), G, in_l, 16] (pack_recurrent_weight of Wᵀ)");
  }
}

}  // namespace torch_lstm_grad
