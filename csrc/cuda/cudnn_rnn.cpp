// CUDA implementation of the CudnnRNN family through cuDNN's v8/v9 RNN API:
// cudnnSetRNNDescriptor_v8 (DOUBLE_BIAS, as TF), padded sequence-major or batch-major data
// descriptors with paddingFill = 0, cudnnRNNForward, cudnnRNNBackwardData_v8 and
// cudnnRNNBackwardWeights_v8 (WGRAD_MODE_ADD into zeros). Everything runs on PyTorch's current
// stream through ATen's cuDNN handle; sequence lengths stay on the host (a device copy is passed
// too). Every cuDNN status is checked.
//
// What cuDNN cannot do is done around it, so the GPU gives the CPU kernels' numbers:
// - zero-length rows (cuDNN rejects them): cuDNN runs on the other rows only; a zero-length
//   row's outputs are zero, its final state is its initial state, its state gradient is the
//   incoming one (SPEC §2);
// - batch-major states are TF's reinterpretation of [B, L·D, n] memory as [L·D, B, n];
// - bfloat16 runs as float32 (TF does the same);
// - the params layout is checked against cudnnGetRNNWeightParams on first use of each model, so
//   a buffer moves between CPU and GPU unchanged or the op says exactly where the layouts differ.
//
// Unverified: written and compiled without a GPU (see README, "Status").

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "../cudnn_rnn_config.h"

namespace torch_lstm_grad {
namespace {

using Outputs5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Grads4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// RAII for cuDNN descriptors.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Desc {
 public:
  Desc() { AT_CUDNN_CHECK(Create(&d_)); }
  ~Desc() { Destroy(d_); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  T get() const { return d_; }

 private:
  T d_{};
};
using RNNDesc = Desc<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using DataDesc =
    Desc<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using TensorDesc =
    Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using DropoutDesc =
    Desc<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

cudnnDataType_t cudnn_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return CUDNN_DATA_HALF;
    case at::kFloat: return CUDNN_DATA_FLOAT;
    case at::kDouble: return CUDNN_DATA_DOUBLE;
    default: TORCH_CHECK(false, "cudnn_rnn: no cuDNN data type for ", t);
  }
}

cudnnRNNMode_t cudnn_mode(RNNMode m) {
  switch (m) {
    case RNNMode::kRelu: return CUDNN_RNN_RELU;
    case RNNMode::kTanh: return CUDNN_RNN_TANH;
    case RNNMode::kLSTM: return CUDNN_LSTM;
    case RNNMode::kGRU: return CUDNN_GRU;
  }
  return CUDNN_LSTM;
}

// One cuDNN dropout state per (device, seed, rate), created once and then advancing from call
// to call, as TF's per-kernel state does. Rate 0 needs no state.
struct DropoutState {
  at::Tensor states;
  bool initialised = false;
};

void set_dropout(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, double rate, int64_t seed,
                 int64_t seed2, const at::Device& device) {
  if (rate == 0) {
    AT_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc, handle, 0.0f, nullptr, 0, 0));
    return;
  }
  // TF: (seed << 32) | seed2, seed2 widened from int (a negative seed2 fills the high word).
  const uint64_t seed64 = (static_cast<uint64_t>(seed) << 32) | static_cast<uint64_t>(seed2);
  static std::mutex mutex;
  static std::map<std::tuple<int, uint64_t, double>, DropoutState> cache;
  std::lock_guard<std::mutex> lock(mutex);
  DropoutState& st = cache[{device.index(), seed64, rate}];
  if (!st.initialised) {
    size_t bytes = 0;
    AT_CUDNN_CHECK(cudnnDropoutGetStatesSize(handle, &bytes));
    st.states = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(device).dtype(at::kByte));
    AT_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc, handle, static_cast<float>(rate),
                                             st.states.data_ptr(), bytes, seed64));
    st.initialised = true;
  } else {
    AT_CUDNN_CHECK(cudnnRestoreDropoutDescriptor(desc, handle, static_cast<float>(rate),
                                                 st.states.data_ptr(), st.states.numel(), seed64));
  }
}

// Everything one forward or backward call describes to cuDNN.
struct CudnnRNN {
  RNNDesc rnn;
  DropoutDesc dropout;
  DataDesc x, y;
  TensorDesc h, c;
  size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
};

void set_state_desc(cudnnTensorDescriptor_t d, cudnnDataType_t t, int64_t n0, int64_t n1,
                    int64_t n2) {
  const int dims[3] = {static_cast<int>(n0), static_cast<int>(n1), static_cast<int>(n2)};
  const int strides[3] = {static_cast<int>(n1 * n2), static_cast<int>(n2), 1};
  AT_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d, t, 3, dims, strides));
}

// Checks, once per model, that cuDNN places every matrix and bias where params_layout() does.
void verify_weight_layout(cudnnHandle_t handle, const CudnnRNN& d, const RNNConfig& c,
                          at::ScalarType dtype, const at::Tensor& params) {
  static std::mutex mutex;
  static std::set<std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int>>
      verified;
  const auto key = std::make_tuple(static_cast<int>(c.mode), c.L, c.D, c.I, c.H, c.P, c.G,
                                   c.skip_input, static_cast<int>(dtype));
  std::lock_guard<std::mutex> lock(mutex);
  if (verified.count(key)) return;
  int64_t total = 0;
  const auto layout = params_layout(c, &total);
  const int64_t elem = static_cast<int64_t>(params.element_size());
  TORCH_CHECK(static_cast<int64_t>(d.weight_bytes) == total * elem,
              "cudnn_rnn: cuDNN's weight space is ", d.weight_bytes, " bytes, the params layout ",
              total * elem, " bytes; the CPU and GPU params layouts differ for this model");
  const char* base = static_cast<const char*>(params.const_data_ptr());
  TensorDesc m_desc, b_desc;
  for (int64_t k = 0; k < c.L * c.D; ++k) {
    const auto& p = layout[k];
    for (int64_t id = 0; id < 2 * c.G + (c.proj() ? 1 : 0); ++id) {
      const bool is_proj = id == 2 * c.G;
      const int lin_id = is_proj ? 8 : static_cast<int>(id);
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      AT_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, d.rnn.get(), static_cast<int32_t>(k),
                                             d.weight_bytes, params.const_data_ptr(), lin_id,
                                             m_desc.get(), &m_addr, b_desc.get(), &b_addr));
      const bool input_gate = id < c.G;
      int64_t m_expected = -1, b_expected = -1;
      if (is_proj) {
        m_expected = p.proj;
      } else if (input_gate) {
        m_expected = p.w < 0 ? -1 : p.w + id * c.H * p.in;
        b_expected = p.bw + id * c.H;
      } else {
        m_expected = p.r + (id - c.G) * c.H * c.P;
        b_expected = p.br + (id - c.G) * c.H;
      }
      auto offset = [&](void* a) {
        return a == nullptr ? int64_t{-1} : (static_cast<const char*>(a) - base) / elem;
      };
      TORCH_CHECK(offset(m_addr) == m_expected && (is_proj || offset(b_addr) == b_expected),
                  "cudnn_rnn: cuDNN places pseudo-layer ", k, " linLayerID ", lin_id,
                  " at matrix offset ", offset(m_addr), ", bias offset ", offset(b_addr),
                  "; the params layout expects ", m_expected, ", ", b_expected,
                  ": the CPU and GPU params layouts differ for this model");
    }
  }
  verified.insert(key);
}

// Rows with length > 0: cuDNN refuses zero-length sequences.
struct Rows {
  std::vector<int> lengths;  // of the kept rows
  at::Tensor index;          // [B'] long, on the device
  bool all;                  // every row kept
};

Rows kept_rows(const std::vector<int64_t>& lengths, const at::Device& device) {
  Rows r;
  std::vector<int64_t> idx;
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] > 0) {
      idx.push_back(static_cast<int64_t>(b));
      r.lengths.push_back(static_cast<int>(lengths[b]));
    }
  }
  r.all = idx.size() == lengths.size();
  r.index = at::tensor(at::ArrayRef<int64_t>(idx), at::kLong).to(device);
  return r;
}

// Describes the model and the kept rows to cuDNN.
void describe(CudnnRNN& d, cudnnHandle_t handle, const RNNConfig& c, const Rows& rows,
              at::ScalarType compute, double dropout, int64_t seed, int64_t seed2,
              const at::Device& device, bool training) {
  const cudnnDataType_t t = cudnn_type(compute);
  const cudnnDataType_t math_prec = compute == at::kDouble ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (compute == at::kHalf) math = CUDNN_TENSOR_OP_MATH;
  if (compute == at::kFloat && !at::globalContext().allowTF32CuDNN()) math = CUDNN_FMA_MATH;
  set_dropout(d.dropout.get(), handle, training ? dropout : 0.0, seed, seed2, device);
  AT_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      d.rnn.get(), CUDNN_RNN_ALGO_STANDARD, cudnn_mode(c.mode), CUDNN_RNN_DOUBLE_BIAS,
      c.D == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
      c.skip_input ? CUDNN_SKIP_INPUT : CUDNN_LINEAR_INPUT, t, math_prec, math,
      /*inputSize=*/static_cast<int32_t>(c.I), /*hiddenSize=*/static_cast<int32_t>(c.H),
      /*projSize=*/static_cast<int32_t>(c.P), /*numLayers=*/static_cast<int32_t>(c.L),
      d.dropout.get(), CUDNN_RNN_PADDED_IO_ENABLED));
  const int batch = static_cast<int>(rows.lengths.size());
  const cudnnRNNDataLayout_t layout = c.time_major ? CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED
                                                   : CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED;
  double fill64 = 0.0;
  float fill32 = 0.0f;
  void* fill = compute == at::kDouble ? static_cast<void*>(&fill64) : static_cast<void*>(&fill32);
  AT_CUDNN_CHECK(cudnnSetRNNDataDescriptor(d.x.get(), t, layout, static_cast<int>(c.T), batch,
                                           static_cast<int>(c.I), rows.lengths.data(), fill));
  AT_CUDNN_CHECK(cudnnSetRNNDataDescriptor(d.y.get(), t, layout, static_cast<int>(c.T), batch,
                                           static_cast<int>(c.D * c.P), rows.lengths.data(),
                                           fill));
  set_state_desc(d.h.get(), t, c.L * c.D, batch, c.P);
  set_state_desc(d.c.get(), t, c.L * c.D, batch, c.H);
  AT_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, d.rnn.get(), &d.weight_bytes));
  AT_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(
      handle, d.rnn.get(), training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
      d.x.get(), &d.work_bytes, &d.reserve_bytes));
}

// Op-boundary layouts: states as [L·D, B, n] (TF's batch-major reinterpretation), kept rows.
at::Tensor states_tm(const at::Tensor& h, const RNNConfig& c) {
  return c.time_major ? h.contiguous() : h.contiguous().view({c.L * c.D, c.B, h.size(2)});
}
at::Tensor states_out(const at::Tensor& h, const RNNConfig& c) {
  return c.time_major ? h : h.view({c.B, c.L * c.D, h.size(2)});
}
at::Tensor keep_seq(const at::Tensor& x, const RNNConfig& c, const Rows& r) {
  return (r.all ? x : x.index_select(c.time_major ? 1 : 0, r.index)).contiguous();
}
at::Tensor keep_state(const at::Tensor& h, const Rows& r) {
  return (r.all ? h : h.index_select(1, r.index)).contiguous();
}
// Full-batch tensor from kept rows; the other rows take `rest` (zeros or the given tensor).
at::Tensor scatter_rows(const at::Tensor& kept, const at::Tensor& rest, int64_t dim, const Rows& r) {
  return r.all ? kept : rest.index_copy(dim, r.index, kept);
}

at::Tensor int_tensor(const std::vector<int>& v, const at::Device& device) {
  std::vector<int32_t> w(v.begin(), v.end());
  return at::tensor(at::ArrayRef<int32_t>(w), at::kInt).to(device);
}

// What the forward and the backward both prepare: the compute type (bfloat16 runs as float32,
// as in TF), the rows cuDNN runs, and the initial states as [L·D, B, n] in the compute type.
struct Prepared {
  at::ScalarType compute;
  at::TensorOptions opts;
  Rows rows;
  at::Tensor h0, c0;
};

Prepared prepare(const RNNConfig& c, const std::vector<int64_t>& lengths, const at::Tensor& input,
                 const at::Tensor& input_h, const at::Tensor& input_c) {
  const auto compute = input.scalar_type() == at::kBFloat16 ? at::kFloat : input.scalar_type();
  return {compute, input.options().dtype(compute), kept_rows(lengths, input.device()),
          states_tm(input_h, c).to(compute),
          c.lstm() ? states_tm(input_c, c).to(compute) : at::Tensor()};
}

Outputs5 cudnn_rnn_cuda(const at::Tensor& input, const at::Tensor& input_h,
                        const at::Tensor& input_c, const at::Tensor& params,
                        const std::optional<at::Tensor>& sequence_lengths,
                        c10::string_view rnn_mode, c10::string_view input_mode,
                        c10::string_view direction, double dropout, int64_t seed, int64_t seed2,
                        int64_t num_proj, bool is_training, bool time_major) {
  const auto [c, lengths] =
      check_cudnn_rnn_call(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                           input_mode, direction, dropout, num_proj, time_major);
  const c10::cuda::CUDAGuard guard(input.device());
  const auto dtype = input.scalar_type();
  const auto [compute, opts, rows, h0, c0] = prepare(c, lengths, input, input_h, input_c);
  const std::vector<int64_t> out_shape = time_major ? std::vector<int64_t>{c.T, c.B, c.D * c.P}
                                                    : std::vector<int64_t>{c.B, c.T, c.D * c.P};
  at::Tensor y = at::zeros(out_shape, opts), hy = h0.clone(), cy = c.lstm() ? c0.clone() : c0;
  // The reserve starts with the call's signature (cudnn_rnn_config.h), which the backward
  // checks; cuDNN's reserve follows it, 256-byte aligned.
  const int64_t elem = static_cast<int64_t>(input.element_size());
  const int64_t header = reserve_signature_bytes(c.B, 256);
  at::Tensor reserve = at::empty({header / elem}, input.options());  // training, no row to run
  if (!rows.lengths.empty() && c.T > 0) {
    cudnnHandle_t handle = at::native::getCudnnHandle();
    CudnnRNN d;
    describe(d, handle, c, rows, compute, dropout, seed, seed2, input.device(), is_training);
    const at::Tensor w = params.to(compute).contiguous();
    verify_weight_layout(handle, d, c, compute, w);
    const at::Tensor x = keep_seq(input.to(compute), c, rows);
    const at::Tensor hx = keep_state(h0, rows);
    const at::Tensor cx = c.lstm() ? keep_state(c0, rows) : at::Tensor();
    std::vector<int64_t> y_shape = out_shape;
    y_shape[time_major ? 1 : 0] = static_cast<int64_t>(rows.lengths.size());
    at::Tensor yk = at::empty(y_shape, opts), hyk = at::empty_like(hx);
    at::Tensor cyk = c.lstm() ? at::empty_like(cx) : at::Tensor();
    at::Tensor work = at::empty({static_cast<int64_t>(d.work_bytes)}, opts.dtype(at::kByte));
    if (is_training) {
      reserve = at::empty({(header + static_cast<int64_t>(d.reserve_bytes) + elem - 1) / elem},
                          input.options());
    }
    const at::Tensor dev_lengths = int_tensor(rows.lengths, input.device());
    AT_CUDNN_CHECK(cudnnRNNForward(
        handle, d.rnn.get(), is_training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
        dev_lengths.const_data_ptr<int32_t>(), d.x.get(), x.const_data_ptr(), d.y.get(),
        yk.data_ptr(), d.h.get(), hx.const_data_ptr(), hyk.data_ptr(), d.c.get(),
        c.lstm() ? cx.const_data_ptr() : nullptr, c.lstm() ? cyk.data_ptr() : nullptr,
        d.weight_bytes, w.const_data_ptr(), d.work_bytes, work.data_ptr(),
        is_training ? d.reserve_bytes : 0,
        is_training ? static_cast<char*>(reserve.data_ptr()) + header : nullptr));
    y = scatter_rows(yk, y, time_major ? 1 : 0, rows);
    hy = scatter_rows(hyk, hy, 1, rows);
    if (c.lstm()) cy = scatter_rows(cyk, cy, 1, rows);
  }
  if (is_training) {
    const std::vector<int64_t> sig = reserve_signature(c, lengths, dropout);
    const at::Tensor words =
        at::from_blob(const_cast<int64_t*>(sig.data()), {static_cast<int64_t>(sig.size())},
                      at::TensorOptions().dtype(at::kLong));
    reserve.view(at::kByte).narrow(0, 0, words.numel() * 8).copy_(words.view(at::kByte));
  } else {
    reserve = at::zeros({}, input.options());
  }
  return {y.to(dtype), states_out(hy.to(dtype), c),
          c.lstm() ? states_out(cy.to(dtype), c) : at::zeros({}, input.options()), reserve,
          at::zeros({}, input.options().dtype(at::kChar))};
}

Grads4 cudnn_rnn_backprop_cuda(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    const at::Tensor& output, const at::Tensor& output_h, const at::Tensor& output_c,
    const at::Tensor& output_backprop, const at::Tensor& output_h_backprop,
    const at::Tensor& output_c_backprop, const at::Tensor& reserve_space,
    const at::Tensor& host_reserved, c10::string_view rnn_mode, c10::string_view input_mode,
    c10::string_view direction, double dropout, int64_t seed, int64_t seed2, int64_t num_proj,
    bool time_major) {
  const auto [c, lengths] = check_cudnn_rnn_backprop_call(
      input, input_h, input_c, params, sequence_lengths, output, output_h, output_c,
      output_backprop, output_h_backprop, output_c_backprop, rnn_mode, input_mode, direction,
      dropout, num_proj, time_major);
  (void)host_reserved;
  const c10::cuda::CUDAGuard guard(input.device());
  TORCH_CHECK_VALUE(reserve_space.dim() == 1 && reserve_space.is_contiguous(),
                    "reserve_space: expected the 1-D reserve_space output of CudnnRNNV3 with "
                    "is_training=True, got shape ", shape_str(reserve_space.sizes()));
  const int64_t header = reserve_signature_bytes(c.B, 256);
  {  // the forward's signature: a few bytes copied to the host
    const int64_t n_words = std::min<int64_t>(
        reserve_space.numel() * reserve_space.element_size() / 8, kReserveFixedWords + c.B);
    const at::Tensor stored =
        reserve_space.view(at::kByte).narrow(0, 0, n_words * 8).to(at::kCPU).view(at::kLong);
    check_reserve_signature(stored.const_data_ptr<int64_t>(), n_words, c, lengths, dropout);
  }
  const auto dtype = input.scalar_type();
  const auto [compute, opts, rows, h0, c0] = prepare(c, lengths, input, input_h, input_c);
  const at::Tensor dhy = states_tm(output_h_backprop, c).to(compute);
  const at::Tensor dcy = c.lstm() ? states_tm(output_c_backprop, c).to(compute) : at::Tensor();
  at::Tensor dx = at::zeros(input.sizes(), opts), dhx = dhy.clone();
  at::Tensor dcx = c.lstm() ? dcy.clone() : at::Tensor();
  at::Tensor dw = at::zeros({params.numel()}, opts);
  if (!rows.lengths.empty() && c.T > 0) {
    cudnnHandle_t handle = at::native::getCudnnHandle();
    CudnnRNN d;
    describe(d, handle, c, rows, compute, dropout, seed, seed2, input.device(), true);
    const at::Tensor w = params.to(compute).contiguous();
    verify_weight_layout(handle, d, c, compute, w);
    TORCH_CHECK_VALUE(reserve_space.numel() * reserve_space.element_size() >=
                          header + static_cast<int64_t>(d.reserve_bytes),
                      "reserve_space: expected the reserve_space output of CudnnRNNV3 with "
                      "is_training=True and these attributes and shapes (at least ",
                      header + static_cast<int64_t>(d.reserve_bytes), " bytes), got shape ",
                      shape_str(reserve_space.sizes()));
    // cuDNN's backward writes into the reserve: work on a copy so a retained graph can run
    // backward again (SPEC §2).
    at::Tensor reserve = reserve_space.clone();
    const at::Tensor x = keep_seq(input.to(compute), c, rows);
    const at::Tensor y = keep_seq(output.to(compute), c, rows);
    const at::Tensor dy = keep_seq(output_backprop.to(compute), c, rows);
    const at::Tensor hx = keep_state(h0, rows), dhyk = keep_state(dhy, rows);
    const at::Tensor cx = c.lstm() ? keep_state(c0, rows) : at::Tensor();
    const at::Tensor dcyk = c.lstm() ? keep_state(dcy, rows) : at::Tensor();
    at::Tensor dxk = at::empty_like(x), dhxk = at::empty_like(hx);
    at::Tensor dcxk = c.lstm() ? at::empty_like(cx) : at::Tensor();
    at::Tensor work = at::empty({static_cast<int64_t>(d.work_bytes)}, opts.dtype(at::kByte));
    const at::Tensor dev_lengths = int_tensor(rows.lengths, input.device());
    AT_CUDNN_CHECK(cudnnRNNBackwardData_v8(
        handle, d.rnn.get(), dev_lengths.const_data_ptr<int32_t>(), d.y.get(), y.const_data_ptr(),
        dy.const_data_ptr(), d.x.get(), dxk.data_ptr(), d.h.get(), hx.const_data_ptr(),
        dhyk.const_data_ptr(), dhxk.data_ptr(), d.c.get(),
        c.lstm() ? cx.const_data_ptr() : nullptr, c.lstm() ? dcyk.const_data_ptr() : nullptr,
        c.lstm() ? dcxk.data_ptr() : nullptr, d.weight_bytes, w.const_data_ptr(), d.work_bytes,
        work.data_ptr(), d.reserve_bytes, static_cast<char*>(reserve.data_ptr()) + header));
    AT_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
        handle, d.rnn.get(), CUDNN_WGRAD_MODE_ADD, dev_lengths.const_data_ptr<int32_t>(),
        d.x.get(), x.const_data_ptr(), d.h.get(), hx.const_data_ptr(), d.y.get(),
        y.const_data_ptr(), d.weight_bytes, dw.data_ptr(), d.work_bytes, work.data_ptr(),
        d.reserve_bytes, static_cast<char*>(reserve.data_ptr()) + header));
    dx = scatter_rows(dxk, dx, time_major ? 1 : 0, rows);
    dhx = scatter_rows(dhxk, dhx, 1, rows);
    if (c.lstm()) dcx = scatter_rows(dcxk, dcx, 1, rows);
  }
  return {dx.to(dtype), states_out(dhx.to(dtype), c),
          c.lstm() ? states_out(dcx.to(dtype), c) : at::zeros({}, input.options()), dw.to(dtype)};
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CUDA, m) {
  m.impl("cudnn_rnn", &cudnn_rnn_cuda);
  m.impl("cudnn_rnn_backprop", &cudnn_rnn_backprop_cuda);
}

}  // namespace torch_lstm_grad
