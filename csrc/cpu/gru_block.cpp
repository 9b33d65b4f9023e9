// CPU kernels of TF's fused GRU cell: GRUBlockCell and GRUBlockCellGrad (docs/tf-semantics.md §5).
//
// TF's GRU applies the reset gate before the candidate GEMM: c = tanh([x, r⊙h]·w_c + b_c).
// That is not cuDNN's linear-before-reset GRU; CudnnRNN's gru mode lives elsewhere.
// float16/bfloat16 compute in float32, as the LSTM kernels do.

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../checks.h"
#include "activations.h"
#include "pairwise_gemm.h"

namespace torch_lstm_grad {
namespace {

using Outputs4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

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

template <typename scalar_t>
Outputs4 gru_backward(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                      const at::Tensor& w_c, const at::Tensor& r, const at::Tensor& u,
                      const at::Tensor& c, const at::Tensor& d_h) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = x.size(0), I = x.size(1), H = h_prev.size(1);
  const auto dtype = x.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  const auto acc_opts = x.options().dtype(acc);
  at::Tensor d_c_bar = at::empty({B, H}, acc_opts);
  at::Tensor d_ru = at::empty({B, 2 * H}, acc_opts);  // [d_r_bar, d_u_bar]
  if (B == 0) {
    return {at::zeros(x.sizes(), x.options()), at::zeros(h_prev.sizes(), h_prev.options()),
            d_c_bar.to(dtype), d_ru.to(dtype)};
  }
  const at::Tensor hp = h_prev.to(acc).contiguous();
  const acc_t* hp_p = hp.const_data_ptr<acc_t>();
  const scalar_t* r_p = r.const_data_ptr<scalar_t>();
  const scalar_t* u_p = u.const_data_ptr<scalar_t>();
  const scalar_t* c_p = c.const_data_ptr<scalar_t>();
  const scalar_t* dh_p = d_h.const_data_ptr<scalar_t>();
  acc_t* dcb_p = d_c_bar.data_ptr<acc_t>();
  acc_t* dru_p = d_ru.data_ptr<acc_t>();
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
  const at::Tensor a = at::mm(d_c_bar, w_c.to(acc).t());  // [B, I + H]; a[:, I:] is d(r⊙h)
  const acc_t* a_p = a.const_data_ptr<acc_t>();
  at::parallel_for(0, B, cpu::row_grain(H), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const acc_t rv = r_p[b * H + j];
        dru_p[b * 2 * H + j] = (a_p[b * (I + H) + I + j] * hp_p[b * H + j] * rv) * (1 - rv);
      }
    }
  });
  const at::Tensor bm = at::mm(d_ru, w_ru.to(acc).t());  // [B, I + H]
  const at::Tensor d_x = bm.narrow(1, 0, I) + a.narrow(1, 0, I);
  const at::Tensor d_h_prev = (bm.narrow(1, I, H) + a.narrow(1, I, H) * r.to(acc)) +
                              d_h.to(acc) * u.to(acc);
  return {d_x.to(dtype), d_h_prev.to(dtype), d_c_bar.to(dtype), d_ru.to(dtype)};
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
  const GRUSizes s = check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c);
  for (auto [t, name] : {std::pair{&r, "r"}, {&u, "u"}, {&c, "c"}, {&d_h, "d_h"}}) {
    check_like(*t, name, x);
    check_shape(*t, name, {s.B, s.H}, "[B, H]");
  }
  return AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "gru_block_cell_grad_cpu", [&] {
        return gru_backward<scalar_t>(x, h_prev, w_ru, w_c, r.contiguous(), u.contiguous(),
                                      c.contiguous(), d_h.contiguous());
      });
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  m.impl("gru_block_cell", &gru_block_cell_cpu);
  m.impl("gru_block_cell_grad", &gru_block_cell_grad_cpu);
}

}  // namespace torch_lstm_grad
