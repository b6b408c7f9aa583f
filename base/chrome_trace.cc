#include "base/chrome_trace.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dtrain::base {
namespace {

using Json = nlohmann::json;

Json Metadata(absl::string_view what, int pid, int tid, Json args) {
  Json e = {{"name", std::string(what)},
            {"ph", "M"},
            {"pid", pid},
            {"args", std::move(args)}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

// "event 12 ('forward')" for messages.
std::string Which(size_t index, const Json& e) {
  std::string name;
  if (e.is_object() && e.contains("name") && e["name"].is_string())
    name = absl::StrCat(" ('", e["name"].get<std::string>(), "')");
  return absl::StrCat("traceEvents[", index, "]", name);
}

absl::Status Broken(size_t index, const Json& e, absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("chrome trace: ", Which(index, e), ": ", rule));
}

bool IsInteger(const Json& e, const char* key) {
  return e.contains(key) && e[key].is_number_integer();
}

bool IsNonNegativeNumber(const Json& e, const char* key) {
  return e.contains(key) && e[key].is_number() && e[key].get<double>() >= 0;
}

}  // namespace

void ChromeTrace::NameProcess(int pid, absl::string_view name) {
  processes_[pid] = std::string(name);
}

void ChromeTrace::NameTrack(int pid, int tid, absl::string_view name) {
  tracks_[{pid, tid}] = std::string(name);
}

void ChromeTrace::Add(TraceSlice slice) { slices_.push_back(std::move(slice)); }

void ChromeTrace::Add(TraceInstant instant) {
  instants_.push_back(std::move(instant));
}

void ChromeTrace::SetNote(absl::string_view key, absl::string_view value) {
  notes_[std::string(key)] = std::string(value);
}

std::string ChromeTrace::ToJson() const {
  Json events = Json::array();
  for (const auto& [pid, name] : processes_) {
    events.push_back(Metadata("process_name", pid, -1, {{"name", name}}));
    events.push_back(
        Metadata("process_sort_index", pid, -1, {{"sort_index", pid}}));
  }
  for (const auto& [track, name] : tracks_) {
    events.push_back(
        Metadata("thread_name", track.first, track.second, {{"name", name}}));
    events.push_back(Metadata("thread_sort_index", track.first, track.second,
                              {{"sort_index", track.second}}));
  }
  for (const TraceSlice& s : slices_) {
    Json e = {{"name", s.name},   {"cat", s.category},    {"ph", "X"},
              {"ts", s.start_us}, {"dur", s.duration_us}, {"pid", s.pid},
              {"tid", s.tid}};
    if (!s.numbers.empty() || !s.texts.empty()) {
      Json args = Json::object();
      for (const auto& [k, v] : s.numbers) args[k] = v;
      for (const auto& [k, v] : s.texts) args[k] = v;
      e["args"] = std::move(args);
    }
    events.push_back(std::move(e));
  }
  for (const TraceInstant& i : instants_) {
    Json e = {{"name", i.name}, {"cat", i.category}, {"ph", "i"},   {"s", "t"},
              {"ts", i.at_us},  {"pid", i.pid},      {"tid", i.tid}};
    if (!i.texts.empty()) {
      Json args = Json::object();
      for (const auto& [k, v] : i.texts) args[k] = v;
      e["args"] = std::move(args);
    }
    events.push_back(std::move(e));
  }
  Json other = Json::object();
  for (const auto& [k, v] : notes_) other[k] = v;
  Json trace = {{"traceEvents", std::move(events)},
                {"displayTimeUnit", "ms"},
                {"otherData", std::move(other)}};
  return trace.dump();
}

absl::Status CheckChromeTrace(absl::string_view json,
                              const TraceExpectations& expect) {
  Json trace = Json::parse(json.begin(), json.end(), nullptr,
                           /*allow_exceptions=*/false);
  if (trace.is_discarded()) {
    return absl::InvalidArgumentError("chrome trace: not JSON");
  }
  const Json* events = &trace;
  if (trace.is_object()) {
    if (!trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
      return absl::InvalidArgumentError(
          "chrome trace: an object without a \"traceEvents\" array");
    }
    events = &trace["traceEvents"];
  } else if (!trace.is_array()) {
    return absl::InvalidArgumentError(
        "chrome trace: neither an object nor an array of events");
  }

  // Per track: the complete events' (start, end, index), and the open "B"s.
  std::map<std::pair<int64_t, int64_t>,
           std::vector<std::tuple<double, double, size_t>>>
      spans;
  std::map<std::pair<int64_t, int64_t>, int> open;
  std::set<int64_t> named, with_slices;
  static const std::set<std::string> kMetadata = {
      "process_name", "thread_name", "process_sort_index", "thread_sort_index",
      "process_labels"};
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    if (!e.is_object()) return Broken(i, e, "not an object");
    if (!e.contains("ph") || !e["ph"].is_string())
      return Broken(i, e, "no phase (\"ph\")");
    if (!e.contains("name") || !e["name"].is_string())
      return Broken(i, e, "no name");
    const std::string ph = e["ph"].get<std::string>();
    if (!IsInteger(e, "pid")) return Broken(i, e, "no integer \"pid\"");
    const int64_t pid = e["pid"].get<int64_t>();
    if (ph == "M") {
      const std::string what = e["name"].get<std::string>();
      if (kMetadata.count(what) == 0)
        return Broken(i, e, "an unknown metadata event");
      if (!e.contains("args") || !e["args"].is_object())
        return Broken(i, e, "metadata without \"args\"");
      if (absl::StrContains(what, "thread") && !IsInteger(e, "tid"))
        return Broken(i, e, "thread metadata without an integer \"tid\"");
      if (what == "process_name") {
        if (!e["args"].contains("name") || !e["args"]["name"].is_string())
          return Broken(i, e, "process_name without args.name");
        named.insert(pid);
      }
      continue;
    }
    if (!IsInteger(e, "tid")) return Broken(i, e, "no integer \"tid\"");
    const std::pair<int64_t, int64_t> track = {pid, e["tid"].get<int64_t>()};
    if (!IsNonNegativeNumber(e, "ts"))
      return Broken(i, e, "no timestamp \"ts\" >= 0");
    const double ts = e["ts"].get<double>();
    if (ph == "X") {
      if (!IsNonNegativeNumber(e, "dur"))
        return Broken(i, e, "a complete event without \"dur\" >= 0");
      spans[track].emplace_back(ts, ts + e["dur"].get<double>(), i);
      with_slices.insert(pid);
    } else if (ph == "i" || ph == "I") {
      if (e.contains("s")) {
        const Json& s = e["s"];
        if (!s.is_string() || (s != "g" && s != "p" && s != "t"))
          return Broken(i, e, "an instant's scope \"s\" is not g, p or t");
      }
    } else if (ph == "B") {
      ++open[track];
    } else if (ph == "E") {
      if (open[track]-- == 0)
        return Broken(i, e, "an end (\"E\") with no begin on its track");
    } else if (ph != "C" && ph != "b" && ph != "e" && ph != "n" && ph != "s" &&
               ph != "t" && ph != "f") {
      return Broken(i, e, absl::StrCat("an unknown phase '", ph, "'"));
    }
  }
  for (auto& [track, list] : spans) {
    std::sort(list.begin(), list.end());
    for (size_t k = 1; k < list.size(); ++k) {
      const double start = std::get<0>(list[k]);
      const double prev_end = std::get<1>(list[k - 1]);
      const size_t index = std::get<2>(list[k]);
      const size_t prev = std::get<2>(list[k - 1]);
      if (start < prev_end) {
        return Broken(
            index, (*events)[index],
            absl::StrCat("overlaps ", Which(prev, (*events)[prev]),
                         " on track (pid ", track.first, ", tid ", track.second,
                         "): it starts at ", start,
                         " us, before that one's end at ", prev_end, " us"));
      }
    }
  }
  for (int pid : expect.pids) {
    if (named.count(pid) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chrome trace: process ", pid, " has no name"));
    }
    if (with_slices.count(pid) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("chrome trace: process ", pid, " has no slices"));
    }
  }
  for (const std::string& note : expect.notes) {
    if (!trace.is_object() || !trace.contains("otherData") ||
        !trace["otherData"].contains(note)) {
      return absl::InvalidArgumentError(
          absl::StrCat("chrome trace: no \"", note, "\" in \"otherData\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace dtrain::base
