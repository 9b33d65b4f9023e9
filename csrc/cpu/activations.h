// sigmoid and tanh for the CPU pointwise passes.
//
// float: branch-free range reduction plus a polynomial, written so the compiler can vectorise
// the per-row loops that call them (glibc's scalar expf/tanhf cannot be). Accuracy is within a
// few ulp of the correctly rounded result, the same budget as TF's Eigen approximations
// (tf_semantics.md §9.2). tanh goes through expm1 rather than exp so small arguments keep their
// relative accuracy. double (gradcheck) uses libm: accuracy over speed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// TLG_INLINE, and the hot per-row loops compiled for AVX-512, AVX2+FMA and baseline x86-64 with
// the one for ATen's instruction set called (isa.h: ATEN_CPU_CAPABILITY honoured): wide vectors
// without building the whole extension for one CPU.
#include "isa.h"

// The per-row loops read several input rows and write several output rows that never overlap;
// GCC cannot prove that (too many pointers for its run-time alias checks), so say it.
#if defined(__GNUC__) && !defined(__clang__)
#define TLG_NO_ALIAS_LOOP _Pragma("GCC ivdep")
#else
#define TLG_NO_ALIAS_LOOP
#endif

namespace torch_lstm_grad::cpu {

// Rows per parallel_for task for rows `width` elements wide: enough work per chunk (~2K
// elements) that OpenMP's fork costs less than it saves.
inline int64_t row_grain(int64_t width) {
  return std::max<int64_t>(1, 2048 / std::max<int64_t>(width, 1));
}

namespace detail {

// 2^n for an integral n in [-126, 127], by building the exponent field directly.
TLG_INLINE float pow2i(float n) {
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// x = n·ln2 + r with |r| <= ln2/2 (Cody–Waite split of ln2 keeps r exact to float precision).
// Adding and subtracting 1.5·2^23 rounds to the nearest integer without a libm call.
TLG_INLINE void reduce(float x, float& n, float& r) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187045e-06f;
  n = (x * kLog2e + kRound) - kRound;
  r = (x - n * kLn2Hi) - n * kLn2Lo;
}

// e^r − 1 for |r| <= ln2/2: the Taylor series to r^8/8!, truncation error < 1e-9.
TLG_INLINE float expm1_small(float r) {
  float p = 1.0f / 40320.0f;
  p = p * r + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r;
}

}  // namespace detail

TLG_INLINE float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  float n, r;
  detail::reduce(x, n, r);
  return detail::pow2i(n) * (1.0f + detail::expm1_small(r));
}

TLG_INLINE float expm1_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  float n, r;
  detail::reduce(x, n, r);
  const float s = detail::pow2i(n);
  return s * detail::expm1_small(r) + (s - 1.0f);
}

TLG_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

TLG_INLINE float tanh(float x) {
  // tanh|x| = −m / (2 + m) with m = expm1(−2|x|); tanh(9) rounds to 1 in float.
  const float t = std::min(std::abs(x), 9.0f);
  const float m = expm1_approx(-2.0f * t);
  return std::copysign(-m / (2.0f + m), x);
}

TLG_INLINE double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
TLG_INLINE double tanh(double x) { return std::tanh(x); }

// The functions above as the activation policy of the shared cell math (lstm_block.h's
// SigmoidGate / TanhCell, gru_seq.h).
struct CpuAct {
  template <typename T>
  static T sigmoid(T x) {
    return cpu::sigmoid(x);
  }
  template <typename T>
  static T tanh(T x) {
    return cpu::tanh(x);
  }
};

}  // namespace torch_lstm_grad::cpu
