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

// cudnn_rnn_inference's packed_r: none, or one per pseudo-layer (layer-major, then direction):
// pack_recurrent_weight(Rᵀ, G) of its recurrent matrix R [G·H, P].
inline void check_packed_recurrent(const RNNConfig& c, at::TensorList packed,
                                   const at::Tensor& input) {
  if (packed.empty()) return;
  TORCH_CHECK_VALUE(static_cast<int64_t>(packed.size()) == c.L * c.D,
                    "packed_r: expected none or one tensor per layer and direction (",
                    c.L * c.D, "), got ", packed.size());
  for (const at::Tensor& t : packed) {
    check_packed(t, "packed_r", input, "input", c.P, c.H, c.G,
                 "[ceil(H / 16), G, P, 16] (pack_recurrent_weight of Rᵀ)");
  }
}

}  // namespace torch_lstm_grad
