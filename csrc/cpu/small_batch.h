// The recurrent product of a time loop on small batches (B <= 64 rows). At
// B = 1..8 it is a matrix-vector product per step, bound by reading the [K, G·H] weight, not by
// arithmetic; at B = 16..32, brgemm on the weight's plain rows spent its time on them too. Two
// things make it stream:
// - a layout read front to back: the weight packed once into gate panels, unit block by unit
//   block ([U, G, K, 16], U = ceil(H / 16): the 16 columns of units 16u..16u+15 of each gate,
//   row k after row k), so each thread reads its units' weights as sequential streams (in the
//   [K, G·H] matrix a row of one gate block is 64 bytes every G·H floats: a new page every
//   row at H = 256, where the hardware prefetchers stop);
// - the same units on the same thread every step (a static split of the unit blocks), so at
//   H = 256 each of two threads keeps its half (512 KB) in its own L2 from step to step.
// The kernel keeps a chunk of rows' accumulators (up to 24) of four or two gates in AVX-512
// registers and adds the product onto the step's input projection as brgemm's accumulating
// call does (sums over k in order from zero, then added to the output): the results are
// brgemm's bit for bit.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "cpu_features.h"
#include "transpose.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TLG_HAVE_AVX512_PANELS 1
#endif

namespace torch_lstm_grad::cpu {

constexpr int64_t kPanelWidth = 16;  // units per panel: one AVX-512 vector of float32
// The largest batch the panels take: against brgemm's column blocks the panels are faster up
// to B = 64 (panel_gemm goes unit block by unit block, so the row chunks of a larger batch
// reread each block's panels from L2); at 128 neither wins everywhere (measured:
// docs/performance.md). On AVX2 too (16 registers: at most 6 rows a call, one gate a pass from
// 3 rows), since its kernel keeps its accumulators in registers (panel_product_avx2): with
// every library capped at AVX2, panels up to 64 rows rather than 4 make the LSTM forwards
// faster.
constexpr int64_t kMaxPanelRows = 64;

inline int64_t panel_blocks(int64_t H) { return (H + kPanelWidth - 1) / kPanelWidth; }

// Whether the panel kernel runs here: float32 on an AVX-512 CPU, or an AVX2 + FMA one (the
// same panels, each unit block two 8-wide vectors).
inline bool panels_available() {
#if defined(TLG_HAVE_AVX512_PANELS)
  static const bool isa = cpu::isa() >= Isa::kAvx2 && cpu_has("avx2") && cpu_has("fma3");
  return isa;
#else
  return false;
#endif
}

inline bool panels_avx512() {
#if defined(TLG_HAVE_AVX512_PANELS)
  static const bool isa = cpu::isa() == Isa::kAvx512 && cpu_has("avx512_f");
  return isa;
#else
  return false;
#endif
}

// The most rows a recurrent product takes the panels for here.
inline int64_t max_panel_rows() { return panels_available() ? kMaxPanelRows : 0; }

// w [K, G·H] (any strides, float32; gate q in columns [q·H, (q + 1)·H)) packed as
// [U, G, K, 16]: out[u][q][k][l] = w[k][q·H + 16u + l], zero for 16u + l >= H.
inline at::Tensor pack_panels(const at::Tensor& w, int64_t G) {
  TORCH_INTERNAL_ASSERT(w.dim() == 2 && w.scalar_type() == at::kFloat && w.size(1) % G == 0);
  const int64_t K = w.size(0), H = w.size(1) / G, U = panel_blocks(H);
  at::Tensor out = at::empty({U, G, K, kPanelWidth}, w.options());
  const float* src = w.const_data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t rs = w.stride(0), cs = w.stride(1);
  // A transposed view (CudnnRNN's Wᵀ and Rᵀ, the backward's Whᵀ: unit-stride columns) of full
  // panels goes through register tiles: each panel is 16 of the matrix's rows transposed.
  const int64_t tile = detail::transpose_tile();
  const bool tiles = rs == 1 && cs >= K && tile > 0 && K >= tile;
  at::parallel_for(0, U * G, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t u = p / G, q = p % G, c0 = q * H + u * kPanelWidth;
      const int64_t n = std::min(kPanelWidth, H - u * kPanelWidth);
      float* __restrict o = dst + p * K * kPanelWidth;
      if (tiles && n == kPanelWidth) {
        detail::transpose_rows_tiled(src + c0 * cs, kPanelWidth, cs, o, kPanelWidth, 0,
                                     K / tile * tile);
        detail::transpose_scalar(src + c0 * cs, cs, o, kPanelWidth, 0, kPanelWidth,
                                 K / tile * tile, K);
        continue;
      }
      // Rows of w contiguous (the block ops' w[I:]): a panel's row is 16 floats of w's row, one
      // copy each (the element loop below, with its run-time stride, does not vectorise: 4.4% of
      // a BlockLSTM forward's samples under perf against 1.1%, docs/performance.md §3.9).
      if (cs == 1 && n == kPanelWidth) {
        for (int64_t k = 0; k < K; ++k) {
          std::memcpy(o + k * kPanelWidth, src + k * rs + c0, kPanelWidth * sizeof(float));
        }
        continue;
      }
      if (cs == 1 || rs > cs) {  // rows of w contiguous (or closer to it): row by row
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t l = 0; l < n; ++l) o[k * kPanelWidth + l] = src[k * rs + (c0 + l) * cs];
          for (int64_t l = n; l < kPanelWidth; ++l) o[k * kPanelWidth + l] = 0.0f;
        }
      } else {  // a transposed view: column by column
        for (int64_t l = 0; l < kPanelWidth; ++l) {
          for (int64_t k = 0; k < K; ++k) {
            o[k * kPanelWidth + l] = l < n ? src[k * rs + (c0 + l) * cs] : 0.0f;
          }
        }
      }
    }
  });
  return out;
}

// Checks that `packed` is pack_panels of a [K, G·H] weight (`what` names it in the message):
// the kernels read it unchecked.
inline void check_panels(const at::Tensor& packed, int64_t K, int64_t H, int64_t G,
                         const char* what) {
  TORCH_CHECK(packed.scalar_type() == at::kFloat && packed.is_contiguous() &&
                  packed.sizes() == at::IntArrayRef({panel_blocks(H), G, K, kPanelWidth}),
              what, ": expected pack_panels of the [", K, ", ", G * H, "] weight, got shape ",
              packed.sizes());
}

#if defined(TLG_HAVE_AVX512_PANELS)
namespace detail {

// g[r, q·ldq + 0..valid) (+)= Σ_k a[r, k] · panel[q][k][0..valid) for rows r < RB and panels
// q < GB (`gs` floats apart: gates, or for G = 1 consecutive unit blocks); the sums run over k
// in order, from zero, then are added to g (`accumulate`) or stored.
template <int RB, int GB>
__attribute__((target("avx512f"))) inline void panel_product(
    int64_t K, const float* __restrict a, int64_t lda, const float* __restrict panel,
    int64_t gs, float* __restrict g, int64_t ldg, int64_t ldq, int64_t valid, bool accumulate) {
  __m512 acc[RB][GB];
  // The destination's lines (the step's input projection, written for every step before the
  // loop: in L3 or memory by this step) requested first, so that they arrive while the sums
  // run: loaded after the loop, their misses are a sizeable part of this function's time.
  for (int r = 0; r < RB; ++r) {
    for (int q = 0; q < GB; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(g + r * ldg + q * ldq), _MM_HINT_T0);
    }
  }
  for (int r = 0; r < RB; ++r) {
    for (int q = 0; q < GB; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[GB];
    for (int q = 0; q < GB; ++q) w[q] = _mm512_load_ps(panel + q * gs + k * kPanelWidth);
    for (int r = 0; r < RB; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      for (int q = 0; q < GB; ++q) acc[r][q] = _mm512_fmadd_ps(av, w[q], acc[r][q]);
    }
  }
  const __mmask16 m = valid >= kPanelWidth ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
  for (int r = 0; r < RB; ++r) {
    for (int q = 0; q < GB; ++q) {
      float* dst = g + r * ldg + q * ldq;
      const __m512 sum =
          accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), acc[r][q]) : acc[r][q];
      _mm512_mask_storeu_ps(dst, m, sum);
    }
  }
}

// Unit blocks [u0, u1) for RB rows: every gate, in passes of GB gates, each pass P's product
// (P::product<RB, GB>: the AVX-512 kernel's or the AVX2 one's).
// One gate (G = 1: a product without gates, the backward's next·Whᵀ): GB unit blocks at a time.
template <int RB, int GB, class P>
TLG_INLINE void panel_rows_body(int64_t K, int64_t H, int64_t G, const float* a, int64_t lda,
                                const float* packed, float* g, int64_t ldg, int64_t u0,
                                int64_t u1, bool accumulate) {
  const int64_t gs = K * kPanelWidth;
  if (G == 1) {
    int64_t u = u0;
    const int64_t full = std::min(u1, H / kPanelWidth);  // blocks of 16 valid units
    for (; u + GB <= full; u += GB) {
      P::template product<RB, GB>(K, a, lda, packed + u * gs, gs, g + u * kPanelWidth, ldg,
                                  kPanelWidth, kPanelWidth, accumulate);
    }
    for (; u < u1; ++u) {
      P::template product<RB, 1>(K, a, lda, packed + u * gs, gs, g + u * kPanelWidth, ldg,
                                 kPanelWidth, std::min(kPanelWidth, H - u * kPanelWidth),
                                 accumulate);
    }
    return;
  }
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t valid = std::min(kPanelWidth, H - u * kPanelWidth);
    const float* panel = packed + u * G * gs;
    int64_t q = 0;
    for (; q + GB <= G; q += GB) {
      P::template product<RB, GB>(K, a, lda, panel + q * gs, gs, g + q * H + u * kPanelWidth,
                                  ldg, H, valid, accumulate);
    }
    for (; q < G; ++q) {  // G not a multiple of GB (GRU's three gates)
      P::template product<RB, 1>(K, a, lda, panel + q * gs, gs, g + q * H + u * kPanelWidth,
                                 ldg, H, valid, accumulate);
    }
  }
}

struct Avx512Panels {
  template <int RB, int GB>
  __attribute__((target("avx512f"))) static void product(
      int64_t K, const float* a, int64_t lda, const float* panel, int64_t gs, float* g,
      int64_t ldg, int64_t ldq, int64_t valid, bool accumulate) {
    panel_product<RB, GB>(K, a, lda, panel, gs, g, ldg, ldq, valid, accumulate);
  }
};

template <int RB, int GB>
__attribute__((target("avx512f"))) void panel_rows(int64_t K, int64_t H, int64_t G,
                                                   const float* a, int64_t lda,
                                                   const float* packed, float* g, int64_t ldg,
                                                   int64_t u0, int64_t u1, bool accumulate) {
  panel_rows_body<RB, GB, Avx512Panels>(K, H, G, a, lda, packed, g, ldg, u0, u1, accumulate);
}

// The AVX2 + FMA kernel: panel_product on two 8-wide halves of each 16-unit panel, the same
// sums (each lane's products added over k in order with a fused multiply-add, from zero, then
// added to g) and so the same bits as the AVX-512 kernel's. 16 registers: RB rows of GB panels
// take 2·RB·GB accumulators and 2·GB weight vectors.
template <int RB, int GB>
__attribute__((target("avx2,fma"))) inline void panel_product_avx2(
    int64_t K, const float* __restrict a, int64_t lda, const float* __restrict panel,
    int64_t gs, float* __restrict g, int64_t ldg, int64_t ldq, int64_t valid, bool accumulate) {
  // Every loop over the accumulators unrolled (the pragmas), so that each is a register from
  // the first statement on: with the epilogue's loop over the two halves left rolled, GCC 12
  // would keep the array in memory too and store every accumulator to the stack after each FMA
  // of the k loop (one store per FMA; the AVX-512 kernel's masked epilogue has no such loop),
  // and the loop would run at a third of its speed.
  __m256 acc[RB][GB][2];
  _Pragma("GCC unroll 16") for (int r = 0; r < RB; ++r) {
    _Pragma("GCC unroll 16") for (int q = 0; q < GB; ++q) {
      _mm_prefetch(reinterpret_cast<const char*>(g + r * ldg + q * ldq), _MM_HINT_T0);
      acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    __m256 w[GB][2];
    _Pragma("GCC unroll 16") for (int q = 0; q < GB; ++q) {
      w[q][0] = _mm256_load_ps(panel + q * gs + k * kPanelWidth);
      w[q][1] = _mm256_load_ps(panel + q * gs + k * kPanelWidth + 8);
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < RB; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + k);
      _Pragma("GCC unroll 16") for (int q = 0; q < GB; ++q) {
        acc[r][q][0] = _mm256_fmadd_ps(av, w[q][0], acc[r][q][0]);
        acc[r][q][1] = _mm256_fmadd_ps(av, w[q][1], acc[r][q][1]);
      }
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < RB; ++r) {
    _Pragma("GCC unroll 16") for (int q = 0; q < GB; ++q) {
      float* dst = g + r * ldg + q * ldq;
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; ++h) {
        const int64_t n = std::min<int64_t>(8, std::max<int64_t>(0, valid - 8 * h));
        if (n == 8) {
          const __m256 sum =
              accumulate ? _mm256_add_ps(_mm256_loadu_ps(dst + 8 * h), acc[r][q][h])
                         : acc[r][q][h];
          _mm256_storeu_ps(dst + 8 * h, sum);
        } else if (n > 0) {  // the last units of H: lanes < n only
          alignas(32) float lanes[8];
          _mm256_store_ps(lanes, acc[r][q][h]);
          for (int64_t l = 0; l < n; ++l) {
            dst[8 * h + l] = accumulate ? dst[8 * h + l] + lanes[l] : lanes[l];
          }
        }
      }
    }
  }
}

struct Avx2Panels {
  template <int RB, int GB>
  __attribute__((target("avx2,fma"))) static void product(
      int64_t K, const float* a, int64_t lda, const float* panel, int64_t gs, float* g,
      int64_t ldg, int64_t ldq, int64_t valid, bool accumulate) {
    panel_product_avx2<RB, GB>(K, a, lda, panel, gs, g, ldg, ldq, valid, accumulate);
  }
};

// As panel_rows, on the AVX2 kernel.
template <int RB, int GB>
__attribute__((target("avx2,fma"))) void panel_rows_avx2(int64_t K, int64_t H, int64_t G,
                                                         const float* a, int64_t lda,
                                                         const float* packed, float* g,
                                                         int64_t ldg, int64_t u0, int64_t u1,
                                                         bool accumulate) {
  panel_rows_body<RB, GB, Avx2Panels>(K, H, G, a, lda, packed, g, ldg, u0, u1, accumulate);
}

using PanelRowsFn = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                             float*, int64_t, int64_t, int64_t, bool);

// The AVX2 kernel for `rows` rows (at most 6, panel_gemm's chunk there): two gates a pass for up to 2 rows (8
// accumulators, 4 weight vectors), one for 3 to 6 (up to 12 and 2).
inline PanelRowsFn panel_rows_avx2_for(int64_t rows) {
  switch (rows) {
    case 1: return &panel_rows_avx2<1, 2>;
    case 2: return &panel_rows_avx2<2, 2>;
    case 3: return &panel_rows_avx2<3, 1>;
    case 4: return &panel_rows_avx2<4, 1>;
    case 5: return &panel_rows_avx2<5, 1>;
    default: return &panel_rows_avx2<6, 1>;
  }
}

// The kernel for `rows` rows: up to 24 accumulators (of AVX-512's 32 registers), all four
// gates a pass up to 4 rows, two up to 12 (6 rows with all four gates a pass instead is no
// faster).
inline PanelRowsFn panel_rows_for(int64_t rows) {
  switch (rows) {
    case 1: return &panel_rows<1, 4>;
    case 2: return &panel_rows<2, 4>;
    case 3: return &panel_rows<3, 4>;
    case 4: return &panel_rows<4, 4>;
    case 5: return &panel_rows<5, 2>;
    case 6: return &panel_rows<6, 2>;
    case 7: return &panel_rows<7, 2>;
    case 8: return &panel_rows<8, 2>;
    case 9: return &panel_rows<9, 2>;
    case 10: return &panel_rows<10, 2>;
    case 11: return &panel_rows<11, 2>;
    default: return &panel_rows<12, 2>;
  }
}

}  // namespace detail
#endif

// g[m, ·] += a[m, K] · w for the units [j0, j0 + n) of every gate (j0 a multiple of 16), on the
// calling thread; `packed` is pack_panels(w, G), g row-major [m, G·H] with leading dim ldg, a
// row-major with leading dim lda. Unit block by unit block (two at a time, four for m <= 4:
// what one pass of the kernel covers), and for each every chunk of at most 12 rows, as even as
// they go (16 rows: two of 8): the chunks after the first reread the block's panels from L2
// (4·K·16 floats, 128 KB at K = 512), so each weight comes from memory or L3 once a step even
// where the thread's share does not fit its L2 (H = 512: 2 MB). Chunks outside, unit blocks
// inside would reread the whole share per chunk, from L3 there (slower at 20,64,512,512:
// docs/performance.md).
// panels_available() must hold.
inline void panel_gemm(int64_t m, int64_t K, int64_t H, int64_t G, const float* a, int64_t lda,
                       const float* packed, float* g, int64_t ldg, int64_t j0, int64_t n,
                       bool accumulate = true) {
#if defined(TLG_HAVE_AVX512_PANELS)
  TORCH_INTERNAL_ASSERT(m >= 1 && j0 % kPanelWidth == 0);
  const bool wide = panels_avx512();
  const int64_t chunk = wide ? 12 : 6;  // rows a kernel call takes (registers: 32 or 16)
  const int64_t u0 = j0 / kPanelWidth, u1 = panel_blocks(std::min(H, j0 + n));
  const int64_t chunks = (m + chunk - 1) / chunk, base = m / chunks, longer = m % chunks;
  const int64_t ustep = m <= 4 ? 4 : 2;
  for (int64_t u = u0; u < u1; u += ustep) {
    int64_t r = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      const int64_t rows = base + (k < longer ? 1 : 0);
      const detail::PanelRowsFn fn =
          wide ? detail::panel_rows_for(rows) : detail::panel_rows_avx2_for(rows);
      fn(K, H, G, a + r * lda, lda, packed, g + r * ldg, ldg, u, std::min(u + ustep, u1),
         accumulate);
      r += rows;
    }
  }
#else
  TORCH_INTERNAL_ASSERT(false, "panel_gemm: built without AVX-512 support");
#endif
}

}  // namespace torch_lstm_grad::cpu
