// What the persistent recurrences (lstm_persistent.cuh, gru_persistent.cuh) share: the
// setting that asks for them, the per-step pointer forms, the plan of a pass (units a block,
// batch rows a chunk, shared memory), the cooperative launch's condition, the L2 reads of what
// other blocks wrote, and the products over a chunk's rows (docs/performance.md §5).
//
// A pass's grid: block n of ceil(H / U) owns the units j0 = n·U .. j0 + U - 1, with every gate
// of each (G gates: 4 for the LSTM, 3 for the GRU). The forward keeps H × G·U weights (the
// units' columns of the recurrent matrix) and reads rows of H (the previous h); the backward
// keeps U × G·H (the units' rows) and reads rows of G·H (the later step's gate gradients).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace torch_lstm_grad {
namespace cuda {
namespace persistent {

// Whether the recurrence is asked to run persistent (read at every call: tests and benchmarks
// switch it between calls).
inline bool requested() {
  const char* env = std::getenv("TORCH_LSTM_GRAD_CUDA_RECURRENT");
  const std::string v = env == nullptr || *env == '\0' ? "steps" : env;
  TORCH_CHECK_VALUE(v == "steps" || v == "persistent",
                    "TORCH_LSTM_GRAD_CUDA_RECURRENT: expected \"steps\" or \"persistent\", got \"",
                    v, "\"");
  return v == "persistent";
}

// Where a per-step pointer points at step t: `first` at t = 0, then base + t·stride (bytes), or
// with `alternate` base + (t mod 2)·stride (the inference's two cell-state rows). Addresses as
// integers: base may lie outside any buffer (it is never read itself).
struct StepPtr {
  uintptr_t first = 0, base = 0;
  int64_t stride = 0;
  bool alternate = false;
};

// Step t's address of `p`, as a T*.
template <typename T>
__device__ __forceinline__ T* step_at(const StepPtr& p, int64_t t) {
  const uintptr_t a = t == 0 ? p.first : p.base + (p.alternate ? (t & 1) : t) * p.stride;
  return reinterpret_cast<T*>(a);
}

// The StepPtr that gives p[t] for every t, or false where none does.
template <typename T>
bool fit(const std::vector<T*>& p, StepPtr& out) {
  const int64_t L = static_cast<int64_t>(p.size());
  auto addr = [&](int64_t t) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p[t])); };
  out = StepPtr{};
  if (L == 0) return true;
  out.first = out.base = reinterpret_cast<uintptr_t>(p[0]);
  if (L == 1) return true;
  auto all = [&](auto&& want) {
    for (int64_t t = 1; t < L; ++t) {
      if (addr(t) != want(t)) return false;
    }
    return true;
  };
  const int64_t stride = L >= 3 ? addr(2) - addr(1) : 0;
  const int64_t base = addr(1) - stride;
  if (all([&](int64_t t) { return base + t * stride; })) {
    out.base = static_cast<uintptr_t>(base);
    out.stride = stride;
    return true;
  }
  if (L >= 3 && all([&](int64_t t) { return addr(2) + (t & 1) * (addr(1) - addr(2)); })) {
    out.base = static_cast<uintptr_t>(addr(2));
    out.stride = addr(1) - addr(2);
    out.alternate = true;
    return true;
  }
  return false;
}

constexpr int kThreads = 256;

// A block's share of a pass: U units, Bc batch rows a chunk, its dynamic shared memory.
struct Plan {
  int U = 0, Bc = 0, blocks = 0;
  size_t smem = 0;
};

__host__ __device__ inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// A chunk's rows in shared memory lie one 4-byte bank further apart than their length, so that
// the threads of a warp reading one element of several rows hit different banks.
__host__ __device__ inline int padded(int row, size_t op) { return row + static_cast<int>(4 / op); }

// The shared memory of a block: its weights (w_elems of w_op bytes), a chunk of Bc rows of `row`
// operands of row_op bytes, and the float partial sums (a value a thread, or `outs` a row).
inline size_t smem_bytes(size_t w_elems, size_t w_op, int64_t Bc, int64_t row, size_t row_op,
                         int64_t outs) {
  const size_t rows = static_cast<size_t>(Bc * padded(static_cast<int>(row), row_op));
  return round16(w_elems * w_op) + round16(rows * row_op) +
         static_cast<size_t>(std::max<int64_t>(kThreads, Bc * outs)) * sizeof(float);
}

// U = ceil(H / SMs) units a block (one block an SM), then the largest chunk of rows (at most
// 64) that fits next to the weights: G gates, weights of w_op bytes, chunk rows of row_op bytes.
inline bool plan_for(int64_t B, int64_t H, int64_t G, bool forward, size_t w_op,
                     size_t row_op, Plan& p) {
  const auto* prop = at::cuda::getCurrentDeviceProperties();
  int coop = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch,
                                        at::cuda::current_device()));
  if (!coop || B <= 0 || H <= 0) return false;
  const int64_t sms = prop->multiProcessorCount;
  const int64_t U = (H + sms - 1) / sms;
  const size_t limit = prop->sharedMemPerBlockOptin;
  const size_t w_elems = static_cast<size_t>(G * H * U);
  const int64_t row = forward ? H : G * H, outs = forward ? G * U : U;
  int64_t Bc = std::min<int64_t>(B, 64);
  while (Bc > 0 && smem_bytes(w_elems, w_op, Bc, row, row_op, outs) > limit) Bc /= 2;
  if (Bc == 0) return false;
  p.U = static_cast<int>(U);
  p.Bc = static_cast<int>(Bc);
  p.blocks = static_cast<int>((H + U - 1) / U);
  p.smem = smem_bytes(w_elems, w_op, Bc, row, row_op, outs);
  return true;
}

// Whether `kernel` can run `p.blocks` blocks at once (a cooperative launch's condition), its
// shared-memory limit raised to the plan's.
inline bool fits_at_once(const void* kernel, const Plan& p) {
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(p.smem)));
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads,
                                                               p.smem));
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return static_cast<int64_t>(per_sm) * sms >= p.blocks;
}

// An L2 read of a value other blocks wrote before the last grid barrier (not through L1).
template <typename T>
__device__ __forceinline__ T load_cg(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return __ldcg(p);
  } else if constexpr (std::is_same_v<T, double>) {
    return __ldcg(p);
  } else {
    static_assert(sizeof(T) == 2, "load_cg: float, double or a 16-bit type");
    return T(__ldcg(reinterpret_cast<const unsigned short*>(p)), T::from_bits());
  }
}

// The split S depends on the chunk's row count, so a row of a short last chunk is summed in
// another order than one of a full chunk: deterministic for a shape on a device, as cuBLAS is.
// One partial sum a thread over interleaved slices of k (thread s of S takes k = s, s + S, ...),
// then the S partials of each output added in order s = 0 .. S - 1. `a(o, k)` and `b(o, k)`
// the operands of output o. O outputs; `part` holds max(kThreads, O) floats.
template <class A, class Bf>
__device__ __forceinline__ void dot_rows(int O, int K, const A& a, const Bf& b, float* part) {
  const int S = O >= kThreads ? 1 : min(kThreads / O, max(K, 1));
  for (int item = threadIdx.x; item < O * S; item += kThreads) {
    const int o = item % O, s = item / O;
    float sum = 0.f;
    for (int k = s; k < K; k += S) sum += a(o, k) * b(o, k);
    part[s * O + o] = sum;
  }
  __syncthreads();
  for (int o = threadIdx.x; o < O; o += kThreads) {
    float v = part[o];
    for (int s = 1; s < S; ++s) v += part[s * O + o];
    part[o] = v;
  }
  __syncthreads();
}

// One chunk's products: rows src[0 .. nb) (dense rows of K) loaded into `rows` (Kp apart), then
// part[b·Cw + c] = Σ_k rows[b][k] · w[k·Cw + c] for the chunk's rows b and the block's Cw
// outputs a row (w in shared memory, K × Cw).
template <typename row_t, typename w_t>
__device__ __forceinline__ void chunk_products(const row_t* src, int nb, int K, int Kp, int Cw,
                                               row_t* rows, const w_t* w, float* part) {
  for (int e = threadIdx.x; e < nb * K; e += kThreads) {
    rows[(e / K) * Kp + e % K] = load_cg(src + e);
  }
  __syncthreads();
  dot_rows(
      nb * Cw, K, [&](int o, int k) { return static_cast<float>(rows[(o / Cw) * Kp + k]); },
      [&](int o, int k) { return static_cast<float>(w[k * Cw + o % Cw]); }, part);
}

}  // namespace persistent
}  // namespace cuda
}  // namespace torch_lstm_grad
