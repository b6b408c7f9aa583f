// Early returns on error for functions that return absl::Status or
// absl::StatusOr<T> (Debian's Abseil does not ship its own status macros).
//
//   DTRAIN_RETURN_IF_ERROR(file.Sync());
//   DTRAIN_ASSIGN_OR_RETURN(std::string bytes, base::ReadFile(path));
#ifndef DTRAIN_BASE_STATUS_MACROS_H_
#define DTRAIN_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the absl::Status `expr` from the enclosing function unless it is OK.
#define DTRAIN_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    if (absl::Status _status = (expr); !_status.ok()) { \
      return _status;                                   \
    }                                                   \
  } while (false)

// Evaluates `expr` (an absl::StatusOr<T>); returns its status from the
// enclosing function unless it is OK, else moves its value into `lhs`, which
// may declare a variable. Expands to several statements: not for the body of
// an unbraced if.
#define DTRAIN_ASSIGN_OR_RETURN(lhs, expr)                                   \
  DTRAIN_ASSIGN_OR_RETURN_IMPL_(DTRAIN_STATUS_CONCAT_(_status_or, __LINE__), \
                                lhs, expr)

#define DTRAIN_ASSIGN_OR_RETURN_IMPL_(status_or, lhs, expr)  \
  auto status_or = (expr);                                   \
  if (!status_or.ok()) return std::move(status_or).status(); \
  lhs = std::move(status_or).value()

#define DTRAIN_STATUS_CONCAT_(a, b) DTRAIN_STATUS_CONCAT_IMPL_(a, b)
#define DTRAIN_STATUS_CONCAT_IMPL_(a, b) a##b

#endif  // DTRAIN_BASE_STATUS_MACROS_H_
