// The matrix products of the cell ops' backward, ATen's on every device and a CPU kernel at a
// few rows: the gradient through the gates of LSTMBlockCell and GRUBlockCell (TF1's Python
// gradients, docs/tf-semantics.md §5).
// Shared by the CPU kernel of _gru_block_cell_backward (cpu/gru_block.cpp) and the
// CompositeExplicitAutograd kernels of _lstm_block_cell_backward and _gru_block_cell_backward
// (torch_lstm_grad.cpp).
#pragma once

#include <ATen/ATen.h>

#include "cpu/dot_rows.h"

namespace torch_lstm_grad {

// d · wᵀ (d [B, N], w [K, N]). On the CPU in float32, at 1-8 rows as dot products of rows
// (cpu/dot_rows.cpp, where MKL's d · wᵀ streams w at half the speed: docs/performance.md
// §3.12); at 16-48 rows and 512 gate columns or more, as (w · dᵀ)ᵀ made contiguous, the rule under which MKL's product in that orientation
// was the faster on every CPU measured: 0.34-0.91x the time on an Intel Xeon (AVX-512),
// 0.55-0.91x on Zen 2, 0.6-0.9x on Zen 4. At 256 columns and at 64 rows it was faster on the
// AMD CPUs but 1.1-1.7x slower on the Xeon, at 1, 8 and 128 rows slower or no faster
// (docs/performance.md §3.9). Its sums can round differently (8 rows; the Xeon at K = 1024).
inline at::Tensor times_transposed(const at::Tensor& d, const at::Tensor& w) {
  if (cpu::dot_rows_apply(d, w)) {
    at::Tensor out = at::empty({d.size(0), w.size(0)}, d.options());
    cpu::dot_rows(d, w, out);
    return out;
  }
  if (d.is_cpu() && d.scalar_type() == at::kFloat && d.size(0) >= 16 && d.size(0) <= 48 &&
      d.size(1) >= 512) {
    return at::mm(w, d.t()).t().contiguous();
  }
  return at::mm(d, w.t());
}

}  // namespace torch_lstm_grad
