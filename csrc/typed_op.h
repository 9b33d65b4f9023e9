// One of the library's own ops, looked up by name with its C++ signature, for the kernels that
// call other ops through the dispatcher (each device's kernel runs; callers keep the handle in
// a function-local static, looked up once).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_lstm_grad {

template <class Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace torch_lstm_grad
