// Run-time flags as compile-time template arguments: the kernels are instantiated per flag
// (peepholes, clip, which activation, ...) so that their loops have no branches, and a caller
// picks the instantiation for its flags with
//
//   const auto rows = dispatch_bools(
//       [](auto peep, auto clip) { return &forward_rows<scalar_t, peep, clip>; }, peep, clip);
//
// dispatch_bools(f, b0, b1, ...) calls f(std::bool_constant<b0>{}, std::bool_constant<b1>{},
// ...) and returns its result, which must be of one type for every combination (a function
// pointer, a kernel). Each parameter converts to its bool in a constant expression (a template
// argument, `if constexpr`, std::conditional_t). Every combination of the flags passed is
// instantiated; a flag that is fixed for a caller is not passed but written into f, so a caller
// compiles only the subset it uses. Host code only (C++17: the CPU files and nvcc's host side).
#pragma once

#include <type_traits>
#include <utility>

namespace torch_lstm_grad {
namespace detail {

template <bool... kFixed, class F>
auto dispatch_bools_from(F&& f) {
  return std::forward<F>(f)(std::bool_constant<kFixed>{}...);
}

// kFixed: the flags already turned into constants; `b`, `rest`: those still to turn.
template <bool... kFixed, class F, class... Rest>
auto dispatch_bools_from(F&& f, bool b, Rest... rest) {
  if (b) return dispatch_bools_from<kFixed..., true>(std::forward<F>(f), rest...);
  return dispatch_bools_from<kFixed..., false>(std::forward<F>(f), rest...);
}

}  // namespace detail

template <class F, class... Bools>
auto dispatch_bools(F&& f, Bools... flags) {
  static_assert((std::is_same_v<Bools, bool> && ...), "dispatch_bools: pass bools");
  return detail::dispatch_bools_from<>(std::forward<F>(f), flags...);
}

}  // namespace torch_lstm_grad
