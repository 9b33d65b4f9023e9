// sigmoid and tanh for the CPU pointwise passes.
//
// float: branch-free range reduction plus a polynomial, written so the compiler can vectorise
// the per-row loops that call them (glibc's scalar expf/tanhf cannot be). Accuracy is within a
// few ulp of the correctly rounded result, the same budget as TF's Eigen approximations
// (docs/tf-semantics.md §9.2). tanh goes through expm1 rather than exp so small arguments keep
// their relative accuracy. double (gradcheck) uses libm: accuracy over speed.
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

// Eight floats as one GCC vector (and eight int32): the float functions below are written once,
// as templates, and run on it lane by lane with the same operations in the same order, so a loop
// over such vectors gives the values of the scalar loop (the compiler forms the same fused
// multiply-adds from the same expressions; only a NaN's sign and payload may differ). BlockLSTM's
// forward rows use it where the AVX-512 cell does not run (lstm_backend.h).
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// f32x8 from / to eight unaligned floats.
TLG_INLINE f32x8 load8(const float* q) {
  f32x8 v;
  std::memcpy(&v, q, sizeof(v));
  return v;
}
TLG_INLINE void store8(float* q, f32x8 v) { std::memcpy(q, &v, sizeof(v)); }

namespace detail {

// std::min / std::max lane by lane ((b < a) ? b : a and (a < b) ? b : a): a NaN a passes.
TLG_INLINE float lane_min(float a, float b) { return std::min(a, b); }
TLG_INLINE float lane_max(float a, float b) { return std::max(a, b); }
TLG_INLINE f32x8 lane_min(f32x8 a, float b) {
  const f32x8 v = f32x8{} + b;
  return v < a ? v : a;
}
TLG_INLINE f32x8 lane_max(f32x8 a, float b) {
  const f32x8 v = f32x8{} + b;
  return a < v ? v : a;
}
TLG_INLINE float lane_abs(float x) { return std::abs(x); }
TLG_INLINE f32x8 lane_abs(f32x8 x) { return (f32x8)((i32x8)x & 0x7fffffff); }
TLG_INLINE float lane_copysign(float m, float s) { return std::copysign(m, s); }
TLG_INLINE f32x8 lane_copysign(f32x8 m, f32x8 s) {
  return (f32x8)(((i32x8)m & 0x7fffffff) | ((i32x8)s & INT32_MIN));
}

// 2^n for an integral n in [-126, 127], by building the exponent field directly.
TLG_INLINE float pow2i(float n) {
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}
TLG_INLINE f32x8 pow2i(f32x8 n) {
  return (f32x8)((__builtin_convertvector(n, i32x8) + 127) << 23);
}

// x = n·ln2 + r with |r| <= ln2/2 (Cody–Waite split of ln2 keeps r exact to float precision).
// Adding and subtracting 1.5·2^23 rounds to the nearest integer without a libm call.
template <class T>
TLG_INLINE void reduce(T x, T& n, T& r) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.428606765330187045e-06f;
  n = (x * kLog2e + kRound) - kRound;
  r = (x - n * kLn2Hi) - n * kLn2Lo;
}

// e^r − 1 for |r| <= ln2/2: the Taylor series to r^8/8!, truncation error < 1e-9.
template <class T>
TLG_INLINE T expm1_small(T r) {
  T p = r * (1.0f / 40320.0f) + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r;
}

template <class T>
TLG_INLINE T exp_approx(T x) {
  x = lane_min(lane_max(x, -87.0f), 88.0f);
  T n, r;
  reduce(x, n, r);
  return pow2i(n) * (1.0f + expm1_small(r));
}

template <class T>
TLG_INLINE T expm1_approx(T x) {
  x = lane_min(lane_max(x, -87.0f), 88.0f);
  T n, r;
  reduce(x, n, r);
  const T s = pow2i(n);
  return s * expm1_small(r) + (s - 1.0f);
}

template <class T>
TLG_INLINE T sigmoid(T x) {
  return 1.0f / (1.0f + exp_approx(-x));
}

template <class T>
TLG_INLINE T tanh(T x) {
  // tanh|x| = −m / (2 + m) with m = expm1(−2|x|); tanh(9) rounds to 1 in float.
  const T t = lane_min(lane_abs(x), 9.0f);
  const T m = expm1_approx(-2.0f * t);
  return lane_copysign(-m / (2.0f + m), x);
}

}  // namespace detail

TLG_INLINE float exp_approx(float x) { return detail::exp_approx(x); }
TLG_INLINE float expm1_approx(float x) { return detail::expm1_approx(x); }
TLG_INLINE float sigmoid(float x) { return detail::sigmoid(x); }
TLG_INLINE float tanh(float x) { return detail::tanh(x); }
TLG_INLINE f32x8 sigmoid(f32x8 x) { return detail::sigmoid(x); }
TLG_INLINE f32x8 tanh(f32x8 x) { return detail::tanh(x); }

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
