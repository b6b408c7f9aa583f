// This process's memory as the kernel counts it: its peak resident set
// (getrusage's ru_maxrss) and its proportional set size now (PSS, Linux's
// /proc/self/smaps_rollup: each shared page divided by the number of
// processes that map it). ru_maxrss counts every shared page a process has
// touched in full, so for ranks that share memory (the shm backend's
// buffers) only PSS adds up to what the machine holds.
//
// Thread-safe.
#ifndef DTRAIN_BASE_PROCESS_MEMORY_H_
#define DTRAIN_BASE_PROCESS_MEMORY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::base {

struct ProcessMemory {
  int64_t peak_rss_bytes = 0;
  int64_t pss_bytes = 0;
};

// kUnavailable where /proc/self/smaps_rollup cannot be read (not Linux, or
// a kernel before 4.14); kInternal for a file without a Pss line.
absl::StatusOr<ProcessMemory> ReadProcessMemory();

// The "Pss:" line of an smaps_rollup text, in bytes.
absl::StatusOr<int64_t> ParsePssBytes(absl::string_view smaps_rollup);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_PROCESS_MEMORY_H_
