// CPU kernels of TF's fused GRU cell: GRUBlockCell and GRUBlockCellGrad (docs/tf-semantics.md §5).
//
// TF's GRU applies the reset gate before the candidate GEMM: c = tanh([x, r⊙h]·w_c + b_c).
// That is not cuDNN's linear-before-reset GRU; CudnnRNN's gru mode lives elsewhere.
// float16/bfloat16 compute in float32, as the LSTM kernels do.

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../cell_products.h"
#include "../checks.h"
#include "../gru_block.h"
#include "activations.h"
#include "gemm.h"
#include "pairwise_gemm.h"

namespace torch_lstm_grad {
namespace {

using Outputs4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Outputs6 =
    std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <typename scalar_t>
Outputs4 gru_forward(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                     const at::Tensor& w_c, const at::Tensor& b_ru, const at::Tensor& b_c) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = x.size(0), I = x.size(1), H = h_prev.size(1);
  const auto acc = at::toOpMathType(x.scalar_type());
  at::Tensor r = at::empty({B, H}, x.options()), u = at::empty_like(r), c = at::empty_like(r),
             h = at::empty_like(r);
  if (B == 0) return {r, u, c, h};

  // xh holds [x, h_prev] for the gate GEMM, then [x, r⊙h_prev] for the candidate GEMM.
  at::Tensor xh = at::empty({B, I + H}, x.options().dtype(acc));
  xh.narrow(1, 0, I).copy_(x);
  xh.narrow(1, I, H).copy_(h_prev);
  const at::Tensor hp = h_prev.to(acc).contiguous();
  // Each product sums K = I + H pairwise (pairwise_gemm.h), then the bias is added, TF's
  // order: at B = 1 one GEMM (MKL's GEMV) sums K in order and puts r, u, c and h 2-4x TF's
  // error from float64 (tests/ops/test_raw_ops_accuracy.py).
  at::Tensor ru_bar = cpu::pairwise_sum_gemm(xh, w_ru.to(acc));  // [B, 2H]: r | u
  ru_bar.add_(b_ru.to(acc));
  {
    const acc_t* ru_p = ru_bar.const_data_ptr<acc_t>();
    const acc_t* hp_p = hp.const_data_ptr<acc_t>();
    acc_t* xh_p = xh.data_ptr<acc_t>();
    scalar_t* r_p = r.data_ptr<scalar_t>();
    scalar_t* u_p = u.data_ptr<scalar_t>();
    at::parallel_for(0, B, cpu::row_grain(H), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t j = 0; j < H; ++j) {
          const acc_t rv = cpu::sigmoid(ru_p[b * 2 * H + j]);
          const acc_t uv = cpu::sigmoid(ru_p[b * 2 * H + H + j]);
          r_p[b * H + j] = static_cast<scalar_t>(rv);
          u_p[b * H + j] = static_cast<scalar_t>(uv);
          xh_p[b * (I + H) + I + j] = rv * hp_p[b * H + j];
        }
      }
    });
  }
  at::Tensor c_bar = cpu::pairwise_sum_gemm(xh, w_c.to(acc));  // [B, H]
  c_bar.add_(b_c.to(acc));
  {
    const acc_t* cb_p = c_bar.const_data_ptr<acc_t>();
    const acc_t* hp_p = hp.const_data_ptr<acc_t>();
    const scalar_t* u_p = u.const_data_ptr<scalar_t>();
    scalar_t* c_p = c.data_ptr<scalar_t>();
    scalar_t* h_p = h.data_ptr<scalar_t>();
    at::parallel_for(0, B * H, 2048, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const acc_t cv = cpu::tanh(cb_p[k]);
        const acc_t uv = static_cast<acc_t>(u_p[k]);
        c_p[k] = static_cast<scalar_t>(cv);
        h_p[k] = static_cast<scalar_t>(uv * (hp_p[k] - cv) + cv);  // TF's form of u·h + (1−u)·c
      }
    });
  }
  return {r, u, c, h};
}

// The gradients through the gates, GRUBlockCellGrad's math in TF's order (docs/tf-semantics.md
// §5.3): d_c_bar and d_r_bar_u_bar in the accumulation type, d_x and d_h_prev only where asked
// for (with no d_x, each gate product covers only the h_prev rows of its weight: the half an
// nn.GRUCell skips too; MKL may then round the h_prev part differently, by an ulp), and r⊙h_prev
// (x's dtype, the candidate GEMM's input) where `want_rh`.
struct GateGrads {
  at::Tensor d_x, d_h_prev, d_c_bar, d_ru, rh;
};

template <typename scalar_t>
GateGrads gate_grads(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                     const at::Tensor& w_c, const at::Tensor& r, const at::Tensor& u,
                     const at::Tensor& c, const at::Tensor& d_h, bool need_dx, bool need_dh,
                     bool want_rh) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = x.size(0), I = x.size(1), H = h_prev.size(1);
  const auto acc_opts = x.options().dtype(at::toOpMathType(x.scalar_type()));
  GateGrads g;
  g.d_c_bar = at::empty({B, H}, acc_opts);
  g.d_ru = at::empty({B, 2 * H}, acc_opts);  // [d_r_bar, d_u_bar]
  if (need_dx) g.d_x = at::empty({B, I}, x.options());
  if (need_dh) g.d_h_prev = at::empty({B, H}, x.options());
  if (want_rh) g.rh = at::empty({B, H}, x.options());
  const at::Tensor hp = h_prev.to(acc_opts.dtype()).contiguous();
  const acc_t* hp_p = hp.const_data_ptr<acc_t>();
  const scalar_t* r_p = r.const_data_ptr<scalar_t>();
  const scalar_t* u_p = u.const_data_ptr<scalar_t>();
  const scalar_t* c_p = c.const_data_ptr<scalar_t>();
  const scalar_t* dh_p = d_h.const_data_ptr<scalar_t>();
  acc_t* dcb_p = g.d_c_bar.data_ptr<acc_t>();
  acc_t* dru_p = g.d_ru.data_ptr<acc_t>();
  at::parallel_for(0, B, cpu::row_grain(H), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const int64_t k = b * H + j;
        const acc_t dh = dh_p[k], uv = u_p[k], cv = c_p[k];
        dcb_p[k] = (dh * (1 - uv)) * (1 - cv * cv);
        dru_p[b * 2 * H + H + j] = dh * (hp_p[k] - cv) * uv * (1 - uv);
      }
    }
  });
  // a = d_c_bar · w_cᵀ, [B, (I) + H]; its h_prev columns are d(r⊙h).
  const at::Tensor wc = w_c.to(acc_opts.dtype()), wru = w_ru.to(acc_opts.dtype());
  const at::Tensor a = times_transposed(g.d_c_bar, need_dx ? wc : wc.narrow(0, I, H));
  const int64_t a_ld = a.size(1), a_h = need_dx ? I : 0;
  const acc_t* a_p = a.const_data_ptr<acc_t>();
  scalar_t* rh_p = want_rh ? g.rh.data_ptr<scalar_t>() : nullptr;
  at::parallel_for(0, B, cpu::row_grain(H), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const acc_t rv = r_p[b * H + j], hv = hp_p[b * H + j];
        dru_p[b * 2 * H + j] = (a_p[b * a_ld + a_h + j] * hv * rv) * (1 - rv);
        if (rh_p != nullptr) rh_p[b * H + j] = static_cast<scalar_t>(rv * hv);
      }
    }
  });
  if (!need_dx && !need_dh) return g;
  // bm = d_ru · w_ruᵀ over the rows asked for; d_x = bm_x + a_x,
  // d_h_prev = (bm_h + a_h ⊙ r) + d_h ⊙ u.
  const at::Tensor w = need_dx && need_dh ? wru : wru.narrow(0, need_dx ? 0 : I, need_dx ? I : H);
  const at::Tensor bm = times_transposed(g.d_ru, w);
  const int64_t bm_ld = bm.size(1), bm_h = need_dx ? I : 0;
  const acc_t* bm_p = bm.const_data_ptr<acc_t>();
  scalar_t* dx_p = need_dx ? g.d_x.data_ptr<scalar_t>() : nullptr;
  scalar_t* dhp_p = need_dh ? g.d_h_prev.data_ptr<scalar_t>() : nullptr;
  at::parallel_for(0, B, cpu::row_grain(I + H), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; dx_p != nullptr && j < I; ++j) {
        dx_p[b * I + j] = static_cast<scalar_t>(bm_p[b * bm_ld + j] + a_p[b * a_ld + j]);
      }
      for (int64_t j = 0; dhp_p != nullptr && j < H; ++j) {
        const int64_t k = b * H + j;
        const acc_t rv = r_p[k], uv = u_p[k], dh = dh_p[k];
        const acc_t bm_v = bm_p[b * bm_ld + bm_h + j], a_v = a_p[b * a_ld + a_h + j];
        dhp_p[k] = static_cast<scalar_t>((bm_v + a_v * rv) + dh * uv);
      }
    }
  });
  return g;
}

// GRUBlockCellGrad: d_x, d_h_prev, d_c_bar and d_r_bar_u_bar, each in x's dtype.
template <typename scalar_t>
Outputs4 gru_backward(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                      const at::Tensor& w_c, const at::Tensor& r, const at::Tensor& u,
                      const at::Tensor& c, const at::Tensor& d_h) {
  const GateGrads g = gate_grads<scalar_t>(x, h_prev, w_ru, w_c, r, u, c, d_h, true, true, false);
  const auto dtype = x.scalar_type();
  return {g.d_x, g.d_h_prev, g.d_c_bar.to(dtype), g.d_ru.to(dtype)};
}

// GRUBlockCellFunction's whole backward (torch_lstm_grad.cpp, _gru_block_cell_backward):
// GRUBlockCellGrad's gradients, then TF1's weight and bias products from d_r_bar_u_bar and
// d_c_bar rounded to x's dtype, as TF's gradient reads them; nothing output_mask does not ask
// for. With every output asked for, d_x and d_h_prev are GRUBlockCellGrad's to the bit.
template <typename scalar_t>
Outputs6 gru_backward_fused(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                            const at::Tensor& w_c, const at::Tensor& r, const at::Tensor& u,
                            const at::Tensor& c, const at::Tensor& d_h,
                            std::array<bool, 6> mask) {
  const auto dtype = x.scalar_type();
  const GateGrads g =
      gate_grads<scalar_t>(x, h_prev, w_ru, w_c, r, u, c, d_h, mask[0], mask[1], mask[3]);
  const GRUWeightGrads w =
      gru_weight_grads(x, h_prev, g.rh, g.d_ru.to(dtype), g.d_c_bar.to(dtype), mask);
  return {g.d_x, g.d_h_prev, w.d_w_ru, w.d_w_c, w.d_b_ru, w.d_b_c};
}

Outputs4 gru_block_cell_cpu(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                            const at::Tensor& w_c, const at::Tensor& b_ru, const at::Tensor& b_c) {
  check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c);
  return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                         "gru_block_cell_cpu", [&] {
                                           return gru_forward<scalar_t>(x, h_prev, w_ru, w_c, b_ru,
                                                                        b_c);
                                         });
}

Outputs4 gru_block_cell_grad_cpu(const at::Tensor& x, const at::Tensor& h_prev,
                                 const at::Tensor& w_ru, const at::Tensor& w_c,
                                 const at::Tensor& b_ru, const at::Tensor& b_c, const at::Tensor& r,
                                 const at::Tensor& u, const at::Tensor& c, const at::Tensor& d_h) {
  check_gru_grad_inputs(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h);
  return AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "gru_block_cell_grad_cpu", [&] {
        return gru_backward<scalar_t>(x, h_prev, w_ru, w_c, r.contiguous(), u.contiguous(),
                                      c.contiguous(), d_h.contiguous());
      });
}

Outputs6 gru_block_cell_backward_cpu(const at::Tensor& x, const at::Tensor& h_prev,
                                     const at::Tensor& w_ru, const at::Tensor& w_c,
                                     const at::Tensor& b_ru, const at::Tensor& b_c,
                                     const at::Tensor& r, const at::Tensor& u, const at::Tensor& c,
                                     const at::Tensor& d_h, std::array<bool, 6> output_mask) {
  check_gru_grad_inputs(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h);
  return AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "gru_block_cell_backward_cpu", [&] {
        return gru_backward_fused<scalar_t>(x, h_prev, w_ru, w_c, r.contiguous(), u.contiguous(),
                                            c.contiguous(), d_h.contiguous(), output_mask);
      });
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  m.impl("gru_block_cell", &gru_block_cell_cpu);
  m.impl("gru_block_cell_grad", &gru_block_cell_grad_cpu);
  m.impl("_gru_block_cell_backward", &gru_block_cell_backward_cpu);
}

}  // namespace torch_lstm_grad
