// The GEMMs of the CPU kernels, on the fastest engine PyTorch's own build carries.
//
// Whole-sequence products (the input projection of every step, dx, dW): `matmul`, oneDNN's
// matmul where PyTorch has it (faster than MKL's sgemm through at::mm on the LSTM shapes, above
// all on AMD CPUs, where MKL takes a generic path; docs/performance.md), else ATen; bfloat16
// operands tiled over the threads on PyTorch's brgemm bf16 kernel (bf16_tiled_gemm).
//
// The recurrent product of a time loop: the same weight multiplies a small [m, K] block once
// per step, so whatever the weight can be prepared into once is worth preparing. Two prepared
// forms, chosen per loop by RecurrentGemm:
// - oneDNN's blocked weight layout: faster than MKL's packed sgemm on the LSTM shapes from
//   about 2^22 multiply-adds per step up (oneDNN blocks and threads the small product itself).
// - MKL's packed sgemm (cblas_sgemm_pack / cblas_sgemm_compute), split over the threads by
//   output columns: a plain sgemm repacks the weight on every call, which on a [256, 1024]
//   weight costs as much as the product for m = 32. PyTorch's x86 builds link MKL into
//   libtorch_cpu and export both; the references are weak so that on a build without them (ARM,
//   OpenBLAS) `available()` is false.
// - no preparation at all, for PyTorch's brgemm micro-kernel (at::native::cpublas::brgemm,
//   oneDNN's ukernel JIT-compiled for the CPU, float32 from AVX2): it runs on one thread from
//   inside a parallel region with no per-call cost, so a caller can split the product into
//   column blocks and apply its pointwise pass to each block while it is in cache, one parallel
//   region per step (lstm_block.cpp's fused steps). `blocks()` says when this is the form.
// oneDNN is reached through the ops PyTorch registers for its own CPU linear layers
// (mkldnn::_reorder_linear_weight, mkldnn::_linear_pointwise), looked up in the dispatcher: its
// C API is not exported by libtorch. Anything else (other dtypes, few steps, builds with
// neither) uses ATen's GEMM.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUBlas.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_features.h"
#include "small_batch.h"
#include "transpose.h"

extern "C" {
// MKL's CBLAS constants and LP64 prototypes (MKL_INT = int), declared here to avoid mkl.h.
size_t cblas_sgemm_pack_get_size(int identifier, int m, int n, int k) __attribute__((weak));
void cblas_sgemm_pack(int layout, int identifier, int trans, int m, int n, int k, float alpha,
                      const float* src, int ld, float* dest) __attribute__((weak));
void cblas_sgemm_compute(int layout, int transa, int transb, int m, int n, int k, const float* a,
                         int lda, const float* b, int ldb, float beta, float* c, int ldc)
    __attribute__((weak));
}

namespace torch_lstm_grad::cpu {

class PackedWeight {
 public:
  static constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151;
  static constexpr int kBMatrix = 162;

  static bool available() {
    return cblas_sgemm_pack_get_size != nullptr && cblas_sgemm_pack != nullptr &&
           cblas_sgemm_compute != nullptr;
  }

  // b: a float32 [K, N] matrix (any view whose rows or columns are unit-stride), used as the
  // right operand of every product; `max_m` is the most rows any product will have.
  PackedWeight(const at::Tensor& b, int64_t max_m) : k_(b.size(0)), n_(b.size(1)) {
    TORCH_INTERNAL_ASSERT(b.scalar_type() == at::kFloat && b.dim() == 2);
    const bool row_major = b.stride(1) == 1;
    const at::Tensor src = row_major || b.stride(0) == 1 ? b : b.contiguous();
    const bool rm = src.stride(1) == 1;
    const int ld = static_cast<int>(rm ? src.stride(0) : src.stride(1));
    const size_t bytes = cblas_sgemm_pack_get_size(kBMatrix, static_cast<int>(max_m),
                                                   static_cast<int>(n_), static_cast<int>(k_));
    buffer_ = at::empty({static_cast<int64_t>((bytes + 3) / 4)}, src.options());
    // A column-major-stored B (e.g. a transposed view) is packed as row-major Bᵀ transposed.
    cblas_sgemm_pack(kRowMajor, kBMatrix, rm ? kNoTrans : kTrans, static_cast<int>(max_m),
                     static_cast<int>(n_), static_cast<int>(k_), 1.0f, src.const_data_ptr<float>(),
                     ld, buffer_.data_ptr<float>());
  }

  // c[m, N] = a[m, K] · B + beta · c[m, N]; a and c row-major with leading dims lda, ldc.
  void gemm(const float* a, int64_t m, int64_t lda, float beta, float* c, int64_t ldc) const {
    if (m == 0) return;
    cblas_sgemm_compute(kRowMajor, kNoTrans, kPacked, static_cast<int>(m), static_cast<int>(n_),
                        static_cast<int>(k_), a, static_cast<int>(lda),
                        buffer_.const_data_ptr<float>(), static_cast<int>(n_), beta, c,
                        static_cast<int>(ldc));
  }

 private:
  int64_t k_, n_;
  at::Tensor buffer_;
};

namespace onednn {

using ReorderFn = at::Tensor(const at::Tensor&, std::optional<int64_t>);
using LinearFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            c10::string_view, c10::List<std::optional<at::Scalar>>,
                            std::optional<c10::string_view>);

struct Ops {
  c10::TypedOperatorHandle<ReorderFn> reorder;  // weight [N, K] -> oneDNN's layout
  c10::TypedOperatorHandle<LinearFn> linear;    // x [M, K], weight [N, K] -> x · weightᵀ
};

// The ops, or nothing on a build without them (USE_MKLDNN=0, or other signatures).
inline const std::optional<Ops>& ops() {
  static const std::optional<Ops> found = []() -> std::optional<Ops> {
    auto& d = c10::Dispatcher::singleton();
    const auto reorder = d.findSchema({"mkldnn::_reorder_linear_weight", ""});
    const auto linear = d.findSchema({"mkldnn::_linear_pointwise", ""});
    if (!reorder || !linear || !at::hasMKLDNN()) return std::nullopt;
    try {  // typed() checks the C++ signature against the schema of this torch build
      return Ops{reorder->typed<ReorderFn>(), linear->typed<LinearFn>()};
    } catch (const c10::Error&) {
      return std::nullopt;
    }
  }();
  return found;
}

// x · weightᵀ as a new [M, N] tensor (the op has no out= or accumulating form).
inline at::Tensor linear(const at::Tensor& x, const at::Tensor& weight) {
  return ops()->linear.call(x, weight, std::nullopt, "none",
                            c10::List<std::optional<at::Scalar>>(), std::nullopt);
}

}  // namespace onednn

// A float32 weight in oneDNN's own layout, for the recurrent products.
class OneDnnWeight {
 public:
  static bool available() { return onednn::ops().has_value(); }

  // b: a float32 [K, N] matrix, the right operand of every product; `m` is a hint of the rows.
  OneDnnWeight(const at::Tensor& b, int64_t m)
      : packed_(onednn::ops()->reorder.call(b.t().contiguous(), m)) {}

  at::Tensor operator()(const at::Tensor& a) const { return onednn::linear(a, packed_); }

 private:
  at::Tensor packed_;
};

// Whether at::native::cpublas::brgemm runs oneDNN's JIT kernel for float32 (else it falls back
// to one plain sgemm per call, slower than the library GEMMs it would replace): the condition
// PyTorch's CPUBlas.cpp checks (oneDNN enabled, an AVX2 CPU), on an x86 build with oneDNN.
inline bool brgemm_available() {
#if defined(__x86_64__)
  // oneDNN's JIT, whose own cap is ONEDNN_MAX_CPU_ISA (not ATEN_CPU_CAPABILITY, which this
  // package's own kernels follow).
  static const bool isa = cpu_has("avx2");
  return isa && at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
#else
  return false;
#endif
}

// Whether brgemm's bfloat16 kernel (bf16 x bf16 -> float32, B in VNNI pairs) runs on bf16
// instructions: AVX512-BF16 without AMX. PyTorch's own check admits any AVX-512 CPU, where
// oneDNN would emulate the bf16 products: not faster than float32, so not taken here. Nor on a
// CPU with AMX, where oneDNN builds an AMX kernel instead: for a small LSTM with projection
// (its products' K or N is 3) it fails to (oneDNN's log: brgemm_desc_finalize failed), and
// PyTorch's brgemm then runs tile loads with no tile configuration, which kills the process
// with SIGILL (Sapphire Rapids, oneDNN 3.10.2, torch 2.11.0, the process granted AMX).
// There bfloat16 ops multiply in float32, the same products summed in another order.
inline bool bf16_brgemm_available() {
#if defined(__x86_64__)
  static const bool isa =
      cpu::isa() == Isa::kAvx512 && cpu_has("avx512_bf16") && !cpu_has("amx_tile");
  return isa && brgemm_available();
#else
  return false;
#endif
}

// The type a product's operands take for an op of dtype `t` on this CPU: bfloat16 ops multiply
// in bf16 (float32 accumulation) where bf16_brgemm_available, anything else in its float type.
// A bf16 x bf16 product is exact in float32, so on bf16 values only the summation order differs
// from a float32 GEMM.
inline at::ScalarType product_type(at::ScalarType t) {
  return t == at::kBFloat16 && bf16_brgemm_available() ? t : at::toOpMathType(t);
}

// c[m, n] = a[m, k] · b[k, n] (+ c), all float32 row-major with leading dims lda, ldb, ldc, on
// the calling thread.
inline void block_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                       const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  at::native::cpublas::brgemm(m, n, k, lda, ldb, ldc, accumulate, a, b, c, /*is_vnni=*/false);
}

// A 2-D t as a contiguous matrix: t itself, or a copy; a transposed view (a weight passed as
// wᵀ) is transposed back in parallel tiles, where ATen's copy would take one thread (once per
// call, a weight's worth of strided reads).
inline at::Tensor contiguous_matrix(const at::Tensor& t) {
  if (t.is_contiguous()) return t;
  at::Tensor out = at::empty(t.sizes(), t.options());
  if (t.stride(0) == 1) {
    transpose_into(out, t.t());
  } else {
    out.copy_(t);
  }
  return out;
}

// t as a row-major matrix (unit column stride) and its leading dimension: t itself, or a
// contiguous copy.
inline std::pair<at::Tensor, int64_t> row_major(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, t.size(1)};
  if (t.stride(1) == 1 && t.stride(0) >= t.size(1)) return {t, t.stride(0)};
  return {contiguous_matrix(t), t.size(1)};
}

// A bfloat16 [K, N] right operand in the VNNI layout brgemm's bf16 kernel reads: rows in pairs,
// [ceil(K/2), N, 2], each column's two rows side by side (a zero row pads an odd K; brgemm does
// not read the left operand's matching column).
class VnniMatrix {
 public:
  VnniMatrix() = default;
  // b: bfloat16 [K, N], any strides.
  explicit VnniMatrix(const at::Tensor& b) : k_(b.size(0)), n_(b.size(1)) {
    TORCH_INTERNAL_ASSERT(b.scalar_type() == at::kBFloat16 && b.dim() == 2);
    const auto [src, ld] = row_major(b);
    packed_ = at::empty({(k_ + 1) / 2, n_, 2}, src.options());
    const auto* in = src.const_data_ptr<at::BFloat16>();
    auto* out = packed_.data_ptr<at::BFloat16>();
    const int64_t n = n_, k = k_;
    at::parallel_for(0, (k + 1) / 2, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const at::BFloat16* __restrict even = in + 2 * r * ld;
        const at::BFloat16* __restrict odd = 2 * r + 1 < k ? even + ld : nullptr;
        at::BFloat16* __restrict o = out + 2 * r * n;
        for (int64_t j = 0; j < n; ++j) {
          o[2 * j] = even[j];
          o[2 * j + 1] = odd != nullptr ? odd[j] : at::BFloat16(0.0f);
        }
      }
    });
  }
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  // Column j onwards, for block_gemm with ldb = n().
  const at::BFloat16* column(int64_t j) const {
    return packed_.const_data_ptr<at::BFloat16>() + 2 * j;
  }

 private:
  int64_t k_ = 0, n_ = 0;
  at::Tensor packed_;
};

// c[m, n] (float32) = a[m, k] · b's columns [j0, j0 + n) (+ c): a bfloat16 row-major, on the
// calling thread. Ends by releasing the kernel's hardware context (the AMX tile state; nothing
// on AVX512-BF16), so that no tile configuration outlives the call on this thread.
inline void block_gemm(int64_t m, int64_t n, int64_t k, const at::BFloat16* a, int64_t lda,
                       const VnniMatrix& b, int64_t j0, float* c, int64_t ldc, bool accumulate) {
  at::native::cpublas::brgemm(m, n, k, lda, b.n(), ldc, accumulate, a, b.column(j0), c,
                              /*is_vnni=*/true);
  at::native::cpublas::brgemm_release(/*is_vnni=*/true);
}

// c[M, N] (float32) = a[M, K] · b[K, N] for bfloat16 a and b on brgemm's bf16 kernel, b packed
// into VNNI pairs once; c: unit column stride. [64, 128] tiles of c shared out over the threads,
// column panels outermost so a thread's tiles reuse b's panel from cache. Faster than oneDNN's
// float32 matmul on the LSTM products of the benchmark shapes. (The same tiling in float32 beat
// oneDNN's matmul op in isolation but not inside BlockLSTM's forward + backward, so float32
// stays on oneDNN; docs/performance.md.)
inline void bf16_tiled_gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
  constexpr int64_t kTileM = 64, kTileN = 128;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_INTERNAL_ASSERT(c.scalar_type() == at::kFloat && (c.stride(1) == 1 || N <= 1));
  if (M == 0 || N == 0) return;
  if (K == 0) {
    c.zero_();
    return;
  }
  const auto [A, lda] = row_major(a);
  const VnniMatrix bv(b);
  const auto* ap = A.const_data_ptr<at::BFloat16>();
  float* cp = c.data_ptr<float>();
  const int64_t ldc = M == 1 ? N : c.stride(0);
  const int64_t tiles_m = (M + kTileM - 1) / kTileM, tiles_n = (N + kTileN - 1) / kTileN;
  at::parallel_for(0, tiles_m * tiles_n, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t m0 = t % tiles_m * kTileM, n0 = t / tiles_m * kTileN;
      block_gemm(std::min(kTileM, M - m0), std::min(kTileN, N - n0), K, ap + m0 * lda, lda, bv,
                 n0, cp + m0 * ldc + n0, ldc, /*accumulate=*/false);
    }
  });
}

// Whether a[M, K] · b[K, N] goes to bf16_tiled_gemm: bfloat16 where brgemm's bf16 kernel runs.
inline bool use_bf16_tiled(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
         bf16_brgemm_available();
}

// Whether a[M, K] · b[K, N] goes to oneDNN (without brgemm): float32 from 2^23 multiply-adds.
// Below, its fixed cost per call (tens of µs, the weight reordered each time) outweighs its
// faster kernel (measured on [M, 128] x [128, 512] and [M, 256] x [256, 1024]).
inline bool use_onednn(const at::Tensor& a, const at::Tensor& b) {
  constexpr int64_t kMinOneDnnMacs = int64_t{1} << 23;
  return a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
         a.size(0) * a.size(1) * b.size(1) >= kMinOneDnnMacs && onednn::ops();
}

// a · b as a new contiguous tensor, any strides: of a's dtype, float32 for bfloat16 a and b
// multiplied in bf16 (the callers' product_type).
inline at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  if (use_bf16_tiled(a, b)) {
    at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kFloat));
    bf16_tiled_gemm(a, b, c);
    return c;
  }
  return use_onednn(a, b) ? onednn::linear(a, b.t()) : at::mm(a, b);
}

// out = a · b into an existing tensor of a's dtype such as a view of a larger buffer (a oneDNN
// product is written over in one more pass).
inline void matmul_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (use_onednn(a, b)) {
    out.copy_(onednn::linear(a, b.t()));
  } else {
    at::mm_out(out, a, b);
  }
}

// Width of the column blocks a parallel region splits the n columns of a product of `macs`
// multiply-adds into: one block per thread, a multiple of 16 floats (one AVX-512 vector) wide;
// one block for products too small to share (e.g. B = 1, H = 64: the fork costs more).
constexpr int64_t kMinBlockSplitMacs = int64_t{1} << 18;  // brgemm blocks (no per-call cost)
inline int64_t column_block(int64_t n, int64_t macs) {
  const int64_t threads =
      macs < kMinBlockSplitMacs ? 1 : std::max<int64_t>(1, at::get_num_threads());
  return std::max<int64_t>(16, ((n + threads - 1) / threads + 15) / 16 * 16);
}

// f(j0, n) for each block [j0, j0 + n) of column_block's split of n_cols columns, the blocks
// shared out over the threads in one parallel region.
template <class F>
void for_column_blocks(int64_t n_cols, int64_t macs, const F& f) {
  const int64_t width = column_block(n_cols, macs);
  at::parallel_for(0, (n_cols + width - 1) / width, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t j0 = k0 * width; j0 < std::min(n_cols, k1 * width); j0 += width) {
      f(j0, std::min(width, n_cols - j0));
    }
  });
}

// f(k, j0, n) for the steps k = 0 .. steps - 1, in order, each over the blocks of
// column_block's split of n_cols columns, as `steps` calls of for_column_blocks make it, but in
// one parallel region: each thread keeps its blocks for every step and waits at a barrier after
// each, where the step's results (a time loop's h, or its gate gradients) are complete for the
// next. A fork and join a step cost more (measured on BlockLSTM: docs/performance.md): each
// costs about a microsecond even when idle, and the step's slicing runs on one thread in
// between while the others wait. The barrier needs every block's thread running at once, which
// OpenMP's team promises and ATen's parallel_for does not; without OpenMP, inside another
// parallel region or on one thread: for_column_blocks a step.
// `macs`: one step's multiply-adds (the split's threshold). f must not throw.
template <class F>
void for_steps_column_blocks(int64_t steps, int64_t n_cols, int64_t macs, const F& f) {
  const int64_t width = column_block(n_cols, macs);
  const int64_t blocks = (n_cols + width - 1) / width;
#if defined(_OPENMP)
  const int64_t threads = std::min<int64_t>(blocks, at::get_num_threads());
  if (threads >= 2 && steps >= 2 && !at::in_parallel_region()) {
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      // ATen's split of the blocks over the team (of whatever size OpenMP gave it).
      const int64_t team = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t per = (blocks + team - 1) / team;
      const int64_t j_begin = std::min(blocks, tid * per) * width;
      const int64_t j_end = std::min(n_cols, std::min(blocks, (tid + 1) * per) * width);
      for (int64_t k = 0; k < steps; ++k) {
        for (int64_t j0 = j_begin; j0 < j_end; j0 += width) f(k, j0, std::min(width, n_cols - j0));
#pragma omp barrier
      }
    }
    return;
  }
#endif
  for (int64_t k = 0; k < steps; ++k) {
    for_column_blocks(n_cols, macs, [&](int64_t j0, int64_t n) { f(k, j0, n); });
  }
}

// A time loop on the gate panels (small_batch.h) can also share its steps out by rows: each
// thread takes a block of the batch's rows through every step, on every unit. A row's step
// needs only that row's h (the backward: its gate gradients) from the step before, so there is
// no barrier between the steps, and no thread reads lines another core wrote, as every step
// does in for_steps_column_blocks. In exchange each core reads the whole weight every step,
// not its units' share: from its own L2 where the panels fit there. Taken (panel_row_blocks)
// where the panels take at most half a core's L2 and each thread has at least
// kMinRowsPerThread rows, the range where it was the faster on a 2-core Xeon
// (docs/performance.md §3.13: at H = 64-256, 4-32 rows a thread, the LSTM forwards 0.75-0.96x
// the units split's time, and the backward's split on top of that fwd+bwd 0.88-0.99x; at 1-2
// rows a thread, or with the panels over the L2 at H = 512, 1.1-1.3x). The products' and
// cells' sums are the same either way.
constexpr int64_t kMinRowsPerThread = 4;

// The number of row blocks, one per thread, for a time loop of `rows` rows on pack_panels of a
// [K, G·H] weight; 0 where the loop splits the units instead (for_steps_column_blocks): one
// thread, inside another parallel region, too few rows, a step too small to share
// (column_block's threshold), panels over half the L2, or an L2 size unknown.
inline int64_t panel_row_blocks(int64_t rows, int64_t K, int64_t H, int64_t G) {
  const int64_t threads = at::get_num_threads();
  if (threads < 2 || at::in_parallel_region() || rows < kMinRowsPerThread * threads ||
      rows * K * G * H < kMinBlockSplitMacs) {
    return 0;
  }
  const int64_t panel_bytes =
      panel_blocks(H) * kPanelWidth * G * K * static_cast<int64_t>(sizeof(float));
  const int64_t l2 = l2_cache_bytes();
  return l2 > 0 && 2 * panel_bytes <= l2 ? threads : 0;
}

// f(k, blk, b0, b1) for the steps k = 0 .. steps - 1, in order, on each block blk of `blocks`
// blocks [b0, b1) of `rows` rows (as even as they go), a block per thread for every step, with
// no barrier between the steps: step k of a block may use only what step k - 1 wrote to the
// same rows (and what the block keeps for itself, by blk).
template <class F>
void for_steps_row_blocks(int64_t steps, int64_t rows, int64_t blocks, const F& f) {
  at::parallel_for(0, blocks, 1, [&](int64_t k0, int64_t k1) {
    for (int64_t blk = k0; blk < k1; ++blk) {
      const int64_t b0 = rows * blk / blocks, b1 = rows * (blk + 1) / blocks;
      for (int64_t k = 0; k < steps; ++k) f(k, blk, b0, b1);
    }
  });
}

// out[M, G·H] = a[M, K] · b[K, G·H] (G gate blocks of H columns) written into `out`, an existing
// row-major view such as a region of an op's reserve, which then needs no buffer of its own.
// float32 where the panels run (AVX-512, AVX2): b packed into gate panels (pack_panels) and
// each thread's unit blocks multiplied by panel_gemm, rows kMatmulRowBlock at a time, at
// oneDNN's matmul speed on the LSTM input projections without oneDNN's result tensor and copy.
// Anything else: matmul_out. `packed`: pack_panels(b, G) prepared by the caller, or undefined
// (packed here); the numbers are the same either way.
inline void gate_matmul_out(at::Tensor& out, const at::Tensor& a, const at::Tensor& b, int64_t G,
                            const at::Tensor& packed_b = at::Tensor()) {
  constexpr int64_t kMatmulRowBlock = 48;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  // On AVX2 too: with every library capped at AVX2 the panels are faster than oneDNN's matmul
  // on the LSTM modules' forwards (measured: docs/performance.md).
  const bool panels = panels_available() && a.scalar_type() == at::kFloat &&
                      b.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat &&
                      out.stride(1) == 1 && M > 0 && K > 0 && N > 0;
  if (!panels) {
    cpu::matmul_out(out, a, b);
    return;
  }
  const int64_t H = N / G;
  if (packed_b.defined()) check_panels(packed_b, K, H, G, "packed input weight");
  const at::Tensor packed = packed_b.defined() ? packed_b : pack_panels(b, G);
  const auto [A, lda] = row_major(a);
  const float* ap = A.const_data_ptr<float>();
  const float* pp = packed.const_data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ldo = out.stride(0);
  for_column_blocks(H, M * K * N, [&](int64_t j0, int64_t units) {
    for (int64_t r0 = 0; r0 < M; r0 += kMatmulRowBlock) {
      panel_gemm(std::min(kMatmulRowBlock, M - r0), K, H, G, ap + r0 * lda, lda, pp,
                 op + r0 * ldo, ldo, j0, units, /*accumulate=*/false);
    }
  });
}

// The per-step product of a time loop, c[m', N] = a[m', K] · b (+ c), with one b for the whole
// loop of `steps` products of at most m rows each (fewer where rows finish early: CudnnRNN).
// b is float32/64, or float16/bfloat16 (then made float32 here, or, with allow_blocks, kept
// bf16 where product_type says so). a is of operand_type().
// Preparing a weight costs about one product, so a loop of a few steps (the single-step cell
// ops) does not prepare one. float32 products of at least kMinOneDnnMacs multiply-adds: oneDNN
// (below, its fixed cost per call, tens of µs, makes it lose to MKL; above, its faster kernel
// wins). Otherwise float32: MKL packed, split by output columns over the threads when the
// product is big enough to share (MKL alone runs one this small, e.g. [32, 256] x [256, 1024],
// on one thread; a B = 1 step is not split); packed products need the row count they were
// packed for. Everything else: ATen.
// With allow_blocks, float32 loops on a CPU where PyTorch's brgemm kernel runs, and bfloat16
// ones where its bf16 kernel does, take the blocks form instead (faster at the benchmark shapes,
// docs/performance.md): operator() splits each product by columns over the threads,
// and a caller may fuse its pointwise pass into the same parallel region (blocks(), b_data() or
// b_vnni(), block_gemm).
class RecurrentGemm {
 public:
  static constexpr int64_t kMinSteps = 4;                     // preparing pays off from here
  static constexpr int64_t kMinOneDnnMacs = int64_t{1} << 22;  // per product
  static constexpr int64_t kMinSplitMacs = int64_t{1} << 20;  // per product, to use threads
  // The blocks form on AVX2 (brgemm's AVX2 kernel): only for products below 2^21
  // multiply-adds, where the backward's per-step sums are pairwise on it (pairwise_gemm.h's
  // kPairwiseMaxStepMacs: TF's test shapes, more accurate than TF). Larger products take
  // oneDNN's matmul or MKL's packed sgemm, a step's cell after its product: on AVX2
  // (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) brgemm's
  // AVX2 kernel is the slower there, on BlockLSTM and LSTMBlockFusedCell alike. On AVX-512 the
  // blocks form is the faster at every size (measured: docs/performance.md).
  static constexpr int64_t kMaxAvx2BlockMacs = int64_t{1} << 21;

  // panel_gates (G > 0): b is [K, G·H], G gate blocks of H units, and a caller that fuses its
  // cell per unit (blocks()) may take the panels form for m <= kMaxPanelRows rows: `packed`
  // (pack_panels(b, G), prepared by the caller once per weight version) or packed here. The
  // form is chosen as without `packed` (from kMinSteps steps), so that the numbers do not
  // depend on whether the caller prepared the weight.
  RecurrentGemm(const at::Tensor& b, int64_t m, int64_t steps, bool allow_blocks = false,
                int64_t panel_gates = 0, const at::Tensor& packed = at::Tensor())
      : b_(b), m_(m) {
    if (allow_blocks && panels_form(b, m, steps, panel_gates)) {
      const int64_t K = b.size(0), H = b.size(1) / panel_gates;
      if (packed.defined()) {
        check_panels(packed, K, H, panel_gates, "packed recurrent weight");
        panels_ = packed;
      } else {
        panels_ = pack_panels(b, panel_gates);
      }
      gates_ = panel_gates;
      blocks_ = true;
      return;
    }
    if (allow_blocks && b.scalar_type() == at::kBFloat16 && b.numel() > 0 &&
        product_type(at::kBFloat16) == at::kBFloat16) {
      vnni_ = VnniMatrix(b);  // any number of steps: packing costs what widening would
      blocks_ = bf16_ = true;
      return;
    }
    b_ = b.to(at::toOpMathType(b.scalar_type()));
    if (b_.scalar_type() != at::kFloat || b_.numel() == 0 || m == 0 || steps < kMinSteps) return;
    const int64_t K = b_.size(0), N = b_.size(1);
    if (allow_blocks && float_blocks_form(m, K, N)) {
      b_ = contiguous_matrix(b_);
      blocks_ = true;
      return;
    }
    if (m * K * N >= kMinOneDnnMacs && OneDnnWeight::available()) {
      onednn_.emplace(b_, m);
      return;
    }
    if (!PackedWeight::available()) return;
    const int64_t threads = m * K * N >= kMinSplitMacs ? at::get_num_threads() : 1;
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, N / 64));
    const int64_t width = (N + chunks - 1) / chunks;
    for (int64_t n0 = 0; n0 < N; n0 += width) {
      packed_.emplace_back(n0, PackedWeight(b_.narrow(1, n0, std::min(width, N - n0)), m));
    }
  }

  // Whether RecurrentGemm(b, m, steps, /*allow_blocks=*/true, panel_gates) takes the panels
  // form, told without preparing the weight.
  static bool panels_form(const at::Tensor& b, int64_t m, int64_t steps, int64_t panel_gates) {
    return panel_gates > 0 && b.scalar_type() == at::kFloat && m >= 1 && m <= max_panel_rows() &&
           b.size(0) > 0 && panels_available() && steps >= kMinSteps;
  }

  // Whether RecurrentGemm(b, m, steps, /*allow_blocks=*/true, panel_gates) of a float32 b takes
  // the panels or the blocks form, told without preparing the weight (what a loop that fuses
  // its cells with the products and otherwise leaves the steps to another path asks first).
  static bool fused_form(const at::Tensor& b, int64_t m, int64_t steps, int64_t panel_gates) {
    if (b.scalar_type() != at::kFloat) return false;
    if (panels_form(b, m, steps, panel_gates)) return true;
    return b.numel() > 0 && m > 0 && steps >= kMinSteps &&
           float_blocks_form(m, b.size(0), b.size(1));
  }

  // c[r, q·H + j] (+ c) = Σ_k a[r, k]·b[k, q·H + j] for rows r < m, the units j in
  // [j0, j0 + n) of each of b's G gate blocks of H columns (b [K, G·H]; G = 1: columns
  // [j0, j0 + n)), on the calling thread, in the blocks form (blocks(): the panels, brgemm on
  // b_data(), or the bf16 weight for a bfloat16 a; the panels with G = their gates). What a loop
  // that fuses its cells per unit block calls for its rows and units: each unit's sums are the
  // same whichever thread takes it, and whichever of these forms (small_batch.h).
  template <typename a_t>
  void units(int64_t m, int64_t G, const a_t* a, int64_t lda, float* c, int64_t ldc, int64_t j0,
             int64_t n, bool accumulate) const {
    if constexpr (std::is_same_v<a_t, float>) {
      const int64_t K = b_.size(0), H = b_.size(1) / G;
      if (panels()) {
        TORCH_INTERNAL_ASSERT_DEBUG_ONLY(G == gates_);
        panel_gemm(m, K, H, G, a, lda, panels_data(), c, ldc, j0, n, accumulate);
        return;
      }
      for (int64_t q = 0; q < G; ++q) {
        block_gemm(m, n, K, a, lda, b_data() + q * H + j0, G * H, c + q * H + j0, ldc,
                   accumulate);
      }
    } else {
      static_assert(std::is_same_v<a_t, at::BFloat16>, "units: a float or bfloat16 operand");
      const int64_t K = vnni_.k(), H = vnni_.n() / G;
      for (int64_t q = 0; q < G; ++q) {
        block_gemm(m, n, K, a, lda, vnni_, q * H + j0, c + q * H + j0, ldc, accumulate);
      }
    }
  }

  // The dtype of the left operand a: bfloat16 for a bf16 blocks-form weight, else b's float type.
  at::ScalarType operand_type() const { return bf16() ? at::kBFloat16 : b_.scalar_type(); }

  // Whether the products are to be made block by block with block_gemm on b_data() (float32)
  // or b_vnni() (bf16()).
  bool blocks() const { return blocks_; }
  bool bf16() const { return bf16_; }
  // The panels form (blocks() too): products by panel_gemm on panels_data().
  bool panels() const { return panels_.defined(); }
  const float* panels_data() const { return panels_.const_data_ptr<float>(); }
  const float* b_data() const { return b_.const_data_ptr<float>(); }  // [K, N], row-major
  // The weight as given: in the panels form a view that need not be row-major.
  const at::Tensor& b() const { return b_; }
  const VnniMatrix& b_vnni() const { return vnni_; }

  void operator()(at::Tensor& c, const at::Tensor& a, bool accumulate) const {
    if (panels()) {
      const int64_t m = a.size(0), K = b_.size(0), H = b_.size(1) / gates_;
      if (m == 0) return;
      TORCH_INTERNAL_ASSERT(m <= max_panel_rows() && c.stride(1) == 1);
      const at::Tensor ac = a.contiguous();
      const float* ap = ac.const_data_ptr<float>();
      float* cp = c.data_ptr<float>();
      const int64_t ldc = c.stride(0);
      for_column_blocks(H, m * K * b_.size(1), [&](int64_t j0, int64_t n) {
        panel_gemm(m, K, H, gates_, ap, K, panels_data(), cp, ldc, j0, n, accumulate);
      });
      return;
    }
    if (bf16()) {
      TORCH_INTERNAL_ASSERT(a.scalar_type() == at::kBFloat16 && c.stride(1) == 1);
      const at::Tensor ac = a.contiguous();
      const int64_t m = a.size(0), K = vnni_.k(), N = vnni_.n();
      if (m == 0) return;
      const auto* ap = ac.const_data_ptr<at::BFloat16>();
      float* cp = c.data_ptr<float>();
      const int64_t ldc = c.stride(0);
      for_column_blocks(N, m * K * N, [&](int64_t n0, int64_t n) {
        block_gemm(m, n, K, ap, K, vnni_, n0, cp + n0, ldc, accumulate);
      });
      return;
    }
    if (blocks_ && a.size(0) > 0 && a.is_contiguous() && c.stride(1) == 1) {
      const int64_t m = a.size(0), K = b_.size(0), N = b_.size(1);
      const float* ap = a.const_data_ptr<float>();
      const float* bp = b_.const_data_ptr<float>();
      float* cp = c.data_ptr<float>();
      const int64_t ldc = c.stride(0);
      for_column_blocks(N, m * K * N, [&](int64_t n0, int64_t n) {
        block_gemm(m, n, K, ap, K, bp + n0, N, cp + n0, ldc, accumulate);
      });
      return;
    }
    if (onednn_ && a.size(0) > 0 && a.is_contiguous()) {
      const at::Tensor prod = (*onednn_)(a);
      if (accumulate) {
        c.add_(prod);
      } else {
        c.copy_(prod);
      }
      return;
    }
    if (packed_.empty() || a.size(0) != m_ || !a.is_contiguous() || !c.is_contiguous()) {
      if (accumulate) {
        c.addmm_(a, b_);
      } else {
        at::mm_out(c, a, b_);
      }
      return;
    }
    const float* ap = a.const_data_ptr<float>();
    float* cp = c.data_ptr<float>();
    const int64_t lda = a.size(1), ldc = c.size(1);
    at::parallel_for(0, static_cast<int64_t>(packed_.size()), 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const auto& [n0, w] = packed_[k];
        w.gemm(ap, m_, lda, accumulate ? 1.0f : 0.0f, cp + n0, ldc);
      }
    });
  }

 private:
  // A float32 [K, N] weight for products of m rows, past the panels' checks.
  static bool float_blocks_form(int64_t m, int64_t K, int64_t N) {
    return brgemm_available() && (cpu::isa() == Isa::kAvx512 || m * K * N < kMaxAvx2BlockMacs);
  }

  at::Tensor b_;
  int64_t m_;
  bool blocks_ = false, bf16_ = false;
  VnniMatrix vnni_;  // the bf16 blocks form's b
  at::Tensor panels_;  // the panels form's b: pack_panels(b, gates_)
  int64_t gates_ = 0;
  std::optional<OneDnnWeight> onednn_;
  std::vector<std::pair<int64_t, PackedWeight>> packed_;  // (first column, packed slice)
};

}  // namespace torch_lstm_grad::cpu
