// The CPU Backend of the LSTM drivers (csrc/lstm_block.h): the per-step pointwise passes as
// loops over rows, parallelised over the batch with ATen's parallel_for, each step's recurrent
// product fused with them where brgemm runs, and there the whole time loop in one parallel
// region when nothing runs between the steps (forward_loop, backward_loop). Each loop is
// instantiated per activation variant and peephole/clip setting, so its body has no branches
// and vectorises, and is multiversioned for AVX-512 / AVX2 (activations.h). Included by
// lstm_block.cpp (TF's block ops: sigmoid/tanh only) and lstm_block_ex.cpp (block_lstm_ex:
// every variant), each with its own row policy.
#pragma once

#include <ATen/Parallel.h>

#include <array>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../bool_dispatch.h"
#include "../lstm_block.h"
#include "activations.h"
#include "cell_avx512.h"
#include "gemm.h"
#include "pairwise_gemm.h"
#include "workspace.h"

// An unnamed namespace: each including file gets its own copies of the multiversioned loops.
namespace torch_lstm_grad::cpu_lstm {
namespace {

using lstm_block::BwdStep;
using lstm_block::FwdStep;
using lstm_block::GateLayout;

template <typename scalar_t>
using FwdRows = void (*)(const FwdStep<scalar_t>&, int64_t, int64_t, int64_t, int64_t);
template <typename scalar_t>
using BwdRows = void (*)(const BwdStep<scalar_t>&, int64_t, int64_t, int64_t, int64_t);

using cpu::CpuAct;

// kClip: clip at ±cell_clip, or (cell_clip <= 0: only block_lstm_ex's rows, which always clip)
// at ±inf, i.e. not at all.
template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kClip>
struct ForwardRowsKernel {
  static constexpr bool kVectorCell =
      std::is_same_v<scalar_t, float> &&
      std::is_same_v<Gate, lstm_block::SigmoidGate<CpuAct>> &&
      std::is_same_v<Cell, lstm_block::TanhCell<CpuAct>>;
  TLG_INLINE static void body(const FwdStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0, int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const GateLayout L = s.attrs.layout;
    const acc_t fb = static_cast<acc_t>(s.attrs.forget_bias);
    const acc_t clip = s.attrs.cell_clip > 0 ? static_cast<acc_t>(s.attrs.cell_clip)
                                             : std::numeric_limits<acc_t>::infinity();
    const auto p = lstm_block::ActParams<acc_t>::from(s.attrs.fns);
    const acc_t* __restrict bi = s.bias + L.i * H;
    const acc_t* __restrict bc = s.bias + L.c * H;
    const acc_t* __restrict bf = s.bias + L.f * H;
    const acc_t* __restrict bo = s.bias + L.o * H;
    const acc_t* __restrict wci = s.wci;  // hoisted: loads through `s` inside the loop
    const acc_t* __restrict wcf = s.wcf;  // would keep it from vectorising
    const acc_t* __restrict wco = s.wco;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict g = s.gates + b * 4 * H;
      const acc_t* __restrict gi = g + L.i * H;
      const acc_t* __restrict gc = g + L.c * H;
      const acc_t* __restrict gf = g + L.f * H;
      const acc_t* __restrict go = g + L.o * H;
      const scalar_t* __restrict csp = s.cs_prev + b * H;
      scalar_t* __restrict i_o = s.out[0] + b * H;
      scalar_t* __restrict cs_o = s.out[1] + b * H;
      scalar_t* __restrict f_o = s.out[2] + b * H;
      scalar_t* __restrict o_o = s.out[3] + b * H;
      scalar_t* __restrict ci_o = s.out[4] + b * H;
      scalar_t* __restrict co_o = s.out[5] + b * H;
      scalar_t* __restrict h_o = s.out[6] + b * H;
      int64_t j = j0;
      if constexpr (kVectorCell) {
        // Eight units at a time on activations.h's f32x8: the scalar loop's operations lane
        // by lane (the same values, also on huge and non-finite inputs), where GCC's
        // vectoriser of that loop compiles it to masked blends around every division with one
        // iteration in flight (cell_avx512.h); faster on AVX2 (measured: docs/performance.md).
        using cpu::f32x8;
        constexpr auto ld = cpu::load8;
        constexpr auto st = cpu::store8;
        const f32x8 zero{}, fb8 = zero + fb, clip8 = zero + clip;
        for (; j + 8 <= j1; j += 8) {
          const auto r = lstm_block::lstm_cell_forward<Gate, Cell, kPeep, kClip, f32x8>(
              ld(gi + j) + ld(bi + j), ld(gc + j) + ld(bc + j), ld(gf + j) + ld(bf + j),
              ld(go + j) + ld(bo + j), ld(csp + j), kPeep ? ld(wci + j) : zero,
              kPeep ? ld(wcf + j) : zero, kPeep ? ld(wco + j) : zero, fb8, clip8,
              lstm_block::ActParams<f32x8>{});
          st(i_o + j, r.i), st(cs_o + j, r.cs), st(f_o + j, r.f), st(o_o + j, r.o);
          st(ci_o + j, r.ci), st(co_o + j, r.co), st(h_o + j, r.h);
        }
      }
      TLG_NO_ALIAS_LOOP
      for (; j < j1; ++j) {
        const auto r = lstm_block::lstm_cell_forward<Gate, Cell, kPeep, kClip, acc_t>(
            gi[j] + bi[j], gc[j] + bc[j], gf[j] + bf[j], go[j] + bo[j],
            static_cast<acc_t>(csp[j]), kPeep ? wci[j] : acc_t(0), kPeep ? wcf[j] : acc_t(0),
            kPeep ? wco[j] : acc_t(0), fb, clip, p);
        i_o[j] = static_cast<scalar_t>(r.i);
        cs_o[j] = static_cast<scalar_t>(r.cs);
        f_o[j] = static_cast<scalar_t>(r.f);
        o_o[j] = static_cast<scalar_t>(r.o);
        ci_o[j] = static_cast<scalar_t>(r.ci);
        co_o[j] = static_cast<scalar_t>(r.co);
        h_o[j] = static_cast<scalar_t>(r.h);
      }
      if (s.h_acc != nullptr) {
        for (int64_t j = j0; j < j1; ++j) s.h_acc[b * H + j] = static_cast<acc_t>(h_o[j]);
      }
    }
  }
};

// forward_rows: ForwardRowsKernel::body compiled for the instruction set cpu::isa() chose.
template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kClip>
void forward_rows(const FwdStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0, int64_t j1) {
  cpu::dispatch<ForwardRowsKernel<scalar_t, Gate, Cell, kPeep, kClip>>(s, b0, b1, j0, j1);
}

// kSums: also add this step's rows into s.sums (units j0..j1 belong to this thread), in double,
// row after row. Rows go in groups of kSumRows, each unit's sums held in registers across the
// group and added in the same order (the same bits as a row at a time): their loads and stores
// (14 of 8 bytes a unit with peepholes, against the cell's own 11 of 4) once a group instead of
// once a row, which is faster on BlockLSTM's fwd+bwd, more so with 8 rows than with 2 or 4
// (measured: docs/performance.md).
// kMaskClip: zero the cell-state gradient where |cs| reached s.mask_clip (+inf: nowhere).
template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kMaskClip, bool kSums>
struct BackwardRowsKernel {
  TLG_INLINE static void body(const BwdStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0, int64_t j1) {
    using acc_t = at::opmath_type<scalar_t>;
    constexpr int64_t kSumRows = 8;
    const int64_t H = s.H;
    const GateLayout L = s.layout;
    const auto p = lstm_block::ActParams<acc_t>::from(s.fns);
    const acc_t mask_clip = static_cast<acc_t>(s.mask_clip);
    const acc_t* __restrict wci = s.wci;
    const acc_t* __restrict wcf = s.wcf;
    const acc_t* __restrict wco = s.wco;
    const scalar_t* __restrict i_p = s.act[0];
    const scalar_t* __restrict cs_p = s.act[1];
    const scalar_t* __restrict f_p = s.act[2];
    const scalar_t* __restrict o_p = s.act[3];
    const scalar_t* __restrict ci_p = s.act[4];
    const scalar_t* __restrict co_p = s.act[5];
    const scalar_t* __restrict csp_p = s.cs_prev;
    const scalar_t* __restrict csg_p = s.cs_grad;
    const scalar_t* __restrict hg_p = s.h_grad;
    const acc_t* __restrict dh_p = s.dh_carry;
    acc_t* __restrict dcs_c = s.dcs_carry;
    acc_t* __restrict dgates = s.dgates;
    // Unit j of row b: its gate gradients and the carried cell-state gradient written, and
    // returned for the sums.
    const auto cell = [&](int64_t b, int64_t j) __attribute__((always_inline)) {
      const int64_t k = b * H + j;
      // TF's order: carry first, then the incoming gradient (docs/tf-semantics.md §4.2).
      const auto r = lstm_block::lstm_cell_backward<Gate, Cell, kPeep, kMaskClip, acc_t>(
          i_p[k], f_p[k], o_p[k], ci_p[k], co_p[k], kMaskClip ? static_cast<acc_t>(cs_p[k]) : acc_t(0),
          csp_p[k], dh_p[k] + static_cast<acc_t>(hg_p[k]), dcs_c[k] + static_cast<acc_t>(csg_p[k]),
          kPeep ? wci[j] : acc_t(0), kPeep ? wcf[j] : acc_t(0), kPeep ? wco[j] : acc_t(0),
          mask_clip, p);
      acc_t* dg = dgates + 4 * b * H + j;
      dg[L.i * H] = r.di;
      dg[L.c * H] = r.dci;
      dg[L.f * H] = r.df;
      dg[L.o * H] = r.d_o;
      dcs_c[k] = r.dcs_prev;
      return r;
    };
    // Rows of s.sums: the gate sums in dgates' block order, then the three peephole sums.
    double* __restrict sum_i = kSums ? s.sums + L.i * H : nullptr;
    double* __restrict sum_c = kSums ? s.sums + L.c * H : nullptr;
    double* __restrict sum_f = kSums ? s.sums + L.f * H : nullptr;
    double* __restrict sum_o = kSums ? s.sums + L.o * H : nullptr;
    double* __restrict sum_wci = kSums ? s.sums + 4 * H : nullptr;
    double* __restrict sum_wcf = kSums ? s.sums + 5 * H : nullptr;
    double* __restrict sum_wco = kSums ? s.sums + 6 * H : nullptr;
    // Adds one row's unit j to the sums held in si..swco.
    const auto add = [&](int64_t b, int64_t j, const lstm_block::CellBackward<acc_t>& r, double& si,
                         double& sc, double& sf, double& so, double& swci, double& swcf,
                         double& swco) __attribute__((always_inline)) {
      si += r.di;
      sc += r.dci;
      sf += r.df;
      so += r.d_o;
      if constexpr (kPeep) {
        const double cb = static_cast<acc_t>(csp_p[b * H + j]);
        swci += static_cast<double>(r.di) * cb;
        swcf += static_cast<double>(r.df) * cb;
        swco += static_cast<double>(r.d_o) * static_cast<acc_t>(cs_p[b * H + j]);
      }
    };
    int64_t b = b0;
    if constexpr (kSums) {
      for (; b + kSumRows <= b1; b += kSumRows) {
        TLG_NO_ALIAS_LOOP
        for (int64_t j = j0; j < j1; ++j) {
          double si = sum_i[j], sc = sum_c[j], sf = sum_f[j], so = sum_o[j];
          double swci = 0, swcf = 0, swco = 0;
          if constexpr (kPeep) swci = sum_wci[j], swcf = sum_wcf[j], swco = sum_wco[j];
          // Unrolled before the vectoriser runs, which takes no inner loop.
  #pragma GCC unroll 8
          for (int64_t q = 0; q < kSumRows; ++q) {
            add(b + q, j, cell(b + q, j), si, sc, sf, so, swci, swcf, swco);
          }
          sum_i[j] = si, sum_c[j] = sc, sum_f[j] = sf, sum_o[j] = so;
          if constexpr (kPeep) sum_wci[j] = swci, sum_wcf[j] = swcf, sum_wco[j] = swco;
        }
      }
    }
    for (; b < b1; ++b) {
      TLG_NO_ALIAS_LOOP
      for (int64_t j = j0; j < j1; ++j) {
        const auto r = cell(b, j);
        if constexpr (kSums) {
          add(b, j, r, sum_i[j], sum_c[j], sum_f[j], sum_o[j], sum_wci[j], sum_wcf[j],
              sum_wco[j]);
        }
      }
    }
    if (s.dgates_lp != nullptr) {  // the rounded copy the bfloat16 products read
      for (b = b0; b < b1; ++b) {
        for (int64_t q = 0; q < 4; ++q) {
          const acc_t* __restrict from = s.dgates + 4 * b * H + q * H;
          scalar_t* __restrict to = s.dgates_lp + 4 * b * H + q * H;
          for (int64_t j = j0; j < j1; ++j) to[j] = static_cast<scalar_t>(from[j]);
        }
      }
    }
  }
};

// backward_rows: BackwardRowsKernel::body compiled for the instruction set cpu::isa() chose.
template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kMaskClip, bool kSums>
void backward_rows(const BwdStep<scalar_t>& s, int64_t b0, int64_t b1, int64_t j0, int64_t j1) {
  cpu::dispatch<BackwardRowsKernel<scalar_t, Gate, Cell, kPeep, kMaskClip, kSums>>(s, b0, b1, j0, j1);
}

// The float32 sigmoid/tanh forward loop on AVX-512 (cell_avx512.h: the same numbers, faster
// than the loops above), or null where the CPU lacks it.
template <typename scalar_t>
FwdRows<scalar_t> avx512_tf_rows(bool peep, bool clip, bool gates_read) {
  if constexpr (std::is_same_v<scalar_t, float>) {
#if defined(TLG_HAVE_AVX512_CELL)
    if (!cpu::avx512_cell_available()) return nullptr;
    return dispatch_bools(
        [](auto kPeep, auto kClip, auto kStoreGates) {
          return &cpu::tf_forward_rows<kPeep, kClip, kStoreGates>;
        },
        peep, clip, gates_read);
#endif
  }
  (void)peep, (void)clip, (void)gates_read;
  return nullptr;
}

// The three peephole reductions in one pass over dgates, split over threads by columns: each
// column is summed by one thread, in row order, in double (a float running sum over T·B rows
// would lose more than ATen's pairwise sum).
template <typename scalar_t>
void peephole_columns(const float* dg, const scalar_t* cs_prev, const scalar_t* cs, int64_t L,
                      int64_t B, int64_t H, GateLayout layout, double* out) {
  at::parallel_for(0, H, 64, [&](int64_t j0, int64_t j1) {
    const int64_t w = j1 - j0;
    std::vector<double> acc(3 * w, 0.0);
    double* __restrict ai = acc.data();
    double* __restrict af = ai + w;
    double* __restrict ao = af + w;
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t b = 0; b < B; ++b) {
        const float* g = dg + (t * B + b) * 4 * H + j0;
        const float* __restrict gi = g + layout.i * H;
        const float* __restrict gf = g + layout.f * H;
        const float* __restrict go = g + layout.o * H;
        const scalar_t* __restrict before =
            (t == 0 ? cs_prev + b * H : cs + ((t - 1) * B + b) * H) + j0;
        const scalar_t* __restrict now = cs + (t * B + b) * H + j0;
        for (int64_t j = 0; j < w; ++j) {
          const double cb = static_cast<float>(before[j]);
          ai[j] += static_cast<double>(gi[j]) * cb;
          af[j] += static_cast<double>(gf[j]) * cb;
          ao[j] += static_cast<double>(go[j]) * static_cast<float>(now[j]);
        }
      }
    }
    for (int64_t j = 0; j < w; ++j) {
      out[j0 + j] = ai[j];
      out[H + j0 + j] = af[j];
      out[2 * H + j0 + j] = ao[j];
    }
  });
}

// Rows: the policy that picks the pointwise loops (`forward<scalar_t>(step)`,
// `backward<scalar_t>(step, sums)`): TF's sigmoid/tanh only (lstm_block.cpp) or every variant
// (lstm_block_ex.cpp), so the block ops' file does not compile the variants.
template <class Rows>
struct CpuBackend {
  static std::array<at::Tensor, 3> peephole_grads(const at::Tensor& dgates, const at::Tensor& cs_prev,
                                                  const at::Tensor& cs, int64_t L, GateLayout layout,
                                                  at::ScalarType out_type) {
    if (dgates.scalar_type() != at::kFloat) {  // float64: ATen's reductions are exact enough
      return lstm_block::aten_peephole_grads(dgates, cs_prev, cs, L, layout, out_type);
    }
    const int64_t B = cs_prev.size(0), H = cs_prev.size(1);
    at::Tensor out = at::empty({3, H}, dgates.options().dtype(at::kDouble));
    // float32 dgates: cs is float32, float16 or bfloat16.
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cs.scalar_type(), "peephole_grads", [&] {
      peephole_columns<scalar_t>(dgates.const_data_ptr<float>(), cs_prev.const_data_ptr<scalar_t>(),
                                 cs.const_data_ptr<scalar_t>(), L, B, H, layout,
                                 out.data_ptr<double>());
    });
    // Three separate tensors: op outputs must not alias each other.
    auto own = [&](int k) { return out[k].to(out_type, /*non_blocking=*/false, /*copy=*/true); };
    return {own(0), own(1), own(2)};
  }

  static at::ScalarType product_type(at::ScalarType t) { return cpu::product_type(t); }

  // BlockLSTM's loops fuse their products with the cell where the blocks form is taken.
  static cpu::RecurrentGemm recurrent_gemm(const at::Tensor& b, int64_t m, int64_t steps) {
    return {b, m, steps, /*allow_blocks=*/true};
  }

  // The backward's recurrent product, dh = next·Whᵀ (b = Whᵀ, [4H, P]): small batches take the
  // panels form with the output units as the panels (no gates), read in sequential runs where
  // the blocks form reads 64 bytes of each of Whᵀ's 4H rows (backward_units).
  static cpu::RecurrentGemm dh_gemm(const at::Tensor& b, int64_t m, int64_t steps) {
    return {b, m, steps, /*allow_blocks=*/true, /*panel_gates=*/1};
  }

  // The forward's recurrent product of the four gate blocks ([P, 4H]): small batches take the
  // panels form (`packed`: the weight already packed, or undefined).
  static cpu::RecurrentGemm gate_gemm(const at::Tensor& b, int64_t m, int64_t steps,
                                      const at::Tensor& packed) {
    return {b, m, steps, /*allow_blocks=*/true, /*panel_gates=*/4, packed};
  }

  // The input projection of all steps, a [L·B, I] · b [I, 4H]: on the gate panels (float32,
  // AVX-512 or AVX2) from kMinPanelInputRows rows, where packing b costs little against the
  // product or the caller packed it (`packed`: block_lstm_inference's packed_x, the modules
  // keep it per weight version), else oneDNN. The same sums in order either way (the same bits
  // at the benchmark shapes); the panels are the faster, prepared or packed per call (measured:
  // docs/performance.md).
  static constexpr int64_t kMinPanelInputRows = 64;
  // `scratch`: the caller only reads the result within the call (the inference forward), so
  // the panels' result goes to the thread's kept workspace (workspace.h).
  static at::Tensor input_gates(const at::Tensor& a, const at::Tensor& b,
                                const at::Tensor& packed, bool scratch) {
    if (!cpu::panels_available() || a.scalar_type() != at::kFloat ||
        b.scalar_type() != at::kFloat || a.size(0) < kMinPanelInputRows) {
      return cpu::matmul(a, b);
    }
    const std::array<int64_t, 2> sizes{a.size(0), b.size(1)};
    at::Tensor out = scratch ? cpu::inference_workspace(sizes, a.options())
                             : at::empty(sizes, a.options());
    cpu::gate_matmul_out(out, a, b, 4, packed);
    return out;
  }

  // The backward's long sums (dx over the 4H gate columns, dW over the L·B rows), pairwise up to
  // kPairwiseMaxMacs (pairwise_gemm.h): one GEMM over them puts BlockLSTM's w_grad and x_grad
  // several times further from float64 than TF on TF's CudnnLSTM "large" shape (T 32, B 16,
  // I = H = 128), where TF sums step by step. The benchmark's shapes are above the bound and
  // take pairwise_gemm.h's long_sum_out (chunks on MKL on AVX2, one oneDNN GEMM on AVX-512).
  // A single step's [x, h_prev]·w (LSTMBlockCell) is one too: as one GEMM (oneDNN, or MKL's
  // GEMV at B = 1) its gates are 2-3.5e-7 from float64 at H 256-512, where TF's own sums are
  // 0.6-1.6e-7; pairwise 0.3-0.7e-7 (tests/ops/test_raw_ops_accuracy.py).
  static at::Tensor sum_matmul(const at::Tensor& a, const at::Tensor& b) {
    return cpu::pairwise_sum_gemm(a, b);
  }

  // h_prev_grad = dgates_0·Whᵀ, a sum over the 4H gate columns, pairwise (float32 blocks or
  // panels form, any size): in one brgemm call BlockLSTM's h_prev_grad is less accurate than
  // TF's, 1.8-3.0x its error from float64 at B 8-32, H 256-512 (docs/differences.md), pairwise
  // within it; it is one product a call (+0.1 to +1.7 ms, inside the noise, at the benchmark's
  // shapes). The same sum inside the steps (backward_step) stays one brgemm call: summed
  // pairwise there too it makes no gradient more accurate on TF's "large" shape (its rounding
  // is damped through the cells) and costs a noticeable part of the fwd+bwd.
  static void h_prev_product(const cpu::RecurrentGemm& rec, at::Tensor& dh,
                             const at::Tensor& dgates0) {
    const int64_t B = dgates0.size(0), K = dgates0.size(1), N = dh.size(1);
    if (rec.panels()) {  // small batches: the panels hold Whᵀ, rec.b() is the weight's view
      cpu::pairwise_sum_gemm_out(dh, dgates0, rec.b(), cpu::kPairwiseStepChunk);
      return;
    }
    if (!rec.blocks() || rec.bf16() || B == 0 || !dgates0.is_contiguous() ||
        !dh.is_contiguous()) {
      rec(dh, dgates0, /*accumulate=*/false);
      return;
    }
    const float* ap = dgates0.const_data_ptr<float>();
    float* cp = dh.data_ptr<float>();
    cpu::for_column_blocks(N, B * K * N, [&](int64_t j0, int64_t n) {
      cpu::pairwise_sum_block(B, n, K, ap, K, rec.b_data() + j0, N, cp + j0, N);
    });
  }

  // forward_step's work on rows [b0, b1) and units [j0, j0 + n) of a step (h, g: its row 0),
  // on the calling thread: the four gate blocks of g for those rows and units get h·Wh (onto
  // the input projection already in g; the panels or the blocks form, h of the operand type),
  // then the cell for them, while the block is in cache.
  template <typename scalar_t, typename h_t>
  static void forward_units(const FwdStep<scalar_t>& s, FwdRows<scalar_t> rows,
                            const cpu::RecurrentGemm& rec, int64_t b0, int64_t b1, int64_t K,
                            const h_t* h, float* g, int64_t j0, int64_t n) {
    const int64_t H = s.H;
    rec.units(b1 - b0, 4, h + b0 * K, K, g + b0 * 4 * H, 4 * H, j0, n, /*accumulate=*/true);
    rows(s, b0, b1, j0, j0 + n);
  }

  // The cell of one step on gates that hold its whole pre-activation: a row-parallel pass.
  template <typename scalar_t>
  static void cell_step(const FwdStep<scalar_t>& s, int64_t B) {
    const auto rows = Rows::template forward<scalar_t>(s);
    at::parallel_for(0, B, cpu::row_grain(s.H),
                     [&](int64_t b0, int64_t b1) { rows(s, b0, b1, 0, s.H); });
  }

  // With a blocks-form weight ([H, 4H]) each thread takes a block of units (forward_units):
  // one parallel region a step. Otherwise the library product and a row-parallel pointwise
  // pass.
  template <typename scalar_t>
  static void forward_step(const FwdStep<scalar_t>& s, const cpu::RecurrentGemm& rec,
                           at::Tensor& g, const at::Tensor& h) {
    const int64_t B = g.size(0), H = s.H, K = h.size(1);
    if (!rec.blocks()) {
      rec(g, h, /*accumulate=*/true);
      cell_step(s, B);
      return;
    }
    const auto rows = Rows::template forward<scalar_t>(s);
    TORCH_INTERNAL_ASSERT(h.is_contiguous() && g.is_contiguous());
    float* gp = g.data_ptr<float>();
    cpu::for_column_blocks(H, B * H * 4 * H, [&](int64_t j0, int64_t n) {
      if (rec.bf16()) {
        forward_units(s, rows, rec, 0, B, K, h.const_data_ptr<at::BFloat16>(), gp, j0, n);
      } else {
        forward_units(s, rows, rec, 0, B, K, h.const_data_ptr<float>(), gp, j0, n);
      }
    });
  }

  // All L steps of forward_step's blocks form in one parallel region, where h is float32 and
  // read as stored: by rows where the panels fit a core's L2 (for_steps_row_blocks: no barrier
  // between the steps), else by units (for_steps_column_blocks: a barrier after each step's
  // cells instead of a fork and join a step). The same sums, bit for bit.
  template <typename scalar_t, class PointStep>
  static bool forward_loop(const FwdStep<scalar_t>& proto, const cpu::RecurrentGemm& rec,
                           int64_t B, int64_t L, const PointStep& point_step,
                           const scalar_t* h0, const scalar_t* h) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (!rec.blocks() || rec.bf16()) return false;
      const int64_t H = proto.H, K = rec.b().size(0);
      const auto rows = Rows::template forward<scalar_t>(proto);
      // By rows where the panels fit the L2 (gemm.h's panel_row_blocks), else by units.
      if (const int64_t blocks = rec.panels() ? cpu::panel_row_blocks(B, K, H, 4) : 0) {
        cpu::for_steps_row_blocks(L, B, blocks, [&](int64_t t, int64_t, int64_t b0,
                                                    int64_t b1) {
          FwdStep<scalar_t> s = proto;
          float* g = point_step(t, s);
          forward_units(s, rows, rec, b0, b1, K, t == 0 ? h0 : h + (t - 1) * B * K, g, 0, H);
        });
        return true;
      }
      cpu::for_steps_column_blocks(L, H, B * H * 4 * H, [&](int64_t t, int64_t j0, int64_t n) {
        FwdStep<scalar_t> s = proto;
        float* g = point_step(t, s);
        forward_units(s, rows, rec, 0, B, K, t == 0 ? h0 : h + (t - 1) * B * K, g, j0, n);
      });
      return true;
    }
    (void)proto, (void)rec, (void)B, (void)L, (void)point_step, (void)h0, (void)h;
    return false;
  }

  // The blocks form sums db and the peephole grads in the steps (BackwardState::sums): each
  // unit's sums are only ever added to by the thread that owns the unit's block.
  static bool sums_in_steps(const cpu::RecurrentGemm& rec) { return rec.blocks(); }

  static void transpose_into(at::Tensor& dst, const at::Tensor& src) {
    cpu::transpose_into(dst, src);
  }

  // backward_step's work on rows [b0, b1) and units [j0, j0 + n) of a step (next, dh: their
  // row 0): their columns of dh = next·Whᵀ (when `next` is not null; Whᵀ's panels: float32,
  // B <= kMaxPanelRows, the same sums as block_gemm's, over k in order from zero), then the
  // cell backward for them.
  template <typename scalar_t, typename next_t>
  static void backward_units(const BwdStep<scalar_t>& s, BwdRows<scalar_t> rows,
                             const cpu::RecurrentGemm& rec, int64_t b0, int64_t b1,
                             const next_t* next, float* dh, int64_t j0, int64_t n) {
    const int64_t H = s.H;
    if (next != nullptr) {
      rec.units(b1 - b0, 1, next + b0 * 4 * H, 4 * H, dh + b0 * H, H, j0, n,
                /*accumulate=*/false);
    }
    rows(s, b0, b1, j0, j0 + n);
  }

  // Blocks form (weight Whᵀ, [4H, H]): each thread takes a block of units (backward_units).
  template <typename scalar_t>
  static void backward_step(const BwdStep<scalar_t>& s, const cpu::RecurrentGemm& rec,
                            const at::Tensor& next, at::Tensor& dh_carry) {
    const int64_t B = dh_carry.size(0), H = s.H;
    if (!rec.blocks()) {
      if (next.defined()) rec(dh_carry, next, /*accumulate=*/false);
      const auto rows = Rows::template backward<scalar_t>(s, /*sums=*/false);
      at::parallel_for(0, B, cpu::row_grain(H),
                       [&](int64_t b0, int64_t b1) { rows(s, b0, b1, 0, H); });
      return;
    }
    TORCH_INTERNAL_ASSERT(s.sums != nullptr);
    const auto rows = Rows::template backward<scalar_t>(s, /*sums=*/true);
    float* dp = dh_carry.data_ptr<float>();
    cpu::for_column_blocks(H, B * H * 4 * H, [&](int64_t j0, int64_t n) {
      if (rec.bf16()) {
        const auto* np = next.defined() ? next.const_data_ptr<at::BFloat16>() : nullptr;
        backward_units(s, rows, rec, 0, B, np, dp, j0, n);
      } else {
        const float* np = next.defined() ? next.const_data_ptr<float>() : nullptr;
        backward_units(s, rows, rec, 0, B, np, dp, j0, n);
      }
    });
  }

  // All L reverse steps of backward_step's blocks form in one parallel region, as
  // forward_loop: by rows, or by units with a barrier after each step, where its dgates (the
  // earlier step's `next`) are complete.
  template <typename scalar_t, class PointStep>
  static bool backward_loop(const BwdStep<scalar_t>& proto, const cpu::RecurrentGemm& rec,
                            int64_t B, int64_t L, const PointStep& point_step,
                            const at::opmath_type<scalar_t>* dgates,
                            at::opmath_type<scalar_t>* dh_carry) {
    if constexpr (std::is_same_v<scalar_t, float>) {
      if (!rec.blocks() || rec.bf16()) return false;
      TORCH_INTERNAL_ASSERT(proto.sums != nullptr);
      const int64_t H = proto.H;
      const auto rows = Rows::template backward<scalar_t>(proto, /*sums=*/true);
      // By rows where the panels of Whᵀ fit the L2, as forward_loop. Each row block sums its
      // rows' db and peephole products into [7, H] of its own (the rows function adds them up
      // per unit, and two threads may not add into one), added into `sums` after the loop in
      // block order: in float64, so the float32 results match the units split's but for a
      // sum within a float64 rounding of a float32 tie.
      if (const int64_t blocks = rec.panels() ? cpu::panel_row_blocks(B, 4 * H, H, 1) : 0) {
        at::Tensor partial = at::zeros({blocks, 7, H}, at::TensorOptions().dtype(at::kDouble));
        double* const pp = partial.data_ptr<double>();
        cpu::for_steps_row_blocks(L, B, blocks, [&](int64_t k, int64_t blk, int64_t b0,
                                                    int64_t b1) {
          const int64_t t = L - 1 - k;
          BwdStep<scalar_t> s = proto;
          point_step(t, s);
          s.sums = pp + blk * 7 * H;
          const float* next = t + 1 < L ? dgates + (t + 1) * B * 4 * H : nullptr;
          backward_units(s, rows, rec, b0, b1, next, dh_carry, 0, H);
        });
        for (int64_t blk = 0; blk < blocks; ++blk) {
          for (int64_t i = 0; i < 7 * H; ++i) proto.sums[i] += pp[blk * 7 * H + i];
        }
        return true;
      }
      cpu::for_steps_column_blocks(L, H, B * H * 4 * H, [&](int64_t k, int64_t j0, int64_t n) {
        const int64_t t = L - 1 - k;
        BwdStep<scalar_t> s = proto;
        point_step(t, s);
        const float* next = t + 1 < L ? dgates + (t + 1) * B * 4 * H : nullptr;
        backward_units(s, rows, rec, 0, B, next, dh_carry, j0, n);
      });
      return true;
    }
    (void)proto, (void)rec, (void)B, (void)L, (void)point_step, (void)dgates, (void)dh_carry;
    return false;
  }
};


}  // namespace
}  // namespace torch_lstm_grad::cpu_lstm
