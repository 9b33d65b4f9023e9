// The device-neutral half of GRUBlockCell's backward (docs/tf-semantics.md §5): TF1's weight
// and bias products from GRUBlockCellGrad's d_r_bar_u_bar and d_c_bar, in x's dtype, as TF's
// gradient reads them. Shared by the CPU kernel of _gru_block_cell_backward (cpu/gru_block.cpp)
// and its CompositeExplicitAutograd kernel (torch_lstm_grad.cpp), which other devices run.
#pragma once

#include <ATen/ATen.h>

#include <array>

namespace torch_lstm_grad {

struct GRUWeightGrads {
  at::Tensor d_w_ru, d_w_c, d_b_ru, d_b_c;
};

// d_w_ru = [x, h_prev]ᵀ·d_ru, d_w_c = [x, r⊙h_prev]ᵀ·d_c_bar (rh: r⊙h_prev, defined where
// mask[3]), and the biases summed over B; each only where mask[2..5] asks for it (undefined
// otherwise). One buffer holds [x, h_prev], then [x, r⊙h_prev], its h_prev half overwritten:
// one product over I + H rows took 0.85x the time of two over I and H on Zen 2.
inline GRUWeightGrads gru_weight_grads(const at::Tensor& x, const at::Tensor& h_prev,
                                       const at::Tensor& rh, const at::Tensor& d_ru,
                                       const at::Tensor& d_c_bar, const std::array<bool, 6>& mask) {
  const int64_t I = x.size(1), H = h_prev.size(1);
  GRUWeightGrads g;
  if (mask[2] || mask[3]) {
    at::Tensor xh = at::empty({x.size(0), I + H}, x.options());
    xh.narrow(1, 0, I).copy_(x);
    if (mask[2]) {
      xh.narrow(1, I, H).copy_(h_prev);
      g.d_w_ru = at::mm(xh.t(), d_ru);
    }
    if (mask[3]) {
      xh.narrow(1, I, H).copy_(rh);
      g.d_w_c = at::mm(xh.t(), d_c_bar);
    }
  }
  if (mask[4]) g.d_b_ru = d_ru.sum(0);
  if (mask[5]) g.d_b_c = d_c_bar.sum(0);
  return g;
}

}  // namespace torch_lstm_grad
