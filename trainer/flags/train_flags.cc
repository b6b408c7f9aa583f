#include "trainer/flags/train_flags.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "base/given_flags.h"
#include "base/status_macros.h"
#include "base/user_path.h"
#include "dist/rendezvous/launch_env.h"

namespace dtrain::trainer {

void SetTrainFlagsUsage() {
  absl::FlagsUsageConfig config;
  const auto ours = [](absl::string_view file) {
    return absl::StrContains(file, "trainer/flags/");
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  // Headings name the section's file as in the source tree, whichever build
  // (Bazel, or CMake with its paths relative to the build folder) made it.
  config.normalize_filename = [](absl::string_view file) {
    const size_t at = file.rfind("trainer/flags/");
    return std::string(at == absl::string_view::npos ? file : file.substr(at));
  };
  absl::SetFlagsUsageConfig(config);
}

void RecordGivenFlags(int argc, char** argv) {
  base::RecordGivenFlags(argc, argv);
}

bool Specified(absl::string_view name) { return base::FlagGiven(name); }

absl::StatusOr<TrainOptions> OptionsFromFlags() {
  TrainOptions o;
  DTRAIN_RETURN_IF_ERROR(ReadModelFlags(&o.model));
  DTRAIN_RETURN_IF_ERROR(ReadDataFlags(&o.data));
  DTRAIN_RETURN_IF_ERROR(ReadOptimizerFlags(&o.optim));
  DTRAIN_RETURN_IF_ERROR(ReadDataParallelFlags(&o.parallel));
  DTRAIN_RETURN_IF_ERROR(ReadCheckpointFlags(&o.checkpoint));
  DTRAIN_RETURN_IF_ERROR(ReadReportFlags(&o.report));
  DTRAIN_RETURN_IF_ERROR(ReadLaunchFlags(&o.launch));
  DTRAIN_RETURN_IF_ERROR(ReadRunFlags(&o));
  // A group the launcher restarted (--max_restarts) continues from its last
  // checkpoint rather than from the beginning.
  // (The project's launcher's restarts, and torchrun's --max_restarts.)
  DTRAIN_ASSIGN_OR_RETURN(const int restart,
                          rendezvous::RestartCount(rendezvous::ProcessEnv()));
  if (restart > 0 && !o.checkpoint.checkpoint_dir.empty())
    o.checkpoint.resume = true;
  // Under `bazel run` the process starts in its runfiles tree: relative
  // paths mean the directory the user ran it from.
  const char* working_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  for (std::string* path :
       {&o.data.data_dir, &o.checkpoint.checkpoint_dir,
        &o.model.init_state_dict, &o.checkpoint.save_state_dict,
        &o.report.metrics_json, &o.report.log_jsonl, &o.report.trace}) {
    *path =
        base::ResolveUserPath(*path, working_dir != nullptr ? working_dir : "");
  }
  DTRAIN_ASSIGN_OR_RETURN(TrainOptions resolved, ResolveDefaults(std::move(o)));
  DTRAIN_RETURN_IF_ERROR(Validate(resolved));
  return resolved;
}

}  // namespace dtrain::trainer
