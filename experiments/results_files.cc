#include "experiments/results_files.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"
#include "base/status_macros.h"
#include "experiments/results_table.h"
#include "nlohmann/json.hpp"

namespace dtrain::experiments {

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
      "peak_rss_bytes,train_flags,instrumentation\n";
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
             absl::StrJoin(r.train_flags, " "), r.instrumentation},
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
        {"instrumentation", r.instrumentation},
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
        {"instrumentation", r.config.instrumentation},
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
