// Pre-packed float32 GEMM for the recurrent weights of the time loops.
//
// Each step multiplies a small [B, K] block by the same weight matrix; a plain sgemm repacks
// that matrix on every call, which on a [256, 1024] weight costs as much as the product for
// B = 32. MKL can pack it once (cblas_sgemm_pack) and reuse it (cblas_sgemm_compute). PyTorch's
// x86 builds link MKL into libtorch_cpu and export both; the references are weak so that on a
// build without them (ARM, OpenBLAS) `available()` is false and callers use ATen's GEMM.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <optional>
#include <utility>
#include <vector>

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

// The per-step product of a time loop, c[m, N] = a[m, K] · b (+ c), with one b for the whole
// loop of `steps` products. float32 on an MKL build: b is packed once and each product is split
// by output columns over the threads (MKL alone runs a product this small, e.g. [32, 256] x
// [256, 1024], on one thread). Packing costs about one product, so a loop of a few steps (the
// single-step cell ops) does not pack, and a product too small to share (a B = 1 step) is not
// split. Packed products need the row count they were packed for (`m`); any other row count,
// another dtype or a build without MKL's packed API uses ATen's GEMM.
class RecurrentGemm {
 public:
  static constexpr int64_t kMinSteps = 4;               // packing pays off from here
  static constexpr int64_t kMinSplitMacs = int64_t{1} << 20;  // per product, to use threads

  RecurrentGemm(const at::Tensor& b, int64_t m, int64_t steps) : b_(b), m_(m) {
    if (b.scalar_type() != at::kFloat || b.numel() == 0 || m == 0 || steps < kMinSteps ||
        !PackedWeight::available()) {
      return;
    }
    const int64_t K = b.size(0), N = b.size(1);
    const int64_t threads = m * K * N >= kMinSplitMacs ? at::get_num_threads() : 1;
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(threads, N / 64));
    const int64_t width = (N + chunks - 1) / chunks;
    for (int64_t n0 = 0; n0 < N; n0 += width) {
      packed_.emplace_back(n0, PackedWeight(b.narrow(1, n0, std::min(width, N - n0)), m));
    }
  }

  void operator()(at::Tensor& c, const at::Tensor& a, bool accumulate) const {
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
  at::Tensor b_;
  int64_t m_;
  std::vector<std::pair<int64_t, PackedWeight>> packed_;  // (first column, packed slice)
};

}  // namespace torch_lstm_grad::cpu
