// CUDA kernels of keras_gru(_grad) (drivers and cell math: csrc/gru_seq.h): each pointwise pass
// of a step is one elementwise kernel over B·H elements (one instantiation per activation
// variant), on PyTorch's current stream; the products are ATen's (cuBLAS). Where asked and
// where it fits, a reset_after pass runs as one persistent kernel (gru_persistent.cuh).

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <torch/library.h>

#include "../bool_dispatch.h"
#include "../gru_seq.h"
#include "activations.cuh"
#include "gru_persistent.cuh"

namespace torch_lstm_grad {
namespace {

using gru_seq::GruStep;
using lstm_block::ActParams;

enum class Pass { kForwardAfter, kForwardGates, kForwardCandidate, kBackwardAfter,
                  kBackwardGates, kBackwardReset };

template <Pass kPass, typename scalar_t, class Gate, class Cell>
__global__ void gru_kernel(GruStep<scalar_t> s, int64_t n) {
  using acc_t = at::opmath_type<scalar_t>;
  using C = gru_seq::GruCell<Gate, Cell, acc_t>;
  const int64_t H = s.H;
  const auto p = ActParams<acc_t>::from(s.fns);
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = k / H, j = k % H;
    const acc_t hp = static_cast<acc_t>(s.h_prev[k]);
    if constexpr (kPass == Pass::kForwardAfter) {
      const acc_t* xp = s.xp + b * 3 * H;
      const acc_t* in = s.inner + b * 3 * H;
      const auto o = C::after(xp[j] + s.b_in[j], xp[H + j] + s.b_in[H + j],
                              xp[2 * H + j] + s.b_in[2 * H + j], in[j] + s.b_rec[j],
                              in[H + j] + s.b_rec[H + j], in[2 * H + j] + s.b_rec[2 * H + j], hp,
                              p);
      s.z[k] = static_cast<scalar_t>(o.z);
      s.r[k] = static_cast<scalar_t>(o.r);
      s.hh[k] = static_cast<scalar_t>(o.hh);
      s.hr[k] = static_cast<scalar_t>(o.hr);
      const scalar_t h = static_cast<scalar_t>(o.h);
      s.h[k] = h;
      if (s.h_acc != nullptr) s.h_acc[k] = static_cast<acc_t>(h);
    } else if constexpr (kPass == Pass::kForwardGates) {
      const acc_t* xp = s.xp + b * 3 * H;
      const acc_t* in = s.inner + b * 2 * H;
      const acc_t z = Gate::f((xp[j] + s.b_in[j]) + in[j], p);
      const acc_t r = Gate::f((xp[H + j] + s.b_in[H + j]) + in[H + j], p);
      s.z[k] = static_cast<scalar_t>(z);
      s.r[k] = static_cast<scalar_t>(r);
      s.hr[k] = static_cast<scalar_t>(r * hp);
      s.rh[k] = r * hp;
    } else if constexpr (kPass == Pass::kForwardCandidate) {
      const acc_t hh = Cell::f((s.xp[b * 3 * H + 2 * H + j] + s.b_in[2 * H + j]) + s.cand[k], p);
      const acc_t z = static_cast<acc_t>(s.z[k]);
      s.hh[k] = static_cast<scalar_t>(hh);
      const scalar_t h = static_cast<scalar_t>(z * hp + (1 - z) * hh);
      s.h[k] = h;
      if (s.h_acc != nullptr) s.h_acc[k] = static_cast<acc_t>(h);
    } else if constexpr (kPass == Pass::kBackwardAfter || kPass == Pass::kBackwardGates) {
      const acc_t g = s.dh[k] + static_cast<acc_t>(s.h_grad[k]);
      const acc_t z = static_cast<acc_t>(s.z[k]);
      acc_t dz, dhh;
      C::gate_grads(g, z, static_cast<acc_t>(s.hh[k]), hp, p, dz, dhh);
      acc_t* dx = s.d_xp + b * 3 * H;
      dx[j] = dz;
      dx[2 * H + j] = dhh;
      if constexpr (kPass == Pass::kBackwardAfter) {
        const acc_t r = static_cast<acc_t>(s.r[k]);
        const acc_t dr = Gate::df(r, p) * (dhh * static_cast<acc_t>(s.hr[k]));
        acc_t* di = s.d_inner + b * 3 * H;
        dx[H + j] = dr;
        di[j] = dz;
        di[H + j] = dr;
        di[2 * H + j] = dhh * r;
      } else {
        s.d_inner[b * 2 * H + j] = dz;
        s.d_cand[k] = dhh;
      }
      s.dh[k] = g * z;
    } else {  // kBackwardReset
      const acc_t r = static_cast<acc_t>(s.r[k]);
      const acc_t dr = Gate::df(r, p) * (s.d_rh[k] * hp);
      s.d_xp[b * 3 * H + H + j] = dr;
      s.d_inner[b * 2 * H + H + j] = dr;
      s.dh[k] = s.dh[k] + s.d_rh[k] * r;
    }
  }
}

using Sigmoid = lstm_block::SigmoidGate<CudaAct>;
using Hard = lstm_block::HardSigmoidGate;
using Tanh = lstm_block::TanhCell<CudaAct>;
using Rect = lstm_block::RectCell;

constexpr int kThreads = 256;

template <Pass kPass, typename scalar_t>
void launch(const GruStep<scalar_t>& s, int64_t B) {
  const int64_t n = B * s.H;
  if (n == 0) return;
  // The backward passes need only the derivatives: one kernel for every variant (AnyGate,
  // AnyCell blend them, lstm_block.h), as on the CPU.
  constexpr bool kBackward = kPass == Pass::kBackwardAfter || kPass == Pass::kBackwardGates ||
                             kPass == Pass::kBackwardReset;
  using Kernel = void (*)(GruStep<scalar_t>, int64_t);
  Kernel kernel;
  if constexpr (kBackward) {
    kernel = gru_kernel<kPass, scalar_t, lstm_block::AnyGate, lstm_block::AnyCell>;
  } else {
    kernel = dispatch_bools(
        [](auto kHard, auto kTanh) {
          using Gate = std::conditional_t<kHard, Hard, Sigmoid>;
          using Cell = std::conditional_t<kTanh, Tanh, Rect>;
          return gru_kernel<kPass, scalar_t, Gate, Cell>;
        },
        s.fns.gate != lstm_block::GateFn::kSigmoid, s.fns.cell == lstm_block::CellFn::kTanh);
  }
  const int64_t max_blocks = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * 8;
  const int blocks =
      static_cast<int>(std::max<int64_t>(1, std::min((n + kThreads - 1) / kThreads, max_blocks)));
  kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(s, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

struct CudaGruBackend {
  static lstm_block::AtenRecurrentGemm recurrent_gemm(const at::Tensor& b, int64_t, int64_t) {
    return {b.contiguous()};
  }
  static at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) { return at::mm(a, b); }
  static void transpose_into(at::Tensor& dst, const at::Tensor& src) { dst.copy_(src.t()); }
  // The persistent kernels, where asked and fitting; reset_after only (gru_persistent.cuh).
  static constexpr bool kWholeLoops = true;
  template <typename scalar_t>
  static bool forward_loop(const gru_seq::GruLoop<scalar_t>& s) {
    return s.reset_after && cuda::persistent::gru_forward(s);
  }
  template <typename scalar_t>
  static bool backward_loop(const gru_seq::GruLoop<scalar_t>& s) {
    return s.reset_after && cuda::persistent::gru_backward(s);
  }
  template <typename scalar_t>
  static void forward_after(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kForwardAfter>(s, B);
  }
  template <typename scalar_t>
  static void forward_gates(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kForwardGates>(s, B);
  }
  template <typename scalar_t>
  static void forward_candidate(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kForwardCandidate>(s, B);
  }
  template <typename scalar_t>
  static void backward_after(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kBackwardAfter>(s, B);
  }
  template <typename scalar_t>
  static void backward_gates(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kBackwardGates>(s, B);
  }
  template <typename scalar_t>
  static void backward_reset(const GruStep<scalar_t>& s, int64_t B) {
    launch<Pass::kBackwardReset>(s, B);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CUDA, m) { gru_seq::register_gru_ops<CudaGruBackend>(m); }

}  // namespace torch_lstm_grad
