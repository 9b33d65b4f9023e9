// The device-neutral half of the extension: every operator schema, defined once.
//
// This file is built in every configuration, so every op exists on CPU-only installs too;
// fake kernels, autograd registration and opcheck then work the same everywhere. Kernels
// live in csrc/cpu (TORCH_LIBRARY_IMPL CPU) and csrc/cuda (TORCH_LIBRARY_IMPL CUDA).
// Schemas use TensorFlow's argument and output names so the Python raw ops map 1:1.

#include <Python.h>
#include <torch/library.h>

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

TORCH_LIBRARY(torch_lstm_grad, m) {
  m.def("_built_with_cuda() -> bool", &built_with_cuda);

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
  m.def("block_lstm(Tensor seq_len_max, " TLG_LSTM_INPUTS
        ", float forget_bias, float cell_clip, bool use_peephole) -> " TLG_LSTM_OUTPUTS);
  m.def("block_lstm_v2(Tensor seq_len_max, " TLG_LSTM_INPUTS
        ", float cell_clip, bool use_peephole) -> " TLG_LSTM_OUTPUTS);
  m.def("block_lstm_grad(Tensor seq_len_max, " TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor h, Tensor cs_grad, Tensor h_grad, bool use_peephole) -> " TLG_BLOCK_GRAD_OUTPUTS);
  m.def("block_lstm_grad_v2(Tensor seq_len_max, " TLG_LSTM_INPUTS ", " TLG_LSTM_ACTIVATIONS
        ", Tensor h, Tensor cs_grad, Tensor h_grad, bool use_peephole) -> " TLG_BLOCK_GRAD_OUTPUTS);

  // TF's fused GRU (reset applied before the candidate GEMM; not cuDNN's variant).
  m.def("gru_block_cell(Tensor x, Tensor h_prev, Tensor w_ru, Tensor w_c, Tensor b_ru, "
        "Tensor b_c) -> (Tensor r, Tensor u, Tensor c, Tensor h)");
  m.def("gru_block_cell_grad(Tensor x, Tensor h_prev, Tensor w_ru, Tensor w_c, Tensor b_ru, "
        "Tensor b_c, Tensor r, Tensor u, Tensor c, Tensor d_h) -> (Tensor d_x, "
        "Tensor d_h_prev, Tensor d_c_bar, Tensor d_r_bar_u_bar)");
}

}  // namespace torch_lstm_grad
