#include "base/torch_guard.h"

#include <c10/util/Exception.h>

namespace dtrain::base {

std::string ExceptionMessage(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace dtrain::base
