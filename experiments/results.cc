#include "experiments/results.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dtrain::experiments {
namespace {

// A row: implementation, backend, model, hook, ZeRO stage, instrumentation,
// processes, batch.
using Key = std::tuple<std::string, std::string, std::string, std::string, int,
                       std::string, int, int64_t>;
// A no-communication bound, every hook's: the same without the hook.
using BoundKey =
    std::tuple<std::string, std::string, std::string, int, int64_t>;

Key KeyOf(const RunConfig& c) {
  return {c.implementation, c.backend,         c.model,      c.comm_hook,
          c.zero,           c.instrumentation, c.world_size, c.batch_size};
}

BoundKey BoundKeyOf(const RunConfig& c) {
  return {c.implementation, c.backend, c.model, c.world_size, c.batch_size};
}

// A run's epoch seconds per step.
double StepSeconds(const RunRecord& r) {
  return r.steps > 0 ? r.epoch_seconds / r.steps : 0;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string Variant(const ResultRow& row) {
  return absl::StrCat(row.comm_hook,
                      row.zero == 0 ? "" : absl::StrCat(" zero", row.zero),
                      row.instrumentation == kDefaultInstrumentation
                          ? ""
                          : absl::StrCat(" ", row.instrumentation));
}

std::string DeviceOf(const std::string& backend) {
  return backend == "nccl" ? "cuda" : "cpu";
}

std::vector<SpeedupBaseline> SpeedupBaselines(
    const std::vector<ResultRow>& rows) {
  // (model, device, hook) in first-seen order -> implementation -> pooled
  // runs.
  using BaseKey = std::tuple<std::string, std::string, std::string>;
  std::vector<BaseKey> order;
  std::map<BaseKey, std::map<std::string, std::vector<double>>> pooled;
  for (const ResultRow& r : rows) {
    if (r.world_size != 1 || r.zero != 0 ||
        r.instrumentation != kDefaultInstrumentation ||
        r.run_samples_per_second.empty()) {
      continue;
    }
    const BaseKey key{r.model, DeviceOf(r.backend), r.comm_hook};
    if (pooled.find(key) == pooled.end()) order.push_back(key);
    std::vector<double>& runs = pooled[key][r.implementation];
    runs.insert(runs.end(), r.run_samples_per_second.begin(),
                r.run_samples_per_second.end());
  }
  std::vector<SpeedupBaseline> out;
  for (const auto& key : order) {
    const auto& [model, device, hook] = key;
    // The default hook's baseline serves every hook of its model and device.
    if (hook != kDefaultCommHook &&
        pooled.count({model, device, kDefaultCommHook}) > 0) {
      continue;
    }
    SpeedupBaseline best;
    best.model = model;
    best.device = device;
    best.comm_hook = hook;
    for (const auto& [impl, runs] : pooled[key]) {
      const double median = Median(runs);
      if (median > best.samples_per_second) {
        best.implementation = impl;
        best.samples_per_second = median;
        best.runs = static_cast<int>(runs.size());
      }
    }
    out.push_back(best);
  }
  return out;
}

const SpeedupBaseline* BaselineOf(const ResultRow& row,
                                  const std::vector<SpeedupBaseline>& all) {
  for (const SpeedupBaseline& b : all) {
    if (b.model == row.model && b.device == DeviceOf(row.backend) &&
        (b.comm_hook == kDefaultCommHook || b.comm_hook == row.comm_hook) &&
        b.samples_per_second > 0) {
      return &b;
    }
  }
  return nullptr;
}

Machine ThisMachine(int nnodes) {
  Machine m;
  m.nnodes = nnodes;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) m.cores = CPU_COUNT(&set);
  if (m.cores <= 0) m.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (m.cores < 0) m.cores = 0;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      m.cpu_model = std::string(absl::StripAsciiWhitespace(
          absl::string_view(line).substr(colon + 1)));
    }
    break;
  }
  return m;
}

std::string DescribeCores(const Machine& m) {
  const std::string cores =
      m.cores > 0 ? absl::StrCat(m.cores, m.cores == 1 ? " core" : " cores")
                  : std::string("unknown cores");
  return m.cpu_model.empty() ? cores
                             : absl::StrCat(cores, " (", m.cpu_model, ")");
}

int ProcessesPerMachine(const Machine& m, int world_size) {
  return m.nodes_share_cores ? world_size : world_size / std::max(m.nnodes, 1);
}

bool Oversubscribed(const Machine& m, int world_size) {
  return m.cores > 0 && ProcessesPerMachine(m, world_size) > m.cores;
}

std::string DescribeRepeats(const std::vector<ResultRow>& rows) {
  int most = 0;
  for (const ResultRow& r : rows) most = std::max(most, r.runs);
  return most <= 1 ? std::string("single run per configuration")
                   : absl::StrCat("median of up to ", most, " runs");
}

std::vector<ResultRow> Summarize(const std::vector<RunRecord>& records) {
  std::vector<Key> order;
  std::map<Key, std::vector<const RunRecord*>> synced;
  struct Bound {
    std::vector<double> sps, epoch, step, p50;
  };
  std::map<BoundKey, Bound> bounds;
  for (const RunRecord& r : records) {
    if (!r.config.sync_gradients) {
      if (r.ok) {
        Bound& b = bounds[BoundKeyOf(r.config)];
        b.sps.push_back(r.samples_per_second);
        b.epoch.push_back(r.epoch_seconds);
        b.step.push_back(StepSeconds(r));
        b.p50.push_back(r.step_seconds_p50);
      }
      continue;
    }
    const Key key = KeyOf(r.config);
    if (synced.find(key) == synced.end()) order.push_back(key);
    synced[key].push_back(&r);
  }
  std::vector<ResultRow> rows;
  for (const Key& key : order) {
    ResultRow row;
    std::tie(row.implementation, row.backend, row.model, row.comm_hook,
             row.zero, row.instrumentation, row.world_size, row.batch_size) =
        key;
    row.train_flags = synced[key].front()->config.train_flags;
    std::vector<double> sps, epoch, step, wall, startup, exposed, data, p50,
        state, rss;
    for (const RunRecord* r : synced[key]) {
      if (!r->ok) {
        ++row.failed;
        if (row.error.empty()) row.error = r->error;
        continue;
      }
      ++row.runs;
      sps.push_back(r->samples_per_second);
      row.run_samples_per_second.push_back(r->samples_per_second);
      epoch.push_back(r->epoch_seconds);
      step.push_back(StepSeconds(*r));
      wall.push_back(r->wall_seconds);
      startup.push_back(r->startup_seconds);
      exposed.push_back(r->exposed_communication_seconds);
      data.push_back(r->data_seconds);
      p50.push_back(r->step_seconds_p50);
      state.push_back(static_cast<double>(r->optimizer_state_bytes));
      rss.push_back(static_cast<double>(r->peak_rss_bytes));
      if (row.step_histogram.size() < r->step_histogram.size())
        row.step_histogram.resize(r->step_histogram.size(), 0);
      for (size_t i = 0; i < r->step_histogram.size(); ++i)
        row.step_histogram[i] += r->step_histogram[i];
      row.step_seconds_sum += r->step_seconds_sum;
    }
    if (row.runs > 0) {
      row.samples_per_second = Median(sps);
      row.epoch_seconds = Median(epoch);
      row.step_seconds = Median(step);
      row.wall_seconds = Median(wall);
      row.startup_seconds = Median(startup);
      row.exposed_communication_seconds = Median(exposed);
      row.data_seconds = Median(data);
      row.step_seconds_p50 = Median(p50);
      row.optimizer_state_bytes = static_cast<int64_t>(Median(state));
      row.peak_rss_bytes = static_cast<int64_t>(Median(rss));
      const auto [lo, hi] = std::minmax_element(sps.begin(), sps.end());
      row.spread =
          row.samples_per_second > 0 ? (*hi - *lo) / row.samples_per_second : 0;
      row.exposed_share =
          row.epoch_seconds > 0
              ? row.exposed_communication_seconds / row.epoch_seconds
              : 0;
      if (const auto b = bounds.find(BoundKeyOf(synced[key].front()->config));
          b != bounds.end()) {
        row.bound_samples_per_second = Median(b->second.sps);
        row.bound_epoch_seconds = Median(b->second.epoch);
        row.bound_step_seconds = Median(b->second.step);
        row.bound_step_seconds_p50 = Median(b->second.p50);
      }
    }
    rows.push_back(row);
  }
  // One process communicates nothing: the default hook's one-process row
  // without ZeRO is its own bound, and that of the other hooks' and ZeRO's
  // one-process rows (where it ran), which then show what a hook or ZeRO
  // adds by itself.
  for (ResultRow& row : rows) {
    if (row.runs == 0 || row.world_size != 1 || row.bound_samples_per_second)
      continue;
    const ResultRow* plain = &row;
    for (const ResultRow& other : rows) {
      if (other.runs > 0 && other.comm_hook == kDefaultCommHook &&
          other.zero == 0 && other.instrumentation == kDefaultInstrumentation &&
          other.implementation == row.implementation &&
          other.backend == row.backend && other.model == row.model &&
          other.world_size == row.world_size &&
          other.batch_size == row.batch_size) {
        plain = &other;
      }
    }
    row.bound_samples_per_second = plain->samples_per_second;
    row.bound_epoch_seconds = plain->epoch_seconds;
    row.bound_step_seconds = plain->step_seconds;
    row.bound_step_seconds_p50 = plain->step_seconds_p50;
  }
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  for (ResultRow& row : rows) {
    if (row.runs == 0) continue;
    if (const SpeedupBaseline* base = BaselineOf(row, baselines)) {
      row.speedup_baseline = base->samples_per_second;
      row.speedup = row.samples_per_second / base->samples_per_second;
      row.efficiency = *row.speedup / row.world_size;
    }
    if (row.bound_samples_per_second && *row.bound_samples_per_second > 0) {
      row.communication_efficiency =
          row.samples_per_second / *row.bound_samples_per_second;
    }
    // Rows from metrics without steps (none here) leave these empty.
    if (row.bound_step_seconds && row.step_seconds > 0 &&
        *row.bound_step_seconds > 0) {
      row.communication_seconds_per_step =
          row.step_seconds - *row.bound_step_seconds;
    }
    if (row.bound_step_seconds_p50 && row.step_seconds_p50 > 0 &&
        *row.bound_step_seconds_p50 > 0) {
      row.communication_seconds_per_step_p50 =
          row.step_seconds_p50 - *row.bound_step_seconds_p50;
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
