// The LSTM block ops' recurrence on CUDA as one cooperative ("persistent") kernel per pass,
// docs/performance.md §5: the step loop (csrc/cuda/lstm_block.cu) launches a cuBLAS product
// and a cell kernel a step, so at small batch the GPU waits for the host; here one launch runs
// every step, each block keeping its slice of the recurrent weights in shared memory for the
// whole pass and the blocks meeting at a grid barrier between steps.
//
// Forward: block n owns the units j0 .. j0 + U - 1 (all four gates of each: 4U columns of Wh,
// H rows; persistent.cuh). Step t reads h_{t-1} [B, H] (written by every block at step t - 1,
// read through L2), forms its 4U gate sums h_{t-1}·Wh[:, cols] (float accumulation, each sum
// over interleaved slices of H added in a fixed order), adds the step's input projection
// (computed for all steps before the loop, as on the steps path) and the bias, runs the cell
// (lstm_block.h, the same device-neutral math as the steps path) and writes the step's outputs.
// Backward: block n owns the same units, and keeps rows j0 .. j0 + U - 1 of Wh (4H columns).
// Step t reads the later step's gate gradients [B, 4H], forms dh_carry for its units, runs the
// cell's backward and writes its units' gate gradients. dx, dW, db come after the loop from the
// stored gate gradients, as on the steps path.
//
// The numbers: the products are float sums of exact products (float, or bfloat16 operands as
// the steps path's tensor cores take them) in another order than cuBLAS's; TF32 does not apply.
// The pointwise math is the steps path's. The per-step pointers are the drivers' own
// (point_step, called for every step on the host and fitted to a StepPtr, persistent.cuh); a
// driver whose steps fit neither, a shape whose slice of Wh does not fit in shared memory, or a
// device without cooperative launch takes the steps path.
//
// TORCH_LSTM_GRAD_CUDA_RECURRENT=steps (the default, until measured) | persistent; the grid,
// the plan and the products: persistent.cuh.
#pragma once

#include <array>
#include <limits>
#include <vector>

#include "../bool_dispatch.h"
#include "../lstm_block.h"
#include "activations.cuh"
#include "persistent.cuh"

namespace torch_lstm_grad {
namespace cuda {
namespace persistent {

// ---------------------------------------------------------------------------------------------
// Forward.

template <typename scalar_t>
struct FwdArgs {
  int B, H, L, U, Bc;
  const scalar_t* w;   // Wh [H, 4H] row-major
  const scalar_t* h0;  // [B, H]
  const scalar_t* h;   // step t's h at h + t·B·H: step t reads h_{t-1}
  const float* bias;   // [4H]
  const float* wci;    // [H] or null
  const float* wcf;
  const float* wco;
  StepPtr gates;       // [B, 4H] float: the step's input projection
  StepPtr cs_prev;     // [B, H]
  StepPtr out[7];      // i, cs, f, o, ci, co, h: [B, H]
  lstm_block::CellAttrs attrs;
};

template <typename scalar_t, bool kPeep, bool kClip>
__global__ void __launch_bounds__(kThreads) forward_kernel(FwdArgs<scalar_t> a) {
  using Gate = lstm_block::SigmoidGate<CudaAct>;
  using Cell = lstm_block::TanhCell<CudaAct>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, U = a.U, C = 4 * U, H4 = 4 * H, Hp = padded(H, sizeof(scalar_t));
  const int j0 = blockIdx.x * U, un = min(U, H - j0);
  const auto Lg = a.attrs.layout;
  const int64_t col[4] = {Lg.i * H, Lg.c * H, Lg.f * H, Lg.o * H};  // gate q's column block
  scalar_t* ws = reinterpret_cast<scalar_t*>(smem);  // [H][C]: Wh[k, col[q] + j0 + u] at q·U + u
  scalar_t* hs = reinterpret_cast<scalar_t*>(smem + round16(sizeof(scalar_t) * H * C));
  float* part = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(hs) +
                                         round16(sizeof(scalar_t) * a.Bc * Hp));
  for (int e = threadIdx.x; e < H * C; e += kThreads) {
    const int k = e / C, c = e % C, q = c / U, u = c % U;
    ws[e] = u < un ? a.w[static_cast<int64_t>(k) * H4 + col[q] + j0 + u] : scalar_t(0.f);
  }
  __syncthreads();
  const float fb = static_cast<float>(a.attrs.forget_bias);
  const float clip = static_cast<float>(a.attrs.cell_clip);
  const auto p = lstm_block::ActParams<float>::from(a.attrs.fns);
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int t = 0; t < a.L; ++t) {
    const scalar_t* hp = t == 0 ? a.h0 : a.h + static_cast<int64_t>(t - 1) * a.B * H;
    const float* gx = step_at<const float>(a.gates, t);
    const scalar_t* cs_prev = step_at<const scalar_t>(a.cs_prev, t);
    for (int b0 = 0; b0 < a.B; b0 += a.Bc) {
      const int nb = min(a.Bc, a.B - b0);
      chunk_products(hp + static_cast<int64_t>(b0) * H, nb, H, Hp, C, hs, ws, part);
      for (int e = threadIdx.x; e < nb * un; e += kThreads) {
        const int b = e / un, u = e % un, row = b0 + b, j = j0 + u;
        const int64_t k = static_cast<int64_t>(row) * H + j;
        const float* g = gx + static_cast<int64_t>(row) * H4;
        const float* s = part + b * C + u;
        // The steps path's order: (projection + h·Wh), then + bias.
        auto gate = [&](int q) { return (g[col[q] + j] + s[q * U]) + a.bias[col[q] + j]; };
        const auto r = lstm_block::lstm_cell_forward<Gate, Cell, kPeep, kClip, float>(
            gate(0), gate(1), gate(2), gate(3), static_cast<float>(cs_prev[k]),
            kPeep ? a.wci[j] : 0.f, kPeep ? a.wcf[j] : 0.f, kPeep ? a.wco[j] : 0.f, fb, clip, p);
        step_at<scalar_t>(a.out[0], t)[k] = static_cast<scalar_t>(r.i);
        step_at<scalar_t>(a.out[1], t)[k] = static_cast<scalar_t>(r.cs);
        step_at<scalar_t>(a.out[2], t)[k] = static_cast<scalar_t>(r.f);
        step_at<scalar_t>(a.out[3], t)[k] = static_cast<scalar_t>(r.o);
        step_at<scalar_t>(a.out[4], t)[k] = static_cast<scalar_t>(r.ci);
        step_at<scalar_t>(a.out[5], t)[k] = static_cast<scalar_t>(r.co);
        step_at<scalar_t>(a.out[6], t)[k] = static_cast<scalar_t>(r.h);
      }
      __syncthreads();  // hs and part are the next chunk's
    }
    grid.sync();  // this step's h, from every block, before any block reads it
  }
}

template <typename scalar_t>
auto forward_kernel_for(const lstm_block::CellAttrs& a) {
  return dispatch_bools(
      [](auto kPeep, auto kClip) { return forward_kernel<scalar_t, kPeep, kClip>; },
      a.use_peephole, a.cell_clip > 0);
}

// The whole forward loop (CudaBackend::forward_loop's contract), or false, having done nothing.
// Only the default activations (sigmoid, tanh: TF's block ops) and float or bfloat16 products.
template <typename scalar_t, class Gemm, class PointStep>
bool forward(const lstm_block::FwdStep<scalar_t>& proto, const Gemm& rec, int64_t B, int64_t L,
             const PointStep& point_step, const scalar_t* h0, const scalar_t* h) {
  if constexpr (!std::is_same_v<scalar_t, float> && !std::is_same_v<scalar_t, at::BFloat16>) {
    return false;
  } else {
    const at::Tensor& w = rec.b();  // [H, 4H]
    const int64_t H = proto.H;
    if (!requested() || L <= 0 || !proto.attrs.fns.is_default() || w.size(0) != H ||
        w.size(1) != 4 * H || w.stride(1) != 1 || w.stride(0) != 4 * H ||
        std::max({B, H, L}) > std::numeric_limits<int>::max() / 4) {
      return false;
    }
    Plan plan;
    const size_t op = sizeof(scalar_t);
    if (!plan_for(B, H, 4, /*forward=*/true, op, op, plan)) return false;
    const auto kernel = forward_kernel_for<scalar_t>(proto.attrs);
    if (!fits_at_once(reinterpret_cast<const void*>(kernel), plan)) return false;
    lstm_block::FwdStep<scalar_t> s = proto;
    std::vector<const float*> gates(L);
    std::vector<const scalar_t*> cs_prev(L);
    std::array<std::vector<scalar_t*>, 7> out;
    for (auto& v : out) v.resize(L);
    for (int64_t t = 0; t < L; ++t) {
      gates[t] = point_step(t, s);
      cs_prev[t] = s.cs_prev;
      for (int k = 0; k < 7; ++k) out[k][t] = s.out[k];
      if (s.h_acc != nullptr || s.out[6] != h + t * B * H) return false;
    }
    FwdArgs<scalar_t> args{static_cast<int>(B), static_cast<int>(H), static_cast<int>(L),
                           plan.U, plan.Bc, w.const_data_ptr<scalar_t>(), h0, h,
                           proto.bias, proto.wci, proto.wcf, proto.wco, {}, {}, {}, proto.attrs};
    if (!fit(gates, args.gates) || !fit(cs_prev, args.cs_prev)) return false;
    for (int k = 0; k < 7; ++k) {
      if (!fit(out[k], args.out[k])) return false;
    }
    void* params[] = {&args};
    C10_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                               dim3(plan.blocks), dim3(kThreads), params,
                                               plan.smem, at::cuda::getCurrentCUDAStream()));
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward.

template <typename scalar_t, typename op_t>
struct BwdArgs {
  int B, H, L, U, Bc;
  const op_t* wt;          // Whᵀ [4H, H] row-major
  const float* wci;        // [H] or null
  const float* wcf;
  const float* wco;
  StepPtr act[6];          // i, cs, f, o, ci, co: [B, H]
  StepPtr cs_prev, cs_grad, h_grad;  // [B, H]
  StepPtr dgates;          // [B, 4H] float
  StepPtr dgates_lp;       // [B, 4H] op_t where the products take scalar_t, else unused
  bool lp;
  float* dcs_carry;        // [B, H]: zeros in, cs_prev_grad out
  lstm_block::GateLayout layout;
  lstm_block::ActivationFns fns;
  float mask_clip;
};

template <typename scalar_t, typename op_t, bool kPeep, bool kMaskClip>
__global__ void __launch_bounds__(kThreads) backward_kernel(BwdArgs<scalar_t, op_t> a) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.H, U = a.U, H4 = 4 * H, H4p = padded(H4, sizeof(op_t));
  const int j0 = blockIdx.x * U, un = min(U, H - j0);
  const auto Lg = a.layout;
  op_t* wr = reinterpret_cast<op_t*>(smem);  // [4H][U]: Wh[j0 + u, n] at n·U + u
  op_t* ds = reinterpret_cast<op_t*>(smem + round16(sizeof(op_t) * H4 * U));
  float* part = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(ds) +
                                         round16(sizeof(op_t) * a.Bc * H4p));
  for (int e = threadIdx.x; e < H4 * U; e += kThreads) {
    const int n = e / U, u = e % U;
    wr[e] = u < un ? a.wt[static_cast<int64_t>(n) * H + j0 + u] : op_t(0.f);
  }
  __syncthreads();
  const auto p = lstm_block::ActParams<float>::from(a.fns);
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int t = a.L - 1; t >= 0; --t) {
    const bool carry = t + 1 < a.L;
    const op_t* next = !carry ? nullptr
                       : a.lp ? step_at<const op_t>(a.dgates_lp, t + 1)
                              : step_at<const op_t>(a.dgates, t + 1);
    float* dg = step_at<float>(a.dgates, t);
    for (int b0 = 0; b0 < a.B; b0 += a.Bc) {
      const int nb = min(a.Bc, a.B - b0);
      if (carry) {
        chunk_products(next + static_cast<int64_t>(b0) * H4, nb, H4, H4p, U, ds, wr, part);
      }
      for (int e = threadIdx.x; e < nb * un; e += kThreads) {
        const int b = e / un, u = e % un, row = b0 + b, j = j0 + u;
        const int64_t k = static_cast<int64_t>(row) * H + j;
        auto in = [&](const StepPtr& ptr) {
          return static_cast<float>(step_at<const scalar_t>(ptr, t)[k]);
        };
        auto act = [&](int m) { return in(a.act[m]); };
        // The steps path's order: dh_carry (0 at the last step) + h_grad, dcs_carry + cs_grad.
        const float dh = (carry ? part[b * U + u] : 0.f) + in(a.h_grad);
        const float dcs = a.dcs_carry[k] + in(a.cs_grad);
        const auto r = lstm_block::lstm_cell_backward<lstm_block::AnyGate, lstm_block::AnyCell,
                                                      kPeep, kMaskClip, float>(
            act(0), act(2), act(3), act(4), act(5), kMaskClip ? act(1) : 0.f,
            in(a.cs_prev), dh, dcs,
            kPeep ? a.wci[j] : 0.f, kPeep ? a.wcf[j] : 0.f, kPeep ? a.wco[j] : 0.f, a.mask_clip,
            p);
        float* d = dg + static_cast<int64_t>(row) * H4;
        d[Lg.i * H + j] = r.di;
        d[Lg.c * H + j] = r.dci;
        d[Lg.f * H + j] = r.df;
        d[Lg.o * H + j] = r.d_o;
        if (a.lp) {  // what the bfloat16 products read
          scalar_t* dl = step_at<scalar_t>(a.dgates_lp, t) + static_cast<int64_t>(row) * H4;
          dl[Lg.i * H + j] = static_cast<scalar_t>(r.di);
          dl[Lg.c * H + j] = static_cast<scalar_t>(r.dci);
          dl[Lg.f * H + j] = static_cast<scalar_t>(r.df);
          dl[Lg.o * H + j] = static_cast<scalar_t>(r.d_o);
        }
        a.dcs_carry[k] = r.dcs_prev;
      }
      __syncthreads();  // ds and part are the next chunk's
    }
    grid.sync();  // this step's gate gradients, from every block, before any block reads them
  }
}

// The whole backward loop (CudaBackend::backward_loop's contract: dh_carry is left to the
// driver's last product), or false, having done nothing.
template <typename scalar_t, class Gemm, class PointStep>
bool backward(const lstm_block::BwdStep<scalar_t>& proto, const Gemm& rec, int64_t B, int64_t L,
              const PointStep& point_step) {
  if constexpr (!std::is_same_v<scalar_t, float> && !std::is_same_v<scalar_t, at::BFloat16>) {
    return false;
  } else {
    const at::Tensor& wt = rec.b();  // [4H, H]
    const int64_t H = proto.H;
    const bool lp = rec.operand_type() == c10::CppTypeToScalarType<scalar_t>::value &&
                    !std::is_same_v<scalar_t, float>;
    if (!requested() || L <= 0 || proto.sums != nullptr || wt.size(0) != 4 * H ||
        wt.size(1) != H || wt.stride(1) != 1 || wt.stride(0) != H ||
        (!lp && rec.operand_type() != at::kFloat) ||
        std::max({B, H, L}) > std::numeric_limits<int>::max() / 4) {
      return false;
    }
    auto run = [&](auto op_tag) -> bool {
      using op_t = decltype(op_tag);
      Plan plan;
      const size_t op = sizeof(op_t);
      if (!plan_for(B, H, 4, /*forward=*/false, op, op, plan)) return false;
      const auto kernel = dispatch_bools(
          [](auto kPeep, auto kMask) { return backward_kernel<scalar_t, op_t, kPeep, kMask>; },
          proto.wci != nullptr, proto.mask_clip != lstm_block::kNoMask);
      if (!fits_at_once(reinterpret_cast<const void*>(kernel), plan)) return false;
      lstm_block::BwdStep<scalar_t> s = proto;
      std::array<std::vector<const scalar_t*>, 9> in;  // act[0..5], cs_prev, cs_grad, h_grad
      std::vector<float*> dgates(L);
      std::vector<scalar_t*> dgates_lp(L);
      for (auto& v : in) v.resize(L);
      for (int64_t t = 0; t < L; ++t) {
        point_step(t, s);
        for (int m = 0; m < 6; ++m) in[m][t] = s.act[m];
        in[6][t] = s.cs_prev;
        in[7][t] = s.cs_grad;
        in[8][t] = s.h_grad;
        dgates[t] = s.dgates;
        dgates_lp[t] = s.dgates_lp;
      }
      BwdArgs<scalar_t, op_t> args{};
      args.B = static_cast<int>(B);
      args.H = static_cast<int>(H);
      args.L = static_cast<int>(L);
      args.U = plan.U;
      args.Bc = plan.Bc;
      args.wt = wt.const_data_ptr<op_t>();
      args.wci = proto.wci;
      args.wcf = proto.wcf;
      args.wco = proto.wco;
      for (int m = 0; m < 6; ++m) {
        if (!fit(in[m], args.act[m])) return false;
      }
      if (!fit(in[6], args.cs_prev) || !fit(in[7], args.cs_grad) || !fit(in[8], args.h_grad) ||
          !fit(dgates, args.dgates) || (lp && !fit(dgates_lp, args.dgates_lp))) {
        return false;
      }
      args.lp = lp;
      args.dcs_carry = proto.dcs_carry;
      args.layout = proto.layout;
      args.fns = proto.fns;
      args.mask_clip = static_cast<float>(proto.mask_clip);
      void* params[] = {&args};
      C10_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel),
                                                 dim3(plan.blocks), dim3(kThreads), params,
                                                 plan.smem, at::cuda::getCurrentCUDAStream()));
      return true;
    };
    if constexpr (std::is_same_v<scalar_t, float>) {
      return run(float{});
    } else {
      return lp && run(scalar_t{});
    }
  }
}

}  // namespace persistent
}  // namespace cuda
}  // namespace torch_lstm_grad
