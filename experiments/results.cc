#include "experiments/results.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {
namespace {

using Key = std::tuple<std::string, std::string, std::string, int, int64_t>;

Key KeyOf(const RunConfig& c) {
  return {c.implementation, c.backend, c.model, c.world_size, c.batch_size};
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

}  // namespace

std::vector<ResultRow> Summarize(const std::vector<RunRecord>& records) {
  std::vector<Key> order;
  std::map<Key, std::vector<const RunRecord*>> synced;
  std::map<Key, std::vector<double>> bound_sps;
  std::map<Key, std::vector<double>> bound_epoch;
  for (const RunRecord& r : records) {
    const Key key = KeyOf(r.config);
    if (!r.config.sync_gradients) {
      if (r.ok) {
        bound_sps[key].push_back(r.samples_per_second);
        bound_epoch[key].push_back(r.epoch_seconds);
      }
      continue;
    }
    if (synced.find(key) == synced.end()) order.push_back(key);
    synced[key].push_back(&r);
  }
  std::vector<ResultRow> rows;
  for (const Key& key : order) {
    ResultRow row;
    std::tie(row.implementation, row.backend, row.model, row.world_size,
             row.batch_size) = key;
    std::vector<double> sps, epoch, wall, startup, exposed, data, p50;
    for (const RunRecord* r : synced[key]) {
      if (!r->ok) {
        ++row.failed;
        if (row.error.empty()) row.error = r->error;
        continue;
      }
      ++row.runs;
      sps.push_back(r->samples_per_second);
      epoch.push_back(r->epoch_seconds);
      wall.push_back(r->wall_seconds);
      startup.push_back(r->startup_seconds);
      exposed.push_back(r->exposed_communication_seconds);
      data.push_back(r->data_seconds);
      p50.push_back(r->step_seconds_p50);
      if (row.step_histogram.size() < r->step_histogram.size())
        row.step_histogram.resize(r->step_histogram.size(), 0);
      for (size_t i = 0; i < r->step_histogram.size(); ++i)
        row.step_histogram[i] += r->step_histogram[i];
      row.step_seconds_sum += r->step_seconds_sum;
    }
    if (row.runs > 0) {
      row.samples_per_second = Median(sps);
      row.epoch_seconds = Median(epoch);
      row.wall_seconds = Median(wall);
      row.startup_seconds = Median(startup);
      row.exposed_communication_seconds = Median(exposed);
      row.data_seconds = Median(data);
      row.step_seconds_p50 = Median(p50);
      const auto [lo, hi] = std::minmax_element(sps.begin(), sps.end());
      row.spread =
          row.samples_per_second > 0 ? (*hi - *lo) / row.samples_per_second : 0;
      row.exposed_share =
          row.epoch_seconds > 0
              ? row.exposed_communication_seconds / row.epoch_seconds
              : 0;
      if (!bound_sps[key].empty()) {
        row.bound_samples_per_second = Median(bound_sps[key]);
        row.bound_epoch_seconds = Median(bound_epoch[key]);
        row.communication_efficiency =
            row.samples_per_second / *row.bound_samples_per_second;
      }
    }
    rows.push_back(row);
  }
  // Speedup against the one-process row of the same implementation, backend
  // and model.
  for (ResultRow& row : rows) {
    if (row.runs == 0) continue;
    for (const ResultRow& base : rows) {
      if (base.world_size == 1 && base.runs > 0 &&
          base.implementation == row.implementation &&
          base.backend == row.backend && base.model == row.model) {
        row.speedup = row.samples_per_second / base.samples_per_second;
        row.efficiency = *row.speedup / row.world_size;
        break;
      }
    }
    // One process communicates nothing: it is its own bound.
    if (row.world_size == 1 && !row.communication_efficiency) {
      row.communication_efficiency = 1.0;
      row.bound_samples_per_second = row.samples_per_second;
      row.bound_epoch_seconds = row.epoch_seconds;
    }
  }
  return rows;
}

std::string FormatTable(const std::vector<ResultRow>& rows) {
  std::vector<std::vector<std::string>> cells = {
      {"impl", "backend", "model", "procs", "batch/proc", "epoch s", "spread",
       "samples/s", "speedup", "efficiency", "vs no-comm", "exposed comm",
       "wall s"}};
  for (const ResultRow& r : rows) {
    if (r.runs == 0) {
      cells.push_back({r.implementation, r.backend, r.model,
                       absl::StrCat(r.world_size), absl::StrCat(r.batch_size),
                       "FAILED", "", "", "", "", "", "", ""});
      continue;
    }
    cells.push_back({
        r.implementation,
        r.backend,
        r.model,
        absl::StrCat(r.world_size),
        absl::StrCat(r.batch_size),
        absl::StrFormat("%.2f", r.epoch_seconds),
        r.runs > 1 ? absl::StrFormat("%.0f%%", 100 * r.spread) : "-",
        absl::StrFormat("%.0f", r.samples_per_second),
        Opt(r.speedup, "%.2fx"),
        r.efficiency ? absl::StrFormat("%.0f%%", 100 * *r.efficiency) : "-",
        r.communication_efficiency
            ? absl::StrFormat("%.0f%%", 100 * *r.communication_efficiency)
            : "-",
        absl::StrFormat("%.0f%%", 100 * r.exposed_share),
        absl::StrFormat("%.1f", r.wall_seconds),
    });
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells)
    for (size_t i = 0; i < line.size(); ++i)
      width[i] = std::max(width[i], line[i].size());
  std::string out;
  for (size_t l = 0; l < cells.size(); ++l) {
    std::string line;
    for (size_t i = 0; i < cells[l].size(); ++i) {
      // Text left-aligned, numbers right-aligned.
      const bool text = i < 3;
      const std::string pad(width[i] - cells[l][i].size(), ' ');
      line += text ? cells[l][i] + pad : pad + cells[l][i];
      if (i + 1 < cells[l].size()) line += "  ";
    }
    out += line + "\n";
    if (l == 0) out += std::string(line.size(), '-') + "\n";
  }
  return out;
}

std::string ToCsv(const std::vector<ResultRow>& rows) {
  std::string out =
      "implementation,backend,model,world_size,batch_size,runs,failed,"
      "epoch_seconds,samples_per_second,spread,speedup,efficiency,"
      "no_comm_samples_per_second,communication_efficiency,"
      "exposed_communication_seconds,exposed_share,data_seconds,"
      "step_seconds_p50,startup_seconds,wall_seconds\n";
  auto opt = [](const absl::optional<double>& v) {
    return v ? absl::StrFormat("%.6g", *v) : std::string();
  };
  for (const ResultRow& r : rows) {
    out += absl::StrCat(
        absl::StrJoin({r.implementation, r.backend, r.model,
                       absl::StrCat(r.world_size), absl::StrCat(r.batch_size),
                       absl::StrCat(r.runs), absl::StrCat(r.failed)},
                      ","),
        ",",
        absl::StrJoin({absl::StrFormat("%.6g", r.epoch_seconds),
                       absl::StrFormat("%.6g", r.samples_per_second),
                       absl::StrFormat("%.6g", r.spread), opt(r.speedup),
                       opt(r.efficiency), opt(r.bound_samples_per_second),
                       opt(r.communication_efficiency),
                       absl::StrFormat("%.6g", r.exposed_communication_seconds),
                       absl::StrFormat("%.6g", r.exposed_share),
                       absl::StrFormat("%.6g", r.data_seconds),
                       absl::StrFormat("%.6g", r.step_seconds_p50),
                       absl::StrFormat("%.6g", r.startup_seconds),
                       absl::StrFormat("%.6g", r.wall_seconds)},
                      ","),
        "\n");
  }
  return out;
}

std::string ToJson(const std::vector<ResultRow>& rows,
                   const std::vector<RunRecord>& records,
                   const std::vector<std::string>& skipped) {
  using nlohmann::json;
  auto opt = [](const absl::optional<double>& v) {
    return v ? json(*v) : json(nullptr);
  };
  json out{{"format", "dtrain.scaling.v1"}, {"skipped", skipped}};
  json jrows = json::array();
  for (const ResultRow& r : rows) {
    jrows.push_back({
        {"implementation", r.implementation},
        {"backend", r.backend},
        {"model", r.model},
        {"world_size", r.world_size},
        {"batch_size", r.batch_size},
        {"runs", r.runs},
        {"failed", r.failed},
        {"error", r.error},
        {"epoch_seconds", r.epoch_seconds},
        {"samples_per_second", r.samples_per_second},
        {"spread", r.spread},
        {"speedup", opt(r.speedup)},
        {"efficiency", opt(r.efficiency)},
        {"no_comm_samples_per_second", opt(r.bound_samples_per_second)},
        {"no_comm_epoch_seconds", opt(r.bound_epoch_seconds)},
        {"communication_efficiency", opt(r.communication_efficiency)},
        {"exposed_communication_seconds", r.exposed_communication_seconds},
        {"exposed_share", r.exposed_share},
        {"data_seconds", r.data_seconds},
        {"step_seconds_p50", r.step_seconds_p50},
        {"startup_seconds", r.startup_seconds},
        {"wall_seconds", r.wall_seconds},
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
        {"world_size", r.config.world_size},
        {"batch_size", r.config.batch_size},
        {"sync_gradients", r.config.sync_gradients},
        {"repeat", r.config.repeat},
        {"ok", r.ok},
        {"error", r.error},
        {"epoch_seconds", r.epoch_seconds},
        {"samples_per_second", r.samples_per_second},
        {"wall_seconds", r.wall_seconds},
        {"log", r.log_path},
        {"metrics", r.metrics_path},
    });
  }
  out["runs"] = jruns;
  return out.dump(2) + "\n";
}

}  // namespace dtrain::experiments
