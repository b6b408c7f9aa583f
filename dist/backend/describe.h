// How the distributed layers describe tensors, sizes and durations in messages,
// so that the backends and DDP use one wording: "float32", "2.1 MiB", "350ms".
#ifndef DTRAIN_DIST_BACKEND_DESCRIBE_H_
#define DTRAIN_DIST_BACKEND_DESCRIBE_H_

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace dtrain::backend {

// PyTorch's names: "float32", "int64", "bfloat16", ...
std::string DtypeName(at::ScalarType type);

// "512 B", "16 KiB", "2.1 MiB".
std::string FormatBytes(int64_t bytes);

// A duration rounded for people: "350ms", "1.2s".
std::string FormatElapsed(absl::Duration d);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_DESCRIBE_H_
