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
//   incoming one (docs/differences.md);
// - batch-major states are TF's reinterpretation of [B, L·D, n] memory as [L·D, B, n];
// - bfloat16 runs as float32 (TF does the same);
// - the params layout is checked against cudnnGetRNNWeightParams on first use of each model, so
//   a buffer moves between CPU and GPU unchanged or the op says exactly where the layouts differ.

#include <ATen/ATen.h>
#include <ATen/ops/from_blob.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/library.h>

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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

// cuDNN dropout states. A state is ~2 MB of RNG state that cuDNN initialises with a kernel
// (slow: curand_init per thread), so it is created once and then advances from call to call, as
// TF's per-kernel state does:
// - explicit seeds (seed or seed2 != 0): one state per (device, TF's 64-bit seed), kept for the
//   last kMaxSeededDropoutStates seed pairs used;
// - seed = seed2 = 0 ("unseeded"): one state per device, seeded from torch's CUDA generator and
//   reseeded after torch.manual_seed (the generator's reset flag, or its seed or offset moved
//   back), as PyTorch's own cuDNN RNN does, so runs after manual_seed repeat.
// Rate is not part of the state (cuDNN takes it with the descriptor). A caller holds the state's
// mutex from describe() to the end of its cuDNN calls and orders its stream after the previous
// user's with an event, so two threads or streams never advance one state at once.
struct DropoutState {
  at::Tensor buffer;
  std::mutex mutex;
  std::optional<at::cuda::CUDAEvent> last_use;
  uint64_t seed = 0;                         // what cuDNN was initialised with
  uint64_t gen_seed = 0, gen_offset = 0;     // unseeded: the generator after our draw
};

// The state a call uses, locked; on release the current stream's position is recorded so the
// next user waits for this call's kernels.
class DropoutLease {
 public:
  DropoutLease() = default;
  explicit DropoutLease(std::shared_ptr<DropoutState> st)
      : st_(std::move(st)), lock_(st_->mutex) {
    if (st_->last_use) st_->last_use->block(at::cuda::getCurrentCUDAStream());
  }
  DropoutLease(DropoutLease&&) = default;
  DropoutLease& operator=(DropoutLease&&) = default;
  ~DropoutLease() {
    if (st_ && lock_.owns_lock()) {
      if (!st_->last_use) st_->last_use.emplace();
      st_->last_use->record(at::cuda::getCurrentCUDAStream());
    }
  }
  DropoutState* get() const { return st_.get(); }

 private:
  std::shared_ptr<DropoutState> st_;
  std::unique_lock<std::mutex> lock_;
};

void init_state(DropoutState& st, cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
                float rate, uint64_t seed, const at::Device& device) {
  size_t bytes = 0;
  AT_CUDNN_CHECK(cudnnDropoutGetStatesSize(handle, &bytes));
  if (!st.buffer.defined()) {
    st.buffer = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions(device).dtype(at::kByte));
  }
  AT_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc, handle, rate, st.buffer.data_ptr(), bytes, seed));
  st.seed = seed;
}

// Sets `desc` to `rate` over the call's state and returns the state, locked (no state for rate
// 0). `reseed`: the forward may (re)initialise the unseeded state; the backward only reads the
// masks of its forward from the reserve and never draws.
DropoutLease set_dropout(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, double rate,
                         int64_t seed, int64_t seed2, const at::Device& device, bool reseed) {
  if (rate == 0) {
    AT_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc, handle, 0.0f, nullptr, 0, 0));
    return {};
  }
  const bool unseeded = seed == 0 && seed2 == 0;
  const uint64_t seed64 = tf_dropout_seed(seed, seed2);
  static std::mutex cache_mutex;
  static std::map<int, std::shared_ptr<DropoutState>> unseeded_states;
  // An evicted state lives on while a lease holds it; its buffer returns to the caching
  // allocator, stream-ordered, after the last call that used it.
  static MostRecentlyUsed<std::pair<int, uint64_t>, std::shared_ptr<DropoutState>> seeded(
      kMaxSeededDropoutStates);
  std::shared_ptr<DropoutState> st;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (unseeded) {
      auto& slot = unseeded_states[device.index()];
      if (!slot) slot = std::make_shared<DropoutState>();
      st = slot;
    } else {
      st = seeded.get(std::make_pair(static_cast<int>(device.index()), seed64),
                      [] { return std::make_shared<DropoutState>(); });
    }
  }
  DropoutLease lease(st);
  const float r = static_cast<float>(rate);
  if (unseeded && reseed) {
    const at::Generator& gen = at::cuda::detail::getDefaultCUDAGenerator(device.index());
    auto* impl = gen.get<at::CUDAGeneratorImpl>();
    // manual_seed sets the reset flag (which PyTorch's cuDNN RNN may consume first), a new
    // seed, and the offset back to 0: any of the three means "start again".
    const bool reset = impl->reset_rnn_state() || !st->buffer.defined() ||
                       impl->current_seed() != st->gen_seed ||
                       impl->philox_offset_per_thread() < st->gen_offset;
    if (reset) {
      const int64_t drawn =
          at::empty({}, at::TensorOptions(device).dtype(at::kLong)).random_(gen).item<int64_t>();
      init_state(*st, desc, handle, r, static_cast<uint64_t>(drawn), device);
      st->gen_seed = impl->current_seed();
      st->gen_offset = impl->philox_offset_per_thread();
      return lease;
    }
  } else if (!st->buffer.defined()) {
    init_state(*st, desc, handle, r, unseeded ? 0 : seed64, device);
    return lease;
  }
  AT_CUDNN_CHECK(cudnnRestoreDropoutDescriptor(desc, handle, r, st->buffer.data_ptr(),
                                               st->buffer.numel(), st->seed));
  return lease;
}

// The model as cuDNN sees it (RNN descriptor, its dropout descriptor, the weight space size).
struct ModelDesc {
  RNNDesc rnn;
  DropoutDesc dropout;
  size_t weight_bytes = 0;
};

// Models without dropout are described once per thread and configuration and reused (cuDNN
// descriptors are not thread-safe to share while being set, hence per thread). A model that
// draws dropout is described per call: its descriptor points at a state that may be re-seeded
// or evicted between calls, and cuDNN does not document whether the RNN descriptor copies the
// dropout descriptor or refers to it.
using ModelKey =
    std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int, int>;
constexpr size_t kMaxCachedModels = 64;

// Everything one forward or backward call describes to cuDNN: the model (cached or this call's
// own), the data and state descriptors of this call's rows, and the locked dropout state.
struct CudnnRNN {
  ModelDesc* model = nullptr;
  std::unique_ptr<ModelDesc> owned;
  DataDesc x, y;
  TensorDesc h, c;
  size_t work_bytes = 0, reserve_bytes = 0;
  DropoutLease dropout;  // released (and its stream position recorded) after the cuDNN calls
  cudnnRNNDescriptor_t rnn() const { return model->rnn.get(); }
  size_t weight_bytes() const { return model->weight_bytes; }
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
  TORCH_CHECK(static_cast<int64_t>(d.weight_bytes()) == total * elem,
              "cudnn_rnn: cuDNN's weight space is ", d.weight_bytes(), " bytes, the params layout ",
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
      AT_CUDNN_CHECK(cudnnGetRNNWeightParams(handle, d.rnn(), static_cast<int32_t>(k),
                                             d.weight_bytes(), params.const_data_ptr(), lin_id,
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

// A host vector on the device without a host sync: staged through pinned memory (the caching
// host allocator keeps the staging buffer until the copy has run).
template <typename T>
at::Tensor to_device(const std::vector<T>& v, at::ScalarType dtype, const at::Device& device) {
  at::Tensor host = at::empty({static_cast<int64_t>(v.size())},
                              at::TensorOptions().dtype(dtype).pinned_memory(true));
  std::copy(v.begin(), v.end(), host.data_ptr<T>());
  return host.to(device, /*non_blocking=*/true);
}

// The training forward's reserve, as the op returns it: the caching allocator's buffer wrapped
// in a storage whose context also holds the signature written at its start. The backward reads
// the signature here, on the host: reading the device copy means a device-to-host copy, which
// waits for every kernel queued before it. A reserve that is not this wrapper (cloned, moved,
// made elsewhere) is checked through its device copy instead.
struct SignedReserve {
  at::Tensor buffer;           // the allocation; freed (stream-ordered) with the wrapper
  std::vector<int64_t> words;  // the signature at its start
  bool consumed = false;       // a backward that does not retain the graph wrote into it
};

void delete_signed_reserve(void* p) { delete static_cast<SignedReserve*>(p); }

at::Tensor sign_reserve(const at::Tensor& buffer, std::vector<int64_t> words) {
  void* data = buffer.data_ptr();
  // The maker owns the context from .context() on (and the storage after make_tensor).
  return at::for_blob(data, buffer.sizes())
      .options(buffer.options())
      .target_device(buffer.device())
      .context(new SignedReserve{buffer, std::move(words)}, &delete_signed_reserve)
      .make_tensor();
}

// The signed reserve behind `t`, or nullptr when `t` is not one (or a view that does not start
// at its beginning).
SignedReserve* signed_reserve(const at::Tensor& t) {
  if (!t.has_storage() || t.storage_offset() != 0) return nullptr;
  const c10::DataPtr& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &delete_signed_reserve || dp.get() != t.const_data_ptr()) return nullptr;
  return static_cast<SignedReserve*>(dp.get_context());
}

// Rows with length > 0: cuDNN refuses zero-length sequences.
struct Rows {
  std::vector<int> lengths;  // of the kept rows
  at::Tensor index;          // [B'] long, on the device (undefined when every row is kept)
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
  if (!r.all) r.index = to_device(idx, at::kLong, device);
  return r;
}

// The algorithm of a training forward (and so of its backward) or of an inference forward,
// docs/cudnn.md §8. TORCH_LSTM_GRAD_CUDNN_RNN_ALGO=standard (the default: TF's, which V3 never
// autotunes) always runs CUDNN_RNN_ALGO_STANDARD; =auto follows torch.nn's choice: the
// persistent small-H algorithm where every row runs all T steps (cuDNN refuses persistent
// algorithms on varying lengths), without projection, not in double, on sm >= 6.0, at hidden
// sizes where torch takes it for both the forward and the backward (LSTM, GRU <= 128; RELU,
// TANH <= 256) in training, for the forward (<= 192, <= 384) in inference.
cudnnRNNAlgo_t choose_algo(const RNNConfig& c, const std::vector<int64_t>& lengths,
                           at::ScalarType compute, bool training) {
  const char* env = std::getenv("TORCH_LSTM_GRAD_CUDNN_RNN_ALGO");
  const std::string choice = env == nullptr || *env == '\0' ? "standard" : env;
  TORCH_CHECK_VALUE(choice == "standard" || choice == "auto",
                    "TORCH_LSTM_GRAD_CUDNN_RNN_ALGO: expected \"standard\" or \"auto\", got \"",
                    choice, "\"");
  if (choice == "standard" || c.proj() || compute == at::kDouble) return CUDNN_RNN_ALGO_STANDARD;
  if (!std::all_of(lengths.begin(), lengths.end(), [&](int64_t n) { return n == c.T; })) {
    return CUDNN_RNN_ALGO_STANDARD;
  }
  if (at::cuda::getCurrentDeviceProperties()->major < 6) return CUDNN_RNN_ALGO_STANDARD;
  const bool gated = c.mode == RNNMode::kLSTM || c.mode == RNNMode::kGRU;
  const int64_t limit = gated ? (training ? 128 : 192) : (training ? 256 : 384);
  return c.H <= limit ? CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H : CUDNN_RNN_ALGO_STANDARD;
}

ReserveMaker maker_of(cudnnRNNAlgo_t algo) {
  return algo == CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H ? ReserveMaker::kCudnnPersistSmallH
                                                       : ReserveMaker::kCudnn;
}

void set_rnn_desc(ModelDesc& m, cudnnHandle_t handle, const RNNConfig& c, cudnnDataType_t t,
                  cudnnDataType_t math_prec, cudnnMathType_t math, cudnnRNNAlgo_t algo) {
  AT_CUDNN_CHECK(cudnnSetRNNDescriptor_v8(
      m.rnn.get(), algo, cudnn_mode(c.mode), CUDNN_RNN_DOUBLE_BIAS,
      c.D == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL,
      c.skip_input ? CUDNN_SKIP_INPUT : CUDNN_LINEAR_INPUT, t, math_prec, math,
      /*inputSize=*/static_cast<int32_t>(c.I), /*hiddenSize=*/static_cast<int32_t>(c.H),
      /*projSize=*/static_cast<int32_t>(c.P), /*numLayers=*/static_cast<int32_t>(c.L),
      m.dropout.get(), CUDNN_RNN_PADDED_IO_ENABLED));
  AT_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, m.rnn.get(), &m.weight_bytes));
}

// Describes the model and the kept rows to cuDNN. `forward`: the call may draw dropout (the
// backward reads its forward's masks from the reserve).
void describe(CudnnRNN& d, cudnnHandle_t handle, const RNNConfig& c, const Rows& rows,
              at::ScalarType compute, double dropout, int64_t seed, int64_t seed2,
              const at::Device& device, bool training, bool forward, cudnnRNNAlgo_t algo) {
  const cudnnDataType_t t = cudnn_type(compute);
  const cudnnDataType_t math_prec = compute == at::kDouble ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (compute == at::kHalf) math = CUDNN_TENSOR_OP_MATH;
  // TF32 follows torch's setting for RNNs (torch.backends.cudnn.allow_tf32 or the newer
  // fp32_precision of cudnn.rnn), as nn.LSTM's does.
  if (compute == at::kFloat && !at::globalContext().allowTF32CuDNN(at::Float32Op::RNN)) {
    math = CUDNN_FMA_MATH;
  }
  const double rate = training ? dropout : 0.0;
  if (rate == 0) {
    thread_local std::map<ModelKey, std::unique_ptr<ModelDesc>> cache;
    const ModelKey key{static_cast<int>(device.index()), static_cast<int>(c.mode), c.L, c.D, c.I,
                       c.H, c.P, c.skip_input, static_cast<int>(compute), static_cast<int>(math),
                       static_cast<int>(algo)};
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= kMaxCachedModels) cache.clear();
      auto m = std::make_unique<ModelDesc>();
      set_dropout(m->dropout.get(), handle, 0.0, 0, 0, device, false);
      set_rnn_desc(*m, handle, c, t, math_prec, math, algo);
      it = cache.emplace(key, std::move(m)).first;
    }
    d.model = it->second.get();
  } else {
    d.owned = std::make_unique<ModelDesc>();
    d.model = d.owned.get();
    d.dropout = set_dropout(d.model->dropout.get(), handle, rate, seed, seed2, device, forward);
    set_rnn_desc(*d.model, handle, c, t, math_prec, math, algo);
  }
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
  AT_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(
      handle, d.rnn(), training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
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
  // With every row run, cuDNN's outputs are the op's; rows it does not run (length 0) output
  // zeros and their initial states, scattered around the kept rows' (no fill or copy a call
  // otherwise: each launch's host time is a noticeable part of a small model's fwd+bwd).
  const bool run = !rows.lengths.empty() && c.T > 0;
  at::Tensor y, hy, cy;
  if (!run) {
    y = at::zeros(out_shape, opts);
    hy = h0.clone();
    cy = c.lstm() ? c0.clone() : c0;
  }
  // The reserve starts with the call's signature (cudnn_rnn_config.h), which the backward
  // checks; cuDNN's reserve follows it, 256-byte aligned. Zeroed, so that the padding after
  // the signature and whatever cuDNN leaves unwritten hold no other tensor's leftovers (any
  // values, huge ones included). What cuDNN itself writes there
  // still differs between two identical calls (its working memory), which is why opcheck's
  // AOT test leaves the reserve out on the GPU (tests/test_cudnn_rnn.py).
  const int64_t elem = static_cast<int64_t>(input.element_size());
  const int64_t header = reserve_signature_bytes(c.B, 256);
  at::Tensor reserve;  // training: the signature, then cuDNN's reserve where rows run
  if (!run && is_training) reserve = at::zeros({header / elem}, input.options());
  const cudnnRNNAlgo_t algo = choose_algo(c, lengths, compute, is_training);
  if (run) {
    cudnnHandle_t handle = at::native::getCudnnHandle();
    CudnnRNN d;
    describe(d, handle, c, rows, compute, dropout, seed, seed2, input.device(), is_training,
             /*forward=*/true, algo);
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
      reserve = at::zeros({(header + static_cast<int64_t>(d.reserve_bytes) + elem - 1) / elem},
                          input.options());
    }
    const at::Tensor dev_lengths = to_device(rows.lengths, at::kInt, input.device());
    AT_CUDNN_CHECK(cudnnRNNForward(
        handle, d.rnn(), is_training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE,
        dev_lengths.const_data_ptr<int32_t>(), d.x.get(), x.const_data_ptr(), d.y.get(),
        yk.data_ptr(), d.h.get(), hx.const_data_ptr(), hyk.data_ptr(), d.c.get(),
        c.lstm() ? cx.const_data_ptr() : nullptr, c.lstm() ? cyk.data_ptr() : nullptr,
        d.weight_bytes(), w.const_data_ptr(), d.work_bytes, work.data_ptr(),
        is_training ? d.reserve_bytes : 0,
        is_training ? static_cast<char*>(reserve.data_ptr()) + header : nullptr));
    y = rows.all ? yk : scatter_rows(yk, at::zeros(out_shape, opts), time_major ? 1 : 0, rows);
    hy = scatter_rows(hyk, h0, 1, rows);  // out of place: h0 is not written
    cy = c.lstm() ? scatter_rows(cyk, c0, 1, rows) : c0;
  }
  if (is_training) {
    std::vector<int64_t> sig = reserve_signature(c, lengths, dropout, maker_of(algo));
    // From pinned memory, non-blocking: a pageable copy would wait for the queued kernels.
    const at::Tensor words = to_device(sig, at::kLong, input.device());
    reserve.view(at::kByte).narrow(0, 0, words.numel() * 8).copy_(words.view(at::kByte));
    reserve = sign_reserve(reserve, std::move(sig));
  } else {
    reserve = at::zeros({}, input.options());
  }
  return {y.to(dtype), states_out(hy.to(dtype), c),
          c.lstm() ? states_out(cy.to(dtype), c) : at::zeros({}, input.options()), reserve,
          at::zeros({}, input.options().dtype(at::kChar))};
}

// consume: cuDNN's backward may write into reserve_space itself (the autograd backward of a
// graph that is not retained: nothing reads the reserve after it); otherwise it works on a copy,
// so the reserve can serve another backward (docs/differences.md).
Grads4 cudnn_rnn_backprop_impl(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    const at::Tensor& output, const at::Tensor& output_h, const at::Tensor& output_c,
    const at::Tensor& output_backprop, const at::Tensor& output_h_backprop,
    const at::Tensor& output_c_backprop, const at::Tensor& reserve_space,
    const at::Tensor& host_reserved, c10::string_view rnn_mode, c10::string_view input_mode,
    c10::string_view direction, double dropout, int64_t seed, int64_t seed2, int64_t num_proj,
    bool time_major, bool consume) {
  const auto [c, lengths] = check_cudnn_rnn_backprop_call(
      input, input_h, input_c, params, sequence_lengths, output, output_h, output_c,
      output_backprop, output_h_backprop, output_c_backprop, rnn_mode, input_mode, direction,
      dropout, num_proj, time_major);
  (void)host_reserved;
  // The dispatcher picks this kernel when any argument is on a CUDA device: a reserve from
  // another device (or the host) must not reach cuDNN as a pointer it cannot read.
  TORCH_CHECK_VALUE(reserve_space.device() == input.device(), "reserve_space: expected a tensor on ",
                    input.device(), " (the device of input, where its forward ran), got ",
                    reserve_space.device());
  const c10::cuda::CUDAGuard guard(input.device());
  TORCH_CHECK_VALUE(reserve_space.dim() == 1 && reserve_space.is_contiguous(),
                    "reserve_space: expected the 1-D reserve_space output of CudnnRNNV3 with "
                    "is_training=True, got shape ", shape_str(reserve_space.sizes()));
  const int64_t header = reserve_signature_bytes(c.B, 256);
  SignedReserve* signed_ = signed_reserve(reserve_space);
  at::Tensor stored;  // a reserve that is not the forward's own tensor: its device copy
  if (signed_ != nullptr) {  // the forward's signature, kept on the host
    TORCH_CHECK_VALUE(!signed_->consumed, "reserve_space: already used by a backward that did "
                      "not retain the graph (cuDNN's backward writes into its reserve); run the "
                      "forward again, or the first backward with retain_graph=True");
  } else {
    const int64_t n_words = std::min<int64_t>(
        reserve_space.numel() * reserve_space.element_size() / 8, kReserveFixedWords + c.B);
    stored = reserve_space.view(at::kByte).narrow(0, 0, n_words * 8).to(at::kCPU).view(at::kLong);
  }
  const int64_t* words = signed_ != nullptr ? signed_->words.data()
                                            : stored.const_data_ptr<int64_t>();
  const int64_t n_words = signed_ != nullptr ? static_cast<int64_t>(signed_->words.size())
                                             : stored.numel();
  // The backward runs its forward's algorithm, which the maker word records; any other word
  // (another device's kernels included) is checked as it stands.
  const bool small_h = n_words >= kReserveFixedWords &&
                       words[kReserveMakerWord] ==
                           static_cast<int64_t>(ReserveMaker::kCudnnPersistSmallH);
  const cudnnRNNAlgo_t algo =
      small_h ? CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H : CUDNN_RNN_ALGO_STANDARD;
  check_reserve_signature(words, n_words, c, lengths, dropout, maker_of(algo));
  const auto dtype = input.scalar_type();
  const auto [compute, opts, rows, h0, c0] = prepare(c, lengths, input, input_h, input_c);
  const at::Tensor dhy = states_tm(output_h_backprop, c).to(compute);
  const at::Tensor dcy = c.lstm() ? states_tm(output_c_backprop, c).to(compute) : at::Tensor();
  // As in the forward: zeros and copies only for rows cuDNN does not run.
  const bool run = !rows.lengths.empty() && c.T > 0;
  at::Tensor dx, dhx, dcx;
  if (!run) {
    dx = at::zeros(input.sizes(), opts);
    dhx = dhy.clone();
    dcx = c.lstm() ? dcy.clone() : at::Tensor();
  }
  at::Tensor dw = at::zeros({params.numel()}, opts);
  if (run) {
    cudnnHandle_t handle = at::native::getCudnnHandle();
    CudnnRNN d;
    describe(d, handle, c, rows, compute, dropout, seed, seed2, input.device(), true,
             /*forward=*/false, algo);
    const at::Tensor w = params.to(compute).contiguous();
    verify_weight_layout(handle, d, c, compute, w);
    TORCH_CHECK_VALUE(reserve_space.numel() * reserve_space.element_size() >=
                          header + static_cast<int64_t>(d.reserve_bytes),
                      "reserve_space: expected the reserve_space output of CudnnRNNV3 with "
                      "is_training=True and these attributes and shapes (at least ",
                      header + static_cast<int64_t>(d.reserve_bytes), " bytes), got shape ",
                      shape_str(reserve_space.sizes()));
    // cuDNN's backward writes into the reserve: unless the caller gave it up, work on a copy
    // so a retained graph can run backward again (docs/differences.md).
    at::Tensor reserve = consume ? reserve_space : reserve_space.clone();
    if (consume && signed_ != nullptr) signed_->consumed = true;
    const at::Tensor x = keep_seq(input.to(compute), c, rows);
    const at::Tensor y = keep_seq(output.to(compute), c, rows);
    const at::Tensor dy = keep_seq(output_backprop.to(compute), c, rows);
    const at::Tensor hx = keep_state(h0, rows), dhyk = keep_state(dhy, rows);
    const at::Tensor cx = c.lstm() ? keep_state(c0, rows) : at::Tensor();
    const at::Tensor dcyk = c.lstm() ? keep_state(dcy, rows) : at::Tensor();
    // cuDNN defines the padding fill of y, not of dx: rows shorter than T get zeros there from
    // here (the CPU kernels write them).
    const bool padded = std::any_of(rows.lengths.begin(), rows.lengths.end(),
                                    [&](int64_t n) { return n < c.T; });
    at::Tensor dxk = padded ? at::zeros_like(x) : at::empty_like(x), dhxk = at::empty_like(hx);
    at::Tensor dcxk = c.lstm() ? at::empty_like(cx) : at::Tensor();
    at::Tensor work = at::empty({static_cast<int64_t>(d.work_bytes)}, opts.dtype(at::kByte));
    const at::Tensor dev_lengths = to_device(rows.lengths, at::kInt, input.device());
    AT_CUDNN_CHECK(cudnnRNNBackwardData_v8(
        handle, d.rnn(), dev_lengths.const_data_ptr<int32_t>(), d.y.get(), y.const_data_ptr(),
        dy.const_data_ptr(), d.x.get(), dxk.data_ptr(), d.h.get(), hx.const_data_ptr(),
        dhyk.const_data_ptr(), dhxk.data_ptr(), d.c.get(),
        c.lstm() ? cx.const_data_ptr() : nullptr, c.lstm() ? dcyk.const_data_ptr() : nullptr,
        c.lstm() ? dcxk.data_ptr() : nullptr, d.weight_bytes(), w.const_data_ptr(), d.work_bytes,
        work.data_ptr(), d.reserve_bytes, static_cast<char*>(reserve.data_ptr()) + header));
    AT_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
        handle, d.rnn(), CUDNN_WGRAD_MODE_ADD, dev_lengths.const_data_ptr<int32_t>(),
        d.x.get(), x.const_data_ptr(), d.h.get(), hx.const_data_ptr(), d.y.get(),
        y.const_data_ptr(), d.weight_bytes(), dw.data_ptr(), d.work_bytes, work.data_ptr(),
        d.reserve_bytes, static_cast<char*>(reserve.data_ptr()) + header));
    dx = rows.all ? dxk
                  : scatter_rows(dxk, at::zeros(input.sizes(), opts), time_major ? 1 : 0, rows);
    dhx = scatter_rows(dhxk, dhy, 1, rows);  // out of place: dhy is not written
    if (c.lstm()) dcx = scatter_rows(dcxk, dcy, 1, rows);
  }
  return {dx.to(dtype), states_out(dhx.to(dtype), c),
          c.lstm() ? states_out(dcx.to(dtype), c) : at::zeros({}, input.options()), dw.to(dtype)};
}

// CudnnRNNBackpropV3 (kConsume false: cuDNN writes into a copy of the reserve) and
// _cudnn_rnn_backprop_consuming (true: into the reserve itself, marked used), one signature.
template <bool kConsume>
Grads4 cudnn_rnn_backprop_cuda(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    const at::Tensor& output, const at::Tensor& output_h, const at::Tensor& output_c,
    const at::Tensor& output_backprop, const at::Tensor& output_h_backprop,
    const at::Tensor& output_c_backprop, const at::Tensor& reserve_space,
    const at::Tensor& host_reserved, c10::string_view rnn_mode, c10::string_view input_mode,
    c10::string_view direction, double dropout, int64_t seed, int64_t seed2, int64_t num_proj,
    bool time_major) {
  return cudnn_rnn_backprop_impl(input, input_h, input_c, params, sequence_lengths, output,
                                 output_h, output_c, output_backprop, output_h_backprop,
                                 output_c_backprop, reserve_space, host_reserved, rnn_mode,
                                 input_mode, direction, dropout, seed, seed2, num_proj,
                                 time_major, kConsume);
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CUDA, m) {
  m.impl("cudnn_rnn", &cudnn_rnn_cuda);
  m.impl("cudnn_rnn_backprop", &cudnn_rnn_backprop_cuda<false>);
  m.impl("_cudnn_rnn_backprop_consuming", &cudnn_rnn_backprop_cuda<true>);
}

}  // namespace torch_lstm_grad
