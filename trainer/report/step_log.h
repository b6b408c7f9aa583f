// --log_jsonl: one JSON object per line for the logged steps of a training
// run, so that `tail -f`, jq or a log shipper can follow it. Two kinds of
// line (docs/MONITORING.md lists the fields):
//
//   {"event":"step","time":1795600000.123,"rank":0,"epoch":0,"step":11,
//    "batch":10,"loss":0.41,"lr":0.5,"samples_per_second":1210,
//    "step_seconds":0.098,"exposed_communication_seconds":0.004}
//   {"event":"epoch", ... the same keys, for the whole epoch}
//
// "step" lines are this rank's own numbers for that step (samples per second
// over its epoch so far); "epoch" lines are the epoch's numbers as the
// metrics JSON has them (loss over all ranks, samples per second of all
// ranks, the mean step time, the exposed communication summed over the
// epoch, slowest rank). Non-finite numbers are written as null.
//
// Each line goes to the file in one write(2) on a descriptor opened with
// O_APPEND, unbuffered: a reader sees whole lines as soon as they are
// written, and a process that dies leaves no partial line behind (a machine
// that loses power may lose lines the kernel had not yet written). The file
// is appended to, not truncated, so a resumed run continues it.
//
// Thread-compatible: one thread writes.
#ifndef DTRAIN_TRAINER_REPORT_STEP_LOG_H_
#define DTRAIN_TRAINER_REPORT_STEP_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/posix_io.h"

namespace dtrain::trainer {

struct StepLogLine {
  const char* event = "step";  // "step" or "epoch"
  double time = 0;             // Unix time, seconds
  int rank = 0;
  int64_t epoch = 0;
  int64_t step = 0;   // global step after this one
  int64_t batch = 0;  // 0-based in the epoch; the epoch's steps for "epoch"
  double loss = 0;
  double lr = 0;
  double samples_per_second = 0;
  double step_seconds = 0;
  double exposed_communication_seconds = 0;
};

// The path a rank writes, or "" when it writes none: `path` with every
// "{rank}" replaced by the rank, for every rank; without the placeholder,
// `path` itself for rank 0 only. "" for an empty path.
std::string StepLogPath(const std::string& path, int rank);

class StepLog {
 public:
  // Opens (creating, mode 0644) `path` for appending. Errors name the path:
  // "--log_jsonl: cannot open PATH: <reason>".
  static absl::StatusOr<std::unique_ptr<StepLog>> Open(const std::string& path);

  // Formats into a fixed buffer (no allocation) and writes the line. Errors
  // name the path and the reason (a full disk).
  absl::Status Write(const StepLogLine& line);

  const std::string& path() const { return path_; }

 private:
  StepLog(std::string path, base::UniqueFd fd)
      : path_(std::move(path)), fd_(std::move(fd)) {}

  const std::string path_;
  base::UniqueFd fd_;
};

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_STEP_LOG_H_
