// d · wᵀ for a few rows of d (the cells' backward products, csrc/cell_products.h), as dot
// products of contiguous rows. With w [K, N] row-major, BLAS's product d · wᵀ is its "NT" form,
// which MKL ran at 8 rows of d 2.2x slower than nn.LSTMCell's products on its [4H, ·] weights
// (docs/performance.md §3.9: the LSTM cell loop at B = 8, H = 512). Each output is the
// dot product of a row of d and a row of w, both contiguous: a block of KB rows of w is read
// once, front to back, and meets d's rows, four at a time, in registers (4 · KB accumulators),
// so w is read once and d stays in L1 or L2.
//
// The sums: lane l of a vector of L floats (16 on AVX-512, 8 on AVX2) adds the terms
// n ≡ l (mod L) in order from zero, the last partial vector masked to zeros; then the L lanes
// are summed pairwise. Each sum runs over N / L terms and a log2(L)-deep tree, against BLAS's
// blocked sums: as close to the float64 product (docs/performance.md §3.12; the tests:
// tests/ops/test_raw_ops_isa_paths.py at each instruction set, tests/ops/test_autograd.py).
// The order does not depend on how the rows are grouped or split over threads.
#include "dot_rows.h"

#include <ATen/Parallel.h>

#include <algorithm>

#include "cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TLG_HAVE_DOT_ROWS 1
#endif

namespace torch_lstm_grad::cpu {

#if defined(TLG_HAVE_DOT_ROWS)
namespace {

// GCC 12's unmasked AVX-512 shuffles pass _mm512_undefined_ps(), a self-initialised variable,
// and -Wall reports it once per shuffle inlined (GCC bug 105593, as in transpose.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// out[r·ldo + q] = Σ_n d[r·ldd + n] · w[q·ldw + n] for r < R, q < KB.
template <int R, int KB>
__attribute__((target("avx512f"))) void dot_block_avx512(int64_t N, const float* __restrict d,
                                                         int64_t ldd, const float* __restrict w,
                                                         int64_t ldw, float* __restrict out,
                                                         int64_t ldo) {
  __m512 acc[R][KB];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < KB; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  int64_t n = 0;
  for (; n + 16 <= N; n += 16) {
    __m512 wv[KB];
    for (int q = 0; q < KB; ++q) wv[q] = _mm512_loadu_ps(w + q * ldw + n);
    for (int r = 0; r < R; ++r) {
      const __m512 dv = _mm512_loadu_ps(d + r * ldd + n);
      for (int q = 0; q < KB; ++q) acc[r][q] = _mm512_fmadd_ps(dv, wv[q], acc[r][q]);
    }
  }
  if (n < N) {
    const __mmask16 m = static_cast<__mmask16>((1u << (N - n)) - 1u);
    __m512 wv[KB];
    for (int q = 0; q < KB; ++q) wv[q] = _mm512_maskz_loadu_ps(m, w + q * ldw + n);
    for (int r = 0; r < R; ++r) {
      const __m512 dv = _mm512_maskz_loadu_ps(m, d + r * ldd + n);
      for (int q = 0; q < KB; ++q) acc[r][q] = _mm512_fmadd_ps(dv, wv[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < KB; ++q) {
      // Pairwise: the upper half onto the lower, down to one lane.
      const __m512 v = acc[r][q];
      const __m256 s8 =
          _mm512_castps512_ps256(_mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E)));
      const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      out[r * ldo + q] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
  }
}

#pragma GCC diagnostic pop

template <int R, int KB>
__attribute__((target("avx2,fma"))) void dot_block_avx2(int64_t N, const float* __restrict d,
                                                        int64_t ldd, const float* __restrict w,
                                                        int64_t ldw, float* __restrict out,
                                                        int64_t ldo) {
  __m256 acc[R][KB];
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < KB; ++q) acc[r][q] = _mm256_setzero_ps();
  }
  int64_t n = 0;
  for (; n + 8 <= N; n += 8) {
    __m256 wv[KB];
    for (int q = 0; q < KB; ++q) wv[q] = _mm256_loadu_ps(w + q * ldw + n);
    for (int r = 0; r < R; ++r) {
      const __m256 dv = _mm256_loadu_ps(d + r * ldd + n);
      for (int q = 0; q < KB; ++q) acc[r][q] = _mm256_fmadd_ps(dv, wv[q], acc[r][q]);
    }
  }
  if (n < N) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(N - n)), lane);
    __m256 wv[KB];
    for (int q = 0; q < KB; ++q) wv[q] = _mm256_maskload_ps(w + q * ldw + n, m);
    for (int r = 0; r < R; ++r) {
      const __m256 dv = _mm256_maskload_ps(d + r * ldd + n, m);
      for (int q = 0; q < KB; ++q) acc[r][q] = _mm256_fmadd_ps(dv, wv[q], acc[r][q]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int q = 0; q < KB; ++q) {
      const __m128 s4 =
          _mm_add_ps(_mm256_castps256_ps128(acc[r][q]), _mm256_extractf128_ps(acc[r][q], 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      out[r * ldo + q] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
  }
}

using DotBlockFn = void (*)(int64_t, const float*, int64_t, const float*, int64_t, float*,
                            int64_t);

// A kernel for R rows of d: KB rows of w a block (R · KB accumulators, KB loaded rows of w and
// one of d within the registers: 32 on AVX-512, 16 on AVX2), and a one-row kernel for the last
// rows of w.
struct DotKernels {
  DotBlockFn block;
  DotBlockFn single;
  int64_t kb;
};

template <int R, int KB>
DotKernels avx512_kernels() {
  return {&dot_block_avx512<R, KB>, &dot_block_avx512<R, 1>, KB};
}
template <int R, int KB>
DotKernels avx2_kernels() {
  return {&dot_block_avx2<R, KB>, &dot_block_avx2<R, 1>, KB};
}

// d's rows go four at a time: with all eight at once on AVX-512 (three rows of w a block), the
// eight rows of d are re-read from L1 or L2 for every three of w, and at B = 8 the kernel was
// 0.97-1.32x MKL's time where w fits L2 (K, N = 512, 256-1024), against 0.79-0.86x four at a
// time with six rows of w a block (docs/performance.md §3.12).
constexpr int64_t kRowGroup = 4;

// The kernels for `rows` (<= kRowGroup) rows of d: `alone`, the only group (B <= 4), with as
// many rows of w as the registers hold; else one of several groups, with the block of w of
// the full group.
DotKernels kernels_for(bool wide, int64_t rows, bool alone) {
  if (wide) {
    if (alone && rows <= 2) return rows == 1 ? avx512_kernels<1, 8>() : avx512_kernels<2, 8>();
    switch (rows) {
      case 1: return avx512_kernels<1, 6>();
      case 2: return avx512_kernels<2, 6>();
      case 3: return avx512_kernels<3, 6>();
      default: return avx512_kernels<4, 6>();
    }
  }
  if (alone && rows <= 2) return rows == 1 ? avx2_kernels<1, 4>() : avx2_kernels<2, 4>();
  switch (rows) {
    case 1: return avx2_kernels<1, 2>();
    case 2: return avx2_kernels<2, 2>();
    case 3: return avx2_kernels<3, 2>();
    default: return avx2_kernels<4, 2>();
  }
}

bool wide_isa() {
  static const bool wide = cpu::isa() == Isa::kAvx512 && cpu_has("avx512_f");
  return wide;
}

bool isa_available() {
  static const bool ok = cpu::isa() >= Isa::kAvx2 && cpu_has("avx2") && cpu_has("fma3");
  return ok;
}

// 1 to kDotRowsMax rows, but not 2 or 3 on AVX-512, where the kernel took 0.85-1.30x the time
// of MKL's own product (docs/performance.md §3.12).
bool rows_taken(int64_t B) {
  return B >= 1 && B <= kDotRowsMax && (B == 1 || B >= 4 || !wide_isa());
}

}  // namespace
#endif

namespace {

// What the kernel can compute: float32 CPU operands with unit-stride rows, d with 1 to
// kDotRowsMax rows, on a CPU with AVX2 and FMA.
bool dot_rows_fit(const at::Tensor& d, const at::Tensor& w) {
#if defined(TLG_HAVE_DOT_ROWS)
  return isa_available() && d.is_cpu() && w.is_cpu() && d.scalar_type() == at::kFloat &&
         w.scalar_type() == at::kFloat && d.dim() == 2 && w.dim() == 2 && d.size(0) >= 1 &&
         d.size(0) <= kDotRowsMax && d.size(1) == w.size(1) && d.size(1) > 0 &&
         w.size(0) > 0 && d.stride(1) == 1 && w.stride(1) == 1;
#else
  (void)d;
  (void)w;
  return false;
#endif
}

}  // namespace

bool dot_rows_apply(const at::Tensor& d, const at::Tensor& w) {
#if defined(TLG_HAVE_DOT_ROWS)
  // Below 2^18 multiply-adds the kernel alone was still the faster, but the cell loops at B = 1,
  // H = 128 took 1.02-1.06x their time with it (the AVX2 caps; docs/performance.md §3.12).
  return dot_rows_fit(d, w) && rows_taken(d.size(0)) &&
         d.size(0) * d.size(1) * w.size(0) >= (int64_t{1} << 18);
#else
  (void)d;
  (void)w;
  return false;
#endif
}

void dot_rows(const at::Tensor& d, const at::Tensor& w, const at::Tensor& out) {
  TORCH_INTERNAL_ASSERT(dot_rows_fit(d, w));
  const int64_t B = d.size(0), N = d.size(1), K = w.size(0);
  TORCH_INTERNAL_ASSERT(out.scalar_type() == at::kFloat && out.dim() == 2 && out.size(0) == B &&
                        out.size(1) == K && out.stride(1) == 1);
#if defined(TLG_HAVE_DOT_ROWS)
  const bool wide = wide_isa();
  const int64_t group = std::min(B, kRowGroup);
  const float* dp = d.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ldd = d.stride(0), ldw = w.stride(0), ldo = out.stride(0);
  const DotKernels first = kernels_for(wide, group, B == group);
  const int64_t kb = first.kb, blocks = (K + kb - 1) / kb;
  // About 2^16 multiply-adds a task at the least, so a small product stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (B * N * kb));
  // Block by block of w, each group of d's rows while the block is in L1.
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t q0 = blk * kb;
      for (int64_t r0 = 0; r0 < B; r0 += group) {
        const int64_t rows = std::min(group, B - r0);
        const DotKernels k = rows == group ? first : kernels_for(wide, rows, false);
        const float* dr = dp + r0 * ldd;
        float* o = op + r0 * ldo + q0;
        if (q0 + kb <= K) {
          k.block(N, dr, ldd, wp + q0 * ldw, ldw, o, ldo);
        } else {
          for (int64_t q = q0; q < K; ++q) {
            k.single(N, dr, ldd, wp + q * ldw, ldw, o + (q - q0), ldo);
          }
        }
      }
    }
  });
#endif
}

}  // namespace torch_lstm_grad::cpu
