// What the CPU the process runs on can do, asked once through PyTorch's own cpuinfo query, for
// the kernels that pick an instruction set at run time (gemm.h, transpose.h).
#pragma once

#include <ATen/cpu/Utils.h>

#include "isa.h"

namespace torch_lstm_grad::cpu {

// Whether the CPU has the named feature, by cpuinfo's names as PyTorch reports them ("avx2",
// "avx512_f", "avx512_bf16", "amx_bf16"; note the underscores): an unknown name is false.
inline bool cpu_has(const char* feature) {
  const auto caps = at::cpu::get_cpu_capabilities();
  const auto it = caps.find(feature);
  return it != caps.end() && it->second.isBool() && it->second.toBool();
}

}  // namespace torch_lstm_grad::cpu
