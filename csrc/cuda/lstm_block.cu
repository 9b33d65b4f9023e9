// CUDA backend of the LSTM block ops and block_lstm_ex (drivers and cell math:
// csrc/lstm_block.h): the per-step pointwise passes as one elementwise kernel each (one per
// activation variant), on PyTorch's current stream; or, where asked and where it fits, the
// whole loop of a pass as one persistent kernel (lstm_persistent.cuh). The GEMMs are cuBLAS
// on torch's handle (cublas_gemm.h: the step loops call it on pointers, no Tensor or dispatch
// a step);
// the whole-sequence reductions (peephole and bias grads: no atomics) are ATen's.
// bfloat16 ops multiply bf16 operands on tensor cores with float32 accumulation (the backward
// rounds the gate gradients to bf16 for its products, as mixed precision does); float16 ops
// multiply in float32.

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <torch/library.h>

#include "../bool_dispatch.h"
#include "../lstm_block.h"
#include "activations.cuh"
#include "cublas_gemm.h"
#include "lstm_persistent.cuh"

namespace torch_lstm_grad {
namespace {

using lstm_block::BwdStep;
using lstm_block::FwdStep;

template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kClip>
__global__ void forward_kernel(FwdStep<scalar_t> s, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t H = s.H;
  const auto L = s.attrs.layout;
  const acc_t fb = static_cast<acc_t>(s.attrs.forget_bias);
  const acc_t clip = static_cast<acc_t>(s.attrs.cell_clip);
  const auto p = lstm_block::ActParams<acc_t>::from(s.attrs.fns);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = k / H, j = k % H;
    const acc_t* g = s.gates + b * 4 * H;
    const auto r = lstm_block::lstm_cell_forward<Gate, Cell, kPeep, kClip, acc_t>(
        g[L.i * H + j] + s.bias[L.i * H + j], g[L.c * H + j] + s.bias[L.c * H + j],
        g[L.f * H + j] + s.bias[L.f * H + j], g[L.o * H + j] + s.bias[L.o * H + j],
        static_cast<acc_t>(s.cs_prev[k]), kPeep ? s.wci[j] : acc_t(0),
        kPeep ? s.wcf[j] : acc_t(0), kPeep ? s.wco[j] : acc_t(0), fb, clip, p);
    s.out[0][k] = static_cast<scalar_t>(r.i);
    s.out[1][k] = static_cast<scalar_t>(r.cs);
    s.out[2][k] = static_cast<scalar_t>(r.f);
    s.out[3][k] = static_cast<scalar_t>(r.o);
    s.out[4][k] = static_cast<scalar_t>(r.ci);
    s.out[5][k] = static_cast<scalar_t>(r.co);
    const scalar_t h = static_cast<scalar_t>(r.h);
    s.out[6][k] = h;
    if (s.h_acc != nullptr) s.h_acc[k] = static_cast<acc_t>(h);
  }
}

template <typename scalar_t, class Gate, class Cell, bool kPeep, bool kMaskClip>
__global__ void backward_kernel(BwdStep<scalar_t> s, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t H = s.H;
  const auto L = s.layout;
  const auto p = lstm_block::ActParams<acc_t>::from(s.fns);
  const acc_t mask_clip = static_cast<acc_t>(s.mask_clip);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = k / H, j = k % H;
    const auto r = lstm_block::lstm_cell_backward<Gate, Cell, kPeep, kMaskClip, acc_t>(
        s.act[0][k], s.act[2][k], s.act[3][k], s.act[4][k], s.act[5][k],
        kMaskClip ? static_cast<acc_t>(s.act[1][k]) : acc_t(0), s.cs_prev[k],
        s.dh_carry[k] + static_cast<acc_t>(s.h_grad[k]),
        s.dcs_carry[k] + static_cast<acc_t>(s.cs_grad[k]), kPeep ? s.wci[j] : acc_t(0),
        kPeep ? s.wcf[j] : acc_t(0), kPeep ? s.wco[j] : acc_t(0), mask_clip, p);
    acc_t* dg = s.dgates + b * 4 * H;
    dg[L.i * H + j] = r.di;
    dg[L.c * H + j] = r.dci;
    dg[L.f * H + j] = r.df;
    dg[L.o * H + j] = r.d_o;
    if (s.dgates_lp != nullptr) {  // what the bfloat16 products read
      scalar_t* dl = s.dgates_lp + b * 4 * H;
      dl[L.i * H + j] = static_cast<scalar_t>(r.di);
      dl[L.c * H + j] = static_cast<scalar_t>(r.dci);
      dl[L.f * H + j] = static_cast<scalar_t>(r.df);
      dl[L.o * H + j] = static_cast<scalar_t>(r.d_o);
    }
    s.dcs_carry[k] = r.dcs_prev;
  }
}

// The kernel for a step's activation variant (every combination is compiled: TF's block ops
// and block_lstm_ex share these kernels).
using Sigmoid = lstm_block::SigmoidGate<CudaAct>;
using Hard = lstm_block::HardSigmoidGate;
using Tanh = lstm_block::TanhCell<CudaAct>;
using Rect = lstm_block::RectCell;

template <typename scalar_t>
auto forward_kernel_for(const lstm_block::CellAttrs& a) {
  return dispatch_bools(
      [](auto kHard, auto kTanh, auto kPeep, auto kClip) {
        using Gate = std::conditional_t<kHard, Hard, Sigmoid>;
        using Cell = std::conditional_t<kTanh, Tanh, Rect>;
        return forward_kernel<scalar_t, Gate, Cell, kPeep, kClip>;
      },
      a.fns.gate != lstm_block::GateFn::kSigmoid, a.fns.cell == lstm_block::CellFn::kTanh,
      a.use_peephole, a.cell_clip > 0);
}

// One backward kernel for every activation variant: the derivatives, from the stored outputs,
// are blended (AnyGate, AnyCell: lstm_block.h), as on the CPU.
template <typename scalar_t>
auto backward_kernel_for(const BwdStep<scalar_t>& s) {
  return dispatch_bools(
      [](auto kPeep, auto kMaskClip) {
        return backward_kernel<scalar_t, lstm_block::AnyGate, lstm_block::AnyCell, kPeep,
                               kMaskClip>;
      },
      s.wci != nullptr, s.mask_clip != lstm_block::kNoMask);
}

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t max_blocks = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
  return static_cast<int>(std::max<int64_t>(1, std::min((n + kThreads - 1) / kThreads, max_blocks)));
}

struct CudaBackend {
  using Gemm = cuda::CublasGemm;

  // bfloat16 multiplies in bf16 on tensor cores (float32 accumulation); float16 in float32.
  static at::ScalarType product_type(at::ScalarType t) {
    return t == at::kBFloat16 ? t : at::toOpMathType(t);
  }

  static Gemm recurrent_gemm(const at::Tensor& b, int64_t, int64_t) {
    return Gemm(b.to(product_type(b.scalar_type())));
  }

  // b = Whᵀ, a transposed view of the stored [P, 4H] weight: copied to its own row-major
  // [4H, P] once per backward. Passed as the view (op 't'), cuBLAS takes split-K for the
  // per-step product at large batches (a second launch and its reduction every step) or a
  // slower kernel (measured: docs/performance.md).
  static Gemm dh_gemm(const at::Tensor& b, int64_t, int64_t) {
    return Gemm(b.to(product_type(b.scalar_type())).contiguous());
  }

  // The forward's gate product: no prepared form on CUDA (a packed weight is not used).
  static Gemm gate_gemm(const at::Tensor& b, int64_t m, int64_t steps, const at::Tensor&) {
    return recurrent_gemm(b, m, steps);
  }

  // The input projection of all steps (a packed input weight is the CPU's layout; a scratch
  // result needs no kept buffer: the caching allocator reuses its blocks).
  static at::Tensor input_gates(const at::Tensor& a, const at::Tensor& b, const at::Tensor&,
                                bool) {
    return cuda::mm_float(a, b);
  }

  // cuBLAS's own summation order: the CPU's pairwise sums are for its one-register GEMMs.
  static at::Tensor sum_matmul(const at::Tensor& a, const at::Tensor& b) {
    return cuda::mm_float(a, b);
  }

  static void h_prev_product(const Gemm& rec, at::Tensor& dh, const at::Tensor& dgates0) {
    rec(dh, dgates0, /*accumulate=*/false);
  }

  static bool sums_in_steps(const Gemm&) { return false; }

  static void transpose_into(at::Tensor& dst, const at::Tensor& src) { dst.copy_(src.t()); }

  static std::array<at::Tensor, 3> peephole_grads(const at::Tensor& dgates, const at::Tensor& cs_prev,
                                                  const at::Tensor& cs, int64_t L,
                                                  lstm_block::GateLayout layout,
                                                  at::ScalarType out_type) {
    return lstm_block::aten_peephole_grads(dgates, cs_prev, cs, L, layout, out_type);
  }

  template <typename scalar_t>
  static void launch_forward(const FwdStep<scalar_t>& s, int64_t n) {
    if (n == 0) return;
    const auto kernel = forward_kernel_for<scalar_t>(s.attrs);
    kernel<<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(s, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void launch_backward(const BwdStep<scalar_t>& s, int64_t n) {
    if (n == 0) return;
    const auto kernel = backward_kernel_for<scalar_t>(s);
    kernel<<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(s, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <typename scalar_t>
  static void forward_step(const FwdStep<scalar_t>& s, const Gemm& rec, at::Tensor& g,
                           const at::Tensor& h) {
    rec(g, h, /*accumulate=*/true);
    cell_step(s, g.size(0));
  }

  // The cell of one step on gates that hold its whole pre-activation.
  template <typename scalar_t>
  static void cell_step(const FwdStep<scalar_t>& s, int64_t B) {
    launch_forward(s, B * s.H);
  }

  // The whole loop on pointers: per step the product (h read as stored: the driver takes this
  // only where h is of the product's operand type) and the pointwise kernel.
  template <typename scalar_t, class PointStep>
  static bool forward_loop(const FwdStep<scalar_t>& proto, const Gemm& rec, int64_t B,
                           int64_t L, const PointStep& point_step, const scalar_t* h0,
                           const scalar_t* h) {
    if (rec.operand_type() != c10::CppTypeToScalarType<scalar_t>::value) return false;
    if (cuda::persistent::forward(proto, rec, B, L, point_step, h0, h)) return true;
    const int64_t K = rec.b().size(0), N = rec.b().size(1);
    FwdStep<scalar_t> s = proto;
    for (int64_t t = 0; t < L; ++t) {
      auto* g = point_step(t, s);
      rec.rows(B, t == 0 ? h0 : h + (t - 1) * B * K, K, g, N, /*accumulate=*/true);
      launch_forward(s, B * s.H);
    }
    return true;
  }

  // The same for the backward: step t's dh_carry = dgates_{t+1} · Whᵀ (the bfloat16 copy of
  // the later step's dgates where the products take bf16), then the pointwise kernel.
  template <typename scalar_t, class PointStep>
  static bool backward_loop(const BwdStep<scalar_t>& proto, const Gemm& rec, int64_t B,
                            int64_t L, const PointStep& point_step,
                            const at::opmath_type<scalar_t>*, at::opmath_type<scalar_t>* dh_carry) {
    using acc_t = at::opmath_type<scalar_t>;
    if (cuda::persistent::backward(proto, rec, B, L, point_step)) return true;
    const int64_t K = rec.b().size(0), N = rec.b().size(1);  // K = 4H, N = P
    const bool lp = rec.operand_type() != c10::CppTypeToScalarType<acc_t>::value;
    BwdStep<scalar_t> s = proto;
    const void* next = nullptr;
    for (int64_t t = L - 1; t >= 0; --t) {
      point_step(t, s);
      if (next != nullptr) {
        if (lp) {
          rec.rows(B, static_cast<const scalar_t*>(next), K, dh_carry, N, /*accumulate=*/false);
        } else {
          rec.rows(B, static_cast<const acc_t*>(next), K, dh_carry, N, /*accumulate=*/false);
        }
      }
      launch_backward(s, B * s.H);
      next = lp ? static_cast<const void*>(s.dgates_lp) : static_cast<const void*>(s.dgates);
    }
    return true;
  }

  template <typename scalar_t>
  static void backward_step(const BwdStep<scalar_t>& s, const Gemm& rec, const at::Tensor& next,
                            at::Tensor& dh_carry) {
    if (next.defined()) rec(dh_carry, next, /*accumulate=*/false);
    launch_backward(s, dh_carry.size(0) * s.H);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CUDA, m) {
  lstm_block::register_ops<CudaBackend>(m);
  lstm_block::register_ex_ops<CudaBackend>(m);
}

}  // namespace torch_lstm_grad
