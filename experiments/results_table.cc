#include "experiments/results_table.h"

#include <algorithm>
#include <map>
#include <string>
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

namespace dtrain::experiments {
namespace {

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

// What each instrumentation other than the default costs: its rows against
// the default's of the same configuration, whose runs were interleaved with
// its own. Empty without such rows.
std::string InstrumentationTable(const std::vector<ResultRow>& rows) {
  std::vector<std::vector<std::string>> cells = {
      {"impl", "backend", "model", "hook", "procs", "batch/proc",
       "instrumentation", "step ms p50", "vs default", "step ms", "vs default",
       "samples/s", "vs default"}};
  auto change = [](double value, double base) {
    return base > 0 && value > 0
               ? absl::StrFormat("%+.1f%%", 100 * (value / base - 1))
               : std::string("-");
  };
  for (const ResultRow& r : rows) {
    if (r.instrumentation == kDefaultInstrumentation || r.runs == 0) continue;
    const ResultRow* base = nullptr;
    for (const ResultRow& d : rows) {
      if (d.instrumentation == kDefaultInstrumentation && d.runs > 0 &&
          d.implementation == r.implementation && d.backend == r.backend &&
          d.model == r.model && d.comm_hook == r.comm_hook &&
          d.zero == r.zero && d.world_size == r.world_size &&
          d.batch_size == r.batch_size) {
        base = &d;
      }
    }
    std::string hook = r.comm_hook;
    if (r.zero != 0) absl::StrAppend(&hook, " zero", r.zero);
    cells.push_back(
        {r.implementation, r.backend, r.model, hook, absl::StrCat(r.world_size),
         absl::StrCat(r.batch_size), r.instrumentation,
         absl::StrFormat("%.2f", 1000 * r.step_seconds_p50),
         base ? change(r.step_seconds_p50, base->step_seconds_p50) : "-",
         absl::StrFormat("%.2f", 1000 * r.step_seconds),
         base ? change(r.step_seconds, base->step_seconds) : "-",
         absl::StrFormat("%.0f", r.samples_per_second),
         base ? change(r.samples_per_second, base->samples_per_second) : "-"});
  }
  if (cells.size() == 1) return "";
  return absl::StrCat(
      "\ninstrumentation: what it costs, against the same configuration's "
      "default runs (train's defaults: the flight recorder on, no trace), "
      "each side the median over its runs, the two sides' runs interleaved\n",
      AlignColumns(cells, 4),
      "trace: --trace of every step; no_flight_recorder: --flight_recorder=0 "
      "(the default's cost is then the opposite of its change)\n"
      "step ms p50: the median step; step ms: epoch s / steps\n");
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
  out += InstrumentationTable(rows);
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
  for (const char* name :
       {"comm_hook", "communication_seconds_per_step", "zero"}) {
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
    if (hooks) {
      // With the ZeRO stage, as Variant() names the sweep's rows.
      std::string hook = field("comm_hook");
      if (column.count("zero") > 0 && !field("zero").empty() &&
          field("zero") != "0") {
        absl::StrAppend(&hook, " zero", field("zero"));
      }
      line.push_back(std::move(hook));
    }
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

}  // namespace dtrain::experiments
