// The instruction set the CPU kernels run, chosen at run time as ATen chooses its own: the best
// the CPU has, or lower where ATEN_CPU_CAPABILITY says so ("default", "avx2", "avx512"), so one
// AVX-512 machine can measure the AVX2 path (with ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN).
//
// A hot loop is written once, as the always-inlined `body` of a kernel struct F, and compiled
// three times by the wrappers of IsaVersions: for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3)
// and the baseline. `dispatch<F>(args...)` calls the one for isa(). The FMA versions can differ
// from the baseline in the last bit (a fused multiply-add rounds once).
#pragma once

#include <ATen/Version.h>

#include <string>
#include <utility>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TLG_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define TLG_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#define TLG_ISA_VERSIONS 1
#else
#define TLG_TARGET_AVX512
#define TLG_TARGET_AVX2
#define TLG_ISA_VERSIONS 0
#endif

// Forced inlining: a call inside the per-row loops would stop them from vectorising.
#define TLG_INLINE inline __attribute__((always_inline))

namespace torch_lstm_grad::cpu {

enum class Isa : int { kBase = 0, kAvx2 = 1, kAvx512 = 2 };

// ATen's choice (at::get_cpu_capability: "AVX512", "AVX2", "DEFAULT", or another architecture's
// name), read once. ATen's AVX512 needs AVX-512 F, BW, VL and DQ, which x86-64-v4 is.
inline Isa isa() {
  static const Isa chosen = [] {
    if (!TLG_ISA_VERSIONS) return Isa::kBase;
    const std::string c = at::get_cpu_capability();
    return c == "AVX512" ? Isa::kAvx512 : (c == "AVX2" ? Isa::kAvx2 : Isa::kBase);
  }();
  return chosen;
}

inline const char* isa_name(Isa i) {
  return i == Isa::kAvx512 ? "avx512" : (i == Isa::kAvx2 ? "avx2" : "default");
}

template <class F>
struct IsaVersions {
  template <class... A>
  TLG_TARGET_AVX512 static void avx512(A... a) {
    F::body(a...);
  }
  template <class... A>
  TLG_TARGET_AVX2 static void avx2(A... a) {
    F::body(a...);
  }
  template <class... A>
  static void base(A... a) {
    F::body(a...);
  }
};

// F::body compiled for isa(), called with `a` (references stay references).
template <class F, class... A>
void dispatch(A&&... a) {
  switch (isa()) {
    case Isa::kAvx512:
      return IsaVersions<F>::template avx512<A...>(std::forward<A>(a)...);
    case Isa::kAvx2:
      return IsaVersions<F>::template avx2<A...>(std::forward<A>(a)...);
    default:
      return IsaVersions<F>::template base<A...>(std::forward<A>(a)...);
  }
}

}  // namespace torch_lstm_grad::cpu
