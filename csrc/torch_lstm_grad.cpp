// The device-neutral half of the extension: every operator schema, defined once.
//
// This file is built in every configuration, so every op exists on CPU-only installs too;
// fake kernels, autograd registration and opcheck then work the same everywhere. Kernels
// live in csrc/cpu (TORCH_LIBRARY_IMPL CPU) and csrc/cuda (TORCH_LIBRARY_IMPL CUDA).
// Schemas use TensorFlow's argument and output names so the Python raw ops map 1:1.

#include <Python.h>
#include <torch/library.h>

#include "cell_products.h"
#include "cpu/isa.h"
#include "cudnn_rnn_config.h"
#include "gru_block.h"
#include "packed_weights.h"
#include "typed_op.h"

extern "C" {
// Importing torch_lstm_grad._C loads this .so, which runs the static registrations below.
// No pybind: the ops are reached through torch.ops.torch_lstm_grad.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace torch_lstm_grad {

bool built_with_cuda() {
#ifdef TORCH_LSTM_GRAD_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// The instruction set the CPU kernels run (csrc/cpu/isa.h): "avx512", "avx2" or "default".
std::string cpu_isa() { return cpu::isa_name(cpu::isa()); }

std::vector<int64_t> cudnn_rnn_params_layout(c10::string_view rnn_mode,
                                             c10::string_view input_mode,
                                             c10::string_view direction, int64_t num_layers,
                                             int64_t num_units, int64_t input_size,
                                             int64_t num_proj) {
  const RNNConfig c =
      make_rnn_config(std::string(rnn_mode), std::string(input_mode), std::string(direction),
                      num_layers, num_units, input_size, num_proj, num_units);
  int64_t total = 0;
  std::vector<int64_t> out{0};
  for (const auto& p : params_layout(c, &total)) {
    out.insert(out.end(), {p.w, p.r, p.proj, p.bw, p.br, p.in});
  }
  out[0] = total;
  return out;
}

TORCH_LIBRARY(torch_lstm_grad, m) {
  m.def("_built_with_cuda() -> bool", &built_with_cuda);
  m.def("_cpu_isa() -> str", &cpu_isa);

  // LSTM block ops. Gate layout ICFO for V1/cell, IFCO for V2 (no forget_bias attribute).
#define TLG_LSTM_INPUTS \
  "Tensor x, Tensor cs_prev, Tensor h_prev, Tensor w, Tensor wci, Tensor wcf, Tensor wco, Tensor b"
#define TLG_LSTM_OUTPUTS \
  "(Tensor i, Tensor cs, Tensor f, Tensor o, Tensor ci, Tensor co, Tensor h)"
#define TLG_LSTM_ACTIVATIONS "Tensor i, Tensor cs, Tensor f, Tensor o, Tensor ci, Tensor co"
#define TLG_BLOCK_GRAD_OUTPUTS                                                            \
  "(Tensor x_grad, Tensor cs_prev_grad, Tensor h_prev_grad, Tensor w_grad, Tensor wci_grad, " \
  "Tensor wcf_grad, Tensor wco_grad, Tensor b_grad)"

  m.def("lstm_block_cell(" TLG_LSTM_INPUTS
        ", float forget_bias, float cell_clip, bool use_peephole) -> " TLG_LSTM_OUTPUTS);
  m.def("lstm_block_cell_grad(" TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor cs_grad, Tensor h_grad, bool use_peephole) -> (Tensor cs_prev_grad, "
        "Tensor dicfo, Tensor wci_grad, Tensor wcf_grad, Tensor wco_grad)");
  // Internal: LSTMBlockCell's whole backward (LSTMBlockCellGrad plus TF1's products), each
  // output computed only where output_mask asks for it (undefined, None in Python, otherwise).
  m.def("_lstm_block_cell_backward(" TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor cs_grad, Tensor h_grad, bool use_peephole, bool[8] output_mask) -> "
        TLG_BLOCK_GRAD_OUTPUTS);
  m.def("block_lstm(Tensor seq_len_max, " TLG_LSTM_INPUTS
        ", float forget_bias, float cell_clip, bool use_peephole) -> " TLG_LSTM_OUTPUTS);
  m.def("block_lstm_v2(Tensor seq_len_max, " TLG_LSTM_INPUTS
        ", float cell_clip, bool use_peephole) -> " TLG_LSTM_OUTPUTS);
  m.def("block_lstm_grad(Tensor seq_len_max, " TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor h, Tensor cs_grad, Tensor h_grad, bool use_peephole) -> " TLG_BLOCK_GRAD_OUTPUTS);
  m.def("block_lstm_grad_v2(Tensor seq_len_max, " TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor h, Tensor cs_grad, Tensor h_grad, bool use_peephole) -> " TLG_BLOCK_GRAD_OUTPUTS);

  // BlockLSTM extended with what real TF/Keras layers use and the block ops lack:
  // gate_activation (i, f, o): sigmoid | hard_sigmoid_keras2 (clip(0.2·x + 0.5, 0, 1)) |
  // hard_sigmoid_keras3 (relu6(x + 3) / 6); activation (ci, co): tanh | relu | linear;
  // clip_gradient: straight_through (TF's block ops) | zero (clip_by_value, TF1 LSTMCell);
  // w_proj [H, P] (TF1 LSTMCell num_proj): h = clip(o ⊙ act(cs) · w_proj, ±proj_clip when > 0)
  // is the output and the recurrent input (h_prev [B, P], w [I + P, 4H]); the projection
  // clip's gradient is clip_by_value's. gate_order: icfo (BlockLSTM, LSTMCell) | ifco (Keras).
  // Time-major, outputs as BlockLSTM's (h: [T, B, P]); the grad op's w_proj_grad is empty
  // without a projection.
  m.def("block_lstm_ex(Tensor seq_len_max, " TLG_LSTM_INPUTS
        ", Tensor? w_proj, float forget_bias, float cell_clip, float proj_clip, "
        "bool use_peephole, str gate_order, str gate_activation, str activation, "
        "str clip_gradient) -> " TLG_LSTM_OUTPUTS);
  m.def("block_lstm_ex_grad(Tensor seq_len_max, " TLG_LSTM_INPUTS ", Tensor? w_proj, "
        TLG_LSTM_ACTIVATIONS ", Tensor h, Tensor cs_grad, Tensor h_grad, float cell_clip, "
        "float proj_clip, bool use_peephole, str gate_order, str gate_activation, "
        "str activation, str clip_gradient) -> (Tensor x_grad, Tensor cs_prev_grad, "
        "Tensor h_prev_grad, Tensor w_grad, Tensor wci_grad, Tensor wcf_grad, Tensor wco_grad, "
        "Tensor b_grad, Tensor w_proj_grad)");

  // The forward for callers that record no gradient (the modules under no_grad /
  // inference_mode): block_lstm_ex's attributes and inputs (the clip gradient does not apply),
  // outputs only h [T, B, P] and the final state cs_last [B, H], h_last [B, P], not the gate
  // activations and cell states of every step. sequence_length [B] (or None: all T steps): the
  // steps run to its largest value, each row's h is zero from its length on and its final
  // state is the one at its length (the initial state for length 0), as TF1's fused cell
  // returns them. packed_w, packed_x: pack_recurrent_weight(w[I:], 4) and (w[:I], 4), or
  // None; a caller that runs many times on one weight prepares them once (the modules keep
  // them per weight version). The numbers do not depend on them.
  m.def("block_lstm_inference(" TLG_LSTM_INPUTS ", Tensor? w_proj, Tensor? packed_w, "
        "Tensor? sequence_length, float forget_bias, float cell_clip, float proj_clip, "
        "bool use_peephole, str gate_order, str gate_activation, str activation, "
        "Tensor? packed_x=None) -> (Tensor h, Tensor cs_last, Tensor h_last)");
  // The recurrent weight w [K, G·H] (G gate blocks of H units) in the layout the small-batch
  // CPU kernels stream it in (csrc/cpu/small_batch.h): [ceil(H / 16), G, K, 16], each block of
  // 16 units' columns of each gate row after row, zero-padded to 16 units.
  m.def("pack_recurrent_weight(Tensor w, int gates) -> Tensor");

  // Keras' GRU layer over a sequence: time-major x [T, B, I], h_prev [B, H],
  // kernel [I, 3H], recurrent_kernel [H, 3H] (gate order z, r, h), bias [2, 3H] (reset_after:
  // input and recurrent rows) or [3H] or None; gate_activation (z, r) and activation (the
  // candidate) as block_lstm_ex's. Outputs [T, B, H], zero beyond seq_len_max: the gates z, r,
  // the candidate hh, hr (what the reset multiplied: h·R_h + b_rec_h, or r ⊙ h_prev) and h.
  m.def("keras_gru(Tensor seq_len_max, Tensor x, Tensor h_prev, Tensor kernel, "
        "Tensor recurrent_kernel, Tensor? bias, bool reset_after, str gate_activation, "
        "str activation) -> (Tensor z, Tensor r, Tensor hh, Tensor hr, Tensor h)");
  // keras_gru's h alone, for callers that record no gradient (the same numbers; the gates of
  // each step are not kept).
  m.def("keras_gru_inference(Tensor seq_len_max, Tensor x, Tensor h_prev, Tensor kernel, "
        "Tensor recurrent_kernel, Tensor? bias, bool reset_after, str gate_activation, "
        "str activation) -> Tensor h");
  m.def("keras_gru_grad(Tensor seq_len_max, Tensor x, Tensor h_prev, Tensor kernel, "
        "Tensor recurrent_kernel, Tensor? bias, Tensor z, Tensor r, Tensor hh, Tensor hr, "
        "Tensor h, Tensor h_grad, bool reset_after, str gate_activation, str activation) -> "
        "(Tensor x_grad, Tensor h_prev_grad, Tensor kernel_grad, Tensor recurrent_kernel_grad, "
        "Tensor bias_grad)");

  // CudnnRNN family (V1/V2 are V3 with every length = T and time-major). sequence_lengths
  // None means every row runs T steps. reserve_space is opaque and device-specific.
  m.def("cudnn_rnn(Tensor input, Tensor input_h, Tensor input_c, Tensor params, "
        "Tensor? sequence_lengths, str rnn_mode, str input_mode, str direction, float dropout, "
        "int seed, int seed2, int num_proj, bool is_training, bool time_major) -> (Tensor output, "
        "Tensor output_h, Tensor output_c, Tensor reserve_space, Tensor host_reserved)");
  m.def("cudnn_rnn_backprop(Tensor input, Tensor input_h, Tensor input_c, Tensor params, "
        "Tensor? sequence_lengths, Tensor output, Tensor output_h, Tensor output_c, "
        "Tensor output_backprop, Tensor output_h_backprop, Tensor output_c_backprop, "
        "Tensor reserve_space, Tensor host_reserved, str rnn_mode, str input_mode, str direction, "
        "float dropout, int seed, int seed2, int num_proj, bool time_major) -> (Tensor "
        "input_backprop, Tensor input_h_backprop, Tensor input_c_backprop, Tensor params_backprop)");
  // cudnn_rnn_backprop for a caller that gives reserve_space up: cuDNN's backward writes into
  // it instead of a copy. The autograd backward of a graph that is not retained calls it (a
  // later backward on that reserve raises); the CPU kernels read their reserve only.
  m.def("_cudnn_rnn_backprop_consuming(Tensor input, Tensor input_h, Tensor input_c, "
        "Tensor params, Tensor? sequence_lengths, Tensor output, Tensor output_h, "
        "Tensor output_c, Tensor output_backprop, Tensor output_h_backprop, "
        "Tensor output_c_backprop, Tensor(a!) reserve_space, Tensor host_reserved, "
        "str rnn_mode, str input_mode, str direction, float dropout, int seed, int seed2, "
        "int num_proj, bool time_major) -> (Tensor input_backprop, Tensor input_h_backprop, "
        "Tensor input_c_backprop, Tensor params_backprop)");
  // The forward for callers that record no gradient (the cuDNN modules under no_grad /
  // inference_mode): cudnn_rnn with is_training=False (no dropout), without reserve_space and
  // host_reserved. packed_r: empty, or per pseudo-layer (layer-major, then direction)
  // pack_recurrent_weight(Rᵀ, G) of its recurrent matrix R [G·H, P], which the CPU kernel's
  // small-batch LSTM steps read; packed_x: empty, or likewise pack_recurrent_weight(Wᵀ, G) of
  // its input matrix W [G·H, in_l] (not under skip_input, where layer 0 has none), which the
  // CPU kernel's input projection reads (the modules keep both per weight version).
  m.def("cudnn_rnn_inference(Tensor input, Tensor input_h, Tensor input_c, Tensor params, "
        "Tensor? sequence_lengths, Tensor[] packed_r, Tensor[] packed_x, str rnn_mode, "
        "str input_mode, str direction, int num_proj, bool time_major) -> (Tensor output, "
        "Tensor output_h, Tensor output_c)");
  // The params layout, one list of ints, for the Python params ops and fake kernels:
  // [total, then per pseudo-layer: w, r, proj, bw, br offsets (-1 when absent), in_l].
  m.def("_cudnn_rnn_params_layout(str rnn_mode, str input_mode, str direction, int num_layers, "
        "int num_units, int input_size, int num_proj) -> int[]",
        &cudnn_rnn_params_layout);

  // TF's fused GRU (reset applied before the candidate GEMM; not cuDNN's variant).
  m.def("gru_block_cell(Tensor x, Tensor h_prev, Tensor w_ru, Tensor w_c, Tensor b_ru, "
        "Tensor b_c) -> (Tensor r, Tensor u, Tensor c, Tensor h)");
  m.def("gru_block_cell_grad(Tensor x, Tensor h_prev, Tensor w_ru, Tensor w_c, Tensor b_ru, "
        "Tensor b_c, Tensor r, Tensor u, Tensor c, Tensor d_h) -> (Tensor d_x, "
        "Tensor d_h_prev, Tensor d_c_bar, Tensor d_r_bar_u_bar)");
  // Internal: GRUBlockCell's whole backward (GRUBlockCellGrad plus TF1's weight and bias
  // products) in one call, each output computed only where output_mask asks for it (undefined,
  // None in Python, otherwise), in the style of aten::native_layer_norm_backward.
  m.def("_gru_block_cell_backward(Tensor x, Tensor h_prev, Tensor w_ru, Tensor w_c, Tensor b_ru, "
        "Tensor b_c, Tensor r, Tensor u, Tensor c, Tensor d_h, bool[6] output_mask) -> (Tensor "
        "d_x, Tensor d_h_prev, Tensor d_w_ru, Tensor d_w_c, Tensor d_b_ru, Tensor d_b_c)");
}

// Device-neutral ATen ops (one copy, once per weight version): every backend and Meta.
at::Tensor pack_recurrent_weight(const at::Tensor& w, int64_t gates) {
  TORCH_CHECK_VALUE(gates >= 1, "gates: expected an int >= 1, got ", gates);
  TORCH_CHECK_VALUE(w.dim() == 2 && w.size(1) > 0 && w.size(1) % gates == 0,
                    "w: expected shape [K, gates * H] with H >= 1 (gates = ", gates, "), got ",
                    shape_str(w.sizes()));
  const int64_t K = w.size(0), H = w.size(1) / gates, U = (H + 15) / 16;
  const at::Tensor padded = at::constant_pad_nd(w.reshape({K, gates, H}), {0, U * 16 - H});
  return padded.view({K, gates, U, 16}).permute({2, 1, 0, 3}).contiguous();
}

// Where a device has no kernel of its own for cudnn_rnn_inference (CUDA: cuDNN's inference
// forward is cudnn_rnn's with is_training=False), it is that op; packed_r and packed_x are
// checked, not read.
std::tuple<at::Tensor, at::Tensor, at::Tensor> cudnn_rnn_inference(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    at::TensorList packed_r, at::TensorList packed_x, c10::string_view rnn_mode,
    c10::string_view input_mode, c10::string_view direction, int64_t num_proj, bool time_major) {
  // The lengths are checked (and copied to the host) once, by cudnn_rnn.
  const RNNConfig c = check_cudnn_rnn_inputs(input, input_h, input_c, params,
                                             std::string(rnn_mode), std::string(input_mode),
                                             std::string(direction), num_proj, time_major);
  check_packed_recurrent(c, packed_r, input);
  check_packed_input(c, packed_x, input);
  using T = const at::Tensor&;
  static const auto op =
      typed_op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
          T, T, T, T, const std::optional<at::Tensor>&, c10::string_view, c10::string_view,
          c10::string_view, double, int64_t, int64_t, int64_t, bool, bool)>(
          "torch_lstm_grad::cudnn_rnn");
  const auto out = op.call(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                           input_mode, direction, 0.0, 0, 0, num_proj, false, time_major);
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

// Where a device has no fused kernel for _gru_block_cell_backward (CUDA), it is
// gru_block_cell_grad followed by TF1's weight and bias products (gru_block.h), as ATen ops;
// the CPU kernel (cpu/gru_block.cpp) computes the same values without the masked-off work.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
gru_block_cell_backward(const at::Tensor& x, const at::Tensor& h_prev, const at::Tensor& w_ru,
                        const at::Tensor& w_c, const at::Tensor& b_ru, const at::Tensor& b_c,
                        const at::Tensor& r, const at::Tensor& u, const at::Tensor& c,
                        const at::Tensor& d_h, std::array<bool, 6> output_mask) {
  using T = const at::Tensor&;
  static const auto op =
      typed_op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(T, T, T, T, T, T, T, T,
                                                                          T, T)>(
          "torch_lstm_grad::gru_block_cell_grad");
  const auto [d_x, d_h_prev, d_c_bar, d_ru] =
      op.call(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h);
  const GRUWeightGrads w = gru_weight_grads(
      x, h_prev, output_mask[3] ? r * h_prev : at::Tensor(), d_ru, d_c_bar, output_mask);
  return {output_mask[0] ? d_x : at::Tensor(), output_mask[1] ? d_h_prev : at::Tensor(),
          w.d_w_ru, w.d_w_c, w.d_b_ru, w.d_b_c};
}

// LSTMBlockCellGrad followed by the products of TF1's Python gradient of LSTMBlockCell
// (docs/tf-semantics.md §5): xh_grad = dicfo·wᵀ over the rows of w whose input needs a gradient
// (a first layer's x and a loop's initial h_prev usually need none, and each is part of the
// product), w_grad = [x, h_prev]ᵀ·dicfo, b_grad = Σ_b dicfo. One copy for every device.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           at::Tensor>
lstm_block_cell_backward(const at::Tensor& x, const at::Tensor& cs_prev, const at::Tensor& h_prev,
                         const at::Tensor& w, const at::Tensor& wci, const at::Tensor& wcf,
                         const at::Tensor& wco, const at::Tensor& b, const at::Tensor& i,
                         const at::Tensor& cs, const at::Tensor& f, const at::Tensor& o,
                         const at::Tensor& ci, const at::Tensor& co, const at::Tensor& cs_grad,
                         const at::Tensor& h_grad, bool use_peephole,
                         std::array<bool, 8> output_mask) {
  using T = const at::Tensor&;
  static const auto op =
      typed_op<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
          T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, T, bool)>(
          "torch_lstm_grad::lstm_block_cell_grad");
  const auto [cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad] = op.call(
      x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad, use_peephole);
  const std::array<bool, 8>& need = output_mask;
  const int64_t I = x.size(1), H = h_prev.size(1);
  at::Tensor x_grad, h_prev_grad, w_grad, b_grad;
  if (need[0] && need[2] && cpu::dot_rows_apply(dicfo, w)) {
    // Dot products of rows (cpu/dot_rows.cpp): each block of w's rows straight into its own
    // tensor, the same sums as one product over both.
    x_grad = at::empty({x.size(0), I}, dicfo.options());
    h_prev_grad = at::empty({x.size(0), H}, dicfo.options());
    cpu::dot_rows(dicfo, w.narrow(0, 0, I), x_grad);
    cpu::dot_rows(dicfo, w.narrow(0, I, H), h_prev_grad);
  } else if (need[0] && need[2]) {
    // One product over both row blocks, then each half its own tensor (an op's outputs do not
    // alias one another).
    const at::Tensor xh_grad = times_transposed(dicfo, w);
    x_grad = xh_grad.narrow(1, 0, I).clone(at::MemoryFormat::Contiguous);
    h_prev_grad = xh_grad.narrow(1, I, H).clone(at::MemoryFormat::Contiguous);
  } else if (need[0]) {
    x_grad = times_transposed(dicfo, w.narrow(0, 0, I));
  } else if (need[2]) {
    h_prev_grad = times_transposed(dicfo, w.narrow(0, I, H));
  }
  if (need[3]) w_grad = at::mm(at::cat({x, h_prev}, 1).t(), dicfo);
  if (need[7]) b_grad = dicfo.sum(0);
  const auto wanted = [&](const at::Tensor& t, int k) { return need[k] ? t : at::Tensor(); };
  return {x_grad,        wanted(cs_prev_grad, 1), h_prev_grad,           w_grad,
          wanted(wci_grad, 4), wanted(wcf_grad, 5), wanted(wco_grad, 6), b_grad};
}

TORCH_LIBRARY_IMPL(torch_lstm_grad, CompositeExplicitAutograd, m) {
  m.impl("pack_recurrent_weight", &pack_recurrent_weight);
  m.impl("cudnn_rnn_inference", &cudnn_rnn_inference);
  m.impl("_gru_block_cell_backward", &gru_block_cell_backward);
  m.impl("_lstm_block_cell_backward", &lstm_block_cell_backward);
}

}  // namespace torch_lstm_grad
