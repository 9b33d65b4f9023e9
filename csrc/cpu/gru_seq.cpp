// CPU kernels of keras_gru(_grad) (drivers and cell math: csrc/gru_seq.h): each step's pointwise
// passes as loops over rows and units, instantiated per activation variant (gate: sigmoid |
// hard sigmoid; cell: tanh | relu/linear, the constants loop invariants) and multiversioned for
// AVX-512 / AVX2 (activations.h); the recurrent products on the prepared weights of
// cpu::RecurrentGemm, the whole-sequence ones on oneDNN (cpu::matmul). reset_after's time loops,
// forward and backward, run in one parallel region each where the products take the gate
// panels or brgemm's blocks, each thread's part of a step's product then its cells
// (forward_loop, backward_loop); elsewhere the steps fork and join for the product and again
// for the cells, parallelised over the batch.

#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstring>
#include <type_traits>

#include "../bool_dispatch.h"
#include "../gru_seq.h"
#include "activations.h"
#include "gemm.h"

namespace torch_lstm_grad {
namespace {

using gru_seq::GruLoop;
using gru_seq::GruStep;
using lstm_block::ActParams;

using cpu::CpuAct;

// reset_after: the step's cells on the product h·R in s.inner. Rows [b0, b1), units [j0, j1).
template <typename scalar_t, class Gate, class Cell>
struct ForwardAfterRowsKernel {
  // float32 sigmoid/tanh: eight units at a time on activations.h's f32x8 (faster on AVX2 than
  // GCC's vectoriser of the scalar loop, which leaves the activations' divisions one at a
  // time), the last units of a row through the same code in a zero-padded vector: the compiler
  // may contract h = z·h_prev + (1 − z)·hh into a fused multiply-add one way in the scalar loop
  // and the other in the vector one, and every unit of a row is rounded alike.
  static constexpr bool kVectorCell = std::is_same_v<scalar_t, float> &&
                                      std::is_same_v<Gate, lstm_block::SigmoidGate<CpuAct>> &&
                                      std::is_same_v<Cell, lstm_block::TanhCell<CpuAct>>;
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in;
    const acc_t* __restrict br = s.b_rec;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xp = s.xp + b * 3 * H;
      const acc_t* __restrict in = s.inner + b * 3 * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict r = s.r + b * H;
      scalar_t* __restrict hh = s.hh + b * H;
      scalar_t* __restrict hr = s.hr + b * H;
      scalar_t* __restrict h = s.h + b * H;
      if constexpr (kVectorCell) {
        using cpu::f32x8;
        using V = gru_seq::GruCell<Gate, Cell, f32x8>;
        // Units [j, j + w) (w <= 8), through lanes 0 .. w - 1.
        const auto units = [&](int64_t j, int64_t w) __attribute__((always_inline)) {
          const auto ld = [&](const float* q) __attribute__((always_inline)) {
            f32x8 v{};
            std::memcpy(&v, q + j, w * sizeof(float));
            return v;
          };
          const auto st = [&](float* q, f32x8 v) __attribute__((always_inline)) {
            std::memcpy(q + j, &v, w * sizeof(float));
          };
          const auto o = V::after(ld(xp) + ld(bi), ld(xp + H) + ld(bi + H),
                                  ld(xp + 2 * H) + ld(bi + 2 * H), ld(in) + ld(br),
                                  ld(in + H) + ld(br + H), ld(in + 2 * H) + ld(br + 2 * H),
                                  ld(hp), lstm_block::ActParams<f32x8>{});
          st(z, o.z), st(r, o.r), st(hh, o.hh), st(hr, o.hr), st(h, o.h);
        };
        int64_t j = j0;
        for (; j + 8 <= j1; j += 8) units(j, 8);
        if (j < j1) units(j, j1 - j);
      } else {
        TLG_NO_ALIAS_LOOP
        for (int64_t j = j0; j < j1; ++j) {
          const auto o =
              C::after(xp[j] + bi[j], xp[H + j] + bi[H + j], xp[2 * H + j] + bi[2 * H + j],
                       in[j] + br[j], in[H + j] + br[H + j], in[2 * H + j] + br[2 * H + j],
                       static_cast<acc_t>(hp[j]), p);
          z[j] = static_cast<scalar_t>(o.z);
          r[j] = static_cast<scalar_t>(o.r);
          hh[j] = static_cast<scalar_t>(o.hh);
          hr[j] = static_cast<scalar_t>(o.hr);
          h[j] = static_cast<scalar_t>(o.h);
        }
        if (s.h_acc != nullptr) {  // float16/bfloat16: the float copy the next product reads
          for (int64_t j = j0; j < j1; ++j) s.h_acc[b * H + j] = static_cast<acc_t>(h[j]);
        }
      }
    }
  }
};

// reset_after=False, before the candidate's product: z, r and r ⊙ h_prev.
template <typename scalar_t, class Gate, class Cell>
struct ForwardGatesRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xp = s.xp + b * 3 * H;
      const acc_t* __restrict in = s.inner + b * 2 * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict r = s.r + b * H;
      scalar_t* __restrict hr = s.hr + b * H;
      acc_t* __restrict rh = s.rh + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const acc_t zv = Gate::f((xp[j] + bi[j]) + in[j], p);
        const acc_t rv = Gate::f((xp[H + j] + bi[H + j]) + in[H + j], p);
        const acc_t rhv = rv * static_cast<acc_t>(hp[j]);
        z[j] = static_cast<scalar_t>(zv);
        r[j] = static_cast<scalar_t>(rv);
        hr[j] = static_cast<scalar_t>(rhv);
        rh[j] = rhv;
      }
    }
  }
};

// reset_after=False, after it: hh = act(xp_h + (r ⊙ h)·R_h), h.
template <typename scalar_t, class Gate, class Cell>
struct ForwardCandidateRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in + 2 * H;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xh = s.xp + b * 3 * H + 2 * H;
      const acc_t* __restrict cand = s.cand + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict hh = s.hh + b * H;
      scalar_t* __restrict h = s.h + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const acc_t hhv = Cell::f((xh[j] + bi[j]) + cand[j], p);
        const acc_t zv = static_cast<acc_t>(z[j]);
        hh[j] = static_cast<scalar_t>(hhv);
        h[j] = static_cast<scalar_t>(zv * static_cast<acc_t>(hp[j]) + (1 - zv) * hhv);
      }
      if (s.h_acc != nullptr) {
        for (int64_t j = j0; j < j1; ++j) s.h_acc[b * H + j] = static_cast<acc_t>(h[j]);
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardAfterRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict z = s.z + b * H;
      const scalar_t* __restrict r = s.r + b * H;
      const scalar_t* __restrict hh = s.hh + b * H;
      const scalar_t* __restrict hr = s.hr + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict hg = s.h_grad + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 3 * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const acc_t g = dh[j] + static_cast<acc_t>(hg[j]);  // carry first, then the incoming
        const acc_t zv = static_cast<acc_t>(z[j]), rv = static_cast<acc_t>(r[j]);
        acc_t dz, dhh;
        C::gate_grads(g, zv, static_cast<acc_t>(hh[j]), static_cast<acc_t>(hp[j]), p, dz, dhh);
        const acc_t dr = Gate::df(rv, p) * (dhh * static_cast<acc_t>(hr[j]));
        dx[j] = dz;
        dx[H + j] = dr;
        dx[2 * H + j] = dhh;
        di[j] = dz;
        di[H + j] = dr;
        di[2 * H + j] = dhh * rv;
        dh[j] = g * zv;
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardGatesRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict z = s.z + b * H;
      const scalar_t* __restrict hh = s.hh + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict hg = s.h_grad + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 2 * H;
      acc_t* __restrict dc = s.d_cand + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const acc_t g = dh[j] + static_cast<acc_t>(hg[j]);
        const acc_t zv = static_cast<acc_t>(z[j]);
        acc_t dz, dhh;
        C::gate_grads(g, zv, static_cast<acc_t>(hh[j]), static_cast<acc_t>(hp[j]), p, dz, dhh);
        dx[j] = dz;
        dx[2 * H + j] = dhh;
        di[j] = dz;
        dc[j] = dhh;
        dh[j] = g * zv;
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardResetRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0,
                              int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict r = s.r + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const acc_t* __restrict drh = s.d_rh + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 2 * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const acc_t rv = static_cast<acc_t>(r[j]);
        const acc_t dr = Gate::df(rv, p) * (drh[j] * static_cast<acc_t>(hp[j]));
        dx[H + j] = dr;
        di[H + j] = dr;
        dh[j] = dh[j] + drh[j] * rv;
      }
    }
  }
};

template <typename scalar_t>
using Rows = void (*)(const GruStep<scalar_t>&, int64_t, int64_t, int64_t, int64_t);

// A pass's rows b0 .. b1, units j0 .. j1: Kernel::body compiled for the instruction set
// cpu::isa() chose.
template <template <typename, class, class> class Kernel, typename scalar_t, class Gate,
          class Cell>
void rows_on_isa(const GruStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0, int64_t j1) {
  cpu::dispatch<Kernel<scalar_t, Gate, Cell>>(s, b0, b1, j0, j1);
}

using Sigmoid = lstm_block::SigmoidGate<CpuAct>;
using Hard = lstm_block::HardSigmoidGate;
using Tanh = lstm_block::TanhCell<CpuAct>;
using Rect = lstm_block::RectCell;

// The pass `Kernel` for the variant of `fns`. The backward passes need only the activations'
// derivatives, which cost little: one loop for every variant (AnyGate, AnyCell blend them,
// lstm_block.h), where a loop per variant would quadruple them.
template <template <typename, class, class> class Kernel, bool kAnyVariant, typename scalar_t>
Rows<scalar_t> rows_for(const lstm_block::ActivationFns& fns) {
  if constexpr (kAnyVariant) {
    return &rows_on_isa<Kernel, scalar_t, lstm_block::AnyGate, lstm_block::AnyCell>;
  } else {
    return dispatch_bools(
        [](auto kHard, auto kTanh) {
          using Gate = std::conditional_t<kHard, Hard, Sigmoid>;
          using Cell = std::conditional_t<kTanh, Tanh, Rect>;
          return &rows_on_isa<Kernel, scalar_t, Gate, Cell>;
        },
        fns.gate != lstm_block::GateFn::kSigmoid, fns.cell == lstm_block::CellFn::kTanh);
  }
}

// The pass `Kernel` run over the B rows of a step, every unit.
template <template <typename, class, class> class Kernel, bool kAnyVariant = false,
          typename scalar_t>
void run(const GruStep<scalar_t>& s, int64_t B) {
  const Rows<scalar_t> rows = rows_for<Kernel, kAnyVariant, scalar_t>(s.fns);
  at::parallel_for(0, B, cpu::row_grain(s.H),
                   [&](int64_t b0, int64_t b1) { rows(s, b0, b1, 0, s.H); });
}

struct CpuGruBackend {
  static cpu::RecurrentGemm recurrent_gemm(const at::Tensor& b, int64_t m, int64_t steps) {
    return {b, m, steps, /*allow_blocks=*/true};
  }
  // reset_after's loops in one parallel region each where the products run on the panels or
  // brgemm's blocks (forward_loop, backward_loop); otherwise the driver's steps.
  static constexpr bool kWholeLoops = true;

  // Step t's pointers in a forward loop (b_rec null without reset_after; the caller sets the
  // products' buffers: inner, and cand and rh without reset_after).
  static GruStep<float> forward_step_of(const GruLoop<float>& loop, int64_t t) {
    const int64_t BH = loop.B * loop.H, gate_at = t * loop.gate_step;
    GruStep<float> s{};
    s.H = loop.H, s.fns = loop.fns, s.b_in = loop.b_in, s.b_rec = loop.b_rec;
    s.xp = loop.xp + t * 3 * BH;
    s.h_prev = t == 0 ? loop.h0 : loop.h + (t - 1) * BH;
    s.z = loop.z + gate_at, s.r = loop.r + gate_at, s.hh = loop.hh + gate_at;
    s.hr = loop.hr + gate_at, s.h = loop.h + t * BH;
    return s;
  }

  // Step t's pointers in a backward loop, d_inner G·H wide (3 with reset_after, 2 without).
  static GruStep<float> backward_step_of(const GruLoop<float>& loop, int64_t t, int64_t G) {
    const int64_t BH = loop.B * loop.H;
    GruStep<float> s{};
    s.H = loop.H, s.fns = loop.fns;
    s.h_prev = t == 0 ? loop.h0 : loop.h + (t - 1) * BH;
    s.z = loop.z + t * BH, s.r = loop.r + t * BH, s.hh = loop.hh + t * BH;
    s.hr = loop.hr + t * BH;
    s.h_grad = loop.h_grad + t * BH;
    s.dh = loop.dh;
    s.d_xp = loop.d_xp + t * 3 * BH;
    s.d_inner = loop.d_inner + t * G * BH;
    return s;
  }

  // All L steps of a reset_after forward in one parallel region, float32, where the recurrent
  // product takes the panels (B <= 64) or brgemm's blocks: by rows where the panels fit half a
  // core's L2 (gemm.h's panel_row_blocks: no barrier between the steps), else by units with a
  // barrier after each step (for_steps_column_blocks), where the steps' path forks and joins
  // twice a step (the product, then the cells). Each thread's part of inner = h·R, then the
  // cells of its rows and units while they are in cache. The same sums as the steps' path
  // (panel_gemm's are brgemm's, small_batch.h), so the same bits (docs/performance.md §3.18).
  template <typename scalar_t>
  static bool forward_loop(const GruLoop<scalar_t>& loop) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (!loop.reset_after) return forward_loop_before(loop);
      const int64_t L = loop.L, B = loop.B, H = loop.H, BH = B * H;
      const at::Tensor R = at::from_blob(const_cast<float*>(loop.R), {H, 3 * H}, at::kFloat);
      if (!cpu::RecurrentGemm::fused_form(R, B, L, /*panel_gates=*/3)) return false;
      const cpu::RecurrentGemm rec{R, B, L, /*allow_blocks=*/true, /*panel_gates=*/3};
      const Rows<float> rows = rows_for<ForwardAfterRowsKernel, false, float>(loop.fns);
      const at::Tensor inner = at::empty({B, 3 * H}, at::kFloat);
      float* const in = inner.data_ptr<float>();
      // Step t's rows [b0, b1), units [j0, j0 + n).
      const auto step = [&](int64_t t, int64_t b0, int64_t b1, int64_t j0, int64_t n) {
        GruStep<float> s = forward_step_of(loop, t);
        s.inner = in;
        rec.units(b1 - b0, 3, s.h_prev + b0 * H, H, in + b0 * 3 * H, 3 * H, j0, n,
                  /*accumulate=*/false);
        rows(s, b0, b1, j0, j0 + n);
      };
      if (const int64_t blocks = rec.panels() ? cpu::panel_row_blocks(B, H, H, 3) : 0) {
        cpu::for_steps_row_blocks(L, B, blocks, [&](int64_t t, int64_t, int64_t b0, int64_t b1) {
          step(t, b0, b1, 0, H);
        });
      } else {
        cpu::for_steps_column_blocks(L, H, BH * 3 * H, [&](int64_t t, int64_t j0, int64_t n) {
          step(t, 0, B, j0, n);
        });
      }
      return true;
    }
    (void)loop;
    return false;
  }

  // The reverse steps of a reset_after backward in one parallel region, as forward_loop: the
  // product of step t + 1, dh += d_inner[t + 1]·Rᵀ (the panels of Rᵀ, or the blocks), for the
  // thread's rows and units, then step t's cells on them; after step 0 the same product of
  // d_inner[0] gives h_prev's gradient. The steps' path's sums, in its order.
  template <typename scalar_t>
  static bool backward_loop(const GruLoop<scalar_t>& loop) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (!loop.reset_after) return backward_loop_before(loop);
      const int64_t L = loop.L, B = loop.B, H = loop.H, BH = B * H;
      const at::Tensor R = at::from_blob(const_cast<float*>(loop.R), {H, 3 * H}, at::kFloat);
      if (!cpu::RecurrentGemm::fused_form(R.t(), B, L, /*panel_gates=*/1)) return false;
      const cpu::RecurrentGemm rec{R.t(), B, L, /*allow_blocks=*/true, /*panel_gates=*/1};
      const Rows<float> rows = rows_for<BackwardAfterRowsKernel, true, float>(loop.fns);
      // Reverse step k (t = L - 1 - k; k = L: h_prev's product alone).
      const auto step = [&](int64_t k, int64_t b0, int64_t b1, int64_t j0, int64_t n) {
        const int64_t t = L - 1 - k;
        if (t + 1 < L) {
          rec.units(b1 - b0, 1, loop.d_inner + ((t + 1) * B + b0) * 3 * H, 3 * H,
                    loop.dh + b0 * H, H, j0, n, /*accumulate=*/true);
        }
        if (t < 0) return;
        rows(backward_step_of(loop, t, 3), b0, b1, j0, j0 + n);
      };
      if (const int64_t blocks = rec.panels() ? cpu::panel_row_blocks(B, 3 * H, H, 1) : 0) {
        cpu::for_steps_row_blocks(L + 1, B, blocks,
                                  [&](int64_t k, int64_t, int64_t b0, int64_t b1) {
                                    step(k, b0, b1, 0, H);
                                  });
      } else {
        cpu::for_steps_column_blocks(L + 1, H, BH * 3 * H, [&](int64_t k, int64_t j0, int64_t n) {
          step(k, 0, B, j0, n);
        });
      }
      return true;
    }
    (void)loop;
    return false;
  }
  static at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) { return cpu::matmul(a, b); }
  static void transpose_into(at::Tensor& dst, const at::Tensor& src) {
    cpu::transpose_into(dst, src);
  }

  // reset_after=False's loops (two products a step, the candidate's on r ⊙ h_prev of the whole
  // row, which a units split would need two barriers a step for): by rows only, where the
  // panels of both products fit half a core's L2, or on the calling thread where the steps
  // would not use a second one; else the steps. Each row block runs its rows' products and
  // passes of every step in the steps' order, so the same sums (docs/performance.md §3.18).
  // Returns the row blocks, 0 for the steps; kMinBlockSplitMacs and row_grain are the steps'
  // own thresholds for sharing a product and a pass.
  static int64_t before_row_blocks(bool panels, int64_t B, int64_t K, int64_t H, int64_t G) {
    if (const int64_t blocks = panels ? cpu::panel_row_blocks(B, K, H, G) : 0) return blocks;
    const bool one_thread = at::get_num_threads() == 1 || at::in_parallel_region() ||
                            (B * K * G * H < cpu::kMinBlockSplitMacs && B <= cpu::row_grain(H));
    return one_thread ? 1 : 0;
  }

  static bool forward_loop_before(const GruLoop<float>& loop) {
    const int64_t L = loop.L, B = loop.B, H = loop.H, BH = B * H;
    const at::Tensor R = at::from_blob(const_cast<float*>(loop.R), {H, 3 * H}, at::kFloat);
    const at::Tensor R_zr = R.narrow(1, 0, 2 * H), R_h = R.narrow(1, 2 * H, H);
    if (!cpu::RecurrentGemm::fused_form(R_zr, B, L, /*panel_gates=*/2) ||
        !cpu::RecurrentGemm::fused_form(R_h, B, L, /*panel_gates=*/1)) {
      return false;
    }
    // Both weights take the same form (the same rows and steps): decided before packing one.
    const int64_t blocks = before_row_blocks(
        cpu::RecurrentGemm::panels_form(R_zr, B, L, /*panel_gates=*/2), B, H, H, 3);
    if (blocks == 0) return false;
    const cpu::RecurrentGemm zr{R_zr, B, L, /*allow_blocks=*/true, /*panel_gates=*/2};
    const cpu::RecurrentGemm hc{R_h, B, L, /*allow_blocks=*/true, /*panel_gates=*/1};
    const Rows<float> gates = rows_for<ForwardGatesRowsKernel, false, float>(loop.fns);
    const Rows<float> candidate = rows_for<ForwardCandidateRowsKernel, false, float>(loop.fns);
    const at::Tensor scratch = at::empty({4, B, H}, at::kFloat);  // inner (two), cand, rh
    float* const inner = scratch.data_ptr<float>();
    float* const cand = inner + 2 * BH;
    float* const rh = cand + BH;
    cpu::for_steps_row_blocks(L, B, blocks, [&](int64_t t, int64_t, int64_t b0, int64_t b1) {
      GruStep<float> s = forward_step_of(loop, t);
      s.inner = inner, s.cand = cand, s.rh = rh;
      const int64_t m = b1 - b0;
      zr.units(m, 2, s.h_prev + b0 * H, H, inner + b0 * 2 * H, 2 * H, 0, H, /*accumulate=*/false);
      gates(s, b0, b1, 0, H);  // z, r, r ⊙ h_prev
      hc.units(m, 1, rh + b0 * H, H, cand + b0 * H, H, 0, H, /*accumulate=*/false);
      candidate(s, b0, b1, 0, H);  // hh, h
    });
    return true;
  }

  // The reverse steps: dh += d_inner[t + 1]·R_zrᵀ (the step after's product, as the steps add
  // it after their passes), then step t's gate pass, d_rh = d_cand·R_hᵀ and the reset pass;
  // after step 0 the first product alone gives h_prev's gradient.
  static bool backward_loop_before(const GruLoop<float>& loop) {
    const int64_t L = loop.L, B = loop.B, H = loop.H, BH = B * H;
    const at::Tensor R = at::from_blob(const_cast<float*>(loop.R), {H, 3 * H}, at::kFloat);
    const at::Tensor R_zr_t = R.narrow(1, 0, 2 * H).t(), R_h_t = R.narrow(1, 2 * H, H).t();
    if (!cpu::RecurrentGemm::fused_form(R_zr_t, B, L, /*panel_gates=*/1) ||
        !cpu::RecurrentGemm::fused_form(R_h_t, B, L, /*panel_gates=*/1)) {
      return false;
    }
    const int64_t blocks = before_row_blocks(
        cpu::RecurrentGemm::panels_form(R_zr_t, B, L, /*panel_gates=*/1), B, 3 * H, H, 1);
    if (blocks == 0) return false;
    const cpu::RecurrentGemm zr_t{R_zr_t, B, L, /*allow_blocks=*/true, /*panel_gates=*/1};
    const cpu::RecurrentGemm hc_t{R_h_t, B, L, /*allow_blocks=*/true, /*panel_gates=*/1};
    const Rows<float> gates = rows_for<BackwardGatesRowsKernel, true, float>(loop.fns);
    const Rows<float> reset = rows_for<BackwardResetRowsKernel, true, float>(loop.fns);
    const at::Tensor scratch = at::empty({2, B, H}, at::kFloat);  // d_cand, d_rh
    float* const d_cand = scratch.data_ptr<float>();
    float* const d_rh = d_cand + BH;
    cpu::for_steps_row_blocks(L + 1, B, blocks, [&](int64_t k, int64_t, int64_t b0, int64_t b1) {
      const int64_t t = L - 1 - k, m = b1 - b0;
      if (t + 1 < L) {
        zr_t.units(m, 1, loop.d_inner + ((t + 1) * B + b0) * 2 * H, 2 * H, loop.dh + b0 * H, H,
                   0, H, /*accumulate=*/true);
      }
      if (t < 0) return;
      GruStep<float> s = backward_step_of(loop, t, 2);
      s.d_cand = d_cand, s.d_rh = d_rh;
      gates(s, b0, b1, 0, H);  // dz, dhh; dh = its direct part
      hc_t.units(m, 1, d_cand + b0 * H, H, d_rh + b0 * H, H, 0, H, /*accumulate=*/false);
      reset(s, b0, b1, 0, H);  // dr; dh += d_rh ⊙ r
    });
    return true;
  }

  template <typename scalar_t>
  static void forward_after(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardAfterRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void forward_gates(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardGatesRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void forward_candidate(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardCandidateRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void backward_after(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardAfterRowsKernel, true>(s, B);
  }
  template <typename scalar_t>
  static void backward_gates(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardGatesRowsKernel, true>(s, B);
  }
  template <typename scalar_t>
  static void backward_reset(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardResetRowsKernel, true>(s, B);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) { gru_seq::register_gru_ops<CpuGruBackend>(m); }

}  // namespace torch_lstm_grad
