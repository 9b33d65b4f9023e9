// Autograd of the one-step cell ops (LSTMBlockCell, GRUBlockCell), in C++ (docs/api.md,
// "Differentiability"). A Python loop calls a cell once a step, where a Python
// torch.autograd.Function cost ~20 µs a step forward and as much again backward, more than a
// B = 1 step's arithmetic (docs/performance.md §3.9, §3.10); a C++ node records and runs for a
// few µs. Each node's backward is the cell's whole-backward op (_lstm_block_cell_backward,
// _gru_block_cell_backward), the formula written once there, which the public Python
// Functions (autograd.py) call as well. The sequence ops keep their Python autograd: one call
// a sequence.

#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "typed_op.h"

namespace torch_lstm_grad {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using T = const at::Tensor&;
using Tensor7 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;
using Tensor4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Tensor6 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor>;
using Tensor8 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor, at::Tensor>;

// Gradients are not materialised: an undefined one means "no gradient" for that output.
at::Tensor grad_or_zeros(const at::Tensor& grad, const at::Tensor& like) {
  return grad.defined() ? grad : at::zeros_like(like);
}

struct LSTMBlockCellNode : public torch::autograd::Function<LSTMBlockCellNode> {
  static variable_list forward(AutogradContext* ctx, T x, T cs_prev, T h_prev, T w, T wci,
                               T wcf, T wco, T b, double forget_bias, double cell_clip,
                               bool use_peephole) {
    static const auto op = typed_op<Tensor7(T, T, T, T, T, T, T, T, double, double, bool)>(
        "torch_lstm_grad::lstm_block_cell");
    // Below the Autograd key: the kernel of the device, not this one again.
    at::AutoDispatchBelowADInplaceOrView below;
    auto [i, cs, f, o, ci, co, h] =
        op.call(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip, use_peephole);
    // The gate outputs are not differentiable (docs/differences.md): a loss on them raises.
    ctx->mark_non_differentiable({i, f, o, ci, co});
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co});
    ctx->saved_data["use_peephole"] = use_peephole;
    return {i, cs, f, o, ci, co, h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = typed_op<Tensor8(T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, bool,
                                            std::array<bool, 8>)>(
        "torch_lstm_grad::_lstm_block_cell_backward");
    const variable_list s = ctx->get_saved_variables();
    std::array<bool, 8> need{};
    for (size_t k = 0; k < need.size(); ++k) need[k] = ctx->needs_input_grad(k);
    auto [x_grad, cs_prev_grad, h_prev_grad, w_grad, wci_grad, wcf_grad, wco_grad, b_grad] =
        op.call(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                s[13], grad_or_zeros(grads[1], s[9]), grad_or_zeros(grads[6], s[2]),
                ctx->saved_data["use_peephole"].toBool(), need);
    return {x_grad,   cs_prev_grad, h_prev_grad, w_grad,       wci_grad,    wcf_grad,
            wco_grad, b_grad,       at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct GRUBlockCellNode : public torch::autograd::Function<GRUBlockCellNode> {
  static variable_list forward(AutogradContext* ctx, T x, T h_prev, T w_ru, T w_c, T b_ru,
                               T b_c) {
    static const auto op =
        typed_op<Tensor4(T, T, T, T, T, T)>("torch_lstm_grad::gru_block_cell");
    at::AutoDispatchBelowADInplaceOrView below;
    auto [r, u, c, h] = op.call(x, h_prev, w_ru, w_c, b_ru, b_c);
    ctx->mark_non_differentiable({r, u, c});
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c});
    return {r, u, c, h};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = typed_op<Tensor6(T, T, T, T, T, T, T, T, T, T, std::array<bool, 6>)>(
        "torch_lstm_grad::_gru_block_cell_backward");
    const variable_list s = ctx->get_saved_variables();
    std::array<bool, 6> need{};
    for (size_t k = 0; k < need.size(); ++k) need[k] = ctx->needs_input_grad(k);
    auto [d_x, d_h_prev, d_w_ru, d_w_c, d_b_ru, d_b_c] =
        op.call(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8],
                grad_or_zeros(grads[3], s[1]), need);
    return {d_x, d_h_prev, d_w_ru, d_w_c, d_b_ru, d_b_c};
  }
};

Tensor7 lstm_block_cell_autograd(T x, T cs_prev, T h_prev, T w, T wci, T wcf, T wco, T b,
                                 double forget_bias, double cell_clip, bool use_peephole) {
  const variable_list out = LSTMBlockCellNode::apply(x, cs_prev, h_prev, w, wci, wcf, wco, b,
                                                     forget_bias, cell_clip, use_peephole);
  return {out[0], out[1], out[2], out[3], out[4], out[5], out[6]};
}

Tensor4 gru_block_cell_autograd(T x, T h_prev, T w_ru, T w_c, T b_ru, T b_c) {
  const variable_list out = GRUBlockCellNode::apply(x, h_prev, w_ru, w_c, b_ru, b_c);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, Autograd, m) {
  m.impl("lstm_block_cell", &lstm_block_cell_autograd);
  m.impl("gru_block_cell", &gru_block_cell_autograd);
}

}  // namespace torch_lstm_grad
