// CUDA implementation of TF's fused GRU cell (GRUBlockCell / GRUBlockCellGrad), as a handful
// of ATen kernels per step in TF's operation order (docs/tf-semantics.md §5.2–5.3): a single
// step is too small for a fused kernel to matter next to its two GEMMs. float16/bfloat16 compute
// in float32, as on the CPU.

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../checks.h"

namespace torch_lstm_grad {
namespace {

using Outputs4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

Outputs4 gru_block_cell_cuda(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                             const at::Tensor& w_c, const at::Tensor& b_ru, const at::Tensor& b_c) {
  const GRUSizes s = check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c);
  const c10::DeviceGuard guard(x.device());
  const auto dtype = x.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  const at::Tensor xa = x.to(acc), hp = h_prev.to(acc);
  const at::Tensor ru = at::sigmoid(at::addmm(b_ru.to(acc), at::cat({xa, hp}, 1), w_ru.to(acc)));
  const at::Tensor r = ru.narrow(1, 0, s.H), u = ru.narrow(1, s.H, s.H);
  const at::Tensor c = at::tanh(at::addmm(b_c.to(acc), at::cat({xa, r * hp}, 1), w_c.to(acc)));
  const at::Tensor h = u * (hp - c) + c;
  return {r.to(dtype).contiguous(), u.to(dtype).contiguous(), c.to(dtype), h.to(dtype)};
}

Outputs4 gru_block_cell_grad_cuda(const at::Tensor& x, const at::Tensor& h_prev,
                                  const at::Tensor& w_ru, const at::Tensor& w_c,
                                  const at::Tensor& b_ru, const at::Tensor& b_c,
                                  const at::Tensor& r, const at::Tensor& u, const at::Tensor& c,
                                  const at::Tensor& d_h) {
  const GRUSizes s = check_gru_grad_inputs(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h);
  const c10::DeviceGuard guard(x.device());
  const auto dtype = x.scalar_type();
  const auto acc = at::toOpMathType(dtype);
  const at::Tensor hp = h_prev.to(acc), ra = r.to(acc), ua = u.to(acc), ca = c.to(acc);
  const at::Tensor dh = d_h.to(acc);
  const at::Tensor d_c_bar = (dh * (1 - ua)) * (1 - ca * ca);
  const at::Tensor d_u_bar = dh * (hp - ca) * ua * (1 - ua);
  const at::Tensor a = at::mm(d_c_bar, w_c.to(acc).t());  // a[:, I:] = d(r⊙h_prev)
  const at::Tensor d_hr = a.narrow(1, s.I, s.H);
  const at::Tensor d_r_bar = (d_hr * hp * ra) * (1 - ra);
  const at::Tensor d_ru = at::cat({d_r_bar, d_u_bar}, 1);
  const at::Tensor bm = at::mm(d_ru, w_ru.to(acc).t());
  const at::Tensor d_x = bm.narrow(1, 0, s.I) + a.narrow(1, 0, s.I);
  const at::Tensor d_h_prev = (bm.narrow(1, s.I, s.H) + d_hr * ra) + dh * ua;
  return {d_x.to(dtype), d_h_prev.to(dtype), d_c_bar.to(dtype), d_ru.to(dtype)};
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CUDA, m) {
  m.impl("gru_block_cell", &gru_block_cell_cuda);
  m.impl("gru_block_cell_grad", &gru_block_cell_grad_cuda);
}

}  // namespace torch_lstm_grad
