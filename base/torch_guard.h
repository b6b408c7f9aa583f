// The boundary between LibTorch's exceptions and the project's absl::Status:
// library functions that call LibTorch run the calls through GuardTorch so
// that a throw (a failed allocation, a device error, a shape LibTorch
// rejects) becomes a Status with the caller's context, never an exception
// across a library boundary. Stateless and thread-safe.
#ifndef DTRAIN_BASE_TORCH_GUARD_H_
#define DTRAIN_BASE_TORCH_GUARD_H_

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

// The exception's message; for LibTorch's c10::Error without the C++
// backtrace it appends to what().
std::string ExceptionMessage(const std::exception& e);

// Returns f(), which returns absl::Status or absl::StatusOr<T>. If f throws a
// std::exception (c10::Error included), returns instead a Status with `code`
// and the message `prefix` + ExceptionMessage(e): the prefix carries its own
// separator, e.g. "cannot encode checkpoint: ".
template <typename F>
auto GuardTorch(absl::StatusCode code, absl::string_view prefix, F&& f)
    -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return absl::Status(code, absl::StrCat(prefix, ExceptionMessage(e)));
  }
}

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_TORCH_GUARD_H_
