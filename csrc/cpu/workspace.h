// The inference forwards' scratch for the input products of every step, [T, B, G·H]: a buffer
// each calling thread keeps from call to call (docs/performance.md §3.11).
//
// Written and read within one call, it is the largest buffer an inference forward needs (the
// input products of every step, G·H per row against the output's P). Allocated per call,
// glibc maps a buffer that large afresh (above its mmap threshold, at most 32 MB) and the
// kernel faults in every page again on every call: 65 MB and about 16,000 page faults a call
// at T, B, H = 500, 32, 256, 1.2-1.3x nn.LSTM's time, whose oneDNN primitive keeps its
// scratchpad. Kept per thread, up to kMaxKeptWorkspaceBytes (larger ones are allocated per
// call); a caller must not hand it on: the thread's next inference call overwrites it.
// Training forwards write these products into the reserve they return instead.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

namespace torch_lstm_grad::cpu {

inline constexpr int64_t kMaxKeptWorkspaceBytes = int64_t{128} << 20;

inline at::Tensor inference_workspace(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  const int64_t bytes =
      c10::multiply_integers(sizes) * static_cast<int64_t>(opts.dtype().itemsize());
  if (bytes > kMaxKeptWorkspaceBytes) return at::empty(sizes, opts);
  static thread_local at::Tensor kept;  // bytes; grows to the largest size asked for
  if (!kept.defined() || kept.numel() < bytes) kept = at::empty({bytes}, opts.dtype(at::kByte));
  return kept.narrow(0, 0, bytes).view(opts.dtype().toScalarType()).view(sizes);
}

}  // namespace torch_lstm_grad::cpu
