// Checks a merged trace (train --trace) for trace_test.sh: the Chrome trace
// format's rules (base/chrome_trace.h), every expected rank present with each
// kind of slice and every traced step, and, for ranks on one host, the
// measured clock offsets within their stated error (the true offset is 0).
//
//   trace_check --trace=FILE --ranks=N [--steps=A:B] [--missing=R]
//               [--failure]
//
// Exit 0 and "ok" when it passes, 1 and the first problem otherwise.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/chrome_trace.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, trace, "", "The merged trace.");
ABSL_FLAG(int, ranks, 2, "The run's ranks.");
ABSL_FLAG(std::string, steps, "",
          "A:B: each present rank has a slice per step (default: the file's "
          "\"steps\" note).");
ABSL_FLAG(int, missing, -1, "A rank the file must name as missing.");
ABSL_FLAG(bool, failure, false,
          "The run failed: a \"failure\" instant, steps may be cut short.");

namespace {

using Json = nlohmann::json;

int Fail(const std::string& why) {
  std::cerr << "trace_check: " << why << "\n";
  return 1;
}

int64_t Note(const Json& other, const std::string& key, bool* ok) {
  int64_t value = 0;
  *ok = other.contains(key) && other[key].is_string() &&
        absl::SimpleAtoi(other[key].get<std::string>(), &value);
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int ranks = absl::GetFlag(FLAGS_ranks);
  const int missing = absl::GetFlag(FLAGS_missing);
  const bool failure = absl::GetFlag(FLAGS_failure);
  absl::StatusOr<std::string> text =
      dtrain::base::ReadFile(absl::GetFlag(FLAGS_trace), {"a trace", 1 << 30});
  if (!text.ok()) return Fail(std::string(text.status().message()));

  dtrain::base::TraceExpectations expect;
  expect.notes = {"clock_alignment", "steps", "origin_unix_us"};
  for (int r = 0; r < ranks; ++r) {
    if (r == missing) continue;
    expect.pids.push_back(r);
    expect.notes.push_back(absl::StrCat("clock_offset_us/rank", r));
    expect.notes.push_back(absl::StrCat("clock_error_us/rank", r));
  }
  if (absl::Status st = dtrain::base::CheckChromeTrace(*text, expect);
      !st.ok()) {
    return Fail(std::string(st.message()));
  }
  const Json trace = Json::parse(*text);
  const Json& other = trace["otherData"];
  if (other["ranks"] != absl::StrCat(ranks))
    return Fail(absl::StrCat("ranks note ", other["ranks"].dump()));

  std::string steps = absl::GetFlag(FLAGS_steps);
  if (steps.empty()) steps = other["steps"].get<std::string>();
  int64_t first = 0, last = 0;
  const size_t colon = steps.find(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(steps.substr(0, colon), &first) ||
      !absl::SimpleAtoi(steps.substr(colon + 1), &last)) {
    return Fail(absl::StrCat("bad steps ", steps));
  }

  // One host: every measured offset is 0 within its error (1 us rounding).
  for (int r : expect.pids) {
    bool ok_offset = false, ok_error = false;
    const int64_t offset =
        Note(other, absl::StrCat("clock_offset_us/rank", r), &ok_offset);
    const int64_t error =
        Note(other, absl::StrCat("clock_error_us/rank", r), &ok_error);
    if (!ok_offset || !ok_error)
      return Fail(absl::StrCat("rank ", r, " clock"));
    if (std::llabs(offset) > error + 1) {
      return Fail(absl::StrCat("rank ", r, ": offset ", offset,
                               " us is outside its stated error ", error,
                               " us"));
    }
  }

  std::map<int, std::set<std::string>> names;
  bool failed_instant = false;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") names[e["pid"].get<int>()].insert(e["name"]);
    if (e["ph"] == "i" && e["name"] == "failure") failed_instant = true;
  }
  for (int r : expect.pids) {
    for (const char* kind : {"data wait", "forward", "backward",
                             "gradient sync", "optimizer", "allreduce"}) {
      if (names[r].count(kind) == 0)
        return Fail(absl::StrCat("rank ", r, " has no '", kind, "' slice"));
    }
    // A failed run has the steps before its failure.
    for (int64_t s = first; s <= (failure ? first : last); ++s) {
      if (names[r].count(absl::StrCat("step ", s)) == 0)
        return Fail(absl::StrCat("rank ", r, " has no slice for step ", s));
    }
  }
  if (missing >= 0) {
    if (!other.contains("missing") ||
        other["missing"].get<std::string>().find(
            absl::StrCat("rank ", missing, ":")) == std::string::npos) {
      return Fail(absl::StrCat("rank ", missing, " is not named missing"));
    }
  }
  if (failure && !failed_instant) return Fail("no 'failure' instant");
  std::cout << "ok: " << expect.pids.size() << " of " << ranks
            << " ranks, steps " << steps << "\n";
  return 0;
}
