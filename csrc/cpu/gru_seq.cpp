// CPU kernels of keras_gru(_grad) (drivers and cell math: csrc/gru_seq.h): each step's pointwise
// passes as loops over rows, parallelised over the batch, instantiated per activation variant
// (gate: sigmoid | hard sigmoid; cell: tanh | relu/linear, the constants loop invariants) and
// multiversioned for AVX-512 / AVX2 (activations.h); the recurrent products on the prepared
// weights of cpu::RecurrentGemm (brgemm column blocks where it runs), the whole-sequence ones
// on oneDNN (cpu::matmul).

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "../bool_dispatch.h"
#include "../gru_seq.h"
#include "activations.h"
#include "gemm.h"

namespace torch_lstm_grad {
namespace {

using gru_seq::GruStep;
using lstm_block::ActParams;

using cpu::CpuAct;

template <typename scalar_t, class Gate, class Cell>
struct ForwardAfterRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in;
    const acc_t* __restrict br = s.b_rec;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xp = s.xp + b * 3 * H;
      const acc_t* __restrict in = s.inner + b * 3 * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict r = s.r + b * H;
      scalar_t* __restrict hh = s.hh + b * H;
      scalar_t* __restrict hr = s.hr + b * H;
      scalar_t* __restrict h = s.h + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const auto o = C::after(xp[j] + bi[j], xp[H + j] + bi[H + j], xp[2 * H + j] + bi[2 * H + j],
                                in[j] + br[j], in[H + j] + br[H + j], in[2 * H + j] + br[2 * H + j],
                                static_cast<acc_t>(hp[j]), p);
        z[j] = static_cast<scalar_t>(o.z);
        r[j] = static_cast<scalar_t>(o.r);
        hh[j] = static_cast<scalar_t>(o.hh);
        hr[j] = static_cast<scalar_t>(o.hr);
        h[j] = static_cast<scalar_t>(o.h);
      }
      if (s.h_acc != nullptr) {
        for (int64_t j = 0; j < H; ++j) s.h_acc[b * H + j] = static_cast<acc_t>(h[j]);
      }
    }
  }
};

// reset_after=False, before the candidate's product: z, r and r ⊙ h_prev.
template <typename scalar_t, class Gate, class Cell>
struct ForwardGatesRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xp = s.xp + b * 3 * H;
      const acc_t* __restrict in = s.inner + b * 2 * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict r = s.r + b * H;
      scalar_t* __restrict hr = s.hr + b * H;
      acc_t* __restrict rh = s.rh + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const acc_t zv = Gate::f((xp[j] + bi[j]) + in[j], p);
        const acc_t rv = Gate::f((xp[H + j] + bi[H + j]) + in[H + j], p);
        const acc_t rhv = rv * static_cast<acc_t>(hp[j]);
        z[j] = static_cast<scalar_t>(zv);
        r[j] = static_cast<scalar_t>(rv);
        hr[j] = static_cast<scalar_t>(rhv);
        rh[j] = rhv;
      }
    }
  }
};

// reset_after=False, after it: hh = act(xp_h + (r ⊙ h)·R_h), h.
template <typename scalar_t, class Gate, class Cell>
struct ForwardCandidateRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    const acc_t* __restrict bi = s.b_in + 2 * H;
    for (int64_t b = b0; b < b1; ++b) {
      const acc_t* __restrict xh = s.xp + b * 3 * H + 2 * H;
      const acc_t* __restrict cand = s.cand + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict z = s.z + b * H;
      scalar_t* __restrict hh = s.hh + b * H;
      scalar_t* __restrict h = s.h + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const acc_t hhv = Cell::f((xh[j] + bi[j]) + cand[j], p);
        const acc_t zv = static_cast<acc_t>(z[j]);
        hh[j] = static_cast<scalar_t>(hhv);
        h[j] = static_cast<scalar_t>(zv * static_cast<acc_t>(hp[j]) + (1 - zv) * hhv);
      }
      if (s.h_acc != nullptr) {
        for (int64_t j = 0; j < H; ++j) s.h_acc[b * H + j] = static_cast<acc_t>(h[j]);
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardAfterRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict z = s.z + b * H;
      const scalar_t* __restrict r = s.r + b * H;
      const scalar_t* __restrict hh = s.hh + b * H;
      const scalar_t* __restrict hr = s.hr + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict hg = s.h_grad + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 3 * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const acc_t g = dh[j] + static_cast<acc_t>(hg[j]);  // carry first, then the incoming
        const acc_t zv = static_cast<acc_t>(z[j]), rv = static_cast<acc_t>(r[j]);
        acc_t dz, dhh;
        C::gate_grads(g, zv, static_cast<acc_t>(hh[j]), static_cast<acc_t>(hp[j]), p, dz, dhh);
        const acc_t dr = Gate::df(rv, p) * (dhh * static_cast<acc_t>(hr[j]));
        dx[j] = dz;
        dx[H + j] = dr;
        dx[2 * H + j] = dhh;
        di[j] = dz;
        di[H + j] = dr;
        di[2 * H + j] = dhh * rv;
        dh[j] = g * zv;
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardGatesRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    using C = gru_seq::GruCell<Gate, Cell, acc_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict z = s.z + b * H;
      const scalar_t* __restrict hh = s.hh + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const scalar_t* __restrict hg = s.h_grad + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 2 * H;
      acc_t* __restrict dc = s.d_cand + b * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const acc_t g = dh[j] + static_cast<acc_t>(hg[j]);
        const acc_t zv = static_cast<acc_t>(z[j]);
        acc_t dz, dhh;
        C::gate_grads(g, zv, static_cast<acc_t>(hh[j]), static_cast<acc_t>(hp[j]), p, dz, dhh);
        dx[j] = dz;
        dx[2 * H + j] = dhh;
        di[j] = dz;
        dc[j] = dhh;
        dh[j] = g * zv;
      }
    }
  }
};

template <typename scalar_t, class Gate, class Cell>
struct BackwardResetRowsKernel {
  TLG_INLINE static void body(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t H = s.H;
    const auto p = ActParams<acc_t>::from(s.fns);
    for (int64_t b = b0; b < b1; ++b) {
      const scalar_t* __restrict r = s.r + b * H;
      const scalar_t* __restrict hp = s.h_prev + b * H;
      const acc_t* __restrict drh = s.d_rh + b * H;
      acc_t* __restrict dh = s.dh + b * H;
      acc_t* __restrict dx = s.d_xp + b * 3 * H;
      acc_t* __restrict di = s.d_inner + b * 2 * H;
      TLG_NO_ALIAS_LOOP
      for (int64_t j = 0; j < H; ++j) {
        const acc_t rv = static_cast<acc_t>(r[j]);
        const acc_t dr = Gate::df(rv, p) * (drh[j] * static_cast<acc_t>(hp[j]));
        dx[H + j] = dr;
        di[H + j] = dr;
        dh[j] = dh[j] + drh[j] * rv;
      }
    }
  }
};

template <typename scalar_t>
using Rows = void (*)(const GruStep<scalar_t>&, int64_t, int64_t);

// A pass's rows b0 .. b1: Kernel::body compiled for the instruction set cpu::isa() chose.
template <template <typename, class, class> class Kernel, typename scalar_t, class Gate,
          class Cell>
void rows_on_isa(const GruStep<scalar_t>& s, int64_t b0, int64_t b1) {
  cpu::dispatch<Kernel<scalar_t, Gate, Cell>>(s, b0, b1);
}

using Sigmoid = lstm_block::SigmoidGate<CpuAct>;
using Hard = lstm_block::HardSigmoidGate;
using Tanh = lstm_block::TanhCell<CpuAct>;
using Rect = lstm_block::RectCell;

// The pass `Kernel` for the step's variant, run over the B rows. The backward passes need only
// the activations' derivatives, which cost little: one loop for every variant (AnyGate,
// AnyCell blend them, lstm_block.h), where a loop per variant would quadruple them.
template <template <typename, class, class> class Kernel, bool kAnyVariant = false,
          typename scalar_t>
void run(const GruStep<scalar_t>& s, int64_t B) {
  Rows<scalar_t> rows = nullptr;
  if constexpr (kAnyVariant) {
    rows = &rows_on_isa<Kernel, scalar_t, lstm_block::AnyGate, lstm_block::AnyCell>;
  } else {
    rows = dispatch_bools(
        [](auto kHard, auto kTanh) {
          using Gate = std::conditional_t<kHard, Hard, Sigmoid>;
          using Cell = std::conditional_t<kTanh, Tanh, Rect>;
          return &rows_on_isa<Kernel, scalar_t, Gate, Cell>;
        },
        s.fns.gate != lstm_block::GateFn::kSigmoid, s.fns.cell == lstm_block::CellFn::kTanh);
  }
  at::parallel_for(0, B, cpu::row_grain(s.H), [&](int64_t b0, int64_t b1) { rows(s, b0, b1); });
}

struct CpuGruBackend {
  static cpu::RecurrentGemm recurrent_gemm(const at::Tensor& b, int64_t m, int64_t steps) {
    return {b, m, steps, /*allow_blocks=*/true};
  }
  // No whole-loop form: the steps' products and passes are already one parallel region each.
  static constexpr bool kWholeLoops = false;
  static at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) { return cpu::matmul(a, b); }
  static void transpose_into(at::Tensor& dst, const at::Tensor& src) {
    cpu::transpose_into(dst, src);
  }
  template <typename scalar_t>
  static void forward_after(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardAfterRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void forward_gates(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardGatesRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void forward_candidate(const GruStep<scalar_t>& s, int64_t B) {
    run<ForwardCandidateRowsKernel>(s, B);
  }
  template <typename scalar_t>
  static void backward_after(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardAfterRowsKernel, true>(s, B);
  }
  template <typename scalar_t>
  static void backward_gates(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardGatesRowsKernel, true>(s, B);
  }
  template <typename scalar_t>
  static void backward_reset(const GruStep<scalar_t>& s, int64_t B) {
    run<BackwardResetRowsKernel, true>(s, B);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(torch_lstm_grad, CPU, m) { gru_seq::register_gru_ops<CpuGruBackend>(m); }

}  // namespace torch_lstm_grad
