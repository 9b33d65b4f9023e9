// keras_gru's recurrence (reset_after: one product a step) on CUDA as one cooperative kernel per
// pass, as lstm_persistent.cuh does for the LSTM block ops (the grid, the plan and the
// products: persistent.cuh; docs/performance.md §5).
//
// Forward: block n owns units j0 .. j0 + U - 1 and keeps their z, r, h columns of the recurrent
// kernel (H × 3U floats). Step t reads h_{t-1} [B, H], forms inner = h_{t-1}·R for its columns,
// and runs the steps path's cell (gru_seq.h: GruCell::after, the biases added as there).
// Backward: block n keeps its units' rows of R (U × 3H). Step t reads the later step's
// d_inner [B, 3H], forms the carry d_inner_{t+1}·Rᵀ + dh for its units, runs the steps path's
// backward pass and writes its units' d_xp and d_inner; a last phase adds d_inner_0·Rᵀ into dh
// (h_prev's gradient), as the steps path's last product does. dx, dkernel, drecurrent_kernel
// and the biases' sums come after, from d_xp and d_inner, as on the steps path.
//
// The numbers: float products (the steps path multiplies float copies too) summed in another
// order than cuBLAS's; TF32 does not apply; the pointwise math is the steps path's.
// reset_after=False (two products a step, the second on r ⊙ h of the whole row) takes the steps
// path, as does a shape whose slice of R does not fit in a block's shared memory.
#pragma once

#include <limits>

#include "../bool_dispatch.h"
#include "../gru_seq.h"
#include "activations.cuh"
#include "persistent.cuh"

namespace torch_lstm_grad {
namespace cuda {
namespace persistent {

template <typename scalar_t>
struct GruArgs {
  gru_seq::GruLoop<scalar_t> s;
  int B, H, L, U, Bc;
};

template <typename scalar_t, class Gate, class Cell>
__global__ void __launch_bounds__(kThreads) gru_forward_kernel(GruArgs<scalar_t> a) {
  using C = gru_seq::GruCell<Gate, Cell, float>;
  extern __shared__ __align__(16) unsigned char smem[];
  const auto& s = a.s;
  const int H = a.H, U = a.U, G = 3 * U, H3 = 3 * H, Hp = padded(H, sizeof(scalar_t));
  const int j0 = blockIdx.x * U, un = min(U, H - j0);
  const int64_t BH = static_cast<int64_t>(a.B) * H;
  float* ws = reinterpret_cast<float*>(smem);  // [H][3U]: R[k, q·H + j0 + u] at q·U + u
  scalar_t* hs = reinterpret_cast<scalar_t*>(smem + round16(sizeof(float) * H * G));
  float* part = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(hs) +
                                         round16(sizeof(scalar_t) * a.Bc * Hp));
  for (int e = threadIdx.x; e < H * G; e += kThreads) {
    const int k = e / G, c = e % G, q = c / U, u = c % U;
    ws[e] = u < un ? s.R[static_cast<int64_t>(k) * H3 + q * H + j0 + u] : 0.f;
  }
  __syncthreads();
  const auto p = lstm_block::ActParams<float>::from(s.fns);
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int t = 0; t < a.L; ++t) {
    const scalar_t* hp = t == 0 ? s.h0 : s.h + (t - 1) * BH;
    const float* xp = s.xp + t * BH * 3;
    const int64_t gate_at = t * s.gate_step;
    for (int b0 = 0; b0 < a.B; b0 += a.Bc) {
      const int nb = min(a.Bc, a.B - b0);
      chunk_products(hp + static_cast<int64_t>(b0) * H, nb, H, Hp, G, hs, ws, part);
      for (int e = threadIdx.x; e < nb * un; e += kThreads) {
        const int b = e / un, u = e % un, row = b0 + b, j = j0 + u;
        const int64_t k = static_cast<int64_t>(row) * H + j;
        const float* x = xp + static_cast<int64_t>(row) * H3;
        const float* in = part + b * G + u;  // gate q's h·R at in[q·U]
        const auto o = C::after(x[j] + s.b_in[j], x[H + j] + s.b_in[H + j],
                                x[2 * H + j] + s.b_in[2 * H + j], in[0] + s.b_rec[j],
                                in[U] + s.b_rec[H + j], in[2 * U] + s.b_rec[2 * H + j],
                                static_cast<float>(hs[b * Hp + j]), p);
        s.z[gate_at + k] = static_cast<scalar_t>(o.z);
        s.r[gate_at + k] = static_cast<scalar_t>(o.r);
        s.hh[gate_at + k] = static_cast<scalar_t>(o.hh);
        s.hr[gate_at + k] = static_cast<scalar_t>(o.hr);
        s.h[t * BH + k] = static_cast<scalar_t>(o.h);
      }
      __syncthreads();  // hs and part are the next chunk's
    }
    grid.sync();  // this step's h, from every block, before any block reads it
  }
}

// Steps t = L - 1 .. 0, then t = -1: the last product alone (dh += d_inner_0·Rᵀ).
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads) gru_backward_kernel(GruArgs<scalar_t> a) {
  using C = gru_seq::GruCell<lstm_block::AnyGate, lstm_block::AnyCell, float>;
  extern __shared__ __align__(16) unsigned char smem[];
  const auto& s = a.s;
  const int H = a.H, U = a.U, H3 = 3 * H, H3p = padded(H3, sizeof(float));
  const int j0 = blockIdx.x * U, un = min(U, H - j0);
  const int64_t BH = static_cast<int64_t>(a.B) * H;
  float* wr = reinterpret_cast<float*>(smem);  // [3H][U]: R[j0 + u, n] at n·U + u
  float* ds = reinterpret_cast<float*>(smem + round16(sizeof(float) * H3 * U));
  float* part = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(ds) +
                                         round16(sizeof(float) * a.Bc * H3p));
  for (int e = threadIdx.x; e < H3 * U; e += kThreads) {
    const int n = e / U, u = e % U;
    wr[e] = u < un ? s.R[static_cast<int64_t>(j0 + u) * H3 + n] : 0.f;
  }
  __syncthreads();
  const auto p = lstm_block::ActParams<float>::from(s.fns);
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int t = a.L - 1; t >= -1; --t) {
    const bool carry = t + 1 < a.L;
    const float* next = carry ? s.d_inner + (t + 1) * BH * 3 : nullptr;
    for (int b0 = 0; b0 < a.B; b0 += a.Bc) {
      const int nb = min(a.Bc, a.B - b0);
      if (carry) {
        chunk_products(next + static_cast<int64_t>(b0) * H3, nb, H3, H3p, U, ds, wr, part);
      }
      for (int e = threadIdx.x; e < nb * un; e += kThreads) {
        const int b = e / un, u = e % un, row = b0 + b, j = j0 + u;
        const int64_t k = static_cast<int64_t>(row) * H + j;
        // The steps path's order: the product, then + dh (cuBLAS' accumulate), then + h_grad.
        const float c = carry ? part[b * U + u] + s.dh[k] : s.dh[k];
        if (t < 0) {
          s.dh[k] = c;
          continue;
        }
        const int64_t tk = t * BH + k;  // step t's element k
        const float g = c + static_cast<float>(s.h_grad[tk]);
        const float z = static_cast<float>(s.z[tk]), r = static_cast<float>(s.r[tk]);
        const float hp = static_cast<float>(t == 0 ? s.h0[k] : s.h[tk - BH]);
        float dz, dhh;
        C::gate_grads(g, z, static_cast<float>(s.hh[tk]), hp, p, dz, dhh);
        const float dr = lstm_block::AnyGate::df(r, p) * (dhh * static_cast<float>(s.hr[tk]));
        float* dx = s.d_xp + (t * BH + static_cast<int64_t>(row) * H) * 3;
        float* di = s.d_inner + (t * BH + static_cast<int64_t>(row) * H) * 3;
        dx[j] = dz;
        dx[H + j] = dr;
        dx[2 * H + j] = dhh;
        di[j] = dz;
        di[H + j] = dr;
        di[2 * H + j] = dhh * r;
        s.dh[k] = g * z;
      }
      __syncthreads();  // ds and part are the next chunk's
    }
    grid.sync();  // this step's d_inner, from every block, before any block reads it
  }
}

template <typename scalar_t>
constexpr bool kGruTypes = std::is_same_v<scalar_t, float> ||
                           std::is_same_v<scalar_t, at::BFloat16> ||
                           std::is_same_v<scalar_t, at::Half>;

// A pass's plan, its kernel fitted, or false where it takes the steps path.
template <typename scalar_t>
bool gru_plan(const gru_seq::GruLoop<scalar_t>& s, bool forward, const void* kernel, Plan& plan) {
  const int64_t lim = std::numeric_limits<int>::max() / 4;
  if (!requested() || s.L <= 0 || s.B <= 0 || std::max({s.B, s.H, s.L}) > lim) return false;
  const size_t row_op = forward ? sizeof(scalar_t) : sizeof(float);
  return plan_for(s.B, s.H, 3, forward, sizeof(float), row_op, plan) && fits_at_once(kernel, plan);
}

template <typename scalar_t>
void gru_launch(const void* kernel, const gru_seq::GruLoop<scalar_t>& s, const Plan& plan) {
  GruArgs<scalar_t> args{s, static_cast<int>(s.B), static_cast<int>(s.H), static_cast<int>(s.L),
                         plan.U, plan.Bc};
  void* params[] = {&args};
  C10_CUDA_CHECK(cudaLaunchCooperativeKernel(kernel, dim3(plan.blocks), dim3(kThreads), params,
                                             plan.smem, at::cuda::getCurrentCUDAStream()));
}

// CudaGruBackend::forward_loop / backward_loop (gru_seq.h's GruLoop contract).
template <typename scalar_t>
bool gru_forward(const gru_seq::GruLoop<scalar_t>& s) {
  if constexpr (!kGruTypes<scalar_t>) {
    return false;
  } else {
    using Sigmoid = lstm_block::SigmoidGate<CudaAct>;
    using Tanh = lstm_block::TanhCell<CudaAct>;
    const auto kernel = dispatch_bools(
        [](auto kHard, auto kTanh) {
          using Gate = std::conditional_t<kHard, lstm_block::HardSigmoidGate, Sigmoid>;
          using Cell = std::conditional_t<kTanh, Tanh, lstm_block::RectCell>;
          return gru_forward_kernel<scalar_t, Gate, Cell>;
        },
        s.fns.gate != lstm_block::GateFn::kSigmoid, s.fns.cell == lstm_block::CellFn::kTanh);
    Plan plan;
    const void* k = reinterpret_cast<const void*>(kernel);
    if (!gru_plan(s, /*forward=*/true, k, plan)) return false;
    gru_launch(k, s, plan);
    return true;
  }
}

template <typename scalar_t>
bool gru_backward(const gru_seq::GruLoop<scalar_t>& s) {
  if constexpr (!kGruTypes<scalar_t>) {
    return false;
  } else {
    Plan plan;
    const void* k = reinterpret_cast<const void*>(gru_backward_kernel<scalar_t>);
    if (!gru_plan(s, /*forward=*/false, k, plan)) return false;
    gru_launch(k, s, plan);
    return true;
  }
}

}  // namespace persistent
}  // namespace cuda
}  // namespace torch_lstm_grad
