// DTRAIN_RETURN_IF_ERROR(expr): returns the absl::Status `expr` from the
// enclosing function unless it is OK (Debian's Abseil does not ship its own
// status macros).
#ifndef DTRAIN_TRAINER_STATUS_MACROS_H_
#define DTRAIN_TRAINER_STATUS_MACROS_H_

#include "absl/status/status.h"

#define DTRAIN_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    if (absl::Status _status = (expr); !_status.ok()) { \
      return _status;                                   \
    }                                                   \
  } while (false)

#endif  // DTRAIN_TRAINER_STATUS_MACROS_H_
