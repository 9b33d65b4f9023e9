// CPU kernels of TF's fused LSTM ops: LSTMBlockCell(Grad), BlockLSTM(V2), BlockLSTMGrad(V2).
//
// Forward, per SPEC §4: one GEMM for the input projection of every step, then per step one
// small recurrent GEMM (accumulated in place onto that step's projection) and one fused
// pointwise pass parallelised over the batch. Backward: one pointwise pass plus one [B,4H]x[4H,H]
// GEMM per step in reverse time; dx, dW, db and the peephole grads are whole-sequence GEMMs and
// reductions after the loop. Nothing is allocated inside the time loops.
//
// float16/bfloat16 are stored as such but computed in float32 (at::opmath_type): GEMMs run on
// float copies of the weights, the carried h/cs are the rounded stored values, as in TF.
// The single-step cell ops are the sequence ops with T = 1.

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <array>

#include "../checks.h"
#include "activations.h"

namespace torch_lstm_grad {
namespace {

// Column-block index (in units of H) of each gate in w, b and the gate gradients.
struct GateLayout {
  int64_t i, c, f, o;
};
constexpr GateLayout kICFO{0, 1, 2, 3};  // BlockLSTM, LSTMBlockCell (TF's docstring is wrong)
constexpr GateLayout kIFCO{0, 2, 1, 3};  // BlockLSTMV2 (Keras order)

struct CellAttrs {
  double forget_bias;
  double cell_clip;  // applied when > 0
  bool use_peephole;
  GateLayout layout;
};

using Outputs7 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                            at::Tensor, at::Tensor>;
using Grads8 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                          at::Tensor, at::Tensor, at::Tensor>;

at::ScalarType acc_type(at::ScalarType t) { return at::toOpMathType(t); }

// Rows per task: enough work per chunk that OpenMP's fork costs less than it saves.
int64_t row_grain(int64_t H) { return std::max<int64_t>(1, 2048 / H); }

// Zeros of t's shape, always contiguous: outputs must have the fake kernels' metadata.
at::Tensor zeros_of(const at::Tensor& t) { return at::zeros(t.sizes(), t.options()); }

template <typename T>
const T* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Forward.

template <typename scalar_t>
struct FwdStep {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t H;
  const acc_t* gates;    // [B, 4H]: x·Wx + h·Wh of this step, bias not yet added
  const acc_t* bias;     // [4H]
  const acc_t* wci;      // [H] or null without peepholes
  const acc_t* wcf;
  const acc_t* wco;
  const scalar_t* cs_prev;  // [B, H]
  scalar_t* out[7];         // i, cs, f, o, ci, co, h: [B, H] slices of this step
  acc_t* h_acc;             // [B, H] float copy of h for the next GEMM (half/bf16 only)
  CellAttrs attrs;

  void rows(int64_t b0, int64_t b1) const {
    // Branch-free inner loops (one instantiation per peephole/clip setting) vectorise.
    const bool clip = attrs.cell_clip > 0;
    if (attrs.use_peephole) {
      clip ? rows_impl<true, true>(b0, b1) : rows_impl<true, false>(b0, b1);
    } else {
      clip ? rows_impl<false, true>(b0, b1) : rows_impl<false, false>(b0, b1);
    }
  }

  template <bool kPeep, bool kClip>
  TLG_CPU_MULTIVERSION void rows_impl(int64_t b0, int64_t b1) const {
    const acc_t fb = static_cast<acc_t>(attrs.forget_bias);
    const acc_t clip = static_cast<acc_t>(attrs.cell_clip);
    const GateLayout L = attrs.layout;
    const acc_t* __restrict bi = bias + L.i * H;
    const acc_t* __restrict bc = bias + L.c * H;
    const acc_t* __restrict bf = bias + L.f * H;
    const acc_t* __restrict bo = bias + L.o * H;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict g = gates + b * 4 * H;
      const acc_t* __restrict gi_p = g + L.i * H;
      const acc_t* __restrict gc_p = g + L.c * H;
      const acc_t* __restrict gf_p = g + L.f * H;
      const acc_t* __restrict go_p = g + L.o * H;
      const scalar_t* __restrict csp = cs_prev + b * H;
      scalar_t* __restrict i_o = out[0] + b * H;
      scalar_t* __restrict cs_o = out[1] + b * H;
      scalar_t* __restrict f_o = out[2] + b * H;
      scalar_t* __restrict o_o = out[3] + b * H;
      scalar_t* __restrict ci_o = out[4] + b * H;
      scalar_t* __restrict co_o = out[5] + b * H;
      scalar_t* __restrict h_o = out[6] + b * H;
      for (int64_t j = 0; j < H; ++j) {
        const acc_t c_prev = static_cast<acc_t>(csp[j]);
        acc_t gi = gi_p[j] + bi[j];
        const acc_t gc = gc_p[j] + bc[j];
        acc_t gf = (gf_p[j] + bf[j]) + fb;
        acc_t go = go_p[j] + bo[j];
        if constexpr (kPeep) {
          gi += c_prev * wci[j];
          gf += c_prev * wcf[j];
        }
        const acc_t i = cpu::sigmoid(gi);
        const acc_t ci = cpu::tanh(gc);
        const acc_t f = cpu::sigmoid(gf);
        acc_t cs = i * ci + f * c_prev;
        if constexpr (kClip) cs = std::min(std::max(cs, -clip), clip);
        const acc_t co = cpu::tanh(cs);
        if constexpr (kPeep) go += cs * wco[j];
        const acc_t o = cpu::sigmoid(go);
        i_o[j] = static_cast<scalar_t>(i);
        cs_o[j] = static_cast<scalar_t>(cs);
        f_o[j] = static_cast<scalar_t>(f);
        o_o[j] = static_cast<scalar_t>(o);
        ci_o[j] = static_cast<scalar_t>(ci);
        co_o[j] = static_cast<scalar_t>(co);
        h_o[j] = static_cast<scalar_t>(o * co);
      }
      if (h_acc != nullptr) {
        for (int64_t j = 0; j < H; ++j) h_acc[b * H + j] = static_cast<acc_t>(h_o[j]);
      }
    }
  }
};

// Runs the first L steps of x [T, B, I]; outputs are [T, B, H], all seven zero for t >= L.
template <typename scalar_t>
Outputs7 lstm_forward(int64_t L, const at::Tensor& x, const at::Tensor& cs_prev,
                      const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                      const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                      const CellAttrs& attrs) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr bool kSameType = std::is_same_v<scalar_t, acc_t>;
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = cs_prev.size(1);
  const auto acc = acc_type(x.scalar_type());

  std::array<at::Tensor, 7> out;
  for (auto& t : out) {
    t = at::empty({T, B, H}, x.options());
    t.narrow(0, L, T - L).zero_();
  }
  if (L == 0 || B == 0) return std::make_tuple(out[0], out[1], out[2], out[3], out[4], out[5], out[6]);

  const at::Tensor w_acc = w.to(acc);
  const at::Tensor wh = w_acc.narrow(0, I, H);
  const at::Tensor bias = b.to(acc).contiguous();
  at::Tensor wci_a, wcf_a, wco_a;
  if (attrs.use_peephole) {
    wci_a = wci.to(acc).contiguous();
    wcf_a = wcf.to(acc).contiguous();
    wco_a = wco.to(acc).contiguous();
  }
  // The input projection of all L steps in one GEMM; each step then adds h·Wh in place.
  at::Tensor gates = at::empty({L, B, 4 * H}, x.options().dtype(acc));
  at::Tensor gates_2d = gates.view({L * B, 4 * H});
  at::mm_out(gates_2d, x.narrow(0, 0, L).reshape({L * B, I}).to(acc), w_acc.narrow(0, 0, I));
  const at::Tensor cs0 = cs_prev.contiguous();
  const at::Tensor h0 = h_prev.to(acc);
  at::Tensor h_acc = kSameType ? at::Tensor() : at::empty({B, H}, gates.options());

  for (int64_t t = 0; t < L; ++t) {
    at::Tensor g = gates[t];
    g.addmm_(t == 0 ? h0 : (kSameType ? out[6][t - 1] : h_acc), wh);
    FwdStep<scalar_t> step{H,
                           g.const_data_ptr<acc_t>(),
                           bias.const_data_ptr<acc_t>(),
                           ptr_or_null<acc_t>(wci_a),
                           ptr_or_null<acc_t>(wcf_a),
                           ptr_or_null<acc_t>(wco_a),
                           t == 0 ? cs0.const_data_ptr<scalar_t>()
                                  : out[1][t - 1].const_data_ptr<scalar_t>(),
                           {},
                           kSameType ? nullptr : h_acc.data_ptr<acc_t>(),
                           attrs};
    for (int k = 0; k < 7; ++k) step.out[k] = out[k][t].data_ptr<scalar_t>();
    at::parallel_for(0, B, row_grain(H), [&](int64_t b0, int64_t b1) { step.rows(b0, b1); });
  }
  return std::make_tuple(out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
}

// ---------------------------------------------------------------------------------------------
// Backward.

template <typename scalar_t>
struct BwdStep {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t H;
  const scalar_t* act[6];  // i, cs, f, o, ci, co of this step: [B, H] (cs unused here)
  const scalar_t* cs_prev;  // [B, H]: the state this step started from
  const scalar_t* cs_grad;  // [B, H]
  const scalar_t* h_grad;   // [B, H]
  const acc_t* wci;         // [H] or null
  const acc_t* wcf;
  const acc_t* wco;
  const acc_t* dh_carry;  // [B, H]: gradient reaching h from the later steps
  acc_t* dcs_carry;       // [B, H]: in: from the later steps; out: for the earlier step
  acc_t* dgates;          // [B, 4H]: pre-activation gate gradients, in the op's layout
  GateLayout layout;

  // TF's operation order (tf_semantics.md §2.2, §4.2). The clip is straight-through.
  void rows(int64_t b0, int64_t b1) const {
    wci != nullptr ? rows_impl<true>(b0, b1) : rows_impl<false>(b0, b1);
  }

  template <bool kPeep>
  TLG_CPU_MULTIVERSION void rows_impl(int64_t b0, int64_t b1) const {
    const GateLayout L = layout;
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t r = b * H;
      const scalar_t* __restrict i_p = act[0] + r;
      const scalar_t* __restrict f_p = act[2] + r;
      const scalar_t* __restrict o_p = act[3] + r;
      const scalar_t* __restrict ci_p = act[4] + r;
      const scalar_t* __restrict co_p = act[5] + r;
      const scalar_t* __restrict csp_p = cs_prev + r;
      const scalar_t* __restrict csg_p = cs_grad + r;
      const scalar_t* __restrict hg_p = h_grad + r;
      const acc_t* __restrict dh_p = dh_carry + r;
      acc_t* __restrict dcs_c = dcs_carry + r;
      acc_t* __restrict dgi = dgates + 4 * r + L.i * H;
      acc_t* __restrict dgc = dgates + 4 * r + L.c * H;
      acc_t* __restrict dgf = dgates + 4 * r + L.f * H;
      acc_t* __restrict dgo = dgates + 4 * r + L.o * H;
      for (int64_t j = 0; j < H; ++j) {
        const acc_t i = i_p[j], f = f_p[j], o = o_p[j], ci = ci_p[j], co = co_p[j];
        const acc_t c_prev = csp_p[j];
        const acc_t dh = dh_p[j] + static_cast<acc_t>(hg_p[j]);
        const acc_t dcs_in = dcs_c[j] + static_cast<acc_t>(csg_p[j]);
        const acc_t d_o = o * (1 - o) * dh * co;
        acc_t dcs = (1 - co * co) * dh * o + dcs_in;
        if constexpr (kPeep) dcs += d_o * wco[j];
        const acc_t d_ci = (1 - ci * ci) * dcs * i;
        const acc_t d_f = f * (1 - f) * dcs * c_prev;
        const acc_t d_i = i * (1 - i) * dcs * ci;
        dgi[j] = d_i;
        dgc[j] = d_ci;
        dgf[j] = d_f;
        dgo[j] = d_o;
        acc_t carry = dcs * f;
        if constexpr (kPeep) carry = (carry + d_i * wci[j]) + d_f * wcf[j];
        dcs_c[j] = carry;
      }
    }
  }
};

struct BackwardState {
  at::Tensor dgates;     // [L, B, 4H] acc
  at::Tensor dcs_carry;  // [B, H] acc: cs_prev_grad after the loop
  at::Tensor dh_carry;   // [B, H] acc: h_prev_grad after the loop (when wh is given)
};

// The reverse-time recurrence over the first L steps. `wh` ([H, 4H], acc) feeds dh back through
// the recurrent weights; the cell-grad op passes an undefined wh (its h_grad is the whole dh).
template <typename scalar_t>
BackwardState lstm_backward_recurrence(int64_t L, const at::Tensor& cs_prev,
                                       const std::array<at::Tensor, 6>& act,
                                       const at::Tensor& cs_grad, const at::Tensor& h_grad,
                                       const at::Tensor& wci_a, const at::Tensor& wcf_a,
                                       const at::Tensor& wco_a, const at::Tensor& wh,
                                       GateLayout layout) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = cs_prev.size(0), H = cs_prev.size(1);
  const auto opts = cs_prev.options().dtype(acc_type(cs_prev.scalar_type()));
  BackwardState st{at::empty({L, B, 4 * H}, opts), at::zeros({B, H}, opts),
                   at::zeros({B, H}, opts)};
  const at::Tensor wh_t = wh.defined() ? wh.t() : at::Tensor();
  for (int64_t t = L - 1; t >= 0; --t) {
    BwdStep<scalar_t> step{H,
                           {},
                           t == 0 ? cs_prev.const_data_ptr<scalar_t>()
                                  : act[1][t - 1].const_data_ptr<scalar_t>(),
                           cs_grad[t].const_data_ptr<scalar_t>(),
                           h_grad[t].const_data_ptr<scalar_t>(),
                           ptr_or_null<acc_t>(wci_a),
                           ptr_or_null<acc_t>(wcf_a),
                           ptr_or_null<acc_t>(wco_a),
                           st.dh_carry.const_data_ptr<acc_t>(),
                           st.dcs_carry.data_ptr<acc_t>(),
                           st.dgates[t].data_ptr<acc_t>(),
                           layout};
    for (int k = 0; k < 6; ++k) step.act[k] = act[k][t].const_data_ptr<scalar_t>();
    at::parallel_for(0, B, row_grain(H), [&](int64_t b0, int64_t b1) { step.rows(b0, b1); });
    if (wh_t.defined()) at::mm_out(st.dh_carry, st.dgates[t], wh_t);
  }
  return st;
}

// Σ over (t, b) of di·cs_prev, df·cs_prev and do·cs, each [H]: whole-sequence reductions
// rather than per-row accumulation, so no two threads ever write the same element.
std::array<at::Tensor, 3> peephole_grads(const at::Tensor& dgates, const at::Tensor& cs_prev,
                                         const at::Tensor& cs, int64_t L, GateLayout layout,
                                         at::ScalarType out_type) {
  const int64_t B = cs_prev.size(0), H = cs_prev.size(1);
  const auto acc = dgates.scalar_type();
  const at::Tensor dg = dgates.view({L * B, 4, H});
  const at::Tensor cs_now = cs.narrow(0, 0, L).reshape({L * B, H}).to(acc);
  const at::Tensor cs_before =
      at::cat({cs_prev.unsqueeze(0), cs.narrow(0, 0, L - 1)}).view({L * B, H}).to(acc);
  return {(dg.select(1, layout.i) * cs_before).sum(0).to(out_type),
          (dg.select(1, layout.f) * cs_before).sum(0).to(out_type),
          (dg.select(1, layout.o) * cs_now).sum(0).to(out_type)};
}

std::array<at::Tensor, 3> peepholes_acc(const at::Tensor& wci, const at::Tensor& wcf,
                                        const at::Tensor& wco, bool use_peephole,
                                        at::ScalarType acc) {
  if (!use_peephole) return {};
  return {wci.to(acc).contiguous(), wcf.to(acc).contiguous(), wco.to(acc).contiguous()};
}

template <typename scalar_t>
Grads8 lstm_backward(int64_t L, const at::Tensor& x, const at::Tensor& cs_prev,
                     const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                     const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                     const std::array<at::Tensor, 6>& act, const at::Tensor& h,
                     const at::Tensor& cs_grad, const at::Tensor& h_grad, bool use_peephole,
                     GateLayout layout) {
  const int64_t B = x.size(1), I = x.size(2), H = cs_prev.size(1);
  const auto dtype = x.scalar_type();
  const auto acc = acc_type(dtype);
  at::Tensor x_grad = at::zeros_like(x, at::MemoryFormat::Contiguous);
  auto zeros_peep = [&] {
    return std::array<at::Tensor, 3>{zeros_of(wci), zeros_of(wcf), zeros_of(wco)};
  };
  if (L == 0 || B == 0) {
    auto p = zeros_peep();
    return {x_grad, zeros_of(cs_prev), zeros_of(h_prev), zeros_of(w),
            p[0],   p[1],              p[2],             zeros_of(b)};
  }
  const at::Tensor w_acc = w.to(acc);
  const auto peep = peepholes_acc(wci, wcf, wco, use_peephole, acc);
  BackwardState st = lstm_backward_recurrence<scalar_t>(
      L, cs_prev, act, cs_grad, h_grad, peep[0], peep[1], peep[2], w_acc.narrow(0, I, H), layout);

  // dx, dW, db for all steps at once.
  const at::Tensor dg = st.dgates.view({L * B, 4 * H});
  x_grad.narrow(0, 0, L).view({L * B, I}).copy_(at::mm(dg, w_acc.narrow(0, 0, I).t()));
  const at::Tensor x_all = x.narrow(0, 0, L).reshape({L * B, I}).to(acc);
  const at::Tensor h_before =
      at::cat({h_prev.unsqueeze(0), h.narrow(0, 0, L - 1)}).view({L * B, H}).to(acc);
  at::Tensor w_grad = at::empty({I + H, 4 * H}, w_acc.options());
  at::Tensor wx_grad = w_grad.narrow(0, 0, I), wh_grad = w_grad.narrow(0, I, H);
  at::mm_out(wx_grad, x_all.t(), dg);
  at::mm_out(wh_grad, h_before.t(), dg);
  auto p = use_peephole ? peephole_grads(st.dgates, cs_prev, act[1], L, layout, dtype)
                        : zeros_peep();
  return {x_grad,
          st.dcs_carry.to(dtype),
          st.dh_carry.to(dtype),
          w_grad.to(dtype),
          p[0],
          p[1],
          p[2],
          dg.sum(0).to(dtype)};
}

// ---------------------------------------------------------------------------------------------
// Op entry points: validate, then dispatch on dtype.

Outputs7 forward_entry(const at::Tensor& seq_len_max, const at::Tensor& x, const at::Tensor& cs_prev,
                       const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                       const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                       const CellAttrs& attrs) {
  const LSTMSizes s =
      check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, attrs.use_peephole, true);
  const int64_t L = check_seq_len_max(seq_len_max, s.T);
  return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm_cpu",
                                         [&] {
                                           return lstm_forward<scalar_t>(L, x, cs_prev, h_prev, w,
                                                                         wci, wcf, wco, b, attrs);
                                         });
}

Outputs7 block_lstm_cpu(const at::Tensor& seq_len_max, const at::Tensor& x,
                        const at::Tensor& cs_prev, const at::Tensor& h_prev, const at::Tensor& w,
                        const at::Tensor& wci, const at::Tensor& wcf, const at::Tensor& wco,
                        const at::Tensor& b, double forget_bias, double cell_clip,
                        bool use_peephole) {
  return forward_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                       {forget_bias, cell_clip, use_peephole, kICFO});
}

Outputs7 block_lstm_v2_cpu(const at::Tensor& seq_len_max, const at::Tensor& x,
                           const at::Tensor& cs_prev, const at::Tensor& h_prev,
                           const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                           const at::Tensor& wco, const at::Tensor& b, double cell_clip,
                           bool use_peephole) {
  return forward_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                       {0.0, cell_clip, use_peephole, kIFCO});
}

Outputs7 lstm_block_cell_cpu(const at::Tensor& x, const at::Tensor& cs_prev,
                             const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                             const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                             double forget_bias, double cell_clip, bool use_peephole) {
  check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, false);
  const CellAttrs attrs{forget_bias, cell_clip, use_peephole, kICFO};
  auto out = AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "lstm_block_cell_cpu", [&] {
        return lstm_forward<scalar_t>(1, x.unsqueeze(0), cs_prev, h_prev, w, wci, wcf, wco, b,
                                      attrs);
      });
  auto [i, cs, f, o, ci, co, h] = out;
  return {i[0], cs[0], f[0], o[0], ci[0], co[0], h[0]};
}

Grads8 grad_entry(const at::Tensor& seq_len_max, const at::Tensor& x, const at::Tensor& cs_prev,
                  const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                  const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                  const at::Tensor& i, const at::Tensor& cs, const at::Tensor& f,
                  const at::Tensor& o, const at::Tensor& ci, const at::Tensor& co,
                  const at::Tensor& h, const at::Tensor& cs_grad, const at::Tensor& h_grad,
                  bool use_peephole, GateLayout layout) {
  const LSTMSizes s = check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, true);
  check_lstm_activations({{&i, "i"}, {&cs, "cs"}, {&f, "f"}, {&o, "o"}, {&ci, "ci"}, {&co, "co"},
                          {&h, "h"}, {&cs_grad, "cs_grad"}, {&h_grad, "h_grad"}},
                         x, s, true);
  const int64_t L = check_seq_len_max(seq_len_max, s.T);
  const std::array<at::Tensor, 6> act{i.contiguous(),  cs.contiguous(), f.contiguous(),
                                      o.contiguous(),  ci.contiguous(), co.contiguous()};
  return AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm_grad_cpu", [&] {
        return lstm_backward<scalar_t>(L, x, cs_prev.contiguous(), h_prev, w, wci, wcf, wco, b,
                                       act, h, cs_grad.contiguous(), h_grad.contiguous(),
                                       use_peephole, layout);
      });
}

Grads8 block_lstm_grad_cpu(const at::Tensor& seq_len_max, const at::Tensor& x,
                           const at::Tensor& cs_prev, const at::Tensor& h_prev,
                           const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                           const at::Tensor& wco, const at::Tensor& b, const at::Tensor& i,
                           const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
                           const at::Tensor& ci, const at::Tensor& co, const at::Tensor& h,
                           const at::Tensor& cs_grad, const at::Tensor& h_grad,
                           bool use_peephole) {
  return grad_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, use_peephole, kICFO);
}

Grads8 block_lstm_grad_v2_cpu(const at::Tensor& seq_len_max, const at::Tensor& x,
                              const at::Tensor& cs_prev, const at::Tensor& h_prev,
                              const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                              const at::Tensor& wco, const at::Tensor& b, const at::Tensor& i,
                              const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
                              const at::Tensor& ci, const at::Tensor& co, const at::Tensor& h,
                              const at::Tensor& cs_grad, const at::Tensor& h_grad,
                              bool use_peephole) {
  return grad_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, use_peephole, kIFCO);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lstm_block_cell_grad_cpu(
    const at::Tensor& x, const at::Tensor& cs_prev, const at::Tensor& h_prev, const at::Tensor& w,
    const at::Tensor& wci, const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
    const at::Tensor& i, const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
    const at::Tensor& ci, const at::Tensor& co, const at::Tensor& cs_grad,
    const at::Tensor& h_grad, bool use_peephole) {
  const LSTMSizes s = check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, false);
  check_lstm_activations({{&i, "i"}, {&cs, "cs"}, {&f, "f"}, {&o, "o"}, {&ci, "ci"}, {&co, "co"},
                          {&cs_grad, "cs_grad"}, {&h_grad, "h_grad"}},
                         x, s, false);
  const auto dtype = x.scalar_type();
  const auto acc = acc_type(dtype);
  const std::array<at::Tensor, 6> act{i.contiguous().unsqueeze(0),  cs.contiguous().unsqueeze(0),
                                      f.contiguous().unsqueeze(0),  o.contiguous().unsqueeze(0),
                                      ci.contiguous().unsqueeze(0), co.contiguous().unsqueeze(0)};
  const at::Tensor csp = cs_prev.contiguous();
  const auto peep = peepholes_acc(wci, wcf, wco, use_peephole, acc);
  BackwardState st = AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, dtype, "lstm_block_cell_grad_cpu", [&] {
        return lstm_backward_recurrence<scalar_t>(1, csp, act, cs_grad.contiguous().unsqueeze(0),
                                                  h_grad.contiguous().unsqueeze(0), peep[0],
                                                  peep[1], peep[2], at::Tensor(), kICFO);
      });
  std::array<at::Tensor, 3> p =
      use_peephole ? peephole_grads(st.dgates, csp, act[1], 1, kICFO, dtype)
                   : std::array<at::Tensor, 3>{zeros_of(wci), zeros_of(wcf), zeros_of(wco)};
  return {st.dcs_carry.to(dtype), st.dgates[0].to(dtype), p[0], p[1], p[2]};
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  m.impl("lstm_block_cell", &lstm_block_cell_cpu);
  m.impl("lstm_block_cell_grad", &lstm_block_cell_grad_cpu);
  m.impl("block_lstm", &block_lstm_cpu);
  m.impl("block_lstm_v2", &block_lstm_v2_cpu);
  m.impl("block_lstm_grad", &block_lstm_grad_cpu);
  m.impl("block_lstm_grad_v2", &block_lstm_grad_v2_cpu);
}

}  // namespace torch_lstm_grad
