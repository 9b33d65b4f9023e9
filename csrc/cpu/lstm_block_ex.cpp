// CPU kernels of block_lstm_ex: the CPU Backend (csrc/cpu/lstm_backend.h) with every activation
// variant (gate: sigmoid | hard sigmoid, cell: tanh | relu/linear), the clip-gradient rule and
// the projection (the drivers in csrc/lstm_block.h). Compiled apart from TF's block ops, whose
// loops stay the sigmoid/tanh ones alone.
//
// To keep the instantiations down (each loop is compiled 3 times, for AVX-512, AVX2 and
// baseline, per dtype), the loops here always clip and always mask: the clip at +inf, or the
// mask at +inf, does nothing (two compares an element), and the two hard sigmoids (and relu /
// linear) are one loop each with their constants as loop invariants (ActivationFns); the
// backward is one loop for every variant (AnyGate, AnyCell).

#include <torch/library.h>

#include "lstm_backend.h"

namespace torch_lstm_grad {
namespace {

using cpu_lstm::BwdRows;
using cpu::CpuAct;
using cpu_lstm::FwdRows;
using lstm_block::BwdStep;
using lstm_block::CellAttrs;
using lstm_block::CellFn;
using lstm_block::GateFn;
using Sigmoid = lstm_block::SigmoidGate<CpuAct>;
using Hard = lstm_block::HardSigmoidGate;
using Tanh = lstm_block::TanhCell<CpuAct>;
using Rect = lstm_block::RectCell;

struct VariantRows {
  template <typename scalar_t>
  static FwdRows<scalar_t> forward(const lstm_block::FwdStep<scalar_t>& s) {
    const CellAttrs& a = s.attrs;
    const bool hard = a.fns.gate != GateFn::kSigmoid, tanh = a.fns.cell == CellFn::kTanh;
    const bool peep = a.use_peephole;
    if (!hard && tanh) {  // the clip at +inf clips nothing: the loop without it is the same
      if (const auto fast = cpu_lstm::avx512_tf_rows<scalar_t>(peep, a.cell_clip > 0,
                                                                  s.gates_read)) {
        return fast;
      }
    }
    return dispatch_bools(
        [](auto kHard, auto kTanh, auto kPeep) {
          using Gate = std::conditional_t<kHard, Hard, Sigmoid>;
          using Cell = std::conditional_t<kTanh, Tanh, Rect>;
          return &cpu_lstm::forward_rows<scalar_t, Gate, Cell, kPeep, /*kClip=*/true>;
        },
        hard, tanh, peep);
  }

  // One backward loop for every variant: the derivatives come from the stored outputs and
  // cost little, so AnyGate / AnyCell compute both and blend (lstm_block.h), where a loop per
  // variant would quadruple this file's loops and its compile time.
  template <typename scalar_t>
  static BwdRows<scalar_t> backward(const BwdStep<scalar_t>& s, bool sums) {
    return dispatch_bools(
        [](auto kPeep, auto kSums) {
          return &cpu_lstm::backward_rows<scalar_t, lstm_block::AnyGate, lstm_block::AnyCell, kPeep,
                                          /*kMaskClip=*/true, kSums>;
        },
        s.wci != nullptr, sums);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  lstm_block::register_ex_ops<cpu_lstm::CpuBackend<VariantRows>>(m);
}

}  // namespace torch_lstm_grad
