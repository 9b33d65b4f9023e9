// Products whose K is a long sum, with that sum added pairwise: the weight gradients (Σ over
// T·B rows of inputᵀ · dgates) and the gradients through the gates (Σ over G·H gate columns).
//
// One GEMM accumulates each output element's K products in one register, in order, so its
// rounding grows with the running sum. TF's composite cells multiply one step's B rows per GEMM
// and add the steps up, B + T additions in sequence rather than T·B, and come out several times
// closer to a float64 truth than one GEMM: on TF's CudnnLSTM "large" case (T·B = 512) for dW,
// on the "medium" one (B = 8, G·H = 512) for dx and the initial-state gradient.
//
// Here each [64, 128] tile of the result sums K in chunks: kPairwiseGroup chunks of `chunk`
// rows accumulate into a partial tile (brgemm calls on the tile in cache), and partial tiles of
// equal size are added as they come (a binary counter): chunk + kPairwiseGroup +
// log2(K / (chunk · group)) additions in sequence, 16 + 4 + 3 at K = 512 against TF's 16 + 32.
// Short chunks cost time (per-call and tile traffic, a noticeable part of the CudnnRNN backward
// at TF's test shapes), so products above kPairwiseMaxMacs (every product of the benchmark's
// shapes) are long_sum_out's: fewer, longer sums (see there).
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "activations.h"
#include "gemm.h"

namespace torch_lstm_grad {
namespace cpu {

constexpr int64_t kPairwiseMaxMacs = int64_t{1} << 27;
constexpr int64_t kPairwiseChunk = 16; // rows per chunk (brgemm's K), by default
constexpr int64_t kPairwiseGroup = 4;   // chunks per partial tile
constexpr int64_t kPairwiseTileM = 64, kPairwiseTileN = 128;

namespace detail {

// dst[m, n] += src[m, n], both with leading dimension ld.
template <typename scalar_t>
struct AddTileKernel {
  TLG_INLINE static void body(scalar_t* __restrict dst, const scalar_t* __restrict src, int64_t ld, int64_t m, int64_t n) {
    for (int64_t i = 0; i < m; ++i) {
      scalar_t* __restrict d = dst + i * ld;
      const scalar_t* __restrict s = src + i * ld;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < n; ++j) d[j] += s[j];
    }
  }
};

// add_tile: AddTileKernel::body compiled for the instruction set cpu::isa() chose.
template <typename scalar_t>
void add_tile(scalar_t* __restrict dst, const scalar_t* __restrict src, int64_t ld, int64_t m, int64_t n) {
  cpu::dispatch<AddTileKernel<scalar_t>>(dst, src, ld, m, n);
}

// One [m, n] tile of c = a · b, on the calling thread. `stack`: levels + 1 partial tiles
// [kPairwiseTileM, kPairwiseTileN]; held[k]: how many groups partial tile k holds.
inline void pairwise_tile(int64_t m, int64_t n, int64_t K, const float* a, int64_t lda,
                          const float* b, int64_t ldb, float* c, int64_t ldc, int64_t chunk,
                          float* stack, int64_t* held) {
  constexpr int64_t ld = kPairwiseTileN, tile = kPairwiseTileM * kPairwiseTileN;
  const int64_t group = chunk * kPairwiseGroup;
  int64_t depth = 0;
  for (int64_t g0 = 0; g0 < K; g0 += group) {
    float* top = stack + depth * tile;
    for (int64_t k0 = g0; k0 < std::min(K, g0 + group); k0 += chunk) {
      block_gemm(m, n, std::min(chunk, K - k0), a + k0, lda, b + k0 * ldb, ldb, top, ld,
                 /*accumulate=*/k0 > g0);
    }
    held[depth++] = 1;
    while (depth >= 2 && held[depth - 1] == held[depth - 2]) {
      add_tile(stack + (depth - 2) * tile, stack + (depth - 1) * tile, ld, m, n);
      held[depth - 2] *= 2;
      --depth;
    }
  }
  for (; depth >= 2; --depth) {  // the remainder, smallest partials first
    add_tile(stack + (depth - 2) * tile, stack + (depth - 1) * tile, ld, m, n);
  }
  for (int64_t i = 0; i < m; ++i) std::copy(stack + i * ld, stack + i * ld + n, c + i * ldc);
}

// Rows of K per product in long_sum_out's AVX2 form.
constexpr int64_t kLongSumChunk = 256;

// c = a · b for a long sum the pairwise tiles do not take. float32 on the AVX2 kernels: MKL's
// sgemm (at::mm) on chunks of kLongSumChunk rows of K, each chunk added onto c by the next call
// (beta = 1), 256 + K / 256 additions in sequence. On a Zen 3 (AVX2 only), paired against one
// oneDNN matmul (cpu::matmul takes oneDNN from 2^23 multiply-adds), the fwd+bwd of BlockLSTM
// and CudnnRNNV3's LSTM took 0.92-0.99x the time at the benchmark's shapes. One MKL call over
// all of K is 1-2% faster still, but at TF-model sizes (T 16, B 32, I = H = 256) it leaves
// BlockLSTM's w_grad 1.5-1.8x TF's error from float64; the chunks' is 1.1-1.3x, oneDNN's
// 4.3-5.3x (docs/performance.md §3.16, tests/ops/test_raw_ops_accuracy.py). AVX-512 and the
// other types keep one cpu::matmul: not measured there.
inline bool long_sum_in_chunks(const at::Tensor& a, const at::Tensor& b) {
  return cpu::isa() == Isa::kAvx2 && a.scalar_type() == at::kFloat &&
         b.scalar_type() == at::kFloat;
}

inline void long_sum_out(at::Tensor& c, const at::Tensor& a, const at::Tensor& b) {
  if (!long_sum_in_chunks(a, b)) {
    cpu::matmul_out(c, a, b);
    return;
  }
  const int64_t K = a.size(1), first = std::min(kLongSumChunk, K);
  at::mm_out(c, a.narrow(1, 0, first), b.narrow(0, 0, first));
  for (int64_t k0 = first; k0 < K; k0 += kLongSumChunk) {
    const int64_t n = std::min(kLongSumChunk, K - k0);
    c.addmm_(a.narrow(1, k0, n), b.narrow(0, k0, n));
  }
}

inline bool use_pairwise(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
         a.size(0) * a.size(1) * b.size(1) <= kPairwiseMaxMacs && brgemm_available();
}

}  // namespace detail

// c[M, N] = a[M, K] · b[K, N], K summed pairwise as above (float32 products up to
// kPairwiseMaxMacs where brgemm's kernel runs; anything else: long_sum_out). a, b:
// any strides; c: unit column stride (e.g. a view of a params gradient).
inline void pairwise_sum_gemm_out(at::Tensor& c, const at::Tensor& a, const at::Tensor& b,
                                  int64_t chunk = kPairwiseChunk) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_INTERNAL_ASSERT(c.size(0) == M && c.size(1) == N && (c.stride(1) == 1 || N <= 1));
  if (M == 0 || N == 0 || K == 0) {
    cpu::matmul_out(c, a, b);
    return;
  }
  if (!detail::use_pairwise(a, b)) {
    detail::long_sum_out(c, a, b);
    return;
  }
  int64_t levels = 1;
  while ((chunk * kPairwiseGroup << (levels - 1)) < K) ++levels;
  const auto [A, lda] = row_major(a);
  const auto [Bm, ldb] = row_major(b);
  const float* ap = A.const_data_ptr<float>();
  const float* bp = Bm.const_data_ptr<float>();
  float* cp = c.data_ptr<float>();
  const int64_t ldc = M == 1 ? N : c.stride(0);
  const int64_t tiles_m = (M + kPairwiseTileM - 1) / kPairwiseTileM;
  const int64_t tiles_n = (N + kPairwiseTileN - 1) / kPairwiseTileN;
  // Tiles of one column panel of b are consecutive, so a thread's tiles reuse it from cache.
  at::parallel_for(0, tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
    // Uninitialised: each partial tile is written by a brgemm call before it is read.
    const std::unique_ptr<float[]> stack(new float[(levels + 1) * kPairwiseTileM * kPairwiseTileN]);
    std::vector<int64_t> held(levels + 1);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = t % tiles_m * kPairwiseTileM, n0 = t / tiles_m * kPairwiseTileN;
      detail::pairwise_tile(std::min(kPairwiseTileM, M - m0), std::min(kPairwiseTileN, N - n0),
                            K, ap + m0 * lda, lda, bp + n0, ldb, cp + m0 * ldc + n0, ldc, chunk,
                            stack.get(), held.data());
    }
  });
}

// Products of one step's rows (dh = dgates · Rᵀ over the gate columns) are summed pairwise up
// to this many multiply-adds, in chunks of kPairwiseStepChunk: the bounds of cudnn_rnn.cpp's
// per-step products (TF's test shapes; the benchmark's are 4-64x larger and keep one call).
// BlockLSTM's h_prev_grad, one product a call, takes the chunk at any size (lstm_backend.h).
constexpr int64_t kPairwiseMaxStepMacs = int64_t{1} << 21;
constexpr int64_t kPairwiseStepChunk = 32;

// c[m, n] = a[m, K] · b[K, n], K summed pairwise as above, on the calling thread, for a
// caller's own parallel region over column blocks (BlockLSTM's h_prev_grad, whose weight is in
// RecurrentGemm's blocks form). float32 row-major operands with leading dims lda, ldb, ldc;
// brgemm must run (brgemm_available()).
inline void pairwise_sum_block(int64_t m, int64_t n, int64_t K, const float* a, int64_t lda,
                               const float* b, int64_t ldb, float* c, int64_t ldc,
                               int64_t chunk = kPairwiseStepChunk) {
  if (m == 0 || n == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  int64_t levels = 1;
  while ((chunk * kPairwiseGroup << (levels - 1)) < K) ++levels;
  // Per thread, kept between calls: a step's blocks would otherwise allocate every time.
  thread_local std::vector<float> stack;
  thread_local std::vector<int64_t> held;
  stack.resize(std::max<size_t>(stack.size(), (levels + 1) * kPairwiseTileM * kPairwiseTileN));
  held.resize(std::max<size_t>(held.size(), levels + 1));
  for (int64_t m0 = 0; m0 < m; m0 += kPairwiseTileM) {
    for (int64_t n0 = 0; n0 < n; n0 += kPairwiseTileN) {
      detail::pairwise_tile(std::min(kPairwiseTileM, m - m0), std::min(kPairwiseTileN, n - n0), K,
                            a + m0 * lda, lda, b + n0, ldb, c + m0 * ldc + n0, ldc, chunk,
                            stack.data(), held.data());
    }
  }
}

// The same as a new tensor (one cpu::matmul product: its own result, no copy).
inline at::Tensor pairwise_sum_gemm(const at::Tensor& a, const at::Tensor& b) {
  if (!detail::use_pairwise(a, b) && !detail::long_sum_in_chunks(a, b)) return cpu::matmul(a, b);
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  pairwise_sum_gemm_out(c, a, b);
  return c;
}

// out[N] = Σ_k a[k, :] for a contiguous float32 a [K, N] (the bias gradients: Σ over T·B rows
// of dgates), the rows summed pairwise: chunks of kPairwiseChunk rows added in sequence into a
// partial row, partial rows merged as they come; 16 + log2(K / 16) additions in sequence (one
// at::sum over the rows is several times less accurate than TF on TF's "large" case). Anything
// else: at::sum_out.
inline void pairwise_column_sum_out(at::Tensor& out, const at::Tensor& a) {
  if (a.scalar_type() != at::kFloat || !a.is_contiguous() || !out.is_contiguous() ||
      a.dim() != 2) {
    at::sum_out(out, a, 0);
    return;
  }
  const int64_t K = a.size(0), N = a.size(1);
  if (N == 0) return;
  if (K == 0) {
    out.zero_();
    return;
  }
  constexpr int64_t kCols = 512;
  int64_t levels = 1;
  while ((kPairwiseChunk << (levels - 1)) < K) ++levels;
  const float* ap = a.const_data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, (N + kCols - 1) / kCols, 1, [&](int64_t b0, int64_t b1) {
    const std::unique_ptr<float[]> stack(new float[(levels + 1) * kCols]);
    std::vector<int64_t> held(levels + 1);
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n0 = blk * kCols, n = std::min(kCols, N - n0);
      int64_t depth = 0;
      for (int64_t k0 = 0; k0 < K; k0 += kPairwiseChunk) {
        float* top = stack.get() + depth * kCols;
        std::copy(ap + k0 * N + n0, ap + k0 * N + n0 + n, top);
        for (int64_t k = k0 + 1; k < std::min(K, k0 + kPairwiseChunk); ++k) {
          detail::add_tile(top, ap + k * N + n0, /*ld=*/0, /*m=*/1, n);
        }
        held[depth++] = 1;
        while (depth >= 2 && held[depth - 1] == held[depth - 2]) {
          detail::add_tile(top - kCols, top, 0, 1, n);
          top -= kCols;
          held[depth - 2] *= 2;
          --depth;
        }
      }
      for (; depth >= 2; --depth) {
        detail::add_tile(stack.get() + (depth - 2) * kCols, stack.get() + (depth - 1) * kCols, 0,
                         1, n);
      }
      std::copy(stack.get(), stack.get() + n, op + n0);
    }
  });
}

}  // namespace cpu
}  // namespace torch_lstm_grad
