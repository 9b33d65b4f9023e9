// The CUDA backends' GEMMs, straight into cuBLAS on torch's handle for the current stream
// (at::cuda::getCurrentCUDABlasHandle: the stream, torch's workspace, and TF32 as
// torch.backends.cuda.matmul says), without ATen's operator dispatch. (torch's own wrappers,
// at::cuda::blas::gemm, are not exported from libtorch_cuda.so; cuBLAS itself is a dependency
// of libtorch_cuda.so, so the extension finds its symbols there without linking it.)
//
// Why: an LSTM step at small batch is two launches, and each launch costs the host several
// times the kernel's own time (benchmarks/gpu_profile.py measures it; docs/performance.md). An
// at::addmm_ per step adds its dispatch and checks, and the Tensor of each step's slice; a raw
// call on pointers adds neither (the drivers' per-step slices are pointer arithmetic).
//
// bfloat16 products multiply the bf16 operands on tensor cores with float32 accumulation and a
// float32 result (cublasGemmEx, CUDA_R_16BF x CUDA_R_16BF -> CUDA_R_32F, compute 32F): a bf16
// x bf16 product is exact in float32, so only the summation order differs from a float32 GEMM
// on the same values, as on CPUs with bf16 instructions (csrc/cpu/gemm.h).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace torch_lstm_grad {
namespace cuda {

// c[M, N] = a[M, K] · b[K, N] (+ c): a, c row-major with leading dims lda, ldc (c float or
// double: float for a float or bfloat16 a, double for double), b as `b_` holds it.
class CublasGemm {
 public:
  CublasGemm() = default;
  // b: [K, N] of the product's operand type, any strides (a copy where cuBLAS cannot read it).
  explicit CublasGemm(const at::Tensor& b) : b_(readable(b)) {}

  const at::Tensor& b() const { return b_; }
  at::ScalarType operand_type() const { return b_.scalar_type(); }

  // The Tensor form the drivers call between steps: c (the float type) = a · b (+ c).
  void operator()(at::Tensor& c, const at::Tensor& a, bool accumulate) const {
    TORCH_INTERNAL_ASSERT(a.scalar_type() == operand_type() && a.dim() == 2 && c.dim() == 2 &&
                          a.size(1) == b_.size(0) && c.size(0) == a.size(0) &&
                          c.size(1) == b_.size(1));
    const at::Tensor a_rows = row_major_ok(a) ? a : a.contiguous();
    if (!row_major_ok(c)) {  // never in the drivers (their outputs are dense); kept correct
      at::Tensor dense = accumulate ? c.contiguous() : at::empty(c.sizes(), c.options());
      (*this)(dense, a_rows, accumulate);
      c.copy_(dense);
      return;
    }
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, operand_type(), "cublas_gemm", [&] {
      using c_t = at::opmath_type<scalar_t>;
      TORCH_INTERNAL_ASSERT(c.scalar_type() == c10::CppTypeToScalarType<c_t>::value);
      rows(a.size(0), a_rows.const_data_ptr<scalar_t>(), a_rows.stride(0),
           c.data_ptr<c_t>(), c.stride(0), accumulate);
    });
  }

  // The pointer form the step loops call: M rows of a (lda apart) times b into c (ldc apart).
  template <typename op_t, typename c_t>
  void rows(int64_t M, const op_t* a, int64_t lda, c_t* c, int64_t ldc, bool accumulate) const {
    const int64_t K = b_.size(0), N = b_.size(1);
    if (M == 0 || N == 0) return;
    if (M == 1) {  // one row: its leading dims address nothing, but cuBLAS checks them
      lda = K;
      ldc = N;
    }
    if (K == 0) {  // an empty sum: c itself, or zeros
      if (!accumulate) {
        at::from_blob(c, {M, N}, {ldc, 1}, b_.options().dtype(c10::CppTypeToScalarType<c_t>::value))
            .zero_();
      }
      return;
    }
    // Column-major, as cuBLAS sees it: cᵀ [N, M] = bᵀ [N, K] · aᵀ [K, M]. a and c read as
    // stored; b row-major is bᵀ column-major ('n'), a transposed view of a row-major matrix
    // is b itself column-major ('t').
    const bool b_t = transposed(b_);
    const int64_t ldb = b_t ? b_.stride(1) : b_.stride(0);
    constexpr int64_t kMax = std::numeric_limits<int>::max();
    TORCH_CHECK(std::max({M, N, K, lda, ldb, ldc}) <= kMax,
                "a recurrent product too large for cuBLAS' 32-bit sizes: [", M, ", ", K, "] x [",
                K, ", ", N, "]");
    const cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    const cublasOperation_t op_b = b_t ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
    const op_t* b_p = b_.const_data_ptr<op_t>();
    const c_t alpha = 1, beta = accumulate ? 1 : 0;
    if constexpr (std::is_same_v<op_t, float> && std::is_same_v<c_t, float>) {
      TORCH_CUDABLAS_CHECK(cublasSgemm(handle, op_b, CUBLAS_OP_N, m, n, k, &alpha, b_p,
                                       static_cast<int>(ldb), a, static_cast<int>(lda), &beta,
                                       c, static_cast<int>(ldc)));
    } else if constexpr (std::is_same_v<op_t, double> && std::is_same_v<c_t, double>) {
      TORCH_CUDABLAS_CHECK(cublasDgemm(handle, op_b, CUBLAS_OP_N, m, n, k, &alpha, b_p,
                                       static_cast<int>(ldb), a, static_cast<int>(lda), &beta,
                                       c, static_cast<int>(ldc)));
    } else if constexpr (std::is_same_v<op_t, at::BFloat16> && std::is_same_v<c_t, float>) {
      TORCH_CUDABLAS_CHECK(cublasGemmEx(handle, op_b, CUBLAS_OP_N, m, n, k, &alpha, b_p,
                                        CUDA_R_16BF, static_cast<int>(ldb), a, CUDA_R_16BF,
                                        static_cast<int>(lda), &beta, c, CUDA_R_32F,
                                        static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
    } else {  // instantiated for float16 ops, whose products are float32 (never reached)
      TORCH_INTERNAL_ASSERT(false, "CublasGemm: no product of these operand and result types");
    }
  }

 private:
  // b [K, N] row-major with rows at least N apart, or the transpose of such a matrix.
  static bool transposed(const at::Tensor& b) {
    return !(b.stride(1) == 1 && b.stride(0) >= std::max<int64_t>(1, b.size(1)));
  }
  static bool row_major_ok(const at::Tensor& t) {
    return t.size(0) <= 1 ? t.size(1) <= 1 || t.stride(1) == 1
                          : t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, t.size(1));
  }
  static at::Tensor readable(const at::Tensor& b) {
    TORCH_INTERNAL_ASSERT(b.dim() == 2);
    if (!transposed(b)) return b;
    if (b.stride(0) == 1 && b.stride(1) >= std::max<int64_t>(1, b.size(0))) return b;
    return b.contiguous();
  }

  at::Tensor b_;
};

// a · b as a new contiguous [M, N] tensor of the float type (double for double): a and b of one
// operand type (float, double, or bfloat16, whose products are on tensor cores, see above).
inline at::Tensor mm_float(const at::Tensor& a, const at::Tensor& b) {
  TORCH_INTERNAL_ASSERT(a.scalar_type() == b.scalar_type());
  if (a.scalar_type() != at::kBFloat16) return at::mm(a, b);
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kFloat));
  const CublasGemm product(b);
  product(c, a, /*accumulate=*/false);
  return c;
}

}  // namespace cuda
}  // namespace torch_lstm_grad
