// The CudnnRNN family's model description, validation and params layout, shared by the CPU
// kernels and the CUDA (cuDNN) ones. Mirrored for the fake kernels in torch_lstm_grad/_cudnn.py.
//
// TF derives the model from the tensors (docs/tf-semantics.md §6.3): num_layers from input_h, the
// unit count from input_h.shape[2] (the projection size when num_proj > 0), the cell size from
// input_c (LSTM). TF checks neither params' length nor sequence_lengths' count or values; here
// every one of them is checked before any memory is read.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "checks.h"

namespace torch_lstm_grad {

enum class RNNMode { kRelu, kTanh, kLSTM, kGRU };

struct RNNConfig {
  RNNMode mode;
  int64_t G;  // gates: 4 lstm, 3 gru, 1 rnn_*
  bool skip_input;
  int64_t D;  // directions
  int64_t L;  // layers
  int64_t T, B, I;
  int64_t H;  // cell units (input_c.shape[2] for LSTM, else input_h.shape[2])
  int64_t P;  // recurrent/output units: num_proj when projecting, else H
  bool time_major;

  bool lstm() const { return mode == RNNMode::kLSTM; }
  bool proj() const { return P != H; }
  int64_t layer_input(int64_t l) const { return l == 0 ? I : D * P; }
};

inline RNNMode parse_rnn_mode(const std::string& s) {
  if (s == "lstm") return RNNMode::kLSTM;
  if (s == "gru") return RNNMode::kGRU;
  if (s == "rnn_tanh") return RNNMode::kTanh;
  if (s == "rnn_relu") return RNNMode::kRelu;
  TORCH_CHECK_VALUE(false, "rnn_mode: expected one of 'lstm', 'gru', 'rnn_tanh', 'rnn_relu', got '",
                    s, "'");
}

inline int64_t parse_direction(const std::string& s) {
  TORCH_CHECK_VALUE(s == "unidirectional" || s == "bidirectional",
                    "direction: expected 'unidirectional' or 'bidirectional', got '", s, "'");
  return s == "bidirectional" ? 2 : 1;
}

// skip_input feeds x itself to every gate of layer 0, so x must have the gate width H;
// auto_select picks it when input_size equals TF's num_units (input_h.shape[2]).
inline bool parse_input_mode(const std::string& s, int64_t input_size, int64_t num_units,
                             int64_t cell_units) {
  TORCH_CHECK_VALUE(s == "linear_input" || s == "skip_input" || s == "auto_select",
                    "input_mode: expected 'linear_input', 'skip_input' or 'auto_select', got '", s,
                    "'");
  const bool skip = s == "skip_input" || (s == "auto_select" && input_size == num_units);
  TORCH_CHECK_VALUE(!skip || input_size == cell_units, "input_mode: '", s,
                    "' uses x itself as layer 0's gate input, which needs input_size == num_units"
                    " = ", cell_units, ", got input_size = ", input_size);
  return skip;
}

// The model attributes alone (what CudnnRNNParamsSize and the canonical ops see). auto_select
// compares input_size with `auto_select_units`: TF uses input_h.shape[2] (the projection size
// when projecting) in the forward/backward ops and the num_units argument in the params ops.
inline RNNConfig make_rnn_config(const std::string& rnn_mode, const std::string& input_mode,
                                 const std::string& direction, int64_t num_layers,
                                 int64_t num_units, int64_t input_size, int64_t num_proj,
                                 int64_t auto_select_units) {
  RNNConfig c{};
  c.mode = parse_rnn_mode(rnn_mode);
  c.G = c.mode == RNNMode::kLSTM ? 4 : c.mode == RNNMode::kGRU ? 3 : 1;
  c.D = parse_direction(direction);
  TORCH_CHECK_VALUE(num_proj >= 0, "num_proj: expected a value >= 0, got ", num_proj);
  TORCH_CHECK_VALUE(num_proj == 0 || c.lstm(), "num_proj: projection is only defined for "
                    "rnn_mode='lstm', got num_proj = ", num_proj, " with rnn_mode='", rnn_mode, "'");
  TORCH_CHECK_VALUE(num_layers >= 1, "num_layers: expected a value >= 1, got ", num_layers);
  TORCH_CHECK_VALUE(num_units >= 1, "num_units: expected a value >= 1, got ", num_units);
  // cuDNN refuses inputSize = 0, so the CPU does too: one answer on both devices.
  TORCH_CHECK_VALUE(input_size >= 1, "input_size: expected a value >= 1 (cuDNN refuses a model "
                    "with no input features), got ", input_size);
  TORCH_CHECK_VALUE(num_proj == 0 || num_proj <= num_units, "num_proj: expected a value <= "
                    "num_units = ", num_units, ", got ", num_proj);
  c.L = num_layers;
  c.I = input_size;
  c.H = num_units;
  c.P = num_proj > 0 ? num_proj : num_units;
  c.skip_input = parse_input_mode(input_mode, input_size, auto_select_units, c.H);
  return c;
}

// Where each canonical tensor of one pseudo-layer (k = layer·D + direction) lives in `params`.
// Layout, cuDNN's own (its weight space as cudnnGetRNNWeightParams reports it for every mode,
// layer count, direction and projection: docs/cudnn.md; the CUDA kernels check it against cuDNN
// once per model), so that TF's opaque params, which are cuDNN's weight space, mean the same
// here: first every pseudo-layer's matrices, in pseudo-layer order: the input matrices
// W_0..W_{G-1} [H, in_l] (absent for layer 0 under skip_input), the recurrent matrices
// R_0..R_{G-1} [H, P], the projection W_proj [P, H] (num_proj > 0); then every pseudo-layer's
// biases, in the same order: bW_0..bW_{G-1}, bR_0..bR_{G-1} [H]. Each group of G is
// contiguous, so W_all = [G·H, in_l] and R_all = [G·H, P] are plain views.
struct PseudoLayerParams {
  int64_t w, r, proj, bw, br;  // element offsets; w/proj are -1 when absent
  int64_t in;                  // in_l
};

// The element count of `params` for the model, with checked arithmetic: each distinct region
// size first, then the total, so that every offset params_layout adds up (a partial sum of the
// total) fits int64 too. Where a size overflows (H = 2^31: G·H·in = 2^64 would wrap to 0 and
// pass the params check), a ValueError starting with `name`. _cudnn.params_size mirrors it,
// operation for operation.
inline int64_t params_size(const RNNConfig& c, const char* name = "num_units") {
  const int64_t GH = checked_mul(c.G, c.H, name, "G * H");
  const int64_t w0 = checked_mul(GH, c.skip_input ? 0 : c.I, name, "G * H * input_size");
  const int64_t r = checked_mul(GH, c.P, name, "G * H * num_proj");
  const int64_t proj = c.proj() ? checked_mul(c.P, c.H, name, "num_proj * H") : 0;
  const int64_t biases = checked_mul(2, GH, name, "2 * G * H");
  const int64_t per =
      checked_add(checked_add(r, proj, name, "R + W_proj"), biases, name, "R + W_proj + biases");
  const int64_t first = checked_mul(c.D, checked_add(w0, per, name, "layer 0's size"), name,
                                    "D * layer 0's size");
  if (c.L == 1) return first;
  const int64_t DP = checked_mul(c.D, c.P, name, "D * num_proj");
  const int64_t w_up = checked_mul(GH, DP, name, "G * H * D * num_proj");
  const int64_t up = checked_mul(checked_mul(c.L - 1, c.D, name, "(num_layers - 1) * D"),
                                 checked_add(w_up, per, name, "an upper layer's size"), name,
                                 "(num_layers - 1) * D * an upper layer's size");
  return checked_add(first, up, name, "the params size");
}

inline std::vector<PseudoLayerParams> params_layout(const RNNConfig& c, int64_t* total,
                                                    const char* name = "num_units") {
  *total = params_size(c, name);  // raises where a size overflows; the offsets below then fit
  std::vector<PseudoLayerParams> out;
  int64_t off = 0;
  for (int64_t l = 0; l < c.L; ++l) {
    for (int64_t d = 0; d < c.D; ++d) {
      PseudoLayerParams p{};
      p.in = c.layer_input(l);
      const bool has_w = !(c.skip_input && l == 0);
      p.w = has_w ? off : -1;
      off += has_w ? c.G * c.H * p.in : 0;
      p.r = off;
      off += c.G * c.H * c.P;
      p.proj = c.proj() ? off : -1;
      off += c.proj() ? c.P * c.H : 0;
      out.push_back(p);
    }
  }
  for (PseudoLayerParams& p : out) {  // the biases, after every matrix
    p.bw = off;
    off += c.G * c.H;
    p.br = off;
    off += c.G * c.H;
  }
  TORCH_INTERNAL_ASSERT(off == *total);
  return out;
}

// The forward/backward ops' tensors. Fills T, B, I, L, H, P from them and checks every shape.
inline RNNConfig check_cudnn_rnn_inputs(const at::Tensor& input, const at::Tensor& input_h,
                                        const at::Tensor& input_c, const at::Tensor& params,
                                        const std::string& rnn_mode,
                                        const std::string& input_mode,
                                        const std::string& direction, int64_t num_proj,
                                        bool time_major) {
  check_float_input(input, "input");
  const char* seq_layout = time_major ? "[T, B, input_size]" : "[B, T, input_size]";
  TORCH_CHECK_VALUE(input.dim() == 3, "input: expected a 3-D tensor ", seq_layout,
                    ", got shape ", shape_str(input.sizes()));
  const int64_t T = input.size(time_major ? 0 : 1), B = input.size(time_major ? 1 : 0);
  const int64_t I = input.size(2);
  const RNNMode mode = parse_rnn_mode(rnn_mode);
  const int64_t D = parse_direction(direction);
  check_like(input_h, "input_h", input, "input");
  TORCH_CHECK_VALUE(input_h.dim() == 3 && input_h.size(2) >= 1, "input_h: expected a 3-D tensor ",
                    time_major ? "[num_layers * D, B, num_units]" : "[B, num_layers * D, num_units]",
                    ", got shape ", shape_str(input_h.sizes()));
  const int64_t L = input_h.size(time_major ? 0 : 1) / D;
  const int64_t n = input_h.size(2);
  // The output's [T, B, D * n] (T * B fits: input's storage size did).
  checked_mul(T * B, checked_mul(D, n, "input_h", "D * num_units"), "input",
              "T * B * (D * num_units)");
  TORCH_CHECK_VALUE(L >= 1, "input_h: expected at least ", D, " state slots (num_layers * D with "
                    "D = ", D, "), got shape ", shape_str(input_h.sizes()));
  const std::vector<int64_t> h_shape =
      time_major ? std::vector<int64_t>{L * D, B, n} : std::vector<int64_t>{B, L * D, n};
  check_shape(input_h, "input_h", h_shape,
              time_major ? "[num_layers * D, B, num_units]" : "[B, num_layers * D, num_units]");
  int64_t H = n;
  if (mode == RNNMode::kLSTM) {
    check_like(input_c, "input_c", input, "input");
    TORCH_CHECK_VALUE(input_c.dim() == 3, "input_c: expected a 3-D tensor shaped like input_h, got "
                      "shape ", shape_str(input_c.sizes()));
    H = input_c.size(2);
    if (num_proj > 0) {
      TORCH_CHECK_VALUE(n == num_proj, "input_h: with num_proj = ", num_proj,
                        " the state size (dim 2) must equal num_proj, got shape ",
                        shape_str(input_h.sizes()));
    }
    std::vector<int64_t> c_shape = h_shape;
    c_shape[2] = num_proj > 0 ? H : n;
    check_shape(input_c, "input_c", c_shape,
                num_proj > 0 ? "input_h's shape with dim 2 = cell units"
                             : "input_h's shape (no projection)");
  }
  RNNConfig c = make_rnn_config(rnn_mode, input_mode, direction, L, H, I, num_proj, n);
  c.T = T;
  c.B = B;
  c.time_major = time_major;
  check_like(params, "params", input, "input");
  const int64_t expected = params_size(c, "params");
  TORCH_CHECK_VALUE(params.dim() == 1 && params.numel() == expected,
                    "params: expected a 1-D tensor of CudnnRNNParamsSize = ", expected,
                    " elements for this model, got shape ", shape_str(params.sizes()));
  return c;
}

// TF accepts [0, 1]; 1 drops every input of the layers above the first (NaN is refused).
inline void check_dropout(double dropout) {
  TORCH_CHECK_VALUE(dropout >= 0 && dropout <= 1, "dropout: expected a probability in [0, 1], got ",
                    dropout);
}

// The Backprop op's copies of the forward outputs and their gradients (docs/tf-semantics.md §6.10).
inline void check_cudnn_rnn_outputs(const RNNConfig& c, const at::Tensor& input,
                                    const at::Tensor& input_h, const at::Tensor& input_c,
                                    const at::Tensor& output, const at::Tensor& output_h,
                                    const at::Tensor& output_c, const at::Tensor& output_backprop,
                                    const at::Tensor& output_h_backprop,
                                    const at::Tensor& output_c_backprop) {
  const std::vector<int64_t> out_shape = c.time_major ? std::vector<int64_t>{c.T, c.B, c.D * c.P}
                                                      : std::vector<int64_t>{c.B, c.T, c.D * c.P};
  const char* out_layout = c.time_major ? "[T, B, D * num_units]" : "[B, T, D * num_units]";
  for (auto [t, name] : {std::pair{&output, "output"}, {&output_backprop, "output_backprop"}}) {
    check_like(*t, name, input, "input");
    check_shape(*t, name, out_shape, out_layout);
  }
  for (auto [t, name] : {std::pair{&output_h, "output_h"}, {&output_h_backprop, "output_h_backprop"}}) {
    check_like(*t, name, input, "input");
    check_shape(*t, name, input_h.sizes().vec(), "input_h's shape");
  }
  if (c.lstm()) {
    for (auto [t, name] :
         {std::pair{&output_c, "output_c"}, {&output_c_backprop, "output_c_backprop"}}) {
      check_like(*t, name, input, "input");
      check_shape(*t, name, input_c.sizes().vec(), "input_c's shape");
    }
  }
}

// sequence_lengths: B integers in [0, T]; undefined means every row runs T steps (V1/V2).
inline std::vector<int64_t> check_sequence_lengths(const std::optional<at::Tensor>& lengths,
                                                   const RNNConfig& c) {
  if (!lengths.has_value()) return std::vector<int64_t>(c.B, c.T);
  const at::Tensor& s = *lengths;
  TORCH_CHECK_TYPE(!at::isFloatingType(s.scalar_type()) && !at::isComplexType(s.scalar_type()) &&
                       s.scalar_type() != at::kBool,
                   "sequence_lengths: expected an integer dtype (TF uses int32), got ",
                   s.scalar_type());
  check_shape(s, "sequence_lengths", {c.B}, "[B]");
  if (s.scalar_type() == at::kUInt64) {  // values above int64's range: out of range, not wrapped
    const at::Tensor host = s.to(at::kCPU).contiguous();
    const uint64_t* p = host.const_data_ptr<uint64_t>();
    for (int64_t b = 0; b < c.B; ++b) {
      TORCH_CHECK_VALUE(p[b] <= static_cast<uint64_t>(c.T), "sequence_lengths: expected values in "
                        "[0, T] = [0, ", c.T, "], got ", p[b], " at index ", b);
    }
  }
  const at::Tensor host = s.to(at::kCPU, at::kLong).contiguous();
  const int64_t* p = host.const_data_ptr<int64_t>();
  std::vector<int64_t> out(p, p + c.B);
  for (int64_t b = 0; b < c.B; ++b) {
    TORCH_CHECK_VALUE(0 <= out[b] && out[b] <= c.T, "sequence_lengths: expected values in [0, T] = "
                      "[0, ", c.T, "], got ", out[b], " at index ", b);
  }
  return out;
}

// What the forward op's entry checks, shared by the CPU and CUDA kernels: the model and each
// row's length.
struct CudnnRNNCall {
  RNNConfig config;
  std::vector<int64_t> lengths;
};

inline CudnnRNNCall check_cudnn_rnn_call(const at::Tensor& input, const at::Tensor& input_h,
                                         const at::Tensor& input_c, const at::Tensor& params,
                                         const std::optional<at::Tensor>& sequence_lengths,
                                         c10::string_view rnn_mode, c10::string_view input_mode,
                                         c10::string_view direction, double dropout,
                                         int64_t num_proj, bool time_major) {
  const RNNConfig c = check_cudnn_rnn_inputs(input, input_h, input_c, params, std::string(rnn_mode),
                                             std::string(input_mode), std::string(direction),
                                             num_proj, time_major);
  check_dropout(dropout);
  return {c, check_sequence_lengths(sequence_lengths, c)};
}

// The Backprop op's entry: the forward's checks plus its outputs and their gradients.
inline CudnnRNNCall check_cudnn_rnn_backprop_call(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    const at::Tensor& output, const at::Tensor& output_h, const at::Tensor& output_c,
    const at::Tensor& output_backprop, const at::Tensor& output_h_backprop,
    const at::Tensor& output_c_backprop, c10::string_view rnn_mode, c10::string_view input_mode,
    c10::string_view direction, double dropout, int64_t num_proj, bool time_major) {
  const RNNConfig c = check_cudnn_rnn_inputs(input, input_h, input_c, params, std::string(rnn_mode),
                                             std::string(input_mode), std::string(direction),
                                             num_proj, time_major);
  check_dropout(dropout);
  check_cudnn_rnn_outputs(c, input, input_h, input_c, output, output_h, output_c, output_backprop,
                          output_h_backprop, output_c_backprop);
  return {c, check_sequence_lengths(sequence_lengths, c)};
}

// ---------------------------------------------------------------------------------------------
// reserve_space's signature. A training forward writes, at the start of its reserve_space, what
// its backward must repeat (docs/differences.md): the model, the call's shapes, the dropout rate
// and every row's length, as int64 words. CudnnRNNBackpropV3 reads them back and raises a
// ValueError naming the first difference instead of computing with a reserve made for another
// call (TF reads the reserve as it is).

// Dropout states kept per device for explicit seed pairs, most recently used first: a pair
// used again draws its next masks; the oldest beyond this many is forgotten (used again, it
// starts from its first masks), so a caller who passes a new pair per call holds 16 states,
// not one per call. The same on the CPU and the GPU.
constexpr size_t kMaxSeededDropoutStates = 16;

// TF's dropout seed of a CudnnRNN op: (seed << 32) | seed2, seed2 widened from int (a negative
// seed2 sign-extends over the high word, as TF's cast does). Both backends key their seeded
// dropout states by it.
inline uint64_t tf_dropout_seed(int64_t seed, int64_t seed2) {
  return (static_cast<uint64_t>(seed) << 32) | static_cast<uint64_t>(seed2);
}

// The last `capacity` values by key, most recently used first: the seeded dropout states (CPU:
// a generator per seed pair; GPU: a cuDNN state per device and seed pair). A handful of
// entries, so a list searched in order. Not locked: its owner holds a mutex around get().
template <typename Key, typename Value>
class MostRecentlyUsed {
 public:
  explicit MostRecentlyUsed(size_t capacity) : capacity_(capacity) {}

  // The value for `key`, made by `make()` when absent, now the most recent; beyond capacity
  // the least recently used is forgotten.
  template <typename Make>
  Value& get(const Key& key, Make&& make) {
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const auto& e) { return e.first == key; });
    if (it != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, it);
    } else {
      entries_.emplace_front(key, make());
      if (entries_.size() > capacity_) entries_.pop_back();
    }
    return entries_.front().second;
  }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;
};

constexpr int64_t kReserveMagic = 0x31305652474c5401;  // bytes 01 'T' 'L' 'G' 'R' 'V' '0' '1'
constexpr int64_t kReserveFixedWords = 13;             // magic, 11 fields, B
constexpr int64_t kReserveDropoutWord = 10;            // the dropout rate's bits
constexpr int64_t kReserveMakerWord = 11;              // a ReserveMaker

// Which kernels made a reserve: the CPU's and cuDNN's lay out their activations differently, so
// a reserve moved to the other device must not pass; cuDNN's backward runs the algorithm its
// forward ran (docs/cudnn.md §8), which the word records.
enum class ReserveMaker : int64_t { kCpu = 1, kCudnn = 2, kCudnnPersistSmallH = 3 };

inline std::vector<int64_t> reserve_signature(const RNNConfig& c,
                                              const std::vector<int64_t>& lengths,
                                              double dropout, ReserveMaker maker) {
  int64_t dropout_bits = 0;
  std::memcpy(&dropout_bits, &dropout, sizeof(dropout));
  std::vector<int64_t> w = {kReserveMagic, static_cast<int64_t>(c.mode), c.skip_input, c.D, c.L,
                            c.I, c.H, c.P, c.time_major, c.T, dropout_bits,
                            static_cast<int64_t>(maker), c.B};
  w.insert(w.end(), lengths.begin(), lengths.end());
  return w;
}

// The signature's size in bytes for a batch of B rows, rounded up to `align` (a multiple of 8).
inline int64_t reserve_signature_bytes(int64_t B, int64_t align) {
  const int64_t bytes = (kReserveFixedWords + B) * 8;
  return (bytes + align - 1) / align * align;
}

inline std::string lengths_str(const int64_t* p, int64_t n) {
  std::ostringstream out;
  out << "[";
  for (int64_t k = 0; k < n && k < 16; ++k) out << (k ? ", " : "") << p[k];
  out << (n > 16 ? ", ...]" : "]");
  return out.str();
}

// `stored`: the first `n_stored` words of the reserve (fewer than the signature when it is too
// short to hold one).
inline void check_reserve_signature(const int64_t* stored, int64_t n_stored, const RNNConfig& c,
                                    const std::vector<int64_t>& lengths, double dropout,
                                    ReserveMaker maker) {
  const std::vector<int64_t> want = reserve_signature(c, lengths, dropout, maker);
  TORCH_CHECK_VALUE(n_stored >= kReserveFixedWords && stored[0] == kReserveMagic,
                    "reserve_space: expected the reserve_space output of a CudnnRNN forward run "
                    "with is_training=True (this one was not made by one)");
  static const char* const names[] = {
      "", "rnn_mode", "input_mode (skip_input)", "direction (D)", "num_layers", "input_size",
      "num_units (cell units)", "num_units of input_h (num_proj)", "time_major",
      "T (time steps)", "dropout", "", "B (batch rows)"};
  if (stored[kReserveMakerWord] != want[kReserveMakerWord]) {
    const auto name = [](int64_t m) -> std::string {
      if (m == static_cast<int64_t>(ReserveMaker::kCpu)) return "the CPU kernels";
      if (m == static_cast<int64_t>(ReserveMaker::kCudnn)) return "cuDNN (CUDA)";
      if (m == static_cast<int64_t>(ReserveMaker::kCudnnPersistSmallH)) {
        return "cuDNN (CUDA), its persistent small-H algorithm";
      }
      return "unknown kernels (maker word " + std::to_string(m) + ")";
    };
    TORCH_CHECK_VALUE(false, "reserve_space: made by ", name(stored[kReserveMakerWord]),
                      ", this call runs on ", name(want[kReserveMakerWord]),
                      ": a reserve is only read by the device's kernels that made it (run the "
                      "forward on the same device)");
  }
  for (int64_t k = 1; k < kReserveFixedWords; ++k) {
    if (k == kReserveDropoutWord) {  // compared as a double (-0.0 == 0.0)
      double made = 0;
      std::memcpy(&made, &stored[k], sizeof(made));
      TORCH_CHECK_VALUE(made == dropout, "reserve_space: made by a forward with dropout = ", made,
                        ", this call has dropout = ", dropout,
                        " (the Backprop op must repeat its forward's attributes)");
      continue;
    }
    if (k == kReserveMakerWord || stored[k] == want[k]) continue;
    TORCH_CHECK_VALUE(false, "reserve_space: made by a forward with another ", names[k], " (",
                      stored[k], "), this call has ", want[k],
                      " (the Backprop op must repeat its forward's attributes and shapes)");
  }
  const int64_t B = c.B;
  TORCH_CHECK_VALUE(n_stored >= kReserveFixedWords + B,
                    "reserve_space: expected the reserve_space output of a CudnnRNN forward run "
                    "with is_training=True (this one is too short to be one)");
  const int64_t* made = stored + kReserveFixedWords;
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK_VALUE(made[b] == lengths[b], "sequence_lengths: the forward that made "
                      "reserve_space ran sequence_lengths ", lengths_str(made, B), ", this call "
                      "has ", lengths_str(lengths.data(), B), " (they differ at index ", b, ")");
  }
}

}  // namespace torch_lstm_grad
