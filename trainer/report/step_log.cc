#include "trainer/report/step_log.h"

#include <fcntl.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace dtrain::trainer {
namespace {

constexpr char kRankPlaceholder[] = "{rank}";

// Appends to a fixed buffer; remembers whether anything did not fit.
class LineBuffer {
 public:
  void Append(const char* format, ...) __attribute__((format(printf, 2, 3))) {
    if (overflow_) return;
    va_list args;
    va_start(args, format);
    const int n =
        std::vsnprintf(buf_ + size_, sizeof(buf_) - size_, format, args);
    va_end(args);
    if (n < 0 || static_cast<size_t>(n) >= sizeof(buf_) - size_) {
      overflow_ = true;
      return;
    }
    size_ += static_cast<size_t>(n);
  }
  // ,"key":number (null when not finite); %.9g keeps a float64's meaningful
  // digits for times and losses.
  void Number(const char* key, double value) {
    if (std::isfinite(value)) {
      Append(",\"%s\":%.9g", key, value);
    } else {
      Append(",\"%s\":null", key);
    }
  }
  bool overflow() const { return overflow_; }
  absl::string_view view() const { return absl::string_view(buf_, size_); }

 private:
  char buf_[512];
  size_t size_ = 0;
  bool overflow_ = false;
};

}  // namespace

std::string StepLogPath(const std::string& path, int rank) {
  if (path.empty()) return "";
  if (path.find(kRankPlaceholder) == std::string::npos)
    return rank == 0 ? path : "";
  return absl::StrReplaceAll(path, {{kRankPlaceholder, absl::StrCat(rank)}});
}

absl::StatusOr<std::unique_ptr<StepLog>> StepLog::Open(
    const std::string& path) {
  base::UniqueFd fd(base::RetryOnEintr([&] {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
                  0644);
  }));
  if (!fd.valid()) {
    return base::ErrnoStatus(errno,
                             absl::StrCat("--log_jsonl: cannot open ", path));
  }
  return std::unique_ptr<StepLog>(new StepLog(path, std::move(fd)));
}

absl::Status StepLog::Write(const StepLogLine& l) {
  LineBuffer b;
  // The event is one of the two literals: no escaping needed.
  b.Append(
      "{\"event\":\"%s\",\"time\":%.3f,\"rank\":%d,\"epoch\":%lld,"
      "\"step\":%lld,\"batch\":%lld",
      l.event, l.time, l.rank, static_cast<long long>(l.epoch),
      static_cast<long long>(l.step), static_cast<long long>(l.batch));
  b.Number("loss", l.loss);
  b.Number("lr", l.lr);
  b.Number("samples_per_second", l.samples_per_second);
  b.Number("step_seconds", l.step_seconds);
  b.Number("exposed_communication_seconds", l.exposed_communication_seconds);
  b.Append("}\n");
  if (b.overflow()) {
    return absl::InternalError(
        absl::StrCat("--log_jsonl: a line for ", path_, " is too long"));
  }
  if (const int error = base::WriteFull(fd_.get(), b.view()); error != 0) {
    return base::ErrnoStatus(
        error, absl::StrCat("--log_jsonl: cannot write to ", path_));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
