// What the CPU the process runs on can do, asked once through PyTorch's own cpuinfo query, for
// the kernels that pick an instruction set at run time (gemm.h, transpose.h); and its L2 size,
// from the C library, for the time loops' split (gemm.h).
#pragma once

#include <ATen/cpu/Utils.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "isa.h"

namespace torch_lstm_grad::cpu {

// Whether the CPU has the named feature, by cpuinfo's names as PyTorch reports them ("avx2",
// "avx512_f", "avx512_bf16", "amx_bf16"; note the underscores): an unknown name is false.
inline bool cpu_has(const char* feature) {
  const auto caps = at::cpu::get_cpu_capabilities();
  const auto it = caps.find(feature);
  return it != caps.end() && it->second.isBool() && it->second.toBool();
}

// One core's L2 cache in bytes as the C library reports it (glibc: from CPUID), or 0 where it
// does not (then gemm.h's time loops never split by rows, which relies on it).
inline int64_t l2_cache_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  static const int64_t bytes = std::max<int64_t>(0, sysconf(_SC_LEVEL2_CACHE_SIZE));
  return bytes;
#else
  return 0;
#endif
}

}  // namespace torch_lstm_grad::cpu
