// CPU kernels of TF's LSTM block ops: the CPU Backend (csrc/cpu/lstm_backend.h) with TF's
// sigmoid/tanh cell only. The activation and clip-gradient variants (block_lstm_ex) are compiled
// in lstm_block_ex.cpp.

#include <torch/library.h>

#include "lstm_backend.h"

namespace torch_lstm_grad {
namespace {

using cpu_lstm::BwdRows;
using cpu::CpuAct;
using cpu_lstm::FwdRows;
using lstm_block::BwdStep;
using lstm_block::CellAttrs;
using Gate = lstm_block::SigmoidGate<CpuAct>;
using Cell = lstm_block::TanhCell<CpuAct>;

struct TfRows {
  template <typename scalar_t>
  static FwdRows<scalar_t> forward(const lstm_block::FwdStep<scalar_t>& s) {
    const CellAttrs& a = s.attrs;
    TORCH_INTERNAL_ASSERT(a.fns.is_default() && !a.clip_zero_grad);
    const bool peep = a.use_peephole, clip = a.cell_clip > 0;
    if (const auto fast = cpu_lstm::avx512_tf_rows<scalar_t>(peep, clip, s.gates_read)) return fast;
    return dispatch_bools(
        [](auto kPeep, auto kClip) {
          return &cpu_lstm::forward_rows<scalar_t, Gate, Cell, kPeep, kClip>;
        },
        peep, clip);
  }

  template <typename scalar_t>
  static BwdRows<scalar_t> backward(const BwdStep<scalar_t>& s, bool sums) {
    TORCH_INTERNAL_ASSERT(s.fns.is_default() && s.mask_clip == lstm_block::kNoMask);
    return dispatch_bools(
        [](auto kPeep, auto kSums) {
          return &cpu_lstm::backward_rows<scalar_t, Gate, Cell, kPeep, /*kMaskClip=*/false, kSums>;
        },
        s.wci != nullptr, sums);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  lstm_block::register_ops<cpu_lstm::CpuBackend<TfRows>>(m);
}

}  // namespace torch_lstm_grad
