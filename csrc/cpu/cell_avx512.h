// The float32 sigmoid/tanh LSTM cell on AVX-512 intrinsics: the forward pointwise pass of TF's
// block ops (and block_lstm_ex at its default activations) and of CudnnRNN's LSTM.
//
// Why not the auto-vectorised loops of lstm_backend.h: GCC 12 vectorises them, but turns the
// range clamps of exp_approx into masked blends around each division and keeps one 16-lane
// iteration (~190 instructions) in flight at a time; these take well under half its time per
// unit-row (measured: docs/performance.md). The operations are activations.h's, in its order
// and with the fused multiply-adds GCC forms in the AVX-512 clone of those loops, so the outputs
// are the same bit for bit, on huge and non-finite inputs too (tests/test_inference.py and the
// parity tests check the results). Used where the CPU has AVX-512 F and DQ (the clones'
// x86-64-v4 level implies both).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>

#include "../lstm_block.h"
#include "cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TLG_HAVE_AVX512_CELL 1
#endif

namespace torch_lstm_grad::cpu {

inline bool avx512_cell_available() {
#if defined(TLG_HAVE_AVX512_CELL)
  static const bool isa =
      cpu::isa() == Isa::kAvx512 && cpu_has("avx512_f") && cpu_has("avx512_dq");
  return isa;
#else
  return false;
#endif
}

#if defined(TLG_HAVE_AVX512_CELL)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_ps(), a self-initialised variable, and
// -Wall reports it once per intrinsic inlined here (GCC bug 105593, as in transpose.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TLG_AVX512 __attribute__((target("avx512f,avx512dq")))
#define TLG_AVX512_INLINE __attribute__((target("avx512f,avx512dq"), always_inline)) inline

namespace v16 {

TLG_AVX512_INLINE __m512 splat(float v) { return _mm512_set1_ps(v); }

// min(max(x, lo), hi) as std::min / std::max compute it: a NaN x passes through.
TLG_AVX512_INLINE __m512 clamp(__m512 x, float lo, float hi) {
  return _mm512_min_ps(splat(hi), _mm512_max_ps(splat(lo), x));
}

// detail::reduce and pow2i: x = n·ln2 + r; s = 2^n.
TLG_AVX512_INLINE void reduce(__m512 x, __m512& r, __m512& s) {
  const __m512 round = splat(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, splat(1.44269504088896341f), round), round);
  r = _mm512_fnmadd_ps(n, splat(1.428606765330187045e-06f),
                       _mm512_fnmadd_ps(n, splat(0.693145751953125f), x));
  const __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127));
  s = _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
}

// detail::expm1_small(r) / r: the Horner polynomial before its last multiply by r.
TLG_AVX512_INLINE __m512 expm1_poly(__m512 r) {
  __m512 p = splat(1.0f / 40320.0f);
  p = _mm512_fmadd_ps(p, r, splat(1.0f / 5040.0f));
  p = _mm512_fmadd_ps(p, r, splat(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, splat(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, splat(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, splat(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, splat(0.5f));
  return _mm512_fmadd_ps(p, r, splat(1.0f));
}

// cpu::sigmoid: 1 / (1 + exp(-x)), exp(y) = 2^n · (1 + expm1_small(r)).
TLG_AVX512_INLINE __m512 sigmoid(__m512 x) {
  __m512 r, s;
  reduce(clamp(_mm512_sub_ps(_mm512_setzero_ps(), x), -87.0f, 88.0f), r, s);
  const __m512 e = _mm512_fmadd_ps(expm1_poly(r), r, splat(1.0f));
  return _mm512_div_ps(splat(1.0f), _mm512_fmadd_ps(s, e, splat(1.0f)));
}

// cpu::tanh: copysign(-m / (2 + m), x), m = expm1(-2 min(|x|, 9)).
TLG_AVX512_INLINE __m512 tanh(__m512 x) {
  const __m512 sign = splat(-0.0f);
  const __m512 t = _mm512_min_ps(splat(9.0f), _mm512_andnot_ps(sign, x));
  __m512 r, s;
  reduce(clamp(_mm512_mul_ps(splat(-2.0f), t), -87.0f, 88.0f), r, s);
  const __m512 m = _mm512_fmadd_ps(s, _mm512_mul_ps(expm1_poly(r), r),
                                   _mm512_sub_ps(s, splat(1.0f)));
  const __m512 v = _mm512_div_ps(_mm512_sub_ps(_mm512_setzero_ps(), m), _mm512_add_ps(splat(2.0f), m));
  return _mm512_or_ps(_mm512_andnot_ps(sign, v), _mm512_and_ps(sign, x));
}

TLG_AVX512_INLINE __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

}  // namespace v16

// Whether i, f, o, ci, co of FwdStep s start a 64-byte line at element `at`.
TLG_AVX512_INLINE bool lines_aligned(const lstm_block::FwdStep<float>& s, int64_t at) {
  std::uintptr_t bits = 0;
  for (int k : {0, 2, 3, 4, 5}) bits |= reinterpret_cast<std::uintptr_t>(s.out[k] + at);
  return bits % 64 == 0;
}

// lstm_block::lstm_cell_forward<SigmoidGate, TanhCell, kPeep, kClip> over FwdStep's rows
// [b0, b1), units [j0, j1) (cpu_lstm::forward_rows' contract), float32. kStoreGates false: i,
// f, o, ci, co are not written (the inference forward's scratch rows; nothing reads them).
// With s.gates_streamed they go out as non-temporal stores where whole 64-byte lines are
// written (aligned rows, full vectors), fenced before returning.
template <bool kPeep, bool kClip, bool kStoreGates>
TLG_AVX512 void tf_forward_rows(const lstm_block::FwdStep<float>& s, int64_t b0, int64_t b1,
                                int64_t j0, int64_t j1) {
  const int64_t H = s.H;
  const lstm_block::GateLayout L = s.attrs.layout;
  const __m512 fb = v16::splat(static_cast<float>(s.attrs.forget_bias));
  const float clip_v = s.attrs.cell_clip > 0 ? static_cast<float>(s.attrs.cell_clip)
                                             : std::numeric_limits<float>::infinity();
  const __m512 clip = v16::splat(clip_v), neg_clip = v16::splat(-clip_v);
  bool streamed_any = false;
  for (int64_t b = b0; b < b1; ++b) {
    const float* g = s.gates + b * 4 * H;
    const int64_t row = b * H;
    // j advances a line (16 floats) at a time, so aligned at j0 is aligned everywhere.
    const bool stream = kStoreGates && s.gates_streamed && lines_aligned(s, row + j0);
    streamed_any |= stream;
    for (int64_t j = j0; j < j1; j += 16) {
      const __mmask16 m = v16::tail_mask(j1 - j);
#define TLG_LD(p) _mm512_maskz_loadu_ps(m, (p) + j)
      __m512 gi = _mm512_add_ps(TLG_LD(g + L.i * H), TLG_LD(s.bias + L.i * H));
      const __m512 gc = _mm512_add_ps(TLG_LD(g + L.c * H), TLG_LD(s.bias + L.c * H));
      __m512 gf = _mm512_add_ps(_mm512_add_ps(TLG_LD(g + L.f * H), TLG_LD(s.bias + L.f * H)), fb);
      __m512 go = _mm512_add_ps(TLG_LD(g + L.o * H), TLG_LD(s.bias + L.o * H));
      const __m512 cp = TLG_LD(s.cs_prev + row);
      if constexpr (kPeep) {
        gi = _mm512_fmadd_ps(cp, TLG_LD(s.wci), gi);
        gf = _mm512_fmadd_ps(cp, TLG_LD(s.wcf), gf);
      }
      const __m512 i = v16::sigmoid(gi), ci = v16::tanh(gc), f = v16::sigmoid(gf);
      __m512 cs = _mm512_fmadd_ps(i, ci, _mm512_mul_ps(f, cp));
      if constexpr (kClip) cs = _mm512_min_ps(clip, _mm512_max_ps(neg_clip, cs));
      const __m512 co = v16::tanh(cs);
      if constexpr (kPeep) go = _mm512_fmadd_ps(cs, TLG_LD(s.wco), go);
#undef TLG_LD
      const __m512 o = v16::sigmoid(go);
      const __m512 h = _mm512_mul_ps(o, co);
      if (stream && m == __mmask16(0xFFFF)) {
        _mm512_stream_ps(s.out[0] + row + j, i);
        _mm512_stream_ps(s.out[2] + row + j, f);
        _mm512_stream_ps(s.out[3] + row + j, o);
        _mm512_stream_ps(s.out[4] + row + j, ci);
        _mm512_stream_ps(s.out[5] + row + j, co);
      } else if constexpr (kStoreGates) {
        _mm512_mask_storeu_ps(s.out[0] + row + j, m, i);
        _mm512_mask_storeu_ps(s.out[2] + row + j, m, f);
        _mm512_mask_storeu_ps(s.out[3] + row + j, m, o);
        _mm512_mask_storeu_ps(s.out[4] + row + j, m, ci);
        _mm512_mask_storeu_ps(s.out[5] + row + j, m, co);
      }
      _mm512_mask_storeu_ps(s.out[1] + row + j, m, cs);
      _mm512_mask_storeu_ps(s.out[6] + row + j, m, h);
      if (s.h_acc != nullptr) _mm512_mask_storeu_ps(s.h_acc + row + j, m, h);
    }
  }
  // Non-temporal stores are weakly ordered: drained before anyone (the backward, another
  // thread after the step's barrier) can read them.
  if (streamed_any) _mm_sfence();
}

// CudnnRNN's LSTM row (cudnn_rnn.cpp's lstm_forward_row: gate order i, f, g, o; `bias` is
// bW + bR; c, the state, updated; cn also to `cells`, o·tanh(cn) to `h`), units [j0, j1).
// kStoreActs false: the activations `a` and `cells` are not written (inference).
template <bool kStoreActs>
TLG_AVX512 void cudnn_lstm_row(int64_t H, int64_t j0, int64_t j1, const float* p,
                               const float* bias, float* a, float* c, float* cells, float* h) {
  for (int64_t j = j0; j < j1; j += 16) {
    const __mmask16 m = v16::tail_mask(j1 - j);
#define TLG_LD(q) _mm512_maskz_loadu_ps(m, (q) + j)
    const __m512 i = v16::sigmoid(_mm512_add_ps(TLG_LD(p), TLG_LD(bias)));
    const __m512 f = v16::sigmoid(_mm512_add_ps(TLG_LD(p + H), TLG_LD(bias + H)));
    const __m512 g = v16::tanh(_mm512_add_ps(TLG_LD(p + 2 * H), TLG_LD(bias + 2 * H)));
    const __m512 o = v16::sigmoid(_mm512_add_ps(TLG_LD(p + 3 * H), TLG_LD(bias + 3 * H)));
    const __m512 cn = _mm512_fmadd_ps(f, TLG_LD(c), _mm512_mul_ps(i, g));
#undef TLG_LD
    if constexpr (kStoreActs) {
      _mm512_mask_storeu_ps(a + j, m, i);
      _mm512_mask_storeu_ps(a + H + j, m, f);
      _mm512_mask_storeu_ps(a + 2 * H + j, m, g);
      _mm512_mask_storeu_ps(a + 3 * H + j, m, o);
      _mm512_mask_storeu_ps(cells + j, m, cn);
    }
    _mm512_mask_storeu_ps(c + j, m, cn);
    _mm512_mask_storeu_ps(h + j, m, _mm512_mul_ps(o, v16::tanh(cn)));
  }
}

#undef TLG_AVX512
#undef TLG_AVX512_INLINE
#pragma GCC diagnostic pop
#endif  // TLG_HAVE_AVX512_CELL

}  // namespace torch_lstm_grad::cpu
