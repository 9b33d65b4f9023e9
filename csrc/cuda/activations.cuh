// The activation policy of the shared cell math (lstm_block.h's SigmoidGate / TanhCell,
// gru_seq.h) on the GPU: full-precision libm functions, no fast-math intrinsics, for parity with
// the CPU kernels.
#pragma once

namespace torch_lstm_grad {

struct CudaAct {
  template <typename T>
  __device__ static T sigmoid(T x) {
    return T(1) / (T(1) + ::exp(-x));
  }
  template <typename T>
  __device__ static T tanh(T x) {
    return ::tanh(x);
  }
};

}  // namespace torch_lstm_grad
