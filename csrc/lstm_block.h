// TF's fused LSTM ops (LSTMBlockCell(Grad), BlockLSTM(V2), BlockLSTMGrad(V2)) and block_lstm_ex
// (their activation / clip-gradient variants and TF1 LSTMCell's projection), device-neutral:
// the cell math, written once for the CPU and CUDA kernels, and the host-side drivers, which
// call a Backend for each time step (the recurrent GEMM and the pointwise pass: fused into one
// parallel region on the CPU, csrc/cpu/lstm_block.cpp; ATen GEMM + kernel on CUDA,
// csrc/cuda/lstm_block.cu) and for the whole-sequence GEMMs.
//
// Forward (docs/performance.md): one GEMM for the input projection of every step, then per step
// one small recurrent GEMM (accumulated in place onto that step's projection) and one pointwise
// pass. Backward: one pointwise pass plus one [B,4H]x[4H,H] GEMM per step in reverse time; dx,
// dW are whole-sequence GEMMs after the loop, db and the peephole grads reductions after it
// (or, on the CPU, sums kept per unit by the thread that owns the unit: no atomics anywhere).
// Nothing is allocated inside the time loops.
//
// float16/bfloat16 are stored as such but computed in float32 (at::opmath_type): the pointwise
// math in float32, the GEMMs on the stored values (exact in float32) with float32 accumulation,
// the carried h/cs are the rounded stored values, as in TF. A Backend whose products multiply
// bfloat16 directly (Backend::product_type) also rounds the gate gradients to bfloat16 before
// the backward's products.
// The single-step cell ops are the sequence ops with T = 1.
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "checks.h"
#include "packed_weights.h"

#if defined(__CUDACC__)
#define TLG_HD __host__ __device__ __forceinline__
#else
#define TLG_HD inline __attribute__((always_inline))
#endif

namespace torch_lstm_grad {
namespace lstm_block {

// Column-block index (in units of H) of each gate in w, b and the gate gradients.
struct GateLayout {
  int64_t i, c, f, o;
};
constexpr GateLayout kICFO{0, 1, 2, 3};  // BlockLSTM, LSTMBlockCell (TF's docstring is wrong)
constexpr GateLayout kIFCO{0, 2, 1, 3};  // BlockLSTMV2 (Keras order)

// The activation variants of the extended op (block_lstm_ex): the gate activation applied to
// i, f, o and the cell activation applied to ci = act(gc) and co = act(cs). TF's block ops are
// sigmoid/tanh; the others are what Keras and TF1 LSTMCell layers use.
enum class GateFn { kSigmoid, kHardSigmoidKeras2, kHardSigmoidKeras3 };
enum class CellFn { kTanh, kRelu, kLinear };

// The variants' constants, set once on the host. Both hard sigmoids are one formula,
// min(max(x·g_scale + g_shift, 0), g_hi) / g_div, in the operation order of their TF graphs:
// Keras 2 `clip(x·0.2 + 0.5, 0, 1)` (scale 0.2, shift 0.5, hi 1, div 1: ·1 and /1 are exact)
// and Keras 3 `relu6(x + 3) / 6` (scale 1, shift 3, hi 6, div 6). relu and linear are one
// formula too, max(x, c_lo) with c_lo = 0 or -inf.
struct ActivationFns {
  GateFn gate = GateFn::kSigmoid;
  CellFn cell = CellFn::kTanh;
  double g_scale = 0, g_shift = 0, g_hi = 0, g_div = 1, g_slope = 0;
  double c_lo = 0;
  bool is_default() const { return gate == GateFn::kSigmoid && cell == CellFn::kTanh; }
};

inline ActivationFns make_activation_fns(GateFn gate, CellFn cell) {
  ActivationFns a;
  a.gate = gate;
  a.cell = cell;
  if (gate == GateFn::kHardSigmoidKeras2) {
    a.g_scale = 0.2, a.g_shift = 0.5, a.g_hi = 1.0, a.g_div = 1.0, a.g_slope = 0.2;
  } else if (gate == GateFn::kHardSigmoidKeras3) {
    a.g_scale = 1.0, a.g_shift = 3.0, a.g_hi = 6.0, a.g_div = 6.0, a.g_slope = 1.0 / 6.0;
  }
  a.c_lo = cell == CellFn::kLinear ? -std::numeric_limits<double>::infinity() : 0.0;
  return a;
}

struct CellAttrs {
  double forget_bias;
  double cell_clip;  // applied when > 0
  bool use_peephole;
  GateLayout layout;
  ActivationFns fns = {};
  // The clip's gradient: false = straight through (TF's block ops), true = zero where the
  // state was clipped (clip_by_value's gradient, TF1 LSTMCell).
  bool clip_zero_grad = false;
};

using Outputs7 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                            at::Tensor, at::Tensor>;
using Grads8 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                          at::Tensor, at::Tensor, at::Tensor>;

// ---------------------------------------------------------------------------------------------
// The cell, one element, in TF's operation order (docs/tf-semantics.md §1.2, §2.2, §9.1). `Gate`
// and `Cell` are the activation variants below (`Act` supplies sigmoid and tanh for the device).
// Inputs to the forward already include the bias.

// ActivationFns' constants in the computation type, hoisted out of the loops.
// The w_* weights (0 or 1) pick a variant's derivative in AnyGate / AnyCell below.
template <typename acc_t>
struct ActParams {
  acc_t g_scale, g_shift, g_hi, g_div, g_slope, c_lo;
  acc_t g_w_hard, g_w_sigmoid, c_w_rect, c_w_tanh;
  TLG_HD static ActParams from(const ActivationFns& a) {
    const bool hard = a.gate != GateFn::kSigmoid, rect = a.cell != CellFn::kTanh;
    return {static_cast<acc_t>(a.g_scale), static_cast<acc_t>(a.g_shift),
            static_cast<acc_t>(a.g_hi),    static_cast<acc_t>(a.g_div),
            static_cast<acc_t>(a.g_slope), static_cast<acc_t>(a.c_lo),
            acc_t(hard ? 1 : 0),           acc_t(hard ? 0 : 1),
            acc_t(rect ? 1 : 0),           acc_t(rect ? 0 : 1)};
  }
};

// Each activation has f(x) and df(y), the derivative from the activation's own output y, which
// is what the backward has (the seven stored outputs): TF's own block kernels do the same.
template <class Act>
struct SigmoidGate {
  template <typename T>
  TLG_HD static T f(T x, const ActParams<T>&) {
    return Act::sigmoid(x);
  }
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>&) {
    return y * (1 - y);
  }
};

// Both hard sigmoids (see ActivationFns). The gradient is TF's where y says which piece x was
// on: clip_by_value's gradient (Keras 2) passes where min <= t <= max and relu6's (Keras 3)
// where 0 < x + 3 < 6; from y, 0 < y < 1 gives the slope and anything else 0. So for Keras 2 it
// differs from TF exactly at x = ±2.5 (t = 0 or 1, where TF passes 0.2 and this gives 0), and
// nowhere else; for Keras 3 it is TF's.
struct HardSigmoidGate {
  template <typename T>
  TLG_HD static T f(T x, const ActParams<T>& p) {
    T t = x * p.g_scale + p.g_shift;
    t = t < T(0) ? T(0) : t;
    t = t > p.g_hi ? p.g_hi : t;
    return t / p.g_div;
  }
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>& p) {
    return (y > T(0) && y < T(1)) ? p.g_slope : T(0);
  }
};

template <class Act>
struct TanhCell {
  template <typename T>
  TLG_HD static T f(T x, const ActParams<T>&) {
    return Act::tanh(x);
  }
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>&) {
    return 1 - y * y;
  }
};

// relu (c_lo = 0) and linear (c_lo = -inf): max(x, c_lo). relu's gradient is TF's ReluGrad
// (1 where x > 0, i.e. y > 0); linear's is 1.
struct RectCell {
  template <typename T>
  TLG_HD static T f(T x, const ActParams<T>& p) {
    return x < p.c_lo ? p.c_lo : x;
  }
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>& p) {
    return y > p.c_lo ? T(1) : T(0);
  }
};

// Either gate's or either cell's derivative, chosen at run time: both computed and blended by
// the 0/1 weights of ActParams, with no branch, so that one backward loop serves every variant
// (a branch on a loop-invariant flag is what the compiler would split the loop on again). The
// blend is exact: d·1 + e·0 = d for a finite e ≥ 0 (and +0 + +0 = +0); the tanh derivative
// takes y clamped to [-1, 1], which leaves tanh's own y as it is and keeps a relu or linear
// state's y·y from overflowing (inf·0 would be NaN).
struct AnyGate {
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>& p) {
    return HardSigmoidGate::df(y, p) * p.g_w_hard + (y * (1 - y)) * p.g_w_sigmoid;
  }
};

struct AnyCell {
  template <typename T>
  TLG_HD static T df(T y, const ActParams<T>& p) {
    const T t = y < T(-1) ? T(-1) : (y > T(1) ? T(1) : y);
    return RectCell::df(y, p) * p.c_w_rect + (1 - t * t) * p.c_w_tanh;
  }
};

template <typename acc_t>
struct CellForward {
  acc_t i, cs, f, o, ci, co, h;
};

template <class Gate, class Cell, bool kPeep, bool kClip, typename acc_t>
TLG_HD CellForward<acc_t> lstm_cell_forward(acc_t gi, acc_t gc, acc_t gf, acc_t go, acc_t c_prev,
                                            acc_t wci, acc_t wcf, acc_t wco, acc_t forget_bias,
                                            acc_t clip, const ActParams<acc_t>& p) {
  gf = gf + forget_bias;  // forget_bias after the matrix bias, the peephole after that
  if constexpr (kPeep) {
    gi += c_prev * wci;
    gf += c_prev * wcf;
  }
  CellForward<acc_t> r;
  r.i = Gate::f(gi, p);
  r.ci = Cell::f(gc, p);
  r.f = Gate::f(gf, p);
  r.cs = r.i * r.ci + r.f * c_prev;
  if constexpr (kClip) r.cs = r.cs < -clip ? -clip : (r.cs > clip ? clip : r.cs);
  r.co = Cell::f(r.cs, p);  // the clipped state feeds co and the output peephole
  if constexpr (kPeep) go += r.cs * wco;
  r.o = Gate::f(go, p);
  r.h = r.o * r.co;
  return r;
}

template <typename acc_t>
struct CellBackward {
  acc_t di, dci, df, d_o;  // pre-activation gate gradients
  acc_t dcs_prev;          // gradient reaching the previous cell state
};

// dh, dcs_in: the gradients reaching this step's h and cs (carry + incoming). Without
// kMaskClip the clip is straight-through: TF's grad ops never mask where the forward clipped.
// With it (TF1 LSTMCell's clip_by_value) the gradient reaching the clipped state is zero where
// the stored, clipped cs is at ±clip: clip_by_value's gradient is zero where its input was
// outside [-clip, clip] and passes at exactly ±clip, so the two differ only for a state that was
// exactly ±clip before the clip. `clip` = +inf masks nothing.
template <class Gate, class Cell, bool kPeep, bool kMaskClip, typename acc_t>
TLG_HD CellBackward<acc_t> lstm_cell_backward(acc_t i, acc_t f, acc_t o, acc_t ci, acc_t co,
                                              acc_t cs, acc_t c_prev, acc_t dh, acc_t dcs_in,
                                              acc_t wci, acc_t wcf, acc_t wco, acc_t clip,
                                              const ActParams<acc_t>& p) {
  CellBackward<acc_t> r;
  r.d_o = Gate::df(o, p) * dh * co;
  acc_t dcs = Cell::df(co, p) * dh * o + dcs_in;
  if constexpr (kPeep) dcs += r.d_o * wco;
  if constexpr (kMaskClip) dcs = (cs > -clip && cs < clip) ? dcs : acc_t(0);
  r.dci = Cell::df(ci, p) * dcs * i;
  r.df = Gate::df(f, p) * dcs * c_prev;
  r.di = Gate::df(i, p) * dcs * ci;
  r.dcs_prev = dcs * f;
  if constexpr (kPeep) r.dcs_prev = (r.dcs_prev + r.di * wci) + r.df * wcf;
  return r;
}

// ---------------------------------------------------------------------------------------------
// One step's pointwise pass: what a Backend's forward_step/backward_step receive (B rows).

template <typename scalar_t>
struct FwdStep {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t H;
  const acc_t* gates;       // [B, 4H]: x·Wx + h·Wh of this step, bias not yet added
  const acc_t* bias;        // [4H]
  const acc_t* wci;         // [H] or null without peepholes
  const acc_t* wcf;
  const acc_t* wco;
  const scalar_t* cs_prev;  // [B, H]
  scalar_t* out[7];         // i, cs, f, o, ci, co, h: [B, H] slices of this step
  acc_t* h_acc;             // [B, H] float copy of h for the next GEMM (half/bf16 only)
  CellAttrs attrs;
  // false: nothing reads i, f, o, ci, co (out[0, 2..5] are scratch rows): a pass may skip them.
  bool gates_read = true;
  // true: i, f, o, ci, co are read by nobody before a backward, and a sequence of them is more
  // than caches keep (kStreamedGateBytes): a pass may write them around its caches.
  bool gates_streamed = false;
};

// From this size of a forward's i, f, o, ci, co (all steps), writing them around the caches
// (CPU: non-temporal stores) pays: the lines are not read in first, and the cell states and h
// the next steps read stay cached. Below it the backward still finds them in cache, and plain
// stores are the faster (measured: docs/performance.md).
constexpr int64_t kStreamedGateBytes = int64_t{4} << 20;

template <typename scalar_t>
struct BwdStep {
  using acc_t = at::opmath_type<scalar_t>;
  int64_t H;
  const scalar_t* act[6];   // i, cs, f, o, ci, co of this step: [B, H] (cs unused here)
  const scalar_t* cs_prev;  // [B, H]: the state this step started from
  const scalar_t* cs_grad;  // [B, H]
  const scalar_t* h_grad;   // [B, H]
  const acc_t* wci;         // [H] or null
  const acc_t* wcf;
  const acc_t* wco;
  const acc_t* dh_carry;    // [B, H]: gradient reaching h from the later steps
  acc_t* dcs_carry;         // [B, H]: in: from the later steps; out: for the earlier step
  acc_t* dgates;            // [B, 4H]: pre-activation gate gradients, in the op's layout
  scalar_t* dgates_lp;      // [B, 4H] or null: dgates rounded to scalar_t, for products in it
  GateLayout layout;
  double* sums;             // [7, H] or null: see BackwardState::sums
  ActivationFns fns;        // the forward's activations (their derivatives)
  double mask_clip;         // +inf, or the cell clip whose gradient is zero where it clipped
};

// ---------------------------------------------------------------------------------------------
// Host-side drivers (any device: ATen does the GEMMs on the tensors' device).

inline at::ScalarType acc_type(at::ScalarType t) { return at::toOpMathType(t); }

// Zeros of t's shape, always contiguous: outputs must have the fake kernels' metadata.
inline at::Tensor zeros_of(const at::Tensor& t) { return at::zeros(t.sizes(), t.options()); }

template <typename T>
const T* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? t.const_data_ptr<T>() : nullptr;
}

// A Backend supplies:
// - product_type(dtype): the type the operands of an op of dtype are multiplied in: its float
//   type (at::opmath_type), or dtype itself where the backend multiplies bfloat16 directly;
// - recurrent_gemm(b, m, steps): the per-step product with one weight matrix (of the op's dtype)
//   for the whole loop, c = a·b (+ c), for `steps` products of m rows, a of the recurrent's
//   operand_type() (csrc/cpu/gemm.h prepares b once);
// - gate_gemm(b, m, steps, packed): the forward's recurrent product ([P, 4H], four gate blocks),
//   `packed` an undefined tensor or pack_recurrent_weight(b, 4) for a form that reads it;
// - dh_gemm(b, m, steps): the backward's (b = Whᵀ, [4H, P]);
// - forward_step(s, recurrent, g, h): one step, g += h·Wh with `recurrent`, then the pointwise
//   pass on g (s.gates points into g);
// - cell_step(s, B): that pointwise pass alone, on gates that hold the whole pre-activation
//   (a single step's [x, h_prev]·w);
// - forward_loop(s, recurrent, B, L, point_step, h0, h): all L steps of forward_step's work
//   (h read as stored: step t reads h0 or h + (t - 1)·B·H), each step's pointers from
//   point_step(t, s), which returns its gates; false, having done nothing, where the backend
//   has no such loop for this case (then the driver calls forward_step step by step);
// - backward_step(s, recurrent, next, dh_carry): one reverse step, dh_carry = next·Whᵀ when
//   `next` (the later step's dgates) is defined, then the pointwise pass. The CPU backend fuses
//   each pair into one parallel region where it can (csrc/cpu/lstm_block.cpp);
// - backward_loop(s, recurrent, B, L, point_step, dgates, dh_carry): all L reverse steps of
//   backward_step's work (next: the float dgates of step t + 1, [L, B, 4H] from `dgates`, or
//   where the products take the op's dtype, step t + 1's s.dgates_lp), pointers from
//   point_step(t, s); false, having done nothing, as forward_loop;
// - sums_in_steps(recurrent): whether backward_step also adds up BackwardState::sums;
// - transpose_into(dst, src): dst = srcᵀ (src [m, n], dst an [n, m] view);
// - input_gates(a, b, packed, scratch): a·b as a contiguous tensor of the float type, the
//   forward's input projection of all steps (a, b of one product_type; `packed`: b as
//   pack_recurrent_weight(b, 4) for a form that reads it, or undefined: the same numbers;
//   `scratch`: read only within the call, so it may be a buffer the backend reuses);
// - sum_matmul(a, b): the same for the products whose K is a long sum (the backward's dx over
//   the 4H gate columns and dW over the L·B rows, a single step's [x, h_prev]·w over I + H),
//   which the CPU adds pairwise where small enough;
// - h_prev_product(recurrent, dh, dgates0): h_prev_grad = dgates0·Whᵀ with `recurrent`, the
//   last product of the backward (a sum over 4H gate columns, which the CPU adds pairwise);
// - peephole_grads(dgates, cs_prev, cs, L, layout, dtype): the three peephole reductions
//   (aten_peephole_grads below is the plain form).
// AtenRecurrentGemm is the plain form.
struct AtenRecurrentGemm {
  at::Tensor b;  // [K, N], float type
  at::ScalarType operand_type() const { return b.scalar_type(); }
  void operator()(at::Tensor& c, const at::Tensor& a, bool accumulate) const {
    if (accumulate) {
      c.addmm_(a, b);
    } else {
      at::mm_out(c, a, b);
    }
  }
};

// TF1 LSTMCell's projection (LSTMP): r = m · w_proj (m = o ⊙ act(cs), [B, H]; w_proj [H, P]),
// clipped to ±clip when clip > 0 (clip_by_value: zero gradient where it clipped, always: the
// only TF layer with a projection clip is LSTMCell). r is the step's output h and the next
// step's recurrent input, so w is [I + P, 4H] and h, h_prev are [.., P].
struct Projection {
  at::Tensor w_proj;  // [H, P], the op's dtype
  double clip;
};

// sequence_length: B integers in [0, T], as a host vector (reading it syncs on a GPU).
inline std::vector<int64_t> check_sequence_length(const at::Tensor& lengths, int64_t B,
                                                  int64_t T) {
  TORCH_CHECK_TYPE(!at::isFloatingType(lengths.scalar_type()) &&
                       !at::isComplexType(lengths.scalar_type()) &&
                       lengths.scalar_type() != at::kBool,
                   "sequence_length: expected an integer dtype, got ", lengths.scalar_type());
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == B,
                    "sequence_length: expected shape [B] = [", B, "], got ",
                    shape_str(lengths.sizes()));
  const at::Tensor host = lengths.to(at::kCPU, at::kLong).contiguous();
  const int64_t* v = host.const_data_ptr<int64_t>();
  std::vector<int64_t> out(v, v + B);
  for (int64_t len : out) {
    TORCH_CHECK_VALUE(0 <= len && len <= T, "sequence_length: expected values in [0, T] = [0, ",
                      T, "], got ", len);
  }
  return out;
}

// The inference form of the forward (block_lstm_inference): what a caller that records no
// gradient needs, and nothing else. In: `packed`, `packed_x`, the recurrent and the input
// weight prepared by pack_recurrent_weight (or undefined), `lengths` (empty, or B per-row
// lengths <= L). Out: h [T, B, P] (zero for t >= L, and with lengths for t >= the row's
// length), the final state cs_last [B, H], h_last [B, P] (with lengths: each row's at its own
// length, the initial state for length 0). The gate activations and the cell states of the
// steps are not kept: each step writes them to scratch rows that the next step reuses (in
// cache).
struct Inference {
  at::Tensor packed, packed_x;
  std::vector<int64_t> lengths;
  at::Tensor h, cs_last, h_last;
};

// Runs the first L steps of x [T, B, I]; outputs are [T, B, H] (h: [T, B, P] with a
// projection), all seven zero for t >= L. With step_outputs (T = L = 1: the cell op) they are
// [B, H]: the op's own shape, rather than selecting step 0 of each afterwards (seven more
// Tensors, a noticeable part of a B = 1 step). With `inf`, the inference form (see Inference):
// the seven outputs are not returned.
template <class Backend, typename scalar_t>
Outputs7 lstm_forward(int64_t L, const at::Tensor& x, const at::Tensor& cs_prev,
                      const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                      const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                      const CellAttrs& attrs, bool step_outputs = false,
                      const Projection* proj = nullptr, Inference* inf = nullptr) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = cs_prev.size(1);
  const int64_t P = proj != nullptr ? proj->w_proj.size(1) : H;  // width of h
  const auto acc = acc_type(x.scalar_type());
  TORCH_INTERNAL_ASSERT(!step_outputs || (T == 1 && L == 1 && proj == nullptr));
  TORCH_INTERNAL_ASSERT(inf == nullptr || !step_outputs);

  // Inference: h over the sequence; i, f, o, ci, co into one [B, H] scratch row each, the
  // cell state into two that alternate (a step reads the previous one).
  std::array<at::Tensor, 7> out;
  at::Tensor scratch, cs_buf;
  if (inf != nullptr) {
    out[6] = at::empty({T, B, P}, x.options());
    if (L < T) out[6].narrow(0, L, T - L).zero_();
    scratch = at::empty({5, B, H}, x.options());
    cs_buf = at::empty({2, B, H}, x.options());
    inf->h = out[6];
    inf->cs_last = cs_prev.clone(at::MemoryFormat::Contiguous);
    inf->h_last = h_prev.clone(at::MemoryFormat::Contiguous);
  } else {
    for (int k = 0; k < 7; ++k) {
      at::Tensor& t = out[k];
      const int64_t n = k == 6 ? P : H;
      if (step_outputs) {
        t = at::empty({B, n}, x.options());
        continue;
      }
      t = at::empty({T, B, n}, x.options());
      if (L < T) t.narrow(0, L, T - L).zero_();
    }
  }
  if (L == 0 || B == 0) return std::make_tuple(out[0], out[1], out[2], out[3], out[4], out[5], out[6]);

  // The recurrent product, prepared once for the loop; a single step has none.
  std::optional<decltype(Backend::gate_gemm(w, B, L, at::Tensor()))> recurrent;
  if (!step_outputs) {
    recurrent.emplace(Backend::gate_gemm(w.narrow(0, I, P), B, L,
                                         inf != nullptr ? inf->packed : at::Tensor()));
  }
  const at::Tensor bias = b.to(acc).contiguous();
  at::Tensor wci_a, wcf_a, wco_a;
  if (attrs.use_peephole) {
    wci_a = wci.to(acc).contiguous();
    wcf_a = wcf.to(acc).contiguous();
    wco_a = wco.to(acc).contiguous();
  }
  // The input projection of all L steps in one GEMM; each step then adds h·Wh in place. A
  // single step (LSTMBlockCell) takes TF's own form instead, one product [x, h_prev]·w, a sum
  // over I + H (sum_matmul: the CPU adds it pairwise), where the sequence's form makes two
  // products and prepares the recurrent weight (docs/performance.md §3.7).
  const auto mm = Backend::product_type(x.scalar_type());
  const at::Tensor gates =
      (step_outputs
           ? Backend::sum_matmul(at::cat({x[0].to(mm), h_prev.to(mm)}, 1), w.to(mm))
           : Backend::input_gates(x.narrow(0, 0, L).reshape({L * B, I}).to(mm),
                                  w.narrow(0, 0, I).to(mm),
                                  inf != nullptr ? inf->packed_x : at::Tensor(),
                                  /*scratch=*/inf != nullptr))
          .view({L, B, 4 * H});
  const at::Tensor cs0 = cs_prev.contiguous();
  // Every h a step reads is [B, P] dense, of the recurrent product's operand type: the stored
  // h itself, or (float16, or bfloat16 multiplied in float32) a float copy of it, two of them
  // alternating: a step reads the previous h while (on the CPU, in the same parallel region)
  // other threads already write this step's.
  const auto h_type = recurrent ? recurrent->operand_type() : x.scalar_type();  // no later step
  const bool h_copy = h_type != x.scalar_type();
  TORCH_INTERNAL_ASSERT(!h_copy || h_type == acc);
  const at::Tensor h0 = h_prev.to(h_type).contiguous();
  at::Tensor h_acc = h_copy ? at::empty({2, B, P}, gates.options()) : at::Tensor();
  // With a projection the cell writes m = o ⊙ act(cs) (the op's dtype) to m_buf, and the
  // step's product r = m · w_proj goes to h (through r_acc, float, for float16/bfloat16).
  std::optional<std::decay_t<decltype(*recurrent)>> projection;
  at::Tensor m_buf, r_acc;
  if (proj != nullptr) {
    projection.emplace(Backend::recurrent_gemm(proj->w_proj, B, L));
    m_buf = at::empty({B, H}, x.options());
    if (x.scalar_type() != acc) r_acc = at::empty({B, P}, gates.options());
  }

  // Per-step slices by pointer arithmetic: a Tensor per slice (select), about ten a step, would
  // cost more than a small step's pointwise pass. Only the product's operands are Tensors.
  const int64_t BH = B * H;
  std::array<scalar_t*, 7> out_p;
  for (int k = 0; k < 7; ++k) out_p[k] = out[k].defined() ? out[k].data_ptr<scalar_t>() : nullptr;
  // Where step t writes output k < 6 (i, cs, f, o, ci, co) and reads the previous cell state.
  const std::array<int64_t, 6> scratch_row{0, -1, 1, 2, 3, 4};
  scalar_t* const cs_buf_p = inf != nullptr ? cs_buf.data_ptr<scalar_t>() : nullptr;
  scalar_t* const scratch_p = inf != nullptr ? scratch.data_ptr<scalar_t>() : nullptr;
  auto out_at = [&](int k, int64_t t) -> scalar_t* {
    if (inf == nullptr) return out_p[k] + t * BH;
    if (k == 1) return cs_buf_p + t % 2 * BH;
    return scratch_p + scratch_row[k] * BH;
  };
  // Step t's pointers (pointer arithmetic only, so that any thread may compute them): its
  // slice of the gates (returned) and of every output, the cell state it reads.
  const scalar_t* const cs0_p = cs0.const_data_ptr<scalar_t>();
  scalar_t* const m_p = projection ? m_buf.data_ptr<scalar_t>() : nullptr;
  acc_t* const h_acc_p = h_copy ? h_acc.data_ptr<acc_t>() : nullptr;
  acc_t* const gates_p = gates.data_ptr<acc_t>();
  auto point_step = [&](int64_t t, FwdStep<scalar_t>& s) -> acc_t* {
    s.cs_prev = t == 0 ? cs0_p : out_at(1, t - 1);
    for (int k = 0; k < 6; ++k) s.out[k] = out_at(k, t);
    s.out[6] = projection ? m_p : out_p[6] + t * BH;
    if (h_copy && !projection) s.h_acc = h_acc_p + t % 2 * BH;
    acc_t* g = gates_p + t * B * 4 * H;
    s.gates = g;
    return g;
  };
  FwdStep<scalar_t> step{H,
                         nullptr,
                         bias.const_data_ptr<acc_t>(),
                         ptr_or_null<acc_t>(wci_a),
                         ptr_or_null<acc_t>(wcf_a),
                         ptr_or_null<acc_t>(wco_a),
                         nullptr,
                         {},
                         nullptr,
                         attrs,
                         /*gates_read=*/inf == nullptr,
                         /*gates_streamed=*/inf == nullptr && !step_outputs &&
                             5 * L * B * H * static_cast<int64_t>(sizeof(scalar_t)) >=
                                 kStreamedGateBytes};
  if (step_outputs) {  // the gates hold the whole pre-activation: the cell alone
    point_step(0, step);
    Backend::cell_step(step, B);
    return std::make_tuple(out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
  }
  // The whole loop at once where the backend runs one (nothing between the steps: no
  // projection, no per-row final states, h read as stored).
  const bool whole_loop = !projection && !h_copy &&
                          (inf == nullptr || inf->lengths.empty()) &&
                          Backend::forward_loop(step, *recurrent, B, L, point_step,
                                                h0.const_data_ptr<scalar_t>(), out_p[6]);
  for (int64_t t = 0; t < L && !whole_loop; ++t) {
    at::Tensor g = gates[t];
    point_step(t, step);
    Backend::forward_step(step, *recurrent, g,
                          t == 0 ? h0 : (h_copy ? h_acc[(t - 1) % 2] : out[6][t - 1]));
    if (projection) {
      at::Tensor r = out[6][t];
      at::Tensor r_f = r_acc.defined() ? r_acc : r;  // float type
      (*projection)(r_f, m_buf.to(projection->operand_type()), /*accumulate=*/false);
      if (proj->clip > 0) r_f.clamp_(-proj->clip, proj->clip);
      if (r_acc.defined()) r.copy_(r_acc);
      if (h_copy) h_acc[t % 2].copy_(r);  // the rounded value, as without a projection
    }
    if (inf != nullptr && !inf->lengths.empty()) {  // rows whose last step this was
      for (int64_t row = 0; row < B; ++row) {
        if (inf->lengths[row] != t + 1) continue;
        inf->cs_last[row].copy_(cs_buf[t % 2][row]);
        inf->h_last[row].copy_(out[6][t][row]);
      }
    }
  }
  if (inf != nullptr) {
    if (inf->lengths.empty()) {
      inf->cs_last.copy_(cs_buf[(L - 1) % 2]);
      inf->h_last.copy_(out[6][L - 1]);
    } else if (*std::min_element(inf->lengths.begin(), inf->lengths.end()) < L) {
      // Zero each row's outputs from its length on, as TF1's fused cell masks them.
      const at::Tensor len = at::tensor(at::ArrayRef<int64_t>(inf->lengths), at::kLong)
                                 .to(x.device(), /*non_blocking=*/false);
      const at::Tensor done = at::arange(L, len.options()).unsqueeze(1) >= len.unsqueeze(0);
      out[6].narrow(0, 0, L).masked_fill_(done.unsqueeze(2), 0);
    }
  }
  return std::make_tuple(out[0], out[1], out[2], out[3], out[4], out[5], out[6]);
}

struct BackwardState {
  at::Tensor dgates;     // [L, B, 4H] acc
  at::Tensor dgates_lp;  // [L, B, 4H] of the op's dtype where the products take it, else undefined
  at::Tensor dcs_carry;  // [B, H] acc: cs_prev_grad after the loop
  at::Tensor dh_carry;   // [B, P] acc: h_prev_grad after the loop (when wh is given)
  // [7, H] double, when the Backend's steps sum as they go (Backend::sums_in_steps): rows 0-3
  // Σ over (t, b) of dgates' four column blocks (db, in the op's layout), rows 4-6 the peephole
  // products Σ di·cs_prev, Σ df·cs_prev, Σ do·cs. Undefined otherwise.
  at::Tensor sums;
  at::Tensor dr;  // [L, B, P] acc with a projection: the gradient reaching each step's r (masked)
};

constexpr double kNoMask = std::numeric_limits<double>::infinity();

// A clip bound as the clipped values were stored: the forward clips in the float type and stores
// in scalar_t, so a float16 state clipped at 0.8 reads back as float16(0.8) = 0.7998. The
// zero-gradient masks compare the stored values with this (in float16/bfloat16 a value that
// was within rounding of the bound without being clipped is masked too).
template <typename scalar_t>
double stored_clip(double clip) {
  using acc_t = at::opmath_type<scalar_t>;
  if (clip == kNoMask) return clip;
  return static_cast<double>(static_cast<acc_t>(static_cast<scalar_t>(static_cast<acc_t>(clip))));
}

// An incoming gradient read a step at a time through a pointer: `rows` + t · `step`. A gradient
// that is the same at every step (stride 0 in time: autograd's gradient of a sum, or the zeros
// that stand for an output nobody used) is its first step read again each time, instead of T
// copies made contiguous and streamed from memory; anything else is made contiguous. [B, X]
// (the cell ops, one step) is read as it is.
struct StepRows {
  at::Tensor rows;
  int64_t step;
};
inline StepRows step_rows(const at::Tensor& g) {
  if (g.dim() != 3) return {g.contiguous(), 0};
  if (g.size(0) > 1 && g.stride(0) == 0) return {g[0].contiguous(), 0};
  return {g.contiguous(), g.size(1) * g.size(2)};
}

// The reverse-time recurrence over the first L steps. act: contiguous, at least L steps of
// [B, H] each (read through pointers; [B, H] itself for L = 1); cs_grad, h_grad: the same
// shapes, any strides (step_rows). `wh` ([P, 4H],
// the op's dtype) feeds dh back through the recurrent weights; the cell-grad op passes an
// undefined wh (its h_grad is the whole dh). `fns`: the forward's activations; `mask_clip`: the
// cell clip when its gradient is zero where it clipped, else kNoMask. With `proj` (LSTMP), h
// and h_grad are [.., B, P] and `r` is the forward's h output: each step's dr = dgates_{t+1} ·
// Whᵀ + h_grad[t] is masked where r was clipped and turned into the cell's dh = dr · w_projᵀ.
template <class Backend, typename scalar_t>
BackwardState lstm_backward_recurrence(int64_t L, const at::Tensor& cs_prev,
                                       const std::array<at::Tensor, 6>& act,
                                       const at::Tensor& cs_grad, const at::Tensor& h_grad,
                                       const at::Tensor& wci_a, const at::Tensor& wcf_a,
                                       const at::Tensor& wco_a, const at::Tensor& wh,
                                       GateLayout layout, const ActivationFns& fns = {},
                                       double mask_clip = kNoMask,
                                       const Projection* proj = nullptr,
                                       const at::Tensor& r = at::Tensor()) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t B = cs_prev.size(0), H = cs_prev.size(1);
  const int64_t P = proj != nullptr ? proj->w_proj.size(1) : H;
  const auto opts = cs_prev.options().dtype(acc_type(cs_prev.scalar_type()));
  BackwardState st{at::empty({L, B, 4 * H}, opts), at::Tensor(), at::zeros({B, H}, opts),
                   at::zeros({B, P}, opts), at::Tensor(), at::Tensor()};
  const auto recurrent =
      Backend::dh_gemm(wh.defined() ? wh.t() : at::zeros({0, 0}, opts), B, L);
  const bool lp = recurrent.operand_type() != acc_type(cs_prev.scalar_type());
  TORCH_INTERNAL_ASSERT(!lp || recurrent.operand_type() == cs_prev.scalar_type());
  if (lp) st.dgates_lp = at::empty({L, B, 4 * H}, cs_prev.options());
  if (Backend::sums_in_steps(recurrent)) st.sums = at::zeros({7, H}, opts.dtype(at::kDouble));
  const at::Tensor& product_dgates = lp ? st.dgates_lp : st.dgates;  // what Whᵀ multiplies
  // With a projection the cell's dh is dm (computed per step below) and its h_grad zeros.
  std::optional<std::decay_t<decltype(recurrent)>> projection_t;
  at::Tensor dm, zero_h_grad;
  if (proj != nullptr) {
    TORCH_INTERNAL_ASSERT(wh.defined());
    projection_t.emplace(Backend::recurrent_gemm(proj->w_proj.t(), B, L));  // [P, H]
    st.dr = at::empty({L, B, P}, opts);
    dm = at::empty({B, H}, opts);
    zero_h_grad = at::zeros({B, H}, cs_prev.options());
  }
  // Slices by pointer arithmetic, as in lstm_forward; only the product's operand is a Tensor.
  const int64_t BH = B * H;
  std::array<const scalar_t*, 6> act_p;
  for (int k = 0; k < 6; ++k) act_p[k] = act[k].const_data_ptr<scalar_t>();
  const StepRows cs_grad_rows = step_rows(cs_grad), h_grad_rows = step_rows(h_grad);
  const scalar_t* cs_grad_p = cs_grad_rows.rows.const_data_ptr<scalar_t>();
  const scalar_t* h_grad_p = h_grad_rows.rows.const_data_ptr<scalar_t>();
  acc_t* dgates_p = st.dgates.data_ptr<acc_t>();
  scalar_t* dgates_lp_p = lp ? st.dgates_lp.data_ptr<scalar_t>() : nullptr;
  BwdStep<scalar_t> step{H,
                         {},
                         nullptr,
                         nullptr,
                         nullptr,
                         ptr_or_null<acc_t>(wci_a),
                         ptr_or_null<acc_t>(wcf_a),
                         ptr_or_null<acc_t>(wco_a),
                         proj != nullptr ? dm.const_data_ptr<acc_t>()
                                         : st.dh_carry.const_data_ptr<acc_t>(),
                         st.dcs_carry.data_ptr<acc_t>(),
                         nullptr,
                         nullptr,
                         layout,
                         st.sums.defined() ? st.sums.data_ptr<double>() : nullptr,
                         fns,
                         stored_clip<scalar_t>(mask_clip)};
  const scalar_t* const cs_prev_p = cs_prev.const_data_ptr<scalar_t>();
  const scalar_t* const zero_h_grad_p =
      proj != nullptr ? zero_h_grad.const_data_ptr<scalar_t>() : nullptr;
  auto point_step = [&](int64_t t, BwdStep<scalar_t>& s) {
    s.cs_prev = t == 0 ? cs_prev_p : act_p[1] + (t - 1) * BH;
    s.cs_grad = cs_grad_p + t * cs_grad_rows.step;
    s.h_grad = proj != nullptr ? zero_h_grad_p : h_grad_p + t * h_grad_rows.step;
    s.dgates = dgates_p + t * 4 * BH;
    s.dgates_lp = lp ? dgates_lp_p + t * 4 * BH : nullptr;
    for (int k = 0; k < 6; ++k) s.act[k] = act_p[k] + t * BH;
  };
  // The whole loop at once where the backend runs one (as in lstm_forward).
  const bool whole_loop = proj == nullptr && wh.defined() &&
                          Backend::backward_loop(step, recurrent, B, L, point_step, dgates_p,
                                                 st.dh_carry.data_ptr<acc_t>());
  for (int64_t t = L - 1; t >= 0 && !whole_loop; --t) {
    point_step(t, step);
    if (proj != nullptr) {
      at::Tensor dr = st.dr[t];
      if (t + 1 < L) {
        recurrent(dr, product_dgates[t + 1], /*accumulate=*/false);
      } else {
        dr.zero_();
      }
      dr.add_(h_grad[t]);  // TF's order: carry first, then the incoming gradient
      if (proj->clip > 0) dr.masked_fill_(r[t].abs() >= stored_clip<scalar_t>(proj->clip), 0);
      (*projection_t)(dm, dr.to(projection_t->operand_type()), /*accumulate=*/false);
      Backend::backward_step(step, recurrent, at::Tensor(), dm);
      continue;
    }
    Backend::backward_step(step, recurrent,
                           wh.defined() && t + 1 < L ? product_dgates[t + 1] : at::Tensor(),
                           st.dh_carry);
  }
  if (wh.defined()) Backend::h_prev_product(recurrent, st.dh_carry, product_dgates[0]);
  return st;
}

// Σ over (t, b) of di·cs_prev, df·cs_prev and do·cs, each [H]: whole-sequence reductions
// rather than per-row accumulation, so no two threads ever write the same element. This is the
// ATen form (a Backend's peephole_grads may do it in one pass; the CPU one does).
inline std::array<at::Tensor, 3> aten_peephole_grads(const at::Tensor& dgates,
                                                      const at::Tensor& cs_prev,
                                                      const at::Tensor& cs, int64_t L,
                                                      GateLayout layout, at::ScalarType out_type) {
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

// The peephole gradients of an op without peepholes (or with no step run): zeros.
inline std::array<at::Tensor, 3> zero_peephole_grads(const at::Tensor& wci, const at::Tensor& wcf,
                                                     const at::Tensor& wco) {
  return {zeros_of(wci), zeros_of(wcf), zeros_of(wco)};
}

inline std::array<at::Tensor, 3> peepholes_acc(const at::Tensor& wci, const at::Tensor& wcf,
                                        const at::Tensor& wco, bool use_peephole,
                                        at::ScalarType acc) {
  if (!use_peephole) return {};
  return {wci.to(acc).contiguous(), wcf.to(acc).contiguous(), wco.to(acc).contiguous()};
}

// The eight gradients of the block ops, then w_proj's (undefined without a projection).
using Grads9 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                          at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <class Backend, typename scalar_t>
Grads9 lstm_backward(int64_t L, const at::Tensor& x, const at::Tensor& cs_prev,
                     const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                     const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                     const std::array<at::Tensor, 6>& act, const at::Tensor& h,
                     const at::Tensor& cs_grad, const at::Tensor& h_grad, bool use_peephole,
                     GateLayout layout, const ActivationFns& fns = {},
                     double mask_clip = kNoMask, const Projection* proj = nullptr) {
  const int64_t B = x.size(1), I = x.size(2), H = cs_prev.size(1);
  const int64_t P = h_prev.size(1);  // = H without a projection
  const auto dtype = x.scalar_type();
  const auto acc = acc_type(dtype);
  const at::Tensor no_proj;
  if (L == 0 || B == 0) {
    auto p = zero_peephole_grads(wci, wcf, wco);
    return {zeros_of(x), zeros_of(cs_prev), zeros_of(h_prev), zeros_of(w), p[0], p[1], p[2],
            zeros_of(b), proj != nullptr ? zeros_of(proj->w_proj) : no_proj};
  }
  const auto peep = peepholes_acc(wci, wcf, wco, use_peephole, acc);
  BackwardState st = lstm_backward_recurrence<Backend, scalar_t>(
      L, cs_prev, act, cs_grad, h_grad, peep[0], peep[1], peep[2], w.narrow(0, I, P), layout,
      fns, mask_clip, proj, h);

  // dx, dW, db for all steps at once, the products on dgates in the recurrence's operand type.
  const at::Tensor dg = st.dgates.view({L * B, 4 * H});
  const at::Tensor dg_mm = st.dgates_lp.defined() ? st.dgates_lp.view({L * B, 4 * H}) : dg;
  const auto mm = dg_mm.scalar_type();
  const at::Tensor dx = Backend::sum_matmul(dg_mm, w.narrow(0, 0, I).to(mm).t()).view({L, B, I});
  at::Tensor x_grad;
  if (L == x.size(0) && dtype == acc) {  // the product is the output
    x_grad = dx;
  } else {
    x_grad = at::empty(x.sizes(), x.options());
    x_grad.narrow(0, 0, L).copy_(dx);
    x_grad.narrow(0, L, x.size(0) - L).zero_();
  }
  // dW = [x_t, h_{t-1}]ᵀ · dgates over all steps: one GEMM on the concatenated inputs, built
  // transposed ([I + P, L·B], contiguous) so that the GEMM's left operand is plain row-major
  // (oneDNN is markedly slower with a transposed view there).
  at::Tensor xh_t = at::empty({I + P, L * B}, w.options().dtype(mm));
  at::Tensor x_t = xh_t.narrow(0, 0, I), h_before_t = xh_t.narrow(0, I, P);
  Backend::transpose_into(x_t, x.narrow(0, 0, L).reshape({L * B, I}));
  at::Tensor first = h_before_t.narrow(1, 0, B);
  Backend::transpose_into(first, h_prev);
  if (L > 1) {
    at::Tensor rest = h_before_t.narrow(1, B, (L - 1) * B);
    Backend::transpose_into(rest, h.narrow(0, 0, L - 1).reshape({(L - 1) * B, P}));
  }
  const at::Tensor w_grad = Backend::sum_matmul(xh_t, dg_mm);
  std::array<at::Tensor, 3> p;
  if (!use_peephole) {
    p = zero_peephole_grads(wci, wcf, wco);
  } else if (st.sums.defined()) {
    // Copies: op outputs must not share storage (a float64 .to() would return a view).
    for (int k = 0; k < 3; ++k) p[k] = st.sums[4 + k].to(dtype, false, /*copy=*/true);
  } else {
    p = Backend::peephole_grads(st.dgates, cs_prev, act[1], L, layout, dtype);
  }
  const at::Tensor db =
      st.sums.defined() ? st.sums.narrow(0, 0, 4).reshape({4 * H}).to(dtype, false, true)
                        : dg.sum(0).to(dtype);
  at::Tensor w_proj_grad;
  if (proj != nullptr) {
    // dW_proj = Σ_t m_tᵀ · dr_t, one product over the sequence; m = o ⊙ act(cs) from the
    // stored o and co (exactly the forward's m where the dtype is the float type).
    const at::Tensor m = (act[3].narrow(0, 0, L).to(acc) * act[5].narrow(0, 0, L).to(acc))
                             .reshape({L * B, H});
    at::Tensor m_t = at::empty({H, L * B}, m.options());
    Backend::transpose_into(m_t, m);
    w_proj_grad = Backend::sum_matmul(m_t, st.dr.view({L * B, P})).to(dtype);
  }
  return {x_grad,
          st.dcs_carry.to(dtype),
          st.dh_carry.to(dtype),
          w_grad.to(dtype),
          p[0],
          p[1],
          p[2],
          db,
          w_proj_grad};
}

// ---------------------------------------------------------------------------------------------
// Op entry points: validate, guard the device, dispatch on dtype.

template <class Backend>
struct Ops {
  static Outputs7 forward_entry(const at::Tensor& seq_len_max, const at::Tensor& x, const at::Tensor& cs_prev,
                         const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                         const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                         const CellAttrs& attrs) {
    const LSTMSizes s =
        check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, attrs.use_peephole, true);
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm",
                                           [&] {
                                             return lstm_forward<Backend, scalar_t>(L, x, cs_prev, h_prev, w,
                                                                           wci, wcf, wco, b, attrs);
                                           });
  }

  static Outputs7 block_lstm(const at::Tensor& seq_len_max, const at::Tensor& x,
                          const at::Tensor& cs_prev, const at::Tensor& h_prev, const at::Tensor& w,
                          const at::Tensor& wci, const at::Tensor& wcf, const at::Tensor& wco,
                          const at::Tensor& b, double forget_bias, double cell_clip,
                          bool use_peephole) {
    return forward_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                         {forget_bias, cell_clip, use_peephole, kICFO});
  }

  static Outputs7 block_lstm_v2(const at::Tensor& seq_len_max, const at::Tensor& x,
                             const at::Tensor& cs_prev, const at::Tensor& h_prev,
                             const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                             const at::Tensor& wco, const at::Tensor& b, double cell_clip,
                             bool use_peephole) {
    return forward_entry(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                         {0.0, cell_clip, use_peephole, kIFCO});
  }

  static Outputs7 lstm_block_cell(const at::Tensor& x, const at::Tensor& cs_prev,
                               const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci,
                               const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
                               double forget_bias, double cell_clip, bool use_peephole) {
    check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, false);
    const c10::DeviceGuard guard(x.device());
    const CellAttrs attrs{forget_bias, cell_clip, use_peephole, kICFO};
    return AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "lstm_block_cell", [&] {
          return lstm_forward<Backend, scalar_t>(1, x.unsqueeze(0), cs_prev, h_prev, w, wci, wcf,
                                                 wco, b, attrs, /*step_outputs=*/true);
        });
  }

  static Grads8 grad_entry(const at::Tensor& seq_len_max, const at::Tensor& x, const at::Tensor& cs_prev,
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
    const c10::DeviceGuard guard(x.device());
    const std::array<at::Tensor, 6> act{i.contiguous(),  cs.contiguous(), f.contiguous(),
                                        o.contiguous(),  ci.contiguous(), co.contiguous()};
    const Grads9 g = AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm_grad", [&] {
          return lstm_backward<Backend, scalar_t>(L, x, cs_prev.contiguous(), h_prev, w, wci, wcf, wco, b,
                                         act, h, cs_grad, h_grad, use_peephole, layout);
        });
    return {std::get<0>(g), std::get<1>(g), std::get<2>(g), std::get<3>(g),
            std::get<4>(g), std::get<5>(g), std::get<6>(g), std::get<7>(g)};
  }

  // block_lstm_ex: BlockLSTM with the activation / clip-gradient variants and the projection
  // (see the schema in csrc/torch_lstm_grad.cpp).
  static Outputs7 block_lstm_ex(const at::Tensor& seq_len_max, const at::Tensor& x,
                                const at::Tensor& cs_prev, const at::Tensor& h_prev,
                                const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                                const at::Tensor& wco, const at::Tensor& b,
                                const std::optional<at::Tensor>& w_proj, double forget_bias,
                                double cell_clip, double proj_clip, bool use_peephole,
                                c10::string_view gate_order, c10::string_view gate_activation,
                                c10::string_view activation, c10::string_view clip_gradient) {
    const LSTMExAttrs a =
        check_lstm_ex_attrs(gate_order, gate_activation, activation, clip_gradient);
    const LSTMSizes s = check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                             use_peephole);
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    CellAttrs attrs{forget_bias, cell_clip, use_peephole, a.order == 0 ? kICFO : kIFCO,
                    make_activation_fns(static_cast<GateFn>(a.gate), static_cast<CellFn>(a.cell)),
                    a.zero_clip_grad};
    const Projection proj{w_proj.has_value() ? *w_proj : at::Tensor(), proj_clip};
    return AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm_ex", [&] {
          return lstm_forward<Backend, scalar_t>(L, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                                                 attrs, false,
                                                 w_proj.has_value() ? &proj : nullptr);
        });
  }

  // block_lstm_inference (schema in csrc/torch_lstm_grad.cpp): block_lstm_ex's forward for a
  // caller that records no gradient (lstm_forward's Inference form).
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> block_lstm_inference(
      const at::Tensor& x, const at::Tensor& cs_prev, const at::Tensor& h_prev,
      const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf, const at::Tensor& wco,
      const at::Tensor& b, const std::optional<at::Tensor>& w_proj,
      const std::optional<at::Tensor>& packed_w, const std::optional<at::Tensor>& sequence_length,
      double forget_bias, double cell_clip, double proj_clip, bool use_peephole,
      c10::string_view gate_order, c10::string_view gate_activation,
      c10::string_view activation, const std::optional<at::Tensor>& packed_x) {
    const LSTMExAttrs a =
        check_lstm_ex_attrs(gate_order, gate_activation, activation, "straight_through");
    const LSTMSizes s = check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                             use_peephole);
    const int64_t P = h_prev.size(1);
    if (packed_w.has_value()) check_packed_weight(*packed_w, w, P, s.H);
    if (packed_x.has_value()) check_packed_input_weight(*packed_x, w, s.I, s.H);
    Inference inf;
    if (packed_w.has_value()) inf.packed = *packed_w;
    if (packed_x.has_value()) inf.packed_x = *packed_x;
    int64_t L = s.T;
    if (sequence_length.has_value()) {
      inf.lengths = check_sequence_length(*sequence_length, s.B, s.T);
      L = s.B > 0 ? *std::max_element(inf.lengths.begin(), inf.lengths.end()) : 0;
    }
    const c10::DeviceGuard guard(x.device());
    const CellAttrs attrs{forget_bias, cell_clip, use_peephole, a.order == 0 ? kICFO : kIFCO,
                          make_activation_fns(static_cast<GateFn>(a.gate),
                                              static_cast<CellFn>(a.cell))};
    const Projection proj{w_proj.has_value() ? *w_proj : at::Tensor(), proj_clip};
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(),
                                    "block_lstm_inference", [&] {
      lstm_forward<Backend, scalar_t>(L, x, cs_prev, h_prev, w, wci, wcf, wco, b, attrs, false,
                                      w_proj.has_value() ? &proj : nullptr, &inf);
    });
    return {inf.h, inf.cs_last, inf.h_last};
  }

  static Grads9 block_lstm_ex_grad(
      const at::Tensor& seq_len_max, const at::Tensor& x, const at::Tensor& cs_prev,
      const at::Tensor& h_prev, const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
      const at::Tensor& wco, const at::Tensor& b, const std::optional<at::Tensor>& w_proj,
      const at::Tensor& i, const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
      const at::Tensor& ci, const at::Tensor& co, const at::Tensor& h, const at::Tensor& cs_grad,
      const at::Tensor& h_grad, double cell_clip, double proj_clip, bool use_peephole,
      c10::string_view gate_order, c10::string_view gate_activation, c10::string_view activation,
      c10::string_view clip_gradient) {
    const LSTMExAttrs a =
        check_lstm_ex_attrs(gate_order, gate_activation, activation, clip_gradient);
    const LSTMSizes s = check_lstm_ex_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, w_proj,
                                             use_peephole);
    check_lstm_activations({{&i, "i"}, {&cs, "cs"}, {&f, "f"}, {&o, "o"}, {&ci, "ci"}, {&co, "co"},
                            {&cs_grad, "cs_grad"}},
                           x, s, true);
    const int64_t P = h_prev.size(1);
    for (auto [t, name] : {std::pair{&h, "h"}, {&h_grad, "h_grad"}}) {
      check_like(*t, name, x);
      check_shape(*t, name, {s.T, s.B, P}, w_proj.has_value() ? "[T, B, P]" : "[T, B, H]");
    }
    const int64_t L = check_seq_len_max(seq_len_max, s.T);
    const c10::DeviceGuard guard(x.device());
    const std::array<at::Tensor, 6> act{i.contiguous(),  cs.contiguous(), f.contiguous(),
                                        o.contiguous(),  ci.contiguous(), co.contiguous()};
    const ActivationFns fns =
        make_activation_fns(static_cast<GateFn>(a.gate), static_cast<CellFn>(a.cell));
    const double mask_clip = a.zero_clip_grad && cell_clip > 0 ? cell_clip : kNoMask;
    const Projection proj{w_proj.has_value() ? w_proj->contiguous() : at::Tensor(), proj_clip};
    Grads9 g = AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, x.scalar_type(), "block_lstm_ex_grad", [&] {
          return lstm_backward<Backend, scalar_t>(
              L, x, cs_prev.contiguous(), h_prev, w, wci, wcf, wco, b, act, h.contiguous(),
              cs_grad, h_grad, use_peephole, a.order == 0 ? kICFO : kIFCO,
              fns, mask_clip, w_proj.has_value() ? &proj : nullptr);
        });
    // No projection: an empty w_proj_grad (the schema's outputs are all Tensors).
    if (!w_proj.has_value()) std::get<8>(g) = at::empty({0}, x.options());
    return g;
  }

  static Grads8 block_lstm_grad(const at::Tensor& seq_len_max, const at::Tensor& x,
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

  static Grads8 block_lstm_grad_v2(const at::Tensor& seq_len_max, const at::Tensor& x,
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

  static std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> lstm_block_cell_grad(
      const at::Tensor& x, const at::Tensor& cs_prev, const at::Tensor& h_prev, const at::Tensor& w,
      const at::Tensor& wci, const at::Tensor& wcf, const at::Tensor& wco, const at::Tensor& b,
      const at::Tensor& i, const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
      const at::Tensor& ci, const at::Tensor& co, const at::Tensor& cs_grad,
      const at::Tensor& h_grad, bool use_peephole) {
    const LSTMSizes s = check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, false);
    check_lstm_activations({{&i, "i"}, {&cs, "cs"}, {&f, "f"}, {&o, "o"}, {&ci, "ci"}, {&co, "co"},
                            {&cs_grad, "cs_grad"}, {&h_grad, "h_grad"}},
                           x, s, false);
    const c10::DeviceGuard guard(x.device());
    const auto dtype = x.scalar_type();
    const auto acc = acc_type(dtype);
    // The recurrence reads one step's [B, H] slices through pointers: no time dimension needed.
    const std::array<at::Tensor, 6> act{i.contiguous(),  cs.contiguous(), f.contiguous(),
                                        o.contiguous(),  ci.contiguous(), co.contiguous()};
    const at::Tensor csp = cs_prev.contiguous();
    const auto peep = peepholes_acc(wci, wcf, wco, use_peephole, acc);
    BackwardState st = AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, dtype, "lstm_block_cell_grad", [&] {
          return lstm_backward_recurrence<Backend, scalar_t>(1, csp, act, cs_grad, h_grad,
                                                             peep[0], peep[1], peep[2],
                                                             at::Tensor(), kICFO);
        });
    std::array<at::Tensor, 3> p =
        use_peephole
            ? Backend::peephole_grads(st.dgates, csp, act[1].unsqueeze(0), 1, kICFO, dtype)
            : zero_peephole_grads(wci, wcf, wco);
    return {st.dcs_carry.to(dtype), st.dgates[0].to(dtype), p[0], p[1], p[2]};
  }
};

// Registers the six LSTM ops for one dispatch key with Backend's pointwise passes.
template <class Backend>
void register_ops(torch::Library& m) {
  m.impl("lstm_block_cell", &Ops<Backend>::lstm_block_cell);
  m.impl("lstm_block_cell_grad", &Ops<Backend>::lstm_block_cell_grad);
  m.impl("block_lstm", &Ops<Backend>::block_lstm);
  m.impl("block_lstm_v2", &Ops<Backend>::block_lstm_v2);
  m.impl("block_lstm_grad", &Ops<Backend>::block_lstm_grad);
  m.impl("block_lstm_grad_v2", &Ops<Backend>::block_lstm_grad_v2);
}

// Registers block_lstm_ex(_grad) and block_lstm_inference for one dispatch key (their Backend
// selects every variant).
template <class Backend>
void register_ex_ops(torch::Library& m) {
  m.impl("block_lstm_ex", &Ops<Backend>::block_lstm_ex);
  m.impl("block_lstm_ex_grad", &Ops<Backend>::block_lstm_ex_grad);
  m.impl("block_lstm_inference", &Ops<Backend>::block_lstm_inference);
}

}  // namespace lstm_block
}  // namespace torch_lstm_grad
