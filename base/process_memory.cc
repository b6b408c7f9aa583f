#include "base/process_memory.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace dtrain::base {

absl::StatusOr<int64_t> ParsePssBytes(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Pss:")) continue;
    line = absl::StripAsciiWhitespace(line);
    // "1234 kB": the kernel always writes kB.
    if (!absl::ConsumeSuffix(&line, "kB")) break;
    int64_t kib = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) break;
    return kib * 1024;
  }
  return absl::InternalError("smaps_rollup: no \"Pss: N kB\" line");
}

absl::StatusOr<ProcessMemory> ReadProcessMemory() {
  ProcessMemory m;
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) == 0) {
    m.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  }
  // procfs files report a size of 0: read until the end.
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("/proc/self/smaps_rollup: ", std::strerror(errno)));
  }
  std::string text;
  char chunk[4096];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof(chunk), f)) > 0)
    text.append(chunk, n);
  std::fclose(f);
  DTRAIN_ASSIGN_OR_RETURN(m.pss_bytes, ParsePssBytes(text));
  return m;
}

}  // namespace dtrain::base
