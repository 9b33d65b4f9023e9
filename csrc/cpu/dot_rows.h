// d · wᵀ for a few rows of d, as dot products of contiguous rows (dot_rows.cpp).
#pragma once

#include <ATen/ATen.h>

namespace torch_lstm_grad::cpu {

// The most rows of d the kernel takes.
constexpr int64_t kDotRowsMax = 8;

// Whether d · wᵀ should take dot_rows here: float32 CPU tensors, d [B, N] with 1 <= B <=
// kDotRowsMax (not 2 or 3 on AVX-512), w [K, N], each with unit-stride rows, at least 2^18
// multiply-adds, on an AVX2 + FMA or AVX-512 CPU (the measurements: docs/performance.md §3.12).
bool dot_rows_apply(const at::Tensor& d, const at::Tensor& w);

// out[b, k] = Σ_n d[b, n] · w[k, n] into `out` [B, K] (unit-stride rows; a column slice of a
// wider tensor is fine). For operands of the kind dot_rows_apply takes, of any size (a block
// of w's rows of a product it took).
void dot_rows(const at::Tensor& d, const at::Tensor& w, const at::Tensor& out);

}  // namespace torch_lstm_grad::cpu
