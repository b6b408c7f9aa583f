#include "trainer/report/report_options.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dtrain::trainer {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", why));
}

}  // namespace

absl::Status ValidateReportOptions(const ReportOptions& o) {
  if (o.print_freq < 1) return Invalid("print_freq", "must be >= 1");
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    return Invalid("metrics_port",
                   absl::StrCat(o.metrics_port,
                                " is not a port (0..65535; 0: a free one; -1: "
                                "off)"));
  }
  if (o.metrics_ranks != "0" && o.metrics_ranks != "all") {
    return Invalid("metrics_ranks",
                   absl::StrCat("'", o.metrics_ranks, "' is not 0 or all"));
  }
  if (o.metrics_bind.empty()) return Invalid("metrics_bind", "is empty");
  if (o.trace_first_step < 1 || o.trace_last_step < o.trace_first_step) {
    return Invalid("trace_steps",
                   absl::StrCat(o.trace_first_step, ":", o.trace_last_step,
                                " is not a range of steps A:B with 1 <= A <= "
                                "B"));
  }
  return absl::OkStatus();
}

absl::Status ParseTraceSteps(const std::string& text, ReportOptions* o) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int64_t first = 0;
  int64_t last = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts[1], &last) || first < 1 || last < first) {
    return Invalid("trace_steps",
                   absl::StrCat("'", text,
                                "' is not a range of steps A:B with 1 <= A <= "
                                "B (e.g. 10:20)"));
  }
  o->trace_first_step = first;
  o->trace_last_step = last;
  return absl::OkStatus();
}

absl::StatusOr<ProgressStyle> ParseProgressStyle(const std::string& text) {
  for (ProgressStyle style : {ProgressStyle::kAuto, ProgressStyle::kBar,
                              ProgressStyle::kLines, ProgressStyle::kNone}) {
    if (text == ProgressStyleName(style)) return style;
  }
  return Invalid("progress", absl::StrCat("unknown style '", text,
                                          "'; known: auto, bar, lines, none"));
}

const char* ProgressStyleName(ProgressStyle style) {
  switch (style) {
    case ProgressStyle::kAuto:
      return "auto";
    case ProgressStyle::kBar:
      return "bar";
    case ProgressStyle::kLines:
      return "lines";
    case ProgressStyle::kNone:
      return "none";
  }
  return "auto";
}

}  // namespace dtrain::trainer
