// keras_gru(_grad): Keras' GRU layer over a whole sequence, fused, device-neutral:
// the cell math, written once for the CPU and CUDA kernels, and the host-side drivers, which
// call a Backend for each step's pointwise passes and use its prepared recurrent products.
//
// Keras' math (keras/src/layers/rnn/gru.py, docs/tf-semantics.md §8.1), gate order z, r, h in
// kernel [I, 3H] and recurrent_kernel [H, 3H]; g = recurrent (gate) activation, act = activation:
//   xp = x·kernel + b_in                                    (one product for every step)
//   reset_after=True  (cuDNN's GRU, Keras 3's default; bias [2, 3H] = b_in, b_rec):
//     inner = h·R + b_rec;  z = g(xp_z + inner_z);  r = g(xp_r + inner_r)
//     hh = act(xp_h + r ⊙ inner_h)
//   reset_after=False (TF's GRUBlockCell math; bias [3H] = b_in):
//     z = g(xp_z + (h·R_z));  r = g(xp_r + (h·R_r));  hh = act(xp_h + (r ⊙ h)·R_h)
//   h' = z ⊙ h + (1 − z) ⊙ hh
// Per step: reset_after one recurrent product and one pointwise pass; reset_after=False two of
// each (the candidate's product needs r ⊙ h of the whole row). The backward mirrors it in
// reverse time; dx, dkernel, drecurrent_kernel are whole-sequence products after the loop.
// Outputs (each [T, B, H], zero for t >= seq_len_max): z, r, hh, hr and h, where hr is what
// the candidate's reset multiplied: inner_h (reset_after) or r ⊙ h_prev (reset_after=False);
// the backward reads them instead of recomputing. float16/bfloat16 compute in float32 (the
// products on float copies), as the LSTM ops do.
#pragma once

#include "lstm_block.h"

namespace torch_lstm_grad {
namespace gru_seq {

using lstm_block::ActivationFns;
using lstm_block::ActParams;

using Outputs5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// One step's pointers for every pass ([B, ...] rows; the Backend runs a pass over B rows).
template <typename scalar_t>
struct GruStep {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t H;
  ActivationFns fns;
  const acc_t* b_in;   // [3H] (zeros without a bias)
  const acc_t* b_rec;  // [3H] (reset_after) or null
  // Forward.
  const acc_t* xp;         // [B, 3H]: x·kernel of this step, bias not added
  const acc_t* inner;      // [B, 3H] h·R (reset_after), [B, 2H] h·R_zr (reset_after=False)
  const acc_t* cand;       // [B, H]: (r ⊙ h)·R_h (reset_after=False)
  const scalar_t* h_prev;  // [B, H]
  scalar_t *z, *r, *hh, *hr, *h;  // [B, H] outputs of the step
  acc_t* h_acc;            // [B, H] float copy of h for the next product, or null
  acc_t* rh;               // [B, H] r ⊙ h_prev, the candidate product's operand (reset_after=False)
  // Backward.
  const scalar_t* h_grad;  // [B, H]
  acc_t* dh;        // [B, H] in: gradient reaching h from later steps; out: h_prev's direct part
  acc_t* d_xp;      // [B, 3H] gradient of the pre-activations (x side: z, r, h)
  acc_t* d_inner;   // [B, 3H] (reset_after: z, r, r ⊙ dhh) or [B, 2H] (z, r)
  acc_t* d_cand;    // [B, H] reset_after=False: dhh, the operand of d_rh = dhh·R_hᵀ
  const acc_t* d_rh;  // [B, H] reset_after=False: gradient of r ⊙ h_prev
};

// ---------------------------------------------------------------------------------------------
// The cell, one element (Keras' operation order: the bias after each product, then the sum).

template <class Gate, class Cell, typename acc_t>
struct GruCell {
  struct Fwd {
    acc_t z, r, hh, hr, h;
  };

  // reset_after: xp_* and inner_* already include their biases.
  TLG_HD static Fwd after(acc_t xz, acc_t xr, acc_t xh, acc_t iz, acc_t ir, acc_t ih, acc_t hp,
                          const ActParams<acc_t>& p) {
    Fwd o;
    o.z = Gate::f(xz + iz, p);
    o.r = Gate::f(xr + ir, p);
    o.hr = ih;
    o.hh = Cell::f(xh + o.r * ih, p);
    o.h = o.z * hp + (1 - o.z) * o.hh;
    return o;
  }

  // z' = dh·h_prev − dh·hh through g; dhh = dh·(1 − z) through act. Writes pre-activation
  // gradients.
  TLG_HD static void gate_grads(acc_t dh, acc_t z, acc_t hh, acc_t hp, const ActParams<acc_t>& p,
                                acc_t& dz, acc_t& dhh) {
    dz = Gate::df(z, p) * (dh * hp - dh * hh);
    dhh = Cell::df(hh, p) * (dh * (1 - z));
  }
};

// The whole recurrence of a pass at once, for a Backend that runs one (Backend::kWholeLoops;
// then Backend::forward_loop / backward_loop: true, or false having done nothing, and the
// driver runs its steps; a backend may take one reset mode only). Every pointer is the steps
// path's own buffer; [L, B, ·] unless said. G = 3 column blocks of d_inner with reset_after,
// 2 (z, r) without.
template <typename scalar_t>
struct GruLoop {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t L, B, H;
  bool reset_after;
  ActivationFns fns;
  const acc_t* R;          // [H, 3H] row-major, float type: the recurrent kernel
  const acc_t* b_in;       // [3H]
  const acc_t* b_rec;      // [3H] (reset_after) or null
  const scalar_t* h0;      // [B, H]: h_prev
  // Forward: xp in, z, r, hh, hr, h out (z .. hr `gate_step` apart: B·H, or 0 for one reused
  // row block).
  const acc_t* xp;         // [L, B, 3H]: x·kernel, bias not added
  scalar_t *z, *r, *hh, *hr, *h;
  int64_t gate_step;
  // Backward: z .. h, h_grad in (h_grad [T, B, H], dense); d_xp, d_inner ([L, B, G·H]) out;
  // dh: zeros in, h_prev's gradient out (all of it, as after the steps' last product).
  const scalar_t* h_grad;
  acc_t *d_xp, *d_inner, *dh;
};

// A pass's GruLoop with what both directions read set: R (the recurrent kernel in the float
// type, dense) and h0 (h_prev, dense) must outlive it.
template <typename scalar_t>
GruLoop<scalar_t> gru_loop(int64_t L, int64_t B, int64_t H, bool reset_after,
                           const ActivationFns& fns, const at::Tensor& R, const at::Tensor& h0) {
  GruLoop<scalar_t> loop{};
  loop.L = L, loop.B = B, loop.H = H, loop.reset_after = reset_after, loop.fns = fns;
  loop.R = R.const_data_ptr<at::opmath_type<scalar_t>>();
  loop.h0 = h0.const_data_ptr<scalar_t>();
  return loop;
}

// ---------------------------------------------------------------------------------------------
// Host drivers.

struct GruAttrs {
  bool reset_after;
  ActivationFns fns;
};

// keep_gates=false (keras_gru_inference, nothing to differentiate): z, r, hh and hr of each
// step go to one [B, H] row block reused by every step, and only h is a sequence; h's numbers
// are keras_gru's (the same passes on the same operands).
template <class Backend, typename scalar_t>
Outputs5 gru_forward(int64_t L, const at::Tensor& x, const at::Tensor& h_prev,
                     const at::Tensor& kernel, const at::Tensor& rkernel, const at::Tensor& bias,
                     const GruAttrs& a, bool keep_gates = true) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = h_prev.size(1);
  const auto acc = lstm_block::acc_type(x.scalar_type());
  std::array<at::Tensor, 5> out;
  for (int k = 0; k < 5; ++k) {
    if (!keep_gates && k < 4) {
      out[k] = at::empty({B, H}, x.options());
      continue;
    }
    out[k] = at::empty({T, B, H}, x.options());
    if (L < T) out[k].narrow(0, L, T - L).zero_();
  }
  if (L == 0 || B == 0) return {out[0], out[1], out[2], out[3], out[4]};
  const auto opts = x.options().dtype(acc);
  const at::Tensor xp =
      Backend::matmul(x.narrow(0, 0, L).reshape({L * B, I}).to(acc), kernel.to(acc))
          .view({L, B, 3 * H});
  // Without a bias, zeros: the loops then have no branch (x + 0 is x).
  const at::Tensor bias_a = bias.defined() ? bias.to(acc).contiguous() : at::zeros({6 * H}, opts);
  const at::Tensor R = rkernel.to(acc);
  const at::Tensor hp0 = h_prev.contiguous();
  std::array<scalar_t*, 5> out_p;
  for (int k = 0; k < 5; ++k) out_p[k] = out[k].data_ptr<scalar_t>();
  const int64_t BH = B * H;
  if constexpr (Backend::kWholeLoops) {  // the whole loop at once where the backend runs it
    const at::Tensor Rc = R.contiguous();
    GruLoop<scalar_t> loop = gru_loop<scalar_t>(L, B, H, a.reset_after, a.fns, Rc, hp0);
    loop.b_in = bias_a.const_data_ptr<acc_t>();
    loop.b_rec = a.reset_after ? loop.b_in + 3 * H : nullptr;
    loop.xp = xp.const_data_ptr<acc_t>();
    loop.z = out_p[0], loop.r = out_p[1], loop.hh = out_p[2], loop.hr = out_p[3];
    loop.h = out_p[4];
    loop.gate_step = keep_gates ? BH : 0;
    if (Backend::forward_loop(loop)) return {out[0], out[1], out[2], out[3], out[4]};
  }
  const auto rec = Backend::recurrent_gemm(a.reset_after ? R : R.narrow(1, 0, 2 * H), B, L);
  std::optional<std::decay_t<decltype(rec)>> cand_gemm;
  at::Tensor inner = at::empty({B, (a.reset_after ? 3 : 2) * H}, opts), cand, rh;
  if (!a.reset_after) {
    cand_gemm.emplace(Backend::recurrent_gemm(R.narrow(1, 2 * H, H), B, L));
    cand = at::empty({B, H}, opts);
    rh = at::empty({B, H}, opts);
  }
  const bool h_copy = x.scalar_type() != acc;
  at::Tensor h_acc = h_copy ? at::empty({2, B, H}, opts) : at::Tensor();
  const at::Tensor h0 = h_prev.to(acc).contiguous();
  GruStep<scalar_t> s{};
  s.H = H;
  s.fns = a.fns;
  s.b_in = bias_a.const_data_ptr<acc_t>();
  s.b_rec = a.reset_after ? s.b_in + 3 * H : nullptr;
  s.inner = inner.const_data_ptr<acc_t>();
  s.cand = cand.defined() ? cand.const_data_ptr<acc_t>() : nullptr;
  s.rh = rh.defined() ? rh.data_ptr<acc_t>() : nullptr;
  for (int64_t t = 0; t < L; ++t) {
    const at::Tensor h_op = t == 0 ? h0 : (h_copy ? h_acc[(t - 1) % 2] : out[4][t - 1]);
    rec(inner, h_op, /*accumulate=*/false);
    s.xp = xp[t].const_data_ptr<acc_t>();
    s.h_prev = t == 0 ? hp0.const_data_ptr<scalar_t>() : out_p[4] + (t - 1) * BH;
    const int64_t gate_at = keep_gates ? t * BH : 0;
    s.z = out_p[0] + gate_at;
    s.r = out_p[1] + gate_at;
    s.hh = out_p[2] + gate_at;
    s.hr = out_p[3] + gate_at;
    s.h = out_p[4] + t * BH;
    s.h_acc = h_copy ? h_acc.data_ptr<acc_t>() + t % 2 * BH : nullptr;
    if (a.reset_after) {
      Backend::forward_after(s, B);
    } else {
      Backend::forward_gates(s, B);  // z, r, r ⊙ h_prev
      (*cand_gemm)(cand, rh, /*accumulate=*/false);
      Backend::forward_candidate(s, B);  // hh, h
    }
  }
  return {out[0], out[1], out[2], out[3], out[4]};
}

using Grads5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <class Backend, typename scalar_t>
Grads5 gru_backward(int64_t L, const at::Tensor& x, const at::Tensor& h_prev,
                    const at::Tensor& kernel, const at::Tensor& rkernel, const at::Tensor& bias,
                    const std::array<at::Tensor, 5>& outs, const at::Tensor& h_grad,
                    const GruAttrs& a) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = h_prev.size(1);
  const auto dtype = x.scalar_type();
  const auto acc = lstm_block::acc_type(dtype);
  const auto opts = x.options().dtype(acc);
  using lstm_block::zeros_of;
  if (L == 0 || B == 0) {
    return {zeros_of(x), zeros_of(h_prev), zeros_of(kernel), zeros_of(rkernel),
            bias.defined() ? zeros_of(bias) : at::empty({0}, x.options())};
  }
  const int64_t G = a.reset_after ? 3 : 2;  // column blocks of d_inner
  at::Tensor d_xp = at::empty({L, B, 3 * H}, opts), d_inner = at::empty({L, B, G * H}, opts);
  at::Tensor dh = at::zeros({B, H}, opts), d_cand, d_rh;
  const at::Tensor R = rkernel.to(acc);
  const at::Tensor hp0 = h_prev.contiguous();
  const at::Tensor hg = h_grad.contiguous();
  std::array<const scalar_t*, 5> o_p;
  for (int k = 0; k < 5; ++k) o_p[k] = outs[k].const_data_ptr<scalar_t>();
  bool whole_loop = false;
  if constexpr (Backend::kWholeLoops) {  // the whole loop at once where the backend runs it
    const at::Tensor Rc = R.contiguous();
    GruLoop<scalar_t> loop = gru_loop<scalar_t>(L, B, H, a.reset_after, a.fns, Rc, hp0);
    // read only in the backward
    loop.z = const_cast<scalar_t*>(o_p[0]), loop.r = const_cast<scalar_t*>(o_p[1]);
    loop.hh = const_cast<scalar_t*>(o_p[2]), loop.hr = const_cast<scalar_t*>(o_p[3]);
    loop.h = const_cast<scalar_t*>(o_p[4]);
    loop.gate_step = B * H;
    loop.h_grad = hg.const_data_ptr<scalar_t>();
    loop.d_xp = d_xp.data_ptr<acc_t>(), loop.d_inner = d_inner.data_ptr<acc_t>();
    loop.dh = dh.data_ptr<acc_t>();
    whole_loop = Backend::backward_loop(loop);
  }
  if (!whole_loop) {  // the steps: per step the pointwise passes and the products
    const auto rec_t = Backend::recurrent_gemm(R.narrow(1, 0, G * H).t(), B, L);  // [G·H, H]
    std::optional<std::decay_t<decltype(rec_t)>> cand_t;
    if (!a.reset_after) {
      cand_t.emplace(Backend::recurrent_gemm(R.narrow(1, 2 * H, H).t(), B, L));  // [H, H]
      d_cand = at::empty({B, H}, opts);
      d_rh = at::empty({B, H}, opts);
    }
    GruStep<scalar_t> s{};
    s.H = H;
    s.fns = a.fns;
    s.dh = dh.data_ptr<acc_t>();
    s.d_cand = d_cand.defined() ? d_cand.data_ptr<acc_t>() : nullptr;
    s.d_rh = d_rh.defined() ? d_rh.const_data_ptr<acc_t>() : nullptr;
    const int64_t BH = B * H;
    for (int64_t t = L - 1; t >= 0; --t) {
      s.h_prev = t == 0 ? hp0.const_data_ptr<scalar_t>() : o_p[4] + (t - 1) * BH;
      s.z = const_cast<scalar_t*>(o_p[0] + t * BH);  // read only in the backward passes
      s.r = const_cast<scalar_t*>(o_p[1] + t * BH);
      s.hh = const_cast<scalar_t*>(o_p[2] + t * BH);
      s.hr = const_cast<scalar_t*>(o_p[3] + t * BH);
      s.h_grad = hg.const_data_ptr<scalar_t>() + t * BH;
      s.d_xp = d_xp.data_ptr<acc_t>() + t * 3 * BH;
      s.d_inner = d_inner.data_ptr<acc_t>() + t * G * BH;
      if (a.reset_after) {
        Backend::backward_after(s, B);
      } else {
        Backend::backward_gates(s, B);  // dz, dhh; dh = its direct part
        (*cand_t)(d_rh, d_cand, /*accumulate=*/false);
        Backend::backward_reset(s, B);  // dr; dh += d_rh ⊙ r
      }
      rec_t(dh, d_inner[t], /*accumulate=*/true);
    }
  }
  // Whole-sequence products and sums.
  const at::Tensor dxp = d_xp.view({L * B, 3 * H});
  at::Tensor x_grad = zeros_of(x);
  x_grad.narrow(0, 0, L).copy_(Backend::matmul(dxp, kernel.to(acc).t()).view({L, B, I}));
  at::Tensor xs_t = at::empty({I, L * B}, opts);
  Backend::transpose_into(xs_t, x.narrow(0, 0, L).reshape({L * B, I}).to(acc));
  const at::Tensor kernel_grad = Backend::matmul(xs_t, dxp).to(dtype);
  at::Tensor hs_t = at::empty({H, L * B}, opts);  // h_{t-1} for every step, transposed
  at::Tensor first = hs_t.narrow(1, 0, B);
  Backend::transpose_into(first, h_prev.to(acc));
  if (L > 1) {
    at::Tensor rest = hs_t.narrow(1, B, (L - 1) * B);
    Backend::transpose_into(rest, outs[4].narrow(0, 0, L - 1).reshape({(L - 1) * B, H}).to(acc));
  }
  const at::Tensor din = d_inner.view({L * B, G * H});
  at::Tensor rkernel_grad;
  if (a.reset_after) {
    rkernel_grad = Backend::matmul(hs_t, din);
  } else {
    at::Tensor hr_t = at::empty({H, L * B}, opts);  // (r ⊙ h_prev) for every step, transposed
    Backend::transpose_into(hr_t, outs[3].narrow(0, 0, L).reshape({L * B, H}).to(acc));
    rkernel_grad = at::cat({Backend::matmul(hs_t, din),
                            Backend::matmul(hr_t, dxp.narrow(1, 2 * H, H).contiguous())},
                           1);
  }
  at::Tensor bias_grad;
  if (!bias.defined()) {
    bias_grad = at::empty({0}, x.options());
  } else if (a.reset_after) {
    bias_grad = at::stack({dxp.sum(0), din.sum(0)}).to(dtype);
  } else {
    bias_grad = dxp.sum(0).to(dtype);
  }
  (void)T;
  return {x_grad, dh.to(dtype), kernel_grad, rkernel_grad.to(dtype), bias_grad};
}

// ---------------------------------------------------------------------------------------------
// Op entry points.

inline GruAttrs gru_attrs(bool reset_after, c10::string_view gate_activation,
                          c10::string_view activation) {
  const int gate = check_choice(gate_activation, "gate_activation",
                                {"sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3"});
  const int cell = check_choice(activation, "activation", {"tanh", "relu", "linear"});
  return {reset_after, lstm_block::make_activation_fns(static_cast<lstm_block::GateFn>(gate),
                                                       static_cast<lstm_block::CellFn>(cell))};
}

template <class Backend>
struct GruOps {
  static Outputs5 keras_gru(const at::Tensor& seq_len_max, const at::Tensor& x,
                            const at::Tensor& h_prev, const at::Tensor& kernel,
                            const at::Tensor& recurrent_kernel,
                            const std::optional<at::Tensor>& bias, bool reset_after,
                            c10::string_view gate_activation, c10::string_view activation) {
    const GruAttrs a = gru_attrs(reset_after, gate_activation, activation);
    const GRUSeqSizes s = check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias,
                                               reset_after);
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
    return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "keras_gru",
                                           [&] {
                                             return gru_forward<Backend, scalar_t>(
                                                 L, x, h_prev, kernel, recurrent_kernel, b, a);
                                           });
  }

  static at::Tensor keras_gru_inference(const at::Tensor& seq_len_max, const at::Tensor& x,
                                        const at::Tensor& h_prev, const at::Tensor& kernel,
                                        const at::Tensor& recurrent_kernel,
                                        const std::optional<at::Tensor>& bias, bool reset_after,
                                        c10::string_view gate_activation,
                                        c10::string_view activation) {
    const GruAttrs a = gru_attrs(reset_after, gate_activation, activation);
    const GRUSeqSizes s = check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias,
                                               reset_after);
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
    return AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "keras_gru_inference", [&] {
          return std::get<4>(gru_forward<Backend, scalar_t>(L, x, h_prev, kernel,
                                                            recurrent_kernel, b, a,
                                                            /*keep_gates=*/false));
        });
  }

  static Grads5 keras_gru_grad(const at::Tensor& seq_len_max, const at::Tensor& x,
                               const at::Tensor& h_prev, const at::Tensor& kernel,
                               const at::Tensor& recurrent_kernel,
                               const std::optional<at::Tensor>& bias, const at::Tensor& z,
                               const at::Tensor& r, const at::Tensor& hh, const at::Tensor& hr,
                               const at::Tensor& h, const at::Tensor& h_grad, bool reset_after,
                               c10::string_view gate_activation, c10::string_view activation) {
    const GruAttrs a = gru_attrs(reset_after, gate_activation, activation);
    const GRUSeqSizes s = check_gru_seq_inputs(x, h_prev, kernel, recurrent_kernel, bias,
                                               reset_after);
    for (auto [t, name] : {std::pair{&z, "z"}, {&r, "r"}, {&hh, "hh"}, {&hr, "hr"}, {&h, "h"},
                           {&h_grad, "h_grad"}}) {
      check_like(*t, name, x);
      check_shape(*t, name, {s.T, s.B, s.H}, "[T, B, H]");
    }
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    const at::Tensor b = bias.has_value() ? *bias : at::Tensor();
    const std::array<at::Tensor, 5> outs{z.contiguous(), r.contiguous(), hh.contiguous(),
                                         hr.contiguous(), h.contiguous()};
    return AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "keras_gru_grad", [&] {
          return gru_backward<Backend, scalar_t>(L, x, h_prev, kernel, recurrent_kernel, b, outs,
                                                 h_grad, a);
        });
  }
};

template <class Backend>
void register_gru_ops(torch::Library& m) {
  m.impl("keras_gru", &GruOps<Backend>::keras_gru);
  m.impl("keras_gru_grad", &GruOps<Backend>::keras_gru_grad);
  m.impl("keras_gru_inference", &GruOps<Backend>::keras_gru_inference);
}

}  // namespace gru_seq
}  // namespace torch_lstm_grad
