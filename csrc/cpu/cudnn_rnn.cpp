// CPU kernels of TF's CudnnRNN family (CudnnRNNV3 / CudnnRNNBackpropV3), with cuDNN's math
// (docs/tf-semantics.md §6.4–6.8): lstm, gru (linear-before-reset), rnn_tanh, rnn_relu; layers,
// directions, projection, skip_input, per-row sequence lengths, dropout between layers.
//
// Scheduling: batch rows are sorted by length (longest first, stable), so the rows still running
// at step t are a prefix and each step's recurrent GEMM covers only those rows, as a packed
// sequence would. The reverse direction runs forward over each row's valid steps reversed
// (an index_select, the same one undoes it). Finished rows keep their state and emit zeros, so a
// zero-length row's final state is its initial state and its gradient flows there
// (docs/differences.md).
//
// reserve_space (opaque, CPU-specific) starts with the call's signature (cudnn_rnn_config.h:
// model, shapes, dropout, lengths, which the backward checks), then holds, per pseudo-layer, the
// post-activation gates, the cell states, GRU's R_h·h + bR_h or the pre-projection h, and the
// direction's outputs, plus the dropout masks; all in the compute type (float for half/bf16),
// reinterpreted as dtype T.
//
// The products of the backward whose K is a long sum (the weight gradients over T·B rows, dx and
// dh over the G·H gate columns) add it pairwise where they are small enough (pairwise_gemm.h):
// on TF's test shapes as accurate as TF's step-by-step composite, or more.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "../bool_dispatch.h"
#include "../cudnn_rnn_config.h"
#include "../packed_weights.h"
#include "activations.h"
#include "cell_avx512.h"
#include "gemm.h"
#include "pairwise_gemm.h"
#include "workspace.h"

namespace torch_lstm_grad {
namespace {

using Outputs5 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Grads4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// ---------------------------------------------------------------------------------------------
// Batch schedule and layouts.

struct Schedule {
  std::vector<int64_t> active;  // [T]: rows (a prefix in sorted order) with length > t
  at::Tensor perm;              // [B]: sorted position -> original row
  at::Tensor inv_perm;          // [B]: original row -> sorted position
  at::Tensor rev;               // [T*B]: flat (t, b) -> (len_b - 1 - t, b) for t < len_b, else itself
  bool sorted;                  // the rows are already in order: perm is the identity
};

Schedule make_schedule(const std::vector<int64_t>& lengths, int64_t T) {
  const int64_t B = static_cast<int64_t>(lengths.size());
  std::vector<int64_t> order(B);
  for (int64_t b = 0; b < B; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  Schedule s;
  s.active.assign(T, 0);
  std::vector<int64_t> inv(B), rev(T * B);
  for (int64_t p = 0; p < B; ++p) {
    const int64_t len = lengths[order[p]];
    inv[order[p]] = p;
    for (int64_t t = 0; t < T; ++t) {
      if (t < len) ++s.active[t];
      rev[t * B + p] = t < len ? (len - 1 - t) * B + p : t * B + p;
    }
  }
  auto as_tensor = [](const std::vector<int64_t>& v) {
    return at::tensor(at::ArrayRef<int64_t>(v), at::kLong);
  };
  s.sorted = std::is_sorted(order.begin(), order.end());
  s.perm = as_tensor(order);
  s.inv_perm = as_tensor(inv);
  s.rev = as_tensor(rev);
  return s;
}

struct LayerWeights {
  at::Tensor W;   // [G·H, in] (undefined for layer 0 under skip_input)
  at::Tensor R;   // [G·H, P]
  at::Tensor Wp;  // [P, H] (undefined without projection)
  at::Tensor bW;  // [G·H]
  at::Tensor bR;  // [G·H]
};

std::vector<LayerWeights> weight_views(const RNNConfig& c, const at::Tensor& params) {
  int64_t total = 0;
  std::vector<LayerWeights> out;
  for (const auto& p : params_layout(c, &total)) {
    const int64_t GH = c.G * c.H;
    LayerWeights w;
    if (p.w >= 0) w.W = params.narrow(0, p.w, GH * p.in).view({GH, p.in});
    w.R = params.narrow(0, p.r, GH * c.P).view({GH, c.P});
    if (p.proj >= 0) w.Wp = params.narrow(0, p.proj, c.P * c.H).view({c.P, c.H});
    w.bW = params.narrow(0, p.bw, GH);
    w.bR = params.narrow(0, p.br, GH);
    out.push_back(w);
  }
  return out;
}

// Views of one pseudo-layer's saved activations, all [T, B, ·] in sorted, direction-normalised
// order; padded positions are zero.
struct DirState {
  at::Tensor acts;   // [T, B, G·H] post-activation gates (lstm i,f,g,o; gru r,z,n; rnn h)
  at::Tensor cells;  // [T, B, H] lstm cell states
  at::Tensor extra;  // [T, B, H] gru: R_h·h + bR_h; lstm with projection: h before projection
  at::Tensor hseq;   // [T, B, P] outputs of this direction
};

struct Reserve {
  at::Tensor buffer;  // 1-D, compute type: the signature's words, then the views below
  std::vector<DirState> dirs;
  std::vector<at::Tensor> masks;  // per layer: [T, B, D·P] scaled keep-masks (layer 0: undefined)
};

bool has_extra(const RNNConfig& c) { return c.mode == RNNMode::kGRU || c.proj(); }

// The signature is padded (with zeros) to a cache line, so that the regions start on one: the
// activations' rows are the destination of the input projection (off a line, its stores and
// the steps' loads would split lines).
constexpr int64_t kReserveHeaderAlign = 64;

// Carves the reserve out of `buffer` (after the signature), or allocates it when `buffer` is
// undefined. Sizes in checked arithmetic: absurd shapes raise instead of wrapping (the params
// check bounds G·H and P; T·B·width can still overflow).
Reserve make_reserve(const RNNConfig& c, bool with_masks, at::Tensor buffer,
                     const at::TensorOptions& opts) {
  const int64_t T = c.T, B = c.B;
  const int64_t width = c.G * c.H + (c.lstm() ? c.H : 0) + (has_extra(c) ? c.H : 0) + c.P;
  const char* what = "T * B * (the reserve's floats per row and step)";
  const int64_t per_dir = checked_mul(T * B, width, "input", what);
  const int64_t masks =
      with_masks ? checked_mul(checked_mul(T * B, c.L - 1, "input", what), c.D * c.P, "input", what)
                 : 0;
  const int64_t header = reserve_signature_bytes(B, kReserveHeaderAlign) /
                         static_cast<int64_t>(opts.dtype().itemsize());
  const int64_t total = checked_add(
      checked_add(checked_mul(c.L * c.D, per_dir, "input", what), masks, "input", what), header,
      "input", what);
  if (!buffer.defined()) {
    buffer = at::empty({total}, opts);
  } else {
    TORCH_CHECK_VALUE(buffer.numel() == total, "reserve_space: expected the reserve_space of a "
                      "CudnnRNNV3 forward run with is_training=True and these attributes and "
                      "shapes (", total, " elements of its compute type), got ", buffer.numel());
  }
  Reserve r{buffer, {}, {}};
  int64_t off = header;
  auto take = [&](int64_t width) {
    at::Tensor v = buffer.narrow(0, off, T * B * width).view({T, B, width});
    off += T * B * width;
    return v;
  };
  for (int64_t k = 0; k < c.L * c.D; ++k) {
    DirState d;
    d.acts = take(c.G * c.H);
    if (c.lstm()) d.cells = take(c.H);
    if (has_extra(c)) d.extra = take(c.H);
    d.hseq = take(c.P);
    r.dirs.push_back(d);
  }
  r.masks.resize(c.L);
  if (with_masks) {
    for (int64_t l = 1; l < c.L; ++l) r.masks[l] = take(c.D * c.P);
  }
  return r;
}

// torch's CPU generator is a Mersenne Twister that keeps only the low 32 bits of its seed: TF's
// 64-bit seed given as it is would leave seed2 alone choosing the masks, so pairs that differ
// only in seed (TF's graph-level seed) would drop the same units. splitmix64's finalizer mixes
// all 64 bits first, and the two halves are folded into the 32 that are kept.
uint64_t dropout_generator_seed(uint64_t key) {
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ULL;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebULL;
  key ^= key >> 31;
  return (key ^ (key >> 32)) & 0xffffffffULL;
}

// Masks come from torch's CPU generator: a cached generator per seed pair (TF's 64-bit seed)
// that advances from call to call, as TF's per-kernel cuDNN state does (the last
// kMaxSeededDropoutStates pairs, as on the GPU); seed = seed2 = 0 means "unseeded" and draws
// from torch's default generator.
at::Generator dropout_generator(int64_t seed, int64_t seed2) {
  if (seed == 0 && seed2 == 0) return at::detail::getDefaultCPUGenerator();
  const uint64_t key = tf_dropout_seed(seed, seed2);
  static std::mutex mutex;
  static MostRecentlyUsed<uint64_t, at::Generator> generators(kMaxSeededDropoutStates);
  std::lock_guard<std::mutex> lock(mutex);
  return generators.get(key, [&] {
    return at::detail::createCPUGenerator(dropout_generator_seed(key));
  });
}

// ---------------------------------------------------------------------------------------------
// One row of one step (H units), per mode. Branch-free bodies over restrict pointers, so each
// loop vectorises; multiversioned like the block ops' loops (activations.h).

// Each forward row reads `p`, the step's products (W·x, plus R·h for lstm) and `bias` (bW, plus
// bR for lstm) and writes the activations to `a`: the bias joins here rather than in a pass of
// its own over the whole sequence. `a` may be `p` (a training forward writes the activations
// over their sums): each element is read before the same element is written.
// lstm, cuDNN gate order i, f, g, o; c: the cell state, updated; h: where o·tanh(c) goes.
// Units [j0, j1) of the row (the fused small-batch steps give each thread its units).
// Not lstm_block::lstm_cell_forward, though cuDNN's cell is TF's with forget_bias 0 and no
// peepholes: TF's sums the state as i·ci + f·c_prev, this one as f·c + i·g, and the FMA clones
// (AVX2, AVX-512) fuse the first product of each, so the shared cell would change the bits in
// float32 and float64. It was also slower on AVX2 (paired, about a tenth of the inference
// forward): GCC vectorises its loop with more masked blends. (AVX-512 float32 runs
// cell_avx512.h's row.)
template <typename acc_t>
struct LstmForwardRowKernel {
  TLG_INLINE static void body(int64_t H, int64_t j0, int64_t j1, const acc_t* p, const acc_t* __restrict bias, acc_t* a, acc_t* __restrict c, acc_t* __restrict cells, acc_t* __restrict h) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = j0; j < j1; ++j) {
      const acc_t i = cpu::sigmoid(p[j] + bias[j]), f = cpu::sigmoid(p[H + j] + bias[H + j]);
      const acc_t g = cpu::tanh(p[2 * H + j] + bias[2 * H + j]);
      const acc_t o = cpu::sigmoid(p[3 * H + j] + bias[3 * H + j]);
      const acc_t cn = f * c[j] + i * g;
      a[j] = i;
      a[H + j] = f;
      a[2 * H + j] = g;
      a[3 * H + j] = o;
      cells[j] = cn;
      c[j] = cn;
      h[j] = o * cpu::tanh(cn);
    }
  }
};

// lstm_forward_row: LstmForwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t>
void lstm_forward_row(int64_t H, int64_t j0, int64_t j1, const acc_t* p, const acc_t* __restrict bias, acc_t* a, acc_t* __restrict c, acc_t* __restrict cells, acc_t* __restrict h) {
  cpu::dispatch<LstmForwardRowKernel<acc_t>>(H, j0, j1, p, bias, a, c, cells, h);
}

// gru, gates r, z, n: rec = R·h + bR; the reset gate scales rec_n (linear before reset).
// h: the state, updated; rec_n saved for the backward. Not gru_seq::GruCell::after, though
// that is this cell (Keras' reset_after=True): Keras' blend z·h + (1 − z)·hh and this one's
// (1 − z)·n + z·h round differently in the FMA clones, and GCC vectorises the shared loop with
// more masked blends, slightly slower (paired).
template <typename acc_t>
struct GruForwardRowKernel {
  TLG_INLINE static void body(int64_t H, const acc_t* p, const acc_t* __restrict bias, acc_t* a, const acc_t* __restrict rec, acc_t* __restrict h, acc_t* __restrict rec_n, acc_t* __restrict out) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = 0; j < H; ++j) {
      const acc_t r = cpu::sigmoid((p[j] + bias[j]) + rec[j]);
      const acc_t z = cpu::sigmoid((p[H + j] + bias[H + j]) + rec[H + j]);
      const acc_t n = cpu::tanh((p[2 * H + j] + bias[2 * H + j]) + r * rec[2 * H + j]);
      const acc_t hn = (1 - z) * n + z * h[j];
      a[j] = r;
      a[H + j] = z;
      a[2 * H + j] = n;
      rec_n[j] = rec[2 * H + j];
      out[j] = hn;
      h[j] = hn;
    }
  }
};

// gru_forward_row: GruForwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t>
void gru_forward_row(int64_t H, const acc_t* p, const acc_t* __restrict bias, acc_t* a, const acc_t* __restrict rec, acc_t* __restrict h, acc_t* __restrict rec_n, acc_t* __restrict out) {
  cpu::dispatch<GruForwardRowKernel<acc_t>>(H, p, bias, a, rec, h, rec_n, out);
}

template <typename acc_t, bool kRelu>
struct RnnForwardRowKernel {
  TLG_INLINE static void body(int64_t H, const acc_t* p, const acc_t* __restrict bias, acc_t* a, const acc_t* __restrict rec, acc_t* __restrict h, acc_t* __restrict out) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = 0; j < H; ++j) {
      const acc_t z = (p[j] + bias[j]) + rec[j];
      const acc_t v = kRelu ? (z > 0 ? z : acc_t(0)) : cpu::tanh(z);
      a[j] = v;
      out[j] = v;
      h[j] = v;
    }
  }
};

// rnn_forward_row: RnnForwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t, bool kRelu>
void rnn_forward_row(int64_t H, const acc_t* p, const acc_t* __restrict bias, acc_t* a, const acc_t* __restrict rec, acc_t* __restrict h, acc_t* __restrict out) {
  cpu::dispatch<RnnForwardRowKernel<acc_t, kRelu>>(H, p, bias, a, rec, h, out);
}

// Backward rows: d_pre = gradient of the gate pre-activations (the W and R paths alike, except
// GRU's n gate, whose R path, d_rec, carries the reset gate).
// lstm: not lstm_block::lstm_cell_backward, whose products associate otherwise (there
// (1 − co²)·dh·o + dcs_in and i(1 − i)·dcs·ci, here dh·o·(1 − co²) + dc and dcc·g·i·(1 − i),
// co recomputed from the state): other gradient bits on every instruction set, at the same
// time (paired). Units [j0, j1) of the row, as the forward's.
template <typename acc_t>
struct LstmBackwardRowKernel {
  TLG_INLINE static void body(int64_t H, int64_t j0, int64_t j1, const acc_t* __restrict a, const acc_t* __restrict cells, const acc_t* __restrict c_before, const acc_t* __restrict dh, acc_t* __restrict dc, acc_t* __restrict dp) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = j0; j < j1; ++j) {
      const acc_t i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j];
      const acc_t co = cpu::tanh(cells[j]);
      const acc_t dcc = dc[j] + dh[j] * o * (1 - co * co);
      dp[j] = dcc * g * i * (1 - i);
      dp[H + j] = dcc * c_before[j] * f * (1 - f);
      dp[2 * H + j] = dcc * i * (1 - g * g);
      dp[3 * H + j] = dh[j] * co * o * (1 - o);
      dc[j] = dcc * f;
    }
  }
};

// lstm_backward_row: LstmBackwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t>
void lstm_backward_row(int64_t H, int64_t j0, int64_t j1, const acc_t* __restrict a, const acc_t* __restrict cells, const acc_t* __restrict c_before, const acc_t* __restrict dh, acc_t* __restrict dc, acc_t* __restrict dp) {
  cpu::dispatch<LstmBackwardRowKernel<acc_t>>(H, j0, j1, a, cells, c_before, dh, dc, dp);
}

// gru: not GruCell::gate_grads, whose update-gate gradient is z(1 − z)·(dh·h − dh·hh) where
// this is dh·(h − n)·z(1 − z), and whose reset-gate products associate otherwise: other bits
// on every instruction set, at the same time within noise (paired).
template <typename acc_t>
struct GruBackwardRowKernel {
  TLG_INLINE static void body(int64_t H, const acc_t* __restrict a, const acc_t* __restrict rec_n, const acc_t* __restrict h_before, acc_t* __restrict dh, acc_t* __restrict dp, acc_t* __restrict dr) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = 0; j < H; ++j) {
      const acc_t r = a[j], z = a[H + j], n = a[2 * H + j], dhv = dh[j];
      const acc_t da_n = dhv * (1 - z) * (1 - n * n);
      const acc_t dpr = da_n * rec_n[j] * r * (1 - r);
      const acc_t dpz = dhv * (h_before[j] - n) * z * (1 - z);
      dp[j] = dpr;
      dp[H + j] = dpz;
      dp[2 * H + j] = da_n;
      dr[j] = dpr;
      dr[H + j] = dpz;
      dr[2 * H + j] = da_n * r;
      dh[j] = dhv * z;  // the direct path; the step's GEMM adds R's
    }
  }
};

// gru_backward_row: GruBackwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t>
void gru_backward_row(int64_t H, const acc_t* __restrict a, const acc_t* __restrict rec_n, const acc_t* __restrict h_before, acc_t* __restrict dh, acc_t* __restrict dp, acc_t* __restrict dr) {
  cpu::dispatch<GruBackwardRowKernel<acc_t>>(H, a, rec_n, h_before, dh, dp, dr);
}

template <typename acc_t, bool kRelu>
struct RnnBackwardRowKernel {
  TLG_INLINE static void body(int64_t H, const acc_t* __restrict a, const acc_t* __restrict dh, acc_t* __restrict dp) {
    TLG_NO_ALIAS_LOOP
    for (int64_t j = 0; j < H; ++j) {
      const acc_t v = a[j];
      dp[j] = kRelu ? (v > 0 ? dh[j] : acc_t(0)) : dh[j] * (1 - v * v);
    }
  }
};

// rnn_backward_row: RnnBackwardRowKernel::body compiled for the instruction set cpu::isa() chose.
template <typename acc_t, bool kRelu>
void rnn_backward_row(int64_t H, const acc_t* __restrict a, const acc_t* __restrict dh, acc_t* __restrict dp) {
  cpu::dispatch<RnnBackwardRowKernel<acc_t, kRelu>>(H, a, dh, dp);
}

// The activations of an inference forward (is_training=False: no backward will read them):
// hseq for every step (the layer's output), acts, cells and extra one step deep, rewritten by
// every step.
Reserve make_inference_reserve(const RNNConfig& c, const at::TensorOptions& opts) {
  Reserve r{at::Tensor(), {}, std::vector<at::Tensor>(c.L)};
  for (int64_t k = 0; k < c.L * c.D; ++k) {
    DirState d;
    d.acts = at::empty({1, c.B, c.G * c.H}, opts);
    if (c.lstm()) d.cells = at::empty({1, c.B, c.H}, opts);
    if (has_extra(c)) d.extra = at::empty({1, c.B, c.H}, opts);
    d.hseq = at::empty({c.T, c.B, c.P}, opts);
    r.dirs.push_back(d);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// One direction of one layer, forward. h [B, P] and cst [B, H] hold the initial state and are
// updated in place to the final state; X is the normalised layer input [T·B, in]. `keep`: r
// holds every step's activations (training), else one step's (make_inference_reserve).
// `packed`, `packed_x`: pack_recurrent_weight(Rᵀ, G) and (Wᵀ, G), or undefined.
//
// LSTM without a projection, float32: all steps run in one parallel region in which a thread
// multiplies its units' four gate columns (at most kMaxPanelRows rows where the panels run: the
// packed Rᵀ's panels, csrc/cpu/small_batch.h; more rows: brgemm's blocks of Rᵀ) and applies the
// cell to those units, then waits at the step's barrier. A step reads the previous step's h from
// hseq (another thread may be writing this step's), and each row's final h goes to the state
// after the row finishes.

template <typename acc_t>
void forward_direction(const RNNConfig& c, const Schedule& s, const at::Tensor& X,
                       const LayerWeights& w, at::Tensor& h, at::Tensor& cst, DirState& r,
                       bool keep, const at::Tensor& packed, const at::Tensor& packed_x) {
  const int64_t T = c.T, B = c.B, H = c.H, P = c.P, G = c.G, GH = G * H;
  // LSTM adds R·h onto the step's products and bW + bR in its rows; GRU keeps R·h + bR apart
  // (reset gate), as do the plain RNNs.
  const bool separate_rec = c.mode != RNNMode::kLSTM;
  const at::Tensor bias = (separate_rec ? w.bW : w.bW + w.bR).contiguous();
  // The products of every step, [T, B, GH]: W·x (skip_input: x for each gate), then R·h. In
  // training they are summed in the activations' own rows of the reserve, which each step's row
  // function overwrites with its activations: no buffer of their own, and a step's activations
  // go to lines already in cache: faster than oneDNN's product into a buffer of its own, with
  // the same numbers (measured: docs/performance.md).
  // Inference: in the thread's kept workspace (workspace.h: no page faults a call).
  const at::Tensor pre = keep ? r.acts : cpu::inference_workspace({T, B, GH}, X.options());
  {
    at::Tensor sums = pre.view({T * B, GH});
    if (w.W.defined()) {
      cpu::gate_matmul_out(sums, X, w.W.t(), G, packed_x);
    } else {
      sums.view({T * B, G, H}).copy_(X.reshape({T * B, 1, H}).expand({T * B, G, H}));
    }
  }
  at::Tensor rec = separate_rec ? at::empty({B, GH}, X.options()) : at::Tensor();
  const bool lstm_cells = c.lstm() && !c.proj();  // a step's cells need only their own units
  const cpu::RecurrentGemm recurrent(w.R.t(), B, T, /*allow_blocks=*/true,
                                     /*panel_gates=*/lstm_cells ? G : 0, packed);
  const bool fused = recurrent.panels() && std::is_same_v<acc_t, float>;
  // Larger batches fuse the same way on the blocks form (brgemm, per gate block of the units).
  const bool fused_blocks = lstm_cells && !fused && recurrent.blocks() && !recurrent.bf16() &&
                            std::is_same_v<acc_t, float>;
  // The projection h = Wp · h̃ sums over H: one product's rounding puts output_h further from
  // float64 than TF on TF's "medium" projection case (B = 8, H = 128).
  const bool pairwise_projection = c.proj() && B * H * P <= cpu::kPairwiseMaxStepMacs;
  // Steps sliced by pointer arithmetic (a Tensor per slice would cost more than a small step's
  // cells); Tensors only for the products' operands. Without `keep` the activations of every
  // step share one row.
  const int64_t per_step = keep ? 1 : 0;
  // The LSTM rows: float32 on AVX-512 intrinsics (cell_avx512.h, the same numbers), which
  // skip the activations where nothing keeps them.
  auto lstm_row = &lstm_forward_row<acc_t>;
  if constexpr (std::is_same_v<acc_t, float>) {
#if defined(TLG_HAVE_AVX512_CELL)
    if (cpu::avx512_cell_available()) {
      lstm_row = dispatch_bools(
          [](auto kStoreActs) { return &cpu::cudnn_lstm_row<kStoreActs>; }, keep);
    }
#endif
  }
  const acc_t* bp = bias.const_data_ptr<acc_t>();
  const acc_t* rc = separate_rec ? rec.const_data_ptr<acc_t>() : nullptr;
  acc_t* hp = h.data_ptr<acc_t>();
  acc_t* cp = c.lstm() ? cst.data_ptr<acc_t>() : nullptr;
  acc_t* const pre_p = pre.data_ptr<acc_t>();
  acc_t* const acts_p = r.acts.data_ptr<acc_t>();
  acc_t* const cells_p = c.lstm() ? r.cells.data_ptr<acc_t>() : nullptr;
  acc_t* const extra_p = has_extra(c) ? r.extra.data_ptr<acc_t>() : nullptr;
  acc_t* const hseq_p = r.hseq.data_ptr<acc_t>();
  if ((fused || fused_blocks) && T > 0) {
    // All steps in one parallel region, each thread's work a block of rows and units of a
    // step. By units (cpu::for_steps_column_blocks: a barrier after each step's cells), a
    // thread's units of a row that finished at the step before go to the final state after
    // that barrier (at step 0 every thread still reads the initial h there). With equal
    // lengths on the panels, by rows where they fit a core's L2 (gemm.h's panel_row_blocks;
    // with varied lengths the threads of the shorter rows would idle).
    if constexpr (std::is_same_v<acc_t, float>) {
      auto block = [&](int64_t t, int64_t b0, int64_t b1, int64_t j0, int64_t units) {
        const int64_t n = std::min(b1, s.active[t]);  // the block's rows [b0, n) still run
        if (t > 0) {
          const float* hs_before = hseq_p + (t - 1) * B * P;
          for (int64_t b = std::max(b0, n); b < std::min(b1, s.active[t - 1]); ++b) {
            std::copy(hs_before + b * P + j0, hs_before + b * P + j0 + units, hp + b * P + j0);
          }
        }
        if (n <= b0) return;
        const float* h_before = (t == 0 ? hp : hseq_p + (t - 1) * B * P) + b0 * P;
        float* pt = pre_p + t * B * GH;
        float* a = acts_p + per_step * t * B * GH;
        float* cells = cells_p + per_step * t * B * H;
        float* hs = hseq_p + t * B * P;
        recurrent.units(n - b0, G, h_before, P, pt + b0 * GH, GH, j0, units,
                        /*accumulate=*/true);
        for (int64_t b = b0; b < n; ++b) {
          lstm_row(H, j0, j0 + units, pt + b * GH, bp, a + b * GH, cp + b * H, cells + b * H,
                   hs + b * P);
        }
      };
      const int64_t row_blocks =
          fused && s.active[T - 1] == B ? cpu::panel_row_blocks(B, P, H, G) : 0;
      if (row_blocks > 0) {
        cpu::for_steps_row_blocks(T, B, row_blocks, [&](int64_t t, int64_t, int64_t b0,
                                                        int64_t b1) { block(t, b0, b1, 0, H); });
      } else {
        cpu::for_steps_column_blocks(T, H, s.active[0] * P * GH, [&](int64_t t, int64_t j0,
                                                                     int64_t units) {
          block(t, 0, B, j0, units);
        });
      }
      const float* hs_last = hseq_p + (T - 1) * B * P;
      std::copy(hs_last, hs_last + s.active[T - 1] * P, hp);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = s.active[t];
    acc_t* a = acts_p + per_step * t * B * GH;
    acc_t* cells = c.lstm() ? cells_p + per_step * t * B * H : nullptr;
    acc_t* extra = has_extra(c) ? extra_p + per_step * t * B * H : nullptr;
    acc_t* hs = hseq_p + t * B * P;
    if (n > 0 && !(fused || fused_blocks)) {
      const at::Tensor h_n = n == B ? h : h.narrow(0, 0, n);
      if (separate_rec) {
        at::Tensor rec_n = rec.narrow(0, 0, n);
        rec_n.copy_(w.bR.expand({n, GH}));
        recurrent(rec_n, h_n, /*accumulate=*/true);
      } else {
        at::Tensor p_n = pre[t].narrow(0, 0, n);
        recurrent(p_n, h_n, /*accumulate=*/true);
      }
      const acc_t* p = pre_p + t * B * GH;
      at::parallel_for(0, n, cpu::row_grain(GH), [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const acc_t* pb = p + b * GH;
          acc_t* ab = a + b * GH;
          switch (c.mode) {
            case RNNMode::kLSTM:
              lstm_row(H, 0, H, pb, bp, ab, cp + b * H, cells + b * H,
                       c.proj() ? extra + b * H : hs + b * P);
              if (!c.proj()) std::copy(hs + b * P, hs + (b + 1) * P, hp + b * P);
              break;
            case RNNMode::kGRU:
              gru_forward_row(H, pb, bp, ab, rc + b * GH, hp + b * H, extra + b * H, hs + b * H);
              break;
            case RNNMode::kTanh:
              rnn_forward_row<acc_t, false>(H, pb, bp, ab, rc + b * GH, hp + b * H, hs + b * H);
              break;
            case RNNMode::kRelu:
              rnn_forward_row<acc_t, true>(H, pb, bp, ab, rc + b * GH, hp + b * H, hs + b * H);
              break;
          }
        }
      });
      if (c.proj()) {
        at::Tensor hs_n = r.hseq[t].narrow(0, 0, n);
        const at::Tensor h_tilde = r.extra[per_step * t].narrow(0, 0, n);
        if (pairwise_projection) {  // as dh = dpre · R in the backward
          cpu::pairwise_sum_gemm_out(hs_n, h_tilde, w.Wp.t(), cpu::kPairwiseStepChunk);
        } else {
          at::mm_out(hs_n, h_tilde, w.Wp.t());
        }
        h.narrow(0, 0, n).copy_(hs_n);
      }
    }
    // Finished rows: no gates, zero outputs (cuDNN's paddingFill = 0).
    if (n < B) {
      for (const at::Tensor* v : {&r.acts, &r.cells, &r.extra, &r.hseq}) {
        if (v->defined() && (keep || v == &r.hseq)) (*v)[t].narrow(0, n, B - n).zero_();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// One direction of one layer, backward. dY [T, B, P]: gradient reaching this direction's outputs;
// dh [B, P] / dc [B, H]: gradient of the final state in, of the initial state out. Writes this
// pseudo-layer's regions of dparams and returns the layer-input gradient [T·B, in], a new tensor.

template <typename acc_t>
at::Tensor backward_direction(const RNNConfig& c, const Schedule& s, const at::Tensor& X,
                              const LayerWeights& w, const at::Tensor& h0, const at::Tensor& c0,
                              const DirState& r, const at::Tensor& dY, at::Tensor& dh,
                              at::Tensor& dc, LayerWeights& g) {
  const int64_t T = c.T, B = c.B, H = c.H, P = c.P, G = c.G, GH = G * H;
  const auto opts = X.options();
  if (T == 0) return at::empty({0, X.size(1)}, opts);  // the parameter grads stay zero
  // Written for the running rows of every step; the finished rows are zeroed step by step.
  at::Tensor d_pre = at::empty({T, B, GH}, opts);
  at::Tensor d_rec = c.mode == RNNMode::kGRU ? at::empty({T, B, GH}, opts) : d_pre;
  at::Tensor dhs = c.proj() ? at::zeros({T, B, P}, opts) : at::Tensor();
  at::Tensor dht = c.proj() ? at::empty({B, H}, opts) : at::Tensor();
  // dh = dpre · R sums over the G·H gate columns: in one brgemm call its rounding is several
  // ulps where TF's is one, on TF's "medium" LSTM case (B = 8, G·H = 512).
  const bool pairwise_steps = B * GH * P <= cpu::kPairwiseMaxStepMacs;
  // Otherwise one product a step; small batches on R's panels (one gate: R's P output columns
  // as the units), read in sequential runs as BlockLSTM's backward reads Whᵀ's (the same sums
  // as brgemm's, so the same gradients): faster than brgemm's blocks of R (measured:
  // docs/performance.md).
  const bool steps_product = c.mode == RNNMode::kGRU || !pairwise_steps;
  const cpu::RecurrentGemm recurrent(w.R, B, T, /*allow_blocks=*/true,
                                     /*panel_gates=*/steps_product ? 1 : 0);
  // Steps sliced by pointer arithmetic, as in forward_direction.
  const acc_t* const acts_p = r.acts.const_data_ptr<acc_t>();
  const acc_t* const cells_p = c.lstm() ? r.cells.const_data_ptr<acc_t>() : nullptr;
  const acc_t* const extra_p = c.mode == RNNMode::kGRU ? r.extra.const_data_ptr<acc_t>() : nullptr;
  const acc_t* const hseq_p = r.hseq.const_data_ptr<acc_t>();
  const acc_t* const dy_p = dY.const_data_ptr<acc_t>();
  acc_t* const d_pre_p = d_pre.data_ptr<acc_t>();
  acc_t* const d_rec_p = d_rec.data_ptr<acc_t>();
  const acc_t* dsrc = c.proj() ? dht.const_data_ptr<acc_t>() : dh.const_data_ptr<acc_t>();
  acc_t* dhp = dh.data_ptr<acc_t>();
  acc_t* dcp = c.lstm() ? dc.data_ptr<acc_t>() : nullptr;
  // LSTM without a projection, float32, one product a step on R's panels or blocks: all steps
  // in one parallel region, as in forward_direction, each thread's work a block of rows and
  // units of a step: its part of dh = dpre_{t+1} · R (the rows that ran at t + 1; the others
  // still hold the final state's gradient), then the cells of its rows and units. By units,
  // the barrier after each step completes the dpre the next step's product reads; with equal
  // lengths on the panels, by rows where they fit half a core's L2 (gemm.h's
  // panel_row_blocks). The same sums as the step loop below, so the same bits; the initial
  // state's dh = dpre_0 · R after the loop. Faster where the rows split (paired:
  // docs/performance.md §3.14).
  const bool fused = c.mode == RNNMode::kLSTM && !c.proj() && steps_product &&
                     recurrent.blocks() && !recurrent.bf16() && std::is_same_v<acc_t, float>;
  if (fused) {
    if constexpr (std::is_same_v<acc_t, float>) {
      for (int64_t t = 0; t < T; ++t) {
        if (s.active[t] < B) d_pre[t].narrow(0, s.active[t], B - s.active[t]).zero_();
      }
      auto block = [&](int64_t t, int64_t b0, int64_t b1, int64_t j0, int64_t units) {
        const int64_t n = std::min(b1, s.active[t]);  // the block's rows [b0, n) run at t
        if (n <= b0) return;
        const int64_t m = t + 1 < T ? std::min(b1, s.active[t + 1]) - b0 : 0;
        if (m > 0) {
          recurrent.units(m, 1, d_pre_p + (t + 1) * B * GH + b0 * GH, GH, dhp + b0 * P, P, j0,
                          units, /*accumulate=*/false);
        }
        const float* a = acts_p + t * B * GH;
        const float* cells = cells_p + t * B * H;
        const float* c_before = t == 0 ? c0.const_data_ptr<float>() : cells_p + (t - 1) * B * H;
        const float* dy = dy_p + t * B * P;
        for (int64_t b = b0; b < n; ++b) {
          const int64_t o = b * H;
          float* __restrict dh_row = dhp + o;
          const float* __restrict dy_row = dy + o;
          for (int64_t j = j0; j < j0 + units; ++j) dh_row[j] += dy_row[j];
          lstm_backward_row(H, j0, j0 + units, a + b * GH, cells + o, c_before + o, dhp + o,
                            dcp + o, d_pre_p + t * B * GH + b * GH);
        }
      };
      const int64_t row_blocks = recurrent.panels() && s.active[T - 1] == B
                                     ? cpu::panel_row_blocks(B, GH, P, /*G=*/1)
                                     : 0;
      if (row_blocks > 0) {
        cpu::for_steps_row_blocks(T, B, row_blocks, [&](int64_t k, int64_t, int64_t b0,
                                                        int64_t b1) {
          block(T - 1 - k, b0, b1, 0, H);
        });
      } else {
        cpu::for_steps_column_blocks(T, P, s.active[0] * GH * P, [&](int64_t k, int64_t j0,
                                                                     int64_t units) {
          block(T - 1 - k, 0, B, j0, units);
        });
      }
      const int64_t n0 = s.active[0];
      at::Tensor dh_n = n0 == B ? dh : dh.narrow(0, 0, n0);
      recurrent(dh_n, d_pre[0].narrow(0, 0, n0), /*accumulate=*/false);
    }
  }
  for (int64_t t = T - 1; t >= 0 && !fused; --t) {
    const int64_t n = s.active[t];
    if (n < B) {
      d_pre[t].narrow(0, n, B - n).zero_();
      if (c.mode == RNNMode::kGRU) d_rec[t].narrow(0, n, B - n).zero_();
    }
    if (n == 0) continue;
    // Without a projection the step's output gradient is added into dh in the rows below.
    const acc_t* dy = c.proj() ? nullptr : dy_p + t * B * P;
    if (c.proj()) {
      dh.narrow(0, 0, n).add_(dY[t].narrow(0, 0, n));
      dhs[t].narrow(0, 0, n).copy_(dh.narrow(0, 0, n));
      at::Tensor dht_n = dht.narrow(0, 0, n);
      at::mm_out(dht_n, dh.narrow(0, 0, n), w.Wp);
    }
    const acc_t* a = acts_p + t * B * GH;
    const acc_t* cells = c.lstm() ? cells_p + t * B * H : nullptr;
    const acc_t* c_before = !c.lstm() ? nullptr
                            : t == 0  ? c0.const_data_ptr<acc_t>()
                                      : cells_p + (t - 1) * B * H;
    const acc_t* h_before = c.mode != RNNMode::kGRU ? nullptr
                            : t == 0                ? h0.const_data_ptr<acc_t>()
                                                    : hseq_p + (t - 1) * B * P;
    const acc_t* extra = c.mode == RNNMode::kGRU ? extra_p + t * B * H : nullptr;
    acc_t* dp = d_pre_p + t * B * GH;
    acc_t* dr = d_rec_p + t * B * GH;
    at::parallel_for(0, n, cpu::row_grain(GH), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t o = b * H;
        if (dy != nullptr) {
          acc_t* __restrict dh_row = dhp + o;
          const acc_t* __restrict dy_row = dy + o;
          for (int64_t j = 0; j < H; ++j) dh_row[j] += dy_row[j];
        }
        switch (c.mode) {
          case RNNMode::kLSTM:
            lstm_backward_row(H, 0, H, a + b * GH, cells + o, c_before + o, dsrc + o, dcp + o,
                              dp + b * GH);
            break;
          case RNNMode::kGRU:
            gru_backward_row(H, a + b * GH, extra + o, h_before + o, dhp + o, dp + b * GH,
                             dr + b * GH);
            break;
          case RNNMode::kTanh:
            rnn_backward_row<acc_t, false>(H, a + b * GH, dhp + o, dp + b * GH);
            break;
          case RNNMode::kRelu:
            rnn_backward_row<acc_t, true>(H, a + b * GH, dhp + o, dp + b * GH);
            break;
        }
      }
    });
    at::Tensor dh_n = n == B ? dh : dh.narrow(0, 0, n);
    if (c.mode == RNNMode::kGRU) {
      recurrent(dh_n, d_rec[t].narrow(0, 0, n), /*accumulate=*/true);
    } else if (pairwise_steps) {
      cpu::pairwise_sum_gemm_out(dh_n, d_pre[t].narrow(0, 0, n), w.R, cpu::kPairwiseStepChunk);
    } else {
      recurrent(dh_n, d_pre[t].narrow(0, 0, n), /*accumulate=*/false);
    }
  }
  const at::Tensor dp2 = d_pre.view({T * B, GH});
  const at::Tensor dr2 = d_rec.view({T * B, GH});
  const at::Tensor dX =
      w.W.defined() ? cpu::pairwise_sum_gemm(dp2, w.W) : dp2.view({T * B, G, H}).sum(1);
  // dWᵀ = Xᵀ·dpre and dRᵀ = h_beforeᵀ·drec, on the inputs transposed into contiguous rows
  // [in + P, T·B] (a transposed view as the left operand costs oneDNN a one-thread copy), in one
  // product where drec is dpre (LSTM, RNN); the results transposed into the params' [GH, ·].
  const int64_t in = w.W.defined() ? X.size(1) : 0;
  at::Tensor xh_t = at::empty({in + P, T * B}, opts);
  if (in > 0) {
    at::Tensor x_t = xh_t.narrow(0, 0, in);
    cpu::transpose_into(x_t, X);
  }
  at::Tensor h_t = xh_t.narrow(0, in, P);
  at::Tensor first = h_t.narrow(1, 0, B);
  cpu::transpose_into(first, h0);
  if (T > 1) {
    at::Tensor rest = h_t.narrow(1, B, (T - 1) * B);
    cpu::transpose_into(rest, r.hseq.narrow(0, 0, T - 1).view({(T - 1) * B, P}));
  }
  const bool shared = c.mode != RNNMode::kGRU;
  const at::Tensor prod = cpu::pairwise_sum_gemm(shared ? xh_t : h_t, dr2);  // [in + P or P, GH]
  cpu::transpose_into(g.R, prod.narrow(0, shared ? in : 0, P));
  if (in > 0) {
    cpu::transpose_into(g.W, shared ? prod.narrow(0, 0, in)
                                    : cpu::pairwise_sum_gemm(xh_t.narrow(0, 0, in), dp2));
  }
  cpu::pairwise_column_sum_out(g.bW, dp2);
  if (shared) {
    g.bR.copy_(g.bW);
  } else {
    cpu::pairwise_column_sum_out(g.bR, dr2);
  }
  if (c.proj()) {
    cpu::pairwise_sum_gemm_out(g.Wp, dhs.view({T * B, P}).t(), r.extra.view({T * B, H}));
  }
  return dX;
}

// ---------------------------------------------------------------------------------------------
// Layouts at the op boundary: sorted, time-major, compute type inside.

// Rows of `t` (along `dim`) in sorted order, or back; no copy when already in order.
at::Tensor sort_rows(const at::Tensor& t, int64_t dim, const Schedule& s) {
  return s.sorted ? t : t.index_select(dim, s.perm);
}
at::Tensor unsort_rows(const at::Tensor& t, int64_t dim, const Schedule& s) {
  return s.sorted ? t : t.index_select(dim, s.inv_perm);
}

// A new contiguous tensor of dtype with t's values: op outputs never alias the reserve.
at::Tensor fresh(const at::Tensor& t, at::ScalarType dtype) {
  return at::empty(t.sizes(), t.options().dtype(dtype)).copy_(t);
}

// [T, B, F] (or [B, T, F]) -> sorted time-major [T, B, F] in the compute type.
at::Tensor to_internal_seq(const at::Tensor& x, const RNNConfig& c, const Schedule& s,
                           at::ScalarType acc) {
  const at::Tensor tm = c.time_major ? x : x.transpose(0, 1);
  return sort_rows(tm.to(acc), 1, s).contiguous();
}

// `owned`: x is the call's own tensor, shared with nothing it returns, so it is returned as it
// is where nothing needs reordering, transposing or casting (unsort_rows' result is new anyway).
at::Tensor from_internal_seq(const at::Tensor& x, const RNNConfig& c, const Schedule& s,
                             at::ScalarType dtype, bool owned = false) {
  const at::Tensor y = unsort_rows(x, 1, s);
  if (c.time_major && y.scalar_type() == dtype && y.is_contiguous() && (owned || !s.sorted)) {
    return y;
  }
  return fresh(c.time_major ? y : y.transpose(0, 1), dtype);
}

// States: [L·D, B, n] time-major; batch-major TF reinterprets [B, L·D, n] memory as
// [L·D, B, n] without a transpose (docs/tf-semantics.md §6.3), and so do we.
at::Tensor to_internal_state(const at::Tensor& h, const RNNConfig& c, const Schedule& s,
                             at::ScalarType acc) {
  const at::Tensor tm = c.time_major ? h : h.contiguous().view({c.L * c.D, c.B, h.size(2)});
  return fresh(sort_rows(tm, 1, s), acc);  // updated in place: never the caller's tensor
}

at::Tensor from_internal_state(const at::Tensor& h, const RNNConfig& c, const Schedule& s,
                               at::ScalarType dtype) {
  const at::Tensor y = fresh(unsort_rows(h, 1, s), dtype);
  return c.time_major ? y : y.view({c.B, c.L * c.D, h.size(2)});
}

// Layer l's output [T·B, D·P]: both directions, in original time order (a view of the reserve
// when there is one direction).
at::Tensor layer_output(const RNNConfig& c, const Schedule& s, const Reserve& r, int64_t l) {
  if (c.D == 1) return r.dirs[l].hseq.view({c.T * c.B, c.P});
  std::vector<at::Tensor> parts;
  for (int64_t d = 0; d < c.D; ++d) {
    const at::Tensor hs = r.dirs[l * c.D + d].hseq.view({c.T * c.B, c.P});
    parts.push_back(d == 0 ? hs : hs.index_select(0, s.rev));
  }
  return at::cat(parts, 1);
}

// The input of layer l >= 1: layer l-1's output, dropped out (between layers only).
at::Tensor layer_input(const RNNConfig& c, const Schedule& s, const Reserve& r, int64_t l) {
  const at::Tensor x = layer_output(c, s, r, l - 1);
  return r.masks[l].defined() ? x * r.masks[l].view({c.T * c.B, c.D * c.P}) : x;
}

template <typename acc_t>
Outputs5 rnn_forward(const RNNConfig& c, const std::vector<int64_t>& lengths,
                     const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
                     const at::Tensor& params, double dropout, int64_t seed, int64_t seed2,
                     bool is_training, at::TensorList packed = {},
                     at::TensorList packed_x = {}) {
  const auto dtype = input.scalar_type();
  const auto acc = c10::CppTypeToScalarType<acc_t>::value;
  const Schedule s = make_schedule(lengths, c.T);
  const auto weights = weight_views(c, params.to(acc));
  const bool with_masks = is_training && dropout > 0 && c.L > 1;
  Reserve r = is_training ? make_reserve(c, with_masks, at::Tensor(), input.options().dtype(acc))
                          : make_inference_reserve(c, input.options().dtype(acc));
  if (is_training) {
    const std::vector<int64_t> sig = reserve_signature(c, lengths, dropout, ReserveMaker::kCpu);
    std::memset(r.buffer.data_ptr(), 0, reserve_signature_bytes(c.B, kReserveHeaderAlign));
    std::memcpy(r.buffer.data_ptr(), sig.data(), sig.size() * sizeof(int64_t));
  }
  at::Tensor h_all = to_internal_state(input_h, c, s, acc);
  at::Tensor c_all = c.lstm() ? to_internal_state(input_c, c, s, acc) : at::Tensor();
  at::Tensor x = to_internal_seq(input, c, s, acc).view({c.T * c.B, c.I});
  for (int64_t l = 0; l < c.L; ++l) {
    if (l > 0) {
      if (with_masks) {
        at::Tensor m = r.masks[l];
        if (dropout >= 1) {
          m.zero_();  // TF accepts 1: every input dropped, zeros (not 0 · 1/0)
        } else {
          m.bernoulli_(1 - dropout, dropout_generator(seed, seed2)).div_(1 - dropout);
        }
      }
      x = layer_input(c, s, r, l);
    }
    for (int64_t d = 0; d < c.D; ++d) {
      const int64_t k = l * c.D + d;
      const at::Tensor xd = d == 0 ? x : x.index_select(0, s.rev);
      at::Tensor h = h_all[k], cst = c.lstm() ? c_all[k] : at::Tensor();
      forward_direction<acc_t>(c, s, xd, weights[k], h, cst, r.dirs[k], is_training,
                               packed.empty() ? at::Tensor() : packed[k],
                               packed_x.empty() ? at::Tensor() : packed_x[k]);
    }
  }
  at::Tensor out = layer_output(c, s, r, c.L - 1).view({c.T, c.B, c.D * c.P});
  at::Tensor reserve = is_training ? r.buffer.view(dtype) : at::zeros({}, input.options());
  // In training the output is a view of the returned reserve, so it is copied; an inference
  // forward's activations are its own.
  return {from_internal_seq(out, c, s, dtype, /*owned=*/!is_training),
          from_internal_state(h_all, c, s, dtype),
          c.lstm() ? from_internal_state(c_all, c, s, dtype) : at::zeros({}, input.options()),
          reserve, at::zeros({}, input.options().dtype(at::kChar))};
}

template <typename acc_t>
Grads4 rnn_backward(const RNNConfig& c, const std::vector<int64_t>& lengths,
                    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
                    const at::Tensor& params, const at::Tensor& output_backprop,
                    const at::Tensor& output_h_backprop, const at::Tensor& output_c_backprop,
                    const at::Tensor& reserve_space, double dropout) {
  const auto dtype = input.scalar_type();
  const auto acc = c10::CppTypeToScalarType<acc_t>::value;
  TORCH_CHECK_VALUE(reserve_space.dim() == 1 && reserve_space.is_contiguous() &&
                        (reserve_space.numel() * reserve_space.element_size()) % sizeof(acc_t) == 0,
                    "reserve_space: expected the 1-D reserve_space output of CudnnRNNV3 with "
                    "is_training=True, got shape ", shape_str(reserve_space.sizes()));
  {  // the forward's signature, read through memcpy (a reserve view need not be 8-aligned)
    const int64_t n_words = std::min<int64_t>(
        reserve_space.numel() * reserve_space.element_size() / 8, kReserveFixedWords + c.B);
    std::vector<int64_t> stored(n_words);
    std::memcpy(stored.data(), reserve_space.const_data_ptr(), n_words * sizeof(int64_t));
    check_reserve_signature(stored.data(), n_words, c, lengths, dropout,
                            ReserveMaker::kCpu);
  }
  const Schedule s = make_schedule(lengths, c.T);
  const at::Tensor params_acc = params.to(acc);
  const auto weights = weight_views(c, params_acc);
  at::Tensor dparams = at::zeros_like(params_acc);
  auto grads = weight_views(c, dparams);
  const bool with_masks = dropout > 0 && c.L > 1;
  const Reserve r = make_reserve(c, with_masks, reserve_space.view(acc), params_acc.options());
  const at::Tensor h_all = to_internal_state(input_h, c, s, acc);
  const at::Tensor c_all = c.lstm() ? to_internal_state(input_c, c, s, acc) : at::Tensor();
  at::Tensor dh_all = to_internal_state(output_h_backprop, c, s, acc);
  at::Tensor dc_all = c.lstm() ? to_internal_state(output_c_backprop, c, s, acc) : at::Tensor();
  at::Tensor d_out = to_internal_seq(output_backprop, c, s, acc).view({c.T * c.B, c.D * c.P});
  const at::Tensor x0 = to_internal_seq(input, c, s, acc).view({c.T * c.B, c.I});
  for (int64_t l = c.L - 1; l >= 0; --l) {
    const at::Tensor x = l == 0 ? x0 : layer_input(c, s, r, l);
    const int64_t in = c.layer_input(l);
    // One direction's input gradient is dx; two add theirs up.
    at::Tensor dx = c.D == 1 ? at::Tensor() : at::zeros({c.T * c.B, in}, x.options());
    for (int64_t d = 0; d < c.D; ++d) {
      const int64_t k = l * c.D + d;
      const bool rev = d == 1;
      const at::Tensor xd = rev ? x.index_select(0, s.rev) : x;
      at::Tensor dy = d_out.narrow(1, d * c.P, c.P);
      dy = (rev ? dy.index_select(0, s.rev) : dy.contiguous()).view({c.T, c.B, c.P});
      at::Tensor dh = dh_all[k], dc = c.lstm() ? dc_all[k] : at::Tensor();
      const at::Tensor dxd =
          backward_direction<acc_t>(c, s, xd, weights[k], h_all[k],
                                    c.lstm() ? c_all[k] : at::Tensor(), r.dirs[k], dy, dh, dc,
                                    grads[k]);
      if (c.D == 1) {
        dx = dxd;
      } else {
        dx.add_(rev ? dxd.index_select(0, s.rev) : dxd);
      }
    }
    if (l > 0 && r.masks[l].defined()) dx.mul_(r.masks[l].view({c.T * c.B, c.D * c.P}));
    d_out = dx;
  }
  return {from_internal_seq(d_out.view({c.T, c.B, c.I}), c, s, dtype, /*owned=*/true),
          from_internal_state(dh_all, c, s, dtype),
          c.lstm() ? from_internal_state(dc_all, c, s, dtype) : at::zeros({}, input.options()),
          dparams.to(dtype)};
}

// ---------------------------------------------------------------------------------------------
// Op entry points.

Outputs5 cudnn_rnn_cpu(const at::Tensor& input, const at::Tensor& input_h,
                       const at::Tensor& input_c, const at::Tensor& params,
                       const std::optional<at::Tensor>& sequence_lengths,
                       c10::string_view rnn_mode, c10::string_view input_mode,
                       c10::string_view direction, double dropout, int64_t seed, int64_t seed2,
                       int64_t num_proj, bool is_training, bool time_major) {
  const auto [c, lengths] =
      check_cudnn_rnn_call(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                           input_mode, direction, dropout, num_proj, time_major);
  return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                         "cudnn_rnn_cpu", [&] {
    return rnn_forward<at::opmath_type<scalar_t>>(c, lengths, input, input_h, input_c, params,
                                                  dropout, seed, seed2, is_training);
  });
}

// cudnn_rnn_inference (schema in csrc/torch_lstm_grad.cpp): cudnn_rnn with is_training=False,
// and the recurrent weights of the small-batch LSTM steps and the input weights packed by the
// caller.
std::tuple<at::Tensor, at::Tensor, at::Tensor> cudnn_rnn_inference_cpu(
    const at::Tensor& input, const at::Tensor& input_h, const at::Tensor& input_c,
    const at::Tensor& params, const std::optional<at::Tensor>& sequence_lengths,
    at::TensorList packed_r, at::TensorList packed_x, c10::string_view rnn_mode,
    c10::string_view input_mode, c10::string_view direction, int64_t num_proj, bool time_major) {
  const auto [c, lengths] =
      check_cudnn_rnn_call(input, input_h, input_c, params, sequence_lengths, rnn_mode,
                           input_mode, direction, 0.0, num_proj, time_major);
  check_packed_recurrent(c, packed_r, input);
  check_packed_input(c, packed_x, input);
  const Outputs5 out = AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, input.scalar_type(), "cudnn_rnn_inference_cpu", [&] {
        return rnn_forward<at::opmath_type<scalar_t>>(c, lengths, input, input_h, input_c,
                                                      params, 0.0, 0, 0, false, packed_r,
                                                      packed_x);
      });
  return {std::get<0>(out), std::get<1>(out), std::get<2>(out)};
}

Grads4 cudnn_rnn_backprop_cpu(
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
  (void)seed, (void)seed2, (void)host_reserved;  // the masks are in reserve_space
  return AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, input.scalar_type(),
                                         "cudnn_rnn_backprop_cpu", [&] {
    return rnn_backward<at::opmath_type<scalar_t>>(c, lengths, input, input_h, input_c, params,
                                                   output_backprop, output_h_backprop,
                                                   output_c_backprop, reserve_space, dropout);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) {
  m.impl("cudnn_rnn", &cudnn_rnn_cpu);
  m.impl("cudnn_rnn_backprop", &cudnn_rnn_backprop_cpu);
  m.impl("_cudnn_rnn_backprop_consuming", &cudnn_rnn_backprop_cpu);  // reads its reserve only
  m.impl("cudnn_rnn_inference", &cudnn_rnn_inference_cpu);
}

}  // namespace torch_lstm_grad
