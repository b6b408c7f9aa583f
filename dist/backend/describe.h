// How the distributed layers describe sizes and durations in messages, so
// that the backends and DDP use one wording: "2.1 MiB", "350ms" (dtypes and
// shapes: base/tensor_text.h).
#ifndef DTRAIN_DIST_BACKEND_DESCRIBE_H_
#define DTRAIN_DIST_BACKEND_DESCRIBE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace dtrain::backend {

// "512 B", "16 KiB", "2.1 MiB".
std::string FormatBytes(int64_t bytes);

// A duration rounded for people: "350ms", "1.2s".
std::string FormatElapsed(absl::Duration d);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_DESCRIBE_H_
