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
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/atomic_file.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

// A row: implementation, backend, model, hook, ZeRO stage, processes, batch.
using Key = std::tuple<std::string, std::string, std::string, std::string, int,
                       int, int64_t>;
// A no-communication bound, every hook's: the same without the hook.
using BoundKey =
    std::tuple<std::string, std::string, std::string, int, int64_t>;

Key KeyOf(const RunConfig& c) {
  return {c.implementation, c.backend,    c.model,     c.comm_hook,
          c.zero,           c.world_size, c.batch_size};
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

std::string Opt(const absl::optional<double>& v, const char* format) {
  return v ? absl::StrFormat(format, *v) : std::string("-");
}

// A fraction as a whole percentage: "96%".
std::string Percent(double fraction) {
  return absl::StrFormat("%.0f%%", 100 * fraction);
}

std::string OptPercent(const absl::optional<double>& fraction) {
  return fraction ? Percent(*fraction) : std::string("-");
}

// The cells as aligned lines, columns two spaces apart: the first
// `text_columns` left-aligned (text), the rest right-aligned (numbers); a
// rule under the first line, the header.
std::string AlignColumns(const std::vector<std::vector<std::string>>& cells,
                         size_t text_columns) {
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells)
    for (size_t i = 0; i < line.size(); ++i)
      width[i] = std::max(width[i], line[i].size());
  std::string out;
  for (size_t l = 0; l < cells.size(); ++l) {
    std::string line;
    for (size_t i = 0; i < cells[l].size(); ++i) {
      const std::string pad(width[i] - cells[l][i].size(), ' ');
      line += i < text_columns ? cells[l][i] + pad : pad + cells[l][i];
      if (i + 1 < cells[l].size()) line += "  ";
    }
    out += line + "\n";
    if (l == 0) out += std::string(line.size(), '-') + "\n";
  }
  return out;
}

// A CSV's records, one per line (the i-th on line i + 1), each split at its
// commas.
absl::StatusOr<std::vector<std::vector<std::string>>> SplitCsv(
    absl::string_view text) {
  absl::ConsumeSuffix(&text, "\n");
  std::vector<std::vector<std::string>> records;
  if (text.empty()) return records;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::ConsumeSuffix(&line, "\r");
    if (absl::StrContains(line, '"')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", records.size() + 1, ": quoted fields are not supported"));
    }
    records.push_back(absl::StrSplit(line, ','));
  }
  return records;
}

}  // namespace

std::string Variant(const ResultRow& row) {
  return row.zero == 0 ? row.comm_hook
                       : absl::StrCat(row.comm_hook, " zero", row.zero);
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
    if (r.world_size != 1 || r.zero != 0 || r.run_samples_per_second.empty())
      continue;
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
             row.zero, row.world_size, row.batch_size) = key;
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
          other.zero == 0 && other.implementation == row.implementation &&
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

std::string FormatTable(const std::vector<ResultRow>& rows,
                        const Machine& machine) {
  std::string out;
  // The header: what the numbers depend on.
  std::string nodes;
  if (machine.nnodes > 1 && machine.nodes_share_cores) {
    nodes = absl::StrCat(", shared by all ", machine.nnodes,
                         " nodes (one machine)");
  } else if (machine.nnodes > 1) {
    nodes = absl::StrCat(" on node 0, ", machine.nnodes, " nodes");
  }
  out += absl::StrCat("machine: ", DescribeCores(machine), nodes, "\n");
  int most_runs = 0;
  for (const ResultRow& r : rows) most_runs = std::max(most_runs, r.runs);
  if (most_runs <= 1) {
    out +=
        "runs: single run per configuration (--repeats=1): the spread is "
        "unknown, and identical runs on a shared machine can differ by 10-15%; "
        "--repeats=3 gives medians and spreads\n";
  } else {
    out += absl::StrCat("runs: ", DescribeRepeats(rows),
                        " per configuration (medians; spread below)\n");
  }
  const std::vector<SpeedupBaseline> baselines = SpeedupBaselines(rows);
  bool hooks = false;  // any hook but the default
  bool zero = false;   // any ZeRO stage
  for (const ResultRow& r : rows) {
    hooks |= r.comm_hook != kDefaultCommHook;
    zero |= r.zero != 0;
  }
  std::vector<std::string> parts;
  for (const SpeedupBaseline& b : baselines) {
    parts.push_back(absl::StrFormat(
        "%s%s%s %.0f samples/s (%s, %d %s)", b.model,
        b.device == "cuda" ? " on cuda" : "",
        hooks ? absl::StrCat(" ", b.comm_hook) : "", b.samples_per_second,
        b.implementation, b.runs, b.runs == 1 ? "run" : "runs"));
  }
  out += absl::StrCat(
      "speedup: over one baseline per model, the fastest implementation's "
      "one-process samples/s (median of its one-process runs of every "
      "backend: one process communicates nothing)",
      hooks ? absl::StrCat(", with the ", kDefaultCommHook,
                           " hook, every hook's rows alike (a sweep "
                           "without it: each hook's own)")
            : "",
      ": ",
      parts.empty() ? "none (no one-process run)" : absl::StrJoin(parts, "; "),
      "\n");
  if (!rows.empty() && !rows.front().train_flags.empty()) {
    out += absl::StrCat("every training, ours and PyTorch's, with: ",
                        absl::StrJoin(rows.front().train_flags, " "), "\n");
  }
  out += "\n";

  std::vector<std::vector<std::string>> cells = {
      {"impl", "backend", "model", "hook", "procs", "batch/proc", "epoch s",
       "spread", "samples/s", "speedup", "efficiency", "vs no-comm",
       "comm ms/step", "exposed comm", "wall s"}};
  // With ZeRO: the memory it is for, per rank.
  if (zero) {
    cells[0].push_back("state MiB");
    cells[0].push_back("peak MiB");
  }
  auto mib = [](int64_t bytes) {
    return bytes > 0 ? absl::StrFormat("%.1f", bytes / 1048576.0)
                     : std::string("-");
  };
  bool marked = false;
  for (const ResultRow& r : rows) {
    std::string procs = absl::StrCat(r.world_size);
    if (Oversubscribed(machine, r.world_size)) {
      procs += "*";
      marked = true;
    }
    if (r.runs == 0) {
      cells.push_back({r.implementation, r.backend, r.model, Variant(r), procs,
                       absl::StrCat(r.batch_size), "FAILED", "", "", "", "", "",
                       "", "", ""});
      if (zero) cells.back().insert(cells.back().end(), {"", ""});
      continue;
    }
    const absl::optional<double> comm_ms =
        r.communication_seconds_per_step
            ? absl::optional<double>(1000 * *r.communication_seconds_per_step)
            : absl::nullopt;
    cells.push_back({
        r.implementation,
        r.backend,
        r.model,
        Variant(r),
        procs,
        absl::StrCat(r.batch_size),
        absl::StrFormat("%.2f", r.epoch_seconds),
        r.runs > 1 ? absl::StrFormat("%.0f%% of %d", 100 * r.spread, r.runs)
                   : std::string("1 run"),
        absl::StrFormat("%.0f", r.samples_per_second),
        Opt(r.speedup, "%.2fx"),
        OptPercent(r.efficiency),
        OptPercent(r.communication_efficiency),
        Opt(comm_ms, "%.1f"),
        Percent(r.exposed_share),
        absl::StrFormat("%.1f", r.wall_seconds),
    });
    if (zero) {
      cells.back().push_back(mib(r.optimizer_state_bytes));
      cells.back().push_back(mib(r.peak_rss_bytes));
    }
  }
  // impl, backend, model and hook are text.
  out += AlignColumns(cells, 4);

  // The legend.
  out += "\n";
  if (marked) {
    out += absl::StrCat(
        "* more processes ", machine.nodes_share_cores ? "" : "per node ",
        "than the machine's ", machine.cores,
        " cores: they take turns on the cores, so a drop there measures this "
        "machine, not the backend\n");
  }
  out += absl::StrCat(
      "hook: DDP's communication hook (--comm_hooks; ", kDefaultCommHook,
      ": plain averaging)",
      zero ? ", and the ZeRO stage (--zero_stages): zero1 shards the "
             "optimizer state, zero2 the gradients' averaging too"
           : "",
      "\n"
      "spread: (max - min) / median samples/s over a configuration's runs "
      "(\"1 run\": not measured)\n"
      "efficiency: speedup / processes\n"
      "vs no-comm: samples/s with gradient averaging / samples/s of the same "
      "processes without it (the no-communication bound, one run shared by "
      "every hook), each all ranks' samples over the slowest rank's training "
      "time; at 1 process the bound is the ",
      kDefaultCommHook,
      " row (one process communicates nothing)\n"
      "  It can exceed 100%: the bound is a separate run, so the ratio "
      "carries both runs' noise; and without averaging the ranks never wait "
      "for one another, so where they share cores one falls behind and its "
      "time sets the bound, while averaging keeps them in step\n"
      "comm ms/step: the time communication adds to a step: the step with "
      "gradient averaging (epoch s / steps) minus the same step of the bound; "
      "below 0 where the two runs' noise is larger\n"
      "exposed comm: gradient-allreduce wait that backward did not hide, "
      "slowest rank, share of the epoch\n",
      zero ? "state MiB, peak MiB: the largest rank's optimizer state and "
             "peak resident memory (ru_maxrss, which counts shared memory "
             "every process touches)\n"
           : "");
  return out;
}

std::string TableText(const std::vector<ResultRow>& rows,
                      const Machine& machine,
                      const std::vector<std::string>& skipped) {
  std::string out = FormatTable(rows, machine);
  for (const std::string& s : skipped)
    absl::StrAppend(&out, "skipped ", s, "\n");
  return out;
}

absl::StatusOr<std::string> ClusterTableText(absl::string_view csv,
                                             const std::string& csv_path,
                                             const Machine& machine) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(csv_path, ": ", what));
  };
  absl::StatusOr<std::vector<std::vector<std::string>>> records = SplitCsv(csv);
  if (!records.ok()) return error(records.status().message());
  if (records->size() < 2) return error("no results");
  const std::vector<std::string>& names = records->front();
  std::map<std::string, size_t> column;
  for (const char* name :
       {"link_rate", "measured_link_gbit", "hosts", "ranks_per_host",
        "implementation", "backend", "model", "world_size", "batch_size",
        "samples_per_second", "no_comm_samples_per_second",
        "communication_efficiency", "exposed_share", "step_seconds_p50",
        "failed"}) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return error(absl::StrCat("no column ", name));
    column[name] = it - names.begin();
  }
  // Columns of newer sweeps: shown where the CSV has them.
  for (const char* name : {"comm_hook", "communication_seconds_per_step"}) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it != names.end()) column[name] = it - names.begin();
  }
  const bool hooks = column.count("comm_hook") > 0;
  const bool comm = column.count("communication_seconds_per_step") > 0;

  std::vector<std::vector<std::string>> cells(1);
  for (const char* title :
       {"link", "measured", "impl", "backend", "model", "hook", "hosts",
        "ranks/host", "batch/proc", "samples/s", "no-comm samples/s",
        "vs no-comm", "comm ms/step", "exposed comm", "step s p50", "failed"}) {
    if (absl::string_view(title) == "hook" && !hooks) continue;
    if (absl::string_view(title) == "comm ms/step" && !comm) continue;
    cells[0].push_back(title);
  }
  int most_ranks = 0;
  for (size_t l = 1; l < records->size(); ++l) {
    const std::vector<std::string>& record = (*records)[l];
    if (record.size() != names.size()) {
      return error(absl::StrCat("line ", l + 1, " has ", record.size(),
                                " fields, the header ", names.size()));
    }
    auto field = [&](const char* name) -> const std::string& {
      return record[column.at(name)];
    };
    // The numbers; an empty field (a value the run did not have) is none.
    absl::optional<double> samples, bound, communication, exposed, p50,
        per_step;
    for (const auto& [name, value] :
         {std::pair<const char*, absl::optional<double>*>{"samples_per_second",
                                                          &samples},
          {"no_comm_samples_per_second", &bound},
          {"communication_efficiency", &communication},
          {"exposed_share", &exposed},
          {"step_seconds_p50", &p50},
          {"communication_seconds_per_step", &per_step}}) {
      if (column.count(name) == 0 || field(name).empty()) continue;
      double v = 0;
      if (!absl::SimpleAtod(field(name), &v)) {
        return error(absl::StrCat("line ", l + 1, ": ", name, " '", field(name),
                                  "' is not a number"));
      }
      *value = v;
    }
    int world_size = 0;
    if (!absl::SimpleAtoi(field("world_size"), &world_size)) {
      return error(absl::StrCat("line ", l + 1, ": world_size '",
                                field("world_size"), "' is not a number"));
    }
    most_ranks = std::max(most_ranks, world_size);
    const std::string& measured = field("measured_link_gbit");
    std::vector<std::string> line = {
        field("link_rate"), measured.empty() ? "-" : measured,
        field("implementation"), field("backend"), field("model")};
    if (hooks) line.push_back(field("comm_hook"));
    for (std::string cell : {field("hosts"), field("ranks_per_host"),
                             field("batch_size"), Opt(samples, "%.0f"),
                             Opt(bound, "%.0f"), OptPercent(communication)}) {
      line.push_back(std::move(cell));
    }
    if (comm) {
      line.push_back(Opt(
          per_step ? absl::optional<double>(1000 * *per_step) : absl::nullopt,
          "%.1f"));
    }
    for (std::string cell :
         {OptPercent(exposed), Opt(p50, "%.4f"), field("failed")}) {
      line.push_back(std::move(cell));
    }
    cells.push_back(std::move(line));
  }
  // link, measured, impl, backend, model (and hook) are text.
  return absl::StrCat(
      AlignColumns(cells, hooks ? 6 : 5), "\ncombined: ", csv_path,
      " (measured: Gbit/s of one TCP stream through the shaped link)\n",
      "every host shares this machine's ", machine.cores, " cores",
      most_ranks > machine.cores
          ? ": runs of more ranks in total than that take turns on the cores"
          : "",
      "\n");
}

absl::StatusOr<std::string> ReadClusterTable(const std::string& csv_path,
                                             const Machine& machine) {
  DTRAIN_ASSIGN_OR_RETURN(const std::string csv,
                          base::ReadFile(csv_path, base::kTextFileLimit));
  return ClusterTableText(csv, csv_path, machine);
}

absl::StatusOr<std::vector<std::string>> WriteResults(
    const std::string& dir, const std::vector<ResultRow>& rows,
    const std::vector<RunRecord>& records,
    const std::vector<std::string>& skipped, const Machine& machine) {
  std::vector<std::string> written;
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"table.txt",
                                            TableText(rows, machine, skipped)},
        {"results.csv", ToCsv(rows)},
        {"results.json", ToJson(rows, records, skipped, machine)}}) {
    const std::string path = absl::StrCat(dir, "/", name);
    DTRAIN_RETURN_IF_ERROR(base::WriteFileAtomically(path, text));
    written.push_back(path);
  }
  return written;
}

std::string ToCsv(const std::vector<ResultRow>& rows) {
  std::string out =
      "implementation,backend,model,comm_hook,world_size,batch_size,runs,"
      "failed,epoch_seconds,samples_per_second,spread,speedup,efficiency,"
      "no_comm_samples_per_second,communication_efficiency,"
      "exposed_communication_seconds,exposed_share,data_seconds,"
      "step_seconds_p50,startup_seconds,wall_seconds,"
      "samples_per_second_min,samples_per_second_max,"
      "speedup_baseline_samples_per_second,step_seconds,no_comm_step_seconds,"
      "communication_seconds_per_step,no_comm_step_seconds_p50,"
      "communication_seconds_per_step_p50,zero,optimizer_state_bytes,"
      "peak_rss_bytes,train_flags\n";
  auto opt = [](const absl::optional<double>& v) {
    return v ? absl::StrFormat("%.6g", *v) : std::string();
  };
  for (const ResultRow& r : rows) {
    std::string lo, hi;
    if (!r.run_samples_per_second.empty()) {
      const auto [min, max] = std::minmax_element(
          r.run_samples_per_second.begin(), r.run_samples_per_second.end());
      lo = absl::StrFormat("%.6g", *min);
      hi = absl::StrFormat("%.6g", *max);
    }
    out += absl::StrCat(
        absl::StrJoin({r.implementation, r.backend, r.model, r.comm_hook,
                       absl::StrCat(r.world_size), absl::StrCat(r.batch_size),
                       absl::StrCat(r.runs), absl::StrCat(r.failed)},
                      ","),
        ",",
        absl::StrJoin(
            {absl::StrFormat("%.6g", r.epoch_seconds),
             absl::StrFormat("%.6g", r.samples_per_second),
             absl::StrFormat("%.6g", r.spread), opt(r.speedup),
             opt(r.efficiency), opt(r.bound_samples_per_second),
             opt(r.communication_efficiency),
             absl::StrFormat("%.6g", r.exposed_communication_seconds),
             absl::StrFormat("%.6g", r.exposed_share),
             absl::StrFormat("%.6g", r.data_seconds),
             absl::StrFormat("%.6g", r.step_seconds_p50),
             absl::StrFormat("%.6g", r.startup_seconds),
             absl::StrFormat("%.6g", r.wall_seconds), lo, hi,
             opt(r.speedup_baseline), absl::StrFormat("%.6g", r.step_seconds),
             opt(r.bound_step_seconds), opt(r.communication_seconds_per_step),
             opt(r.bound_step_seconds_p50),
             opt(r.communication_seconds_per_step_p50), absl::StrCat(r.zero),
             absl::StrCat(r.optimizer_state_bytes),
             absl::StrCat(r.peak_rss_bytes),
             // Flags hold no commas (the runner's list flags split
             // at them): one field, spaces between.
             absl::StrJoin(r.train_flags, " ")},
            ","),
        "\n");
  }
  return out;
}

std::string ToJson(const std::vector<ResultRow>& rows,
                   const std::vector<RunRecord>& records,
                   const std::vector<std::string>& skipped,
                   const Machine& machine) {
  using nlohmann::json;
  auto opt = [](const absl::optional<double>& v) {
    return v ? json(*v) : json(nullptr);
  };
  json out{{"format", "dtrain.scaling.v1"},
           {"skipped", skipped},
           {"machine",
            {{"cores", machine.cores},
             {"cpu_model", machine.cpu_model},
             {"nnodes", machine.nnodes},
             {"nodes_share_cores", machine.nodes_share_cores}}},
           {"repeats", DescribeRepeats(rows)}};
  json jbase = json::array();
  for (const SpeedupBaseline& b : SpeedupBaselines(rows)) {
    jbase.push_back({{"model", b.model},
                     {"device", b.device},
                     {"comm_hook", b.comm_hook},
                     {"implementation", b.implementation},
                     {"samples_per_second", b.samples_per_second},
                     {"runs", b.runs}});
  }
  out["speedup_baselines"] = jbase;
  out["train_flags"] = records.empty() ? std::vector<std::string>()
                                       : records.front().config.train_flags;
  json jrows = json::array();
  for (const ResultRow& r : rows) {
    jrows.push_back({
        {"implementation", r.implementation},
        {"backend", r.backend},
        {"model", r.model},
        {"comm_hook", r.comm_hook},
        {"zero", r.zero},
        {"world_size", r.world_size},
        {"batch_size", r.batch_size},
        {"runs", r.runs},
        {"failed", r.failed},
        {"error", r.error},
        {"epoch_seconds", r.epoch_seconds},
        {"samples_per_second", r.samples_per_second},
        {"spread", r.spread},
        {"run_samples_per_second", r.run_samples_per_second},
        {"speedup_baseline_samples_per_second", opt(r.speedup_baseline)},
        {"speedup", opt(r.speedup)},
        {"efficiency", opt(r.efficiency)},
        {"no_comm_samples_per_second", opt(r.bound_samples_per_second)},
        {"no_comm_epoch_seconds", opt(r.bound_epoch_seconds)},
        {"communication_efficiency", opt(r.communication_efficiency)},
        {"exposed_communication_seconds", r.exposed_communication_seconds},
        {"exposed_share", r.exposed_share},
        {"data_seconds", r.data_seconds},
        {"step_seconds_p50", r.step_seconds_p50},
        {"step_seconds", r.step_seconds},
        {"no_comm_step_seconds", opt(r.bound_step_seconds)},
        {"no_comm_step_seconds_p50", opt(r.bound_step_seconds_p50)},
        {"communication_seconds_per_step",
         opt(r.communication_seconds_per_step)},
        {"communication_seconds_per_step_p50",
         opt(r.communication_seconds_per_step_p50)},
        {"startup_seconds", r.startup_seconds},
        {"wall_seconds", r.wall_seconds},
        {"optimizer_state_bytes", r.optimizer_state_bytes},
        {"peak_rss_bytes", r.peak_rss_bytes},
        {"train_flags", r.train_flags},
    });
  }
  out["results"] = jrows;
  json jruns = json::array();
  for (const RunRecord& r : records) {
    jruns.push_back({
        {"name", r.config.Name()},
        {"implementation", r.config.implementation},
        {"backend", r.config.backend},
        {"model", r.config.model},
        {"comm_hook", r.config.comm_hook},
        {"zero", r.config.zero},
        {"world_size", r.config.world_size},
        {"batch_size", r.config.batch_size},
        {"sync_gradients", r.config.sync_gradients},
        {"repeat", r.config.repeat},
        {"ok", r.ok},
        {"error", r.error},
        {"epoch_seconds", r.epoch_seconds},
        {"samples_per_second", r.samples_per_second},
        {"steps", r.steps},
        {"optimizer_state_bytes", r.optimizer_state_bytes},
        {"peak_rss_bytes", r.peak_rss_bytes},
        {"wall_seconds", r.wall_seconds},
        {"log", r.log_path},
        {"metrics", r.metrics_path},
    });
  }
  out["runs"] = jruns;
  return out.dump(2) + "\n";
}

}  // namespace dtrain::experiments
