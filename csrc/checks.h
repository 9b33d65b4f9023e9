// Input validation shared by the CPU and CUDA kernels (and mirrored, message for message, by
// the fake kernels in torch_lstm_grad/_checks.py).
//
// Every failure names the argument first, then the expected and the actual value, and raises
// the Python exception docs/differences.md lists: ValueError for shapes and values, TypeError
// for dtypes. TensorFlow aborts the process or reads out of bounds on several of these inputs
// (docs/tf-semantics.md §10); here they are all checked before any kernel touches memory.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/safe_numerics.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace torch_lstm_grad {

inline std::string shape_str(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t k = 0; k < sizes.size(); ++k) out << (k ? ", " : "") << sizes[k];
  out << "]";
  return out.str();
}

// a * b and a + b of sizes, or a ValueError whose message starts with `name` where the result
// does not fit int64: absurd sizes (H = 2^62) would otherwise wrap, 4 * H to 0, and pass a shape
// check they must fail. `what` spells the product, e.g. "4 * H".
inline int64_t checked_mul(int64_t a, int64_t b, const char* name, const char* what) {
  int64_t out = 0;
  TORCH_CHECK_VALUE(!c10::mul_overflows(a, b, &out), name, ": ", what, " = ", a, " * ", b,
                    " overflows int64");
  return out;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* name, const char* what) {
  int64_t out = 0;
  TORCH_CHECK_VALUE(!c10::add_overflows(a, b, &out), name, ": ", what, " = ", a, " + ", b,
                    " overflows int64");
  return out;
}

inline bool is_supported_float(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

// x's dtype must be one the block ops take; every other float input must match it and live on
// x's device.
inline void check_float_input(const at::Tensor& x, const char* name) {
  TORCH_CHECK_TYPE(is_supported_float(x.scalar_type()), name,
                   ": expected dtype float16, bfloat16, float32 or float64, got ",
                   x.scalar_type());
}

// `ref_name`: the argument that fixes dtype and device (x for the block ops, input for CudnnRNN).
inline void check_like(const at::Tensor& t, const char* name, const at::Tensor& x,
                       const char* ref_name = "x") {
  TORCH_CHECK_TYPE(t.scalar_type() == x.scalar_type(), name, ": expected dtype ",
                   x.scalar_type(), " (the dtype of ", ref_name, "), got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == x.device(), name, ": expected a tensor on ", x.device(),
                    " (the device of ", ref_name, "), got ", t.device());
}

// `layout` spells the symbolic shape, e.g. "[B, H]", so the message reads
// "h_prev: expected shape [B, H] = [2, 3], got [2, 4]".
inline void check_shape(const at::Tensor& t, const char* name, std::vector<int64_t> expected,
                        const char* layout) {
  TORCH_CHECK_VALUE(t.sizes() == at::IntArrayRef(expected), name, ": expected shape ", layout,
                    " = ", shape_str(expected), ", got ", shape_str(t.sizes()));
}

// seq_len_max: an integer scalar with 0 <= value <= T (TF 2.21 aborts the process otherwise).
// Returns the value; reading it syncs when it lives on a GPU, as TF keeps it in host memory.
inline int64_t check_seq_len_max(const at::Tensor& seq_len_max, int64_t T) {
  TORCH_CHECK_TYPE(!at::isFloatingType(seq_len_max.scalar_type()) &&
                       !at::isComplexType(seq_len_max.scalar_type()) &&
                       seq_len_max.scalar_type() != at::kBool,
                   "seq_len_max: expected an integer dtype (TF uses int64), got ",
                   seq_len_max.scalar_type());
  TORCH_CHECK_VALUE(seq_len_max.dim() == 0, "seq_len_max: expected a scalar (0-d) tensor, got shape ",
                    shape_str(seq_len_max.sizes()));
  // A uint64 above int64's range is out of range too, not a conversion error.
  if (seq_len_max.scalar_type() == at::kUInt64) {
    const uint64_t value = *seq_len_max.to(at::kCPU).const_data_ptr<uint64_t>();
    TORCH_CHECK_VALUE(value <= static_cast<uint64_t>(T), "seq_len_max: expected a value in "
                      "[0, T] = [0, ", T, "], got ", value);
    return static_cast<int64_t>(value);
  }
  const int64_t value = seq_len_max.item<int64_t>();
  TORCH_CHECK_VALUE(0 <= value && value <= T, "seq_len_max: expected a value in [0, T] = [0, ", T,
                    "], got ", value);
  return value;
}

struct LSTMSizes {
  int64_t T;  // time steps (1 for the single-step cell ops)
  int64_t B;  // batch
  int64_t I;  // input features
  int64_t H;  // cell units
};

// The LSTM inputs shared by every LSTM op: x is [T, B, I] (`time_major`) or [B, I] (cell ops).
// H is taken from cs_prev, as TF does. The peephole vectors are only looked at when they are used.
inline LSTMSizes check_lstm_inputs(const at::Tensor& x, const at::Tensor& cs_prev,
                                   const at::Tensor& h_prev, const at::Tensor& w,
                                   const at::Tensor& wci, const at::Tensor& wcf,
                                   const at::Tensor& wco, const at::Tensor& b, bool use_peephole,
                                   bool time_major) {
  check_float_input(x, "x");
  const int64_t rank = time_major ? 3 : 2;
  TORCH_CHECK_VALUE(x.dim() == rank, "x: expected a ", rank, "-D tensor ",
                    time_major ? "[T, B, I]" : "[B, I]", ", got shape ", shape_str(x.sizes()));
  LSTMSizes s{time_major ? x.size(0) : 1, x.size(rank - 2), x.size(rank - 1), 0};
  check_like(cs_prev, "cs_prev", x);
  TORCH_CHECK_VALUE(cs_prev.dim() == 2 && cs_prev.size(0) == s.B && cs_prev.size(1) > 0,
                    "cs_prev: expected shape [B, H] with B = ", s.B,
                    " (from x) and H >= 1, got ", shape_str(cs_prev.sizes()));
  s.H = cs_prev.size(1);
  check_like(h_prev, "h_prev", x);
  check_shape(h_prev, "h_prev", {s.B, s.H}, "[B, H]");
  check_like(w, "w", x);
  const int64_t H4 = checked_mul(4, s.H, "w", "4 * H");
  check_shape(w, "w", {checked_add(s.I, s.H, "w", "I + H"), H4}, "[I + H, 4 * H]");
  check_like(b, "b", x);
  check_shape(b, "b", {H4}, "[4 * H]");
  if (use_peephole) {
    for (auto [t, name] : {std::pair{&wci, "wci"}, {&wcf, "wcf"}, {&wco, "wco"}}) {
      check_like(*t, name, x);
      check_shape(*t, name, {s.H}, "[H] (use_peephole=True)");
    }
  }
  return s;
}

// Saved activations and incoming gradients of the Grad ops: each exactly [T, B, H] (or [B, H]).
inline void check_lstm_activations(std::initializer_list<std::pair<const at::Tensor*, const char*>> ts,
                                   const at::Tensor& x, const LSTMSizes& s, bool time_major) {
  for (auto [t, name] : ts) {
    check_like(*t, name, x);
    if (time_major) {
      check_shape(*t, name, {s.T, s.B, s.H}, "[T, B, H]");
    } else {
      check_shape(*t, name, {s.B, s.H}, "[B, H]");
    }
  }
}

// A string attribute that must be one of `allowed`: returns its index, else raises ValueError
// "gate_activation: expected one of 'sigmoid', 'hard_sigmoid_keras2', ..., got 'relu'".
inline int check_choice(c10::string_view value, const char* name,
                        std::initializer_list<const char*> allowed) {
  int k = 0;
  std::ostringstream names;
  for (const char* a : allowed) {
    if (value == a) return k;
    names << (k++ ? ", '" : "'") << a << "'";
  }
  TORCH_CHECK_VALUE(false, name, ": expected one of ", names.str(), ", got '", std::string(value),
                    "'");
  return -1;
}

// The string attributes of block_lstm_ex, as indices into their lists (the order of
// lstm_block::GateFn / CellFn, and torch_lstm_grad/_checks.py's LSTM_EX_CHOICES).
struct LSTMExAttrs {
  int order;  // 0 icfo, 1 ifco
  int gate;   // sigmoid, hard_sigmoid_keras2, hard_sigmoid_keras3
  int cell;   // tanh, relu, linear
  bool zero_clip_grad;
};

inline LSTMExAttrs check_lstm_ex_attrs(c10::string_view gate_order,
                                       c10::string_view gate_activation,
                                       c10::string_view activation,
                                       c10::string_view clip_gradient) {
  return {check_choice(gate_order, "gate_order", {"icfo", "ifco"}),
          check_choice(gate_activation, "gate_activation",
                       {"sigmoid", "hard_sigmoid_keras2", "hard_sigmoid_keras3"}),
          check_choice(activation, "activation", {"tanh", "relu", "linear"}),
          check_choice(clip_gradient, "clip_gradient", {"straight_through", "zero"}) == 1};
}

// block_lstm_ex's inputs: those of BlockLSTM, with an optional projection w_proj [H, P] (then
// h_prev is [B, P] and w [I + P, 4H]).
inline LSTMSizes check_lstm_ex_inputs(const at::Tensor& x, const at::Tensor& cs_prev,
                                      const at::Tensor& h_prev, const at::Tensor& w,
                                      const at::Tensor& wci, const at::Tensor& wcf,
                                      const at::Tensor& wco, const at::Tensor& b,
                                      const std::optional<at::Tensor>& w_proj,
                                      bool use_peephole) {
  if (!w_proj.has_value()) {
    return check_lstm_inputs(x, cs_prev, h_prev, w, wci, wcf, wco, b, use_peephole, true);
  }
  check_float_input(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 3, "x: expected a 3-D tensor [T, B, I], got shape ",
                    shape_str(x.sizes()));
  LSTMSizes s{x.size(0), x.size(1), x.size(2), 0};
  check_like(cs_prev, "cs_prev", x);
  TORCH_CHECK_VALUE(cs_prev.dim() == 2 && cs_prev.size(0) == s.B && cs_prev.size(1) > 0,
                    "cs_prev: expected shape [B, H] with B = ", s.B,
                    " (from x) and H >= 1, got ", shape_str(cs_prev.sizes()));
  s.H = cs_prev.size(1);
  check_like(*w_proj, "w_proj", x);
  TORCH_CHECK_VALUE(w_proj->dim() == 2 && w_proj->size(0) == s.H && w_proj->size(1) > 0,
                    "w_proj: expected shape [H, P] with H = ", s.H,
                    " (from cs_prev) and P >= 1, got ", shape_str(w_proj->sizes()));
  const int64_t P = w_proj->size(1);
  check_like(h_prev, "h_prev", x);
  check_shape(h_prev, "h_prev", {s.B, P}, "[B, P]");
  check_like(w, "w", x);
  check_shape(w, "w", {s.I + P, 4 * s.H}, "[I + P, 4 * H]");
  check_like(b, "b", x);
  check_shape(b, "b", {4 * s.H}, "[4 * H]");
  if (use_peephole) {
    for (auto [t, name] : {std::pair{&wci, "wci"}, {&wcf, "wcf"}, {&wco, "wco"}}) {
      check_like(*t, name, x);
      check_shape(*t, name, {s.H}, "[H] (use_peephole=True)");
    }
  }
  return s;
}

struct GRUSizes {
  int64_t B;
  int64_t I;
  int64_t H;
};

inline GRUSizes check_gru_inputs(const at::Tensor& x, const at::Tensor& h_prev,
                                 const at::Tensor& w_ru, const at::Tensor& w_c,
                                 const at::Tensor& b_ru, const at::Tensor& b_c) {
  check_float_input(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 2, "x: expected a 2-D tensor [B, I], got shape ",
                    shape_str(x.sizes()));
  GRUSizes s{x.size(0), x.size(1), 0};
  check_like(h_prev, "h_prev", x);
  TORCH_CHECK_VALUE(h_prev.dim() == 2 && h_prev.size(0) == s.B && h_prev.size(1) > 0,
                    "h_prev: expected shape [B, H] with B = ", s.B,
                    " (from x) and H >= 1, got ", shape_str(h_prev.sizes()));
  s.H = h_prev.size(1);
  check_like(w_ru, "w_ru", x);
  const int64_t IH = checked_add(s.I, s.H, "w_ru", "I + H");
  const int64_t H2 = checked_mul(2, s.H, "w_ru", "2 * H");
  check_shape(w_ru, "w_ru", {IH, H2}, "[I + H, 2 * H]");
  check_like(w_c, "w_c", x);
  check_shape(w_c, "w_c", {IH, s.H}, "[I + H, H]");
  check_like(b_ru, "b_ru", x);
  check_shape(b_ru, "b_ru", {H2}, "[2 * H]");
  check_like(b_c, "b_c", x);
  check_shape(b_c, "b_c", {s.H}, "[H]");
  return s;
}

// GRUBlockCellGrad's inputs: check_gru_inputs', then r, u, c and d_h, each [B, H] like x.
inline GRUSizes check_gru_grad_inputs(const at::Tensor& x, const at::Tensor& h_prev,
                                      const at::Tensor& w_ru, const at::Tensor& w_c,
                                      const at::Tensor& b_ru, const at::Tensor& b_c,
                                      const at::Tensor& r, const at::Tensor& u,
                                      const at::Tensor& c, const at::Tensor& d_h) {
  const GRUSizes s = check_gru_inputs(x, h_prev, w_ru, w_c, b_ru, b_c);
  for (auto [t, name] : {std::pair{&r, "r"}, {&u, "u"}, {&c, "c"}, {&d_h, "d_h"}}) {
    check_like(*t, name, x);
    check_shape(*t, name, {s.B, s.H}, "[B, H]");
  }
  return s;
}

// keras_gru's inputs: x [T, B, I], h_prev [B, H] (H from it), kernel [I, 3H], recurrent_kernel
// [H, 3H], bias [2, 3H] (reset_after) or [3H], or none.
struct GRUSeqSizes {
  int64_t T, B, I, H;
};

inline GRUSeqSizes check_gru_seq_inputs(const at::Tensor& x, const at::Tensor& h_prev,
                                        const at::Tensor& kernel,
                                        const at::Tensor& recurrent_kernel,
                                        const std::optional<at::Tensor>& bias, bool reset_after) {
  check_float_input(x, "x");
  TORCH_CHECK_VALUE(x.dim() == 3, "x: expected a 3-D tensor [T, B, I], got shape ",
                    shape_str(x.sizes()));
  GRUSeqSizes s{x.size(0), x.size(1), x.size(2), 0};
  check_like(h_prev, "h_prev", x);
  TORCH_CHECK_VALUE(h_prev.dim() == 2 && h_prev.size(0) == s.B && h_prev.size(1) > 0,
                    "h_prev: expected shape [B, H] with B = ", s.B,
                    " (from x) and H >= 1, got ", shape_str(h_prev.sizes()));
  s.H = h_prev.size(1);
  check_like(kernel, "kernel", x);
  check_shape(kernel, "kernel", {s.I, 3 * s.H}, "[I, 3 * H]");
  check_like(recurrent_kernel, "recurrent_kernel", x);
  check_shape(recurrent_kernel, "recurrent_kernel", {s.H, 3 * s.H}, "[H, 3 * H]");
  if (bias.has_value()) {
    check_like(*bias, "bias", x);
    if (reset_after) {
      check_shape(*bias, "bias", {2, 3 * s.H}, "[2, 3 * H] (reset_after=True)");
    } else {
      check_shape(*bias, "bias", {3 * s.H}, "[3 * H] (reset_after=False)");
    }
  }
  return s;
}

}  // namespace torch_lstm_grad
