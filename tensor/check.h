#pragma once
// The one checking helper for errors, used by every layer above.
//
//   GF_CHECK(a.ndim() >= 2, "matmul: {} @ {}: both operands need at least 2 dims", shape_str(a.shape()), ...);
//   GF_FAIL("set_parameter: no parameter named '{}'", name);
//
// GF_CHECK throws std::invalid_argument with the fmt-formatted message when cond is false; GF_FAIL
// throws it unconditionally. The _AS variants take the exception type first, for errors whose type
// callers and tests rely on: std::out_of_range (an index or dim outside its range), std::length_error
// (a full KV cache), std::runtime_error (anomaly mode, I/O, a freed graph) and std::logic_error (a bug
// in gradflow itself). The format string is checked at compile time and the arguments are evaluated
// only when the check fails, so checks cost nothing on the hot path.
//
// Messages start with the op ("matmul: ", "MultiheadAttention: ") and name the shapes involved
// through shape_str, so an error says what failed and where without a debugger.
#include <fmt/core.h>

#include <stdexcept>
#include <utility>

namespace gf::detail {

template <class E, class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw E(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace gf::detail

#define GF_FAIL_AS(E, ...) ::gf::detail::fail<E>(__VA_ARGS__)
#define GF_CHECK_AS(E, cond, ...)          \
  do {                                     \
    if (!(cond)) [[unlikely]]              \
      GF_FAIL_AS(E, __VA_ARGS__);          \
  } while (0)

#define GF_FAIL(...) GF_FAIL_AS(std::invalid_argument, __VA_ARGS__)
#define GF_CHECK(cond, ...) GF_CHECK_AS(std::invalid_argument, cond, __VA_ARGS__)
