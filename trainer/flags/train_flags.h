// train's command line: one flags file per section of TrainOptions
// (trainer/options/, trainer/report/report_options.h), so that --help lists
// the flags grouped by what they configure, plus the spawning flags and the
// run's own. Each Read*Flags fills its section from the parsed flags.
//
//   RecordGivenFlags(argc, argv);
//   absl::ParseCommandLine(argc, argv);
//   DTRAIN_ASSIGN_OR_RETURN(TrainOptions options, OptionsFromFlags());
//
// Thread safety: call from main's thread, after parsing.
#ifndef DTRAIN_TRAINER_FLAGS_TRAIN_FLAGS_H_
#define DTRAIN_TRAINER_FLAGS_TRAIN_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainer/train_options.h"

namespace dtrain::trainer {

// Before absl::ParseCommandLine: --help and --helpshort list the flags of
// these files, one group per section.
void SetTrainFlagsUsage();

// Before absl::ParseCommandLine: remembers the flags the command line names.
// An unset flag takes the model's default (ResolveDefaults), so "given"
// matters, not the value. (This Abseil keeps IsSpecifiedOnCommandLine
// private.)
void RecordGivenFlags(int argc, char** argv);
bool Specified(absl::string_view name);

// Each section from its flags; kInvalidArgument naming a flag whose text does
// not parse.
absl::Status ReadModelFlags(ModelOptions* o);
absl::Status ReadDataFlags(DataOptions* o);
absl::Status ReadOptimizerFlags(OptimizerOptions* o);
absl::Status ReadDataParallelFlags(DataParallelOptions* o);
absl::Status ReadCheckpointFlags(CheckpointOptions* o);
absl::Status ReadReportFlags(ReportOptions* o);
absl::Status ReadLaunchFlags(LaunchOptions* o);
absl::Status ReadRunFlags(TrainOptions* o);

// Every section, with relative paths taken from where `bazel run` started
// (BUILD_WORKING_DIRECTORY), --resume implied after a launcher's restart,
// the model's defaults filled in and the result validated.
absl::StatusOr<TrainOptions> OptionsFromFlags();

// The flags that spawn local ranks (--nproc_per_node and friends), read by
// the spawning process only.
struct SpawnFlags {
  int nproc_per_node = 0;
  int nnodes = 1;
  int max_nnodes = 1;
  int node_rank = 0;
  int max_restarts = 0;
  absl::Duration failure_grace = absl::Seconds(5);
};
SpawnFlags ReadSpawnFlags();
// The flags the spawning process consumes; its children get the rest
// (--master_addr and --master_port among them).
const std::vector<std::string>& SpawnFlagNames();

// --print_cuda_devices.
bool PrintCudaDevicesRequested();

// Where a rank writes its flight recorder (dist/backend/flight_recorder.h) on
// a failure or SIGUSR1: --flight_recorder_dir, else $TMPDIR, else /tmp.
std::string FlightRecorderDir();

// --flight_recorder=N: sets the process's flight recorder's size, before
// anything has used it (called first thing after parsing the flags).
// kInvalidArgument naming the flag for a bad N.
absl::Status ApplyFlightRecorderFlag();

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_FLAGS_TRAIN_FLAGS_H_
