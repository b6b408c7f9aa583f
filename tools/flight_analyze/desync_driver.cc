// A test driver for flight_analyze with real processes: each rank runs
// allreduces of 4 floats over the gloo backend (with shared memory), and one
// rank can be told to go wrong (--extra_at: a broadcast before its Nth
// allreduce; --size_at: its Nth allreduce of 8 floats). A rank whose
// collective fails dumps its flight recorder, as //trainer:train does, and
// exits 1; ranks that finish exit 0, with a dump under --dump_always.
#include <ATen/ATen.h>

#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "dist/backend/flight_recorder.h"
#include "dist/backend/process_group.h"

ABSL_FLAG(std::string, dist_url, "", "tcp://HOST:PORT, rank 0's store");
ABSL_FLAG(int, rank, 0, "This rank");
ABSL_FLAG(int, world_size, 2, "Ranks");
ABSL_FLAG(int, steps, 20, "Allreduces");
ABSL_FLAG(int, extra_at, 0,
          "Issue a broadcast before this allreduce (1-based)");
ABSL_FLAG(int, size_at, 0, "This allreduce (1-based) has 8 floats, not 4");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(3), "Each collective's bound");
ABSL_FLAG(std::string, dump_dir, "", "Where a failed rank dumps");
ABSL_FLAG(bool, dump_always, false,
          "Dump also when every collective succeeded (as SIGUSR1 would)");

namespace dtrain::tools {
namespace {

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rank = absl::GetFlag(FLAGS_rank);
  backend::ProcessGroupOptions options;
  options.init.url = absl::GetFlag(FLAGS_dist_url);
  options.init.args.rank = rank;
  options.init.args.world_size = absl::GetFlag(FLAGS_world_size);
  options.init.timeout = absl::Seconds(30);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  absl::StatusOr<backend::ProcessGroup> group =
      backend::InitProcessGroup(options);
  if (!group.ok()) {
    std::cerr << group.status().message() << "\n";
    return 2;
  }
  std::cout << "rank " << rank << " ready" << std::endl;
  absl::Status failed;
  for (int step = 1; step <= absl::GetFlag(FLAGS_steps) && failed.ok();
       ++step) {
    if (step == absl::GetFlag(FLAGS_extra_at)) {
      failed = group->backend->Broadcast(at::ones({4}), 0)->Wait();
      if (!failed.ok()) break;
    }
    const int64_t n = step == absl::GetFlag(FLAGS_size_at) ? 8 : 4;
    failed = group->backend
                 ->AllReduce(at::ones({n}), backend::ReduceOp::kSum,
                             absl::StrCat("step ", step))
                 ->Wait();
  }
  if (failed.ok() && !absl::GetFlag(FLAGS_dump_always)) return 0;
  if (!failed.ok()) std::cerr << failed.message() << "\n";
  backend::FlightDumpInfo info;
  info.rank = rank;
  info.world_size = group->size();
  info.reason =
      failed.ok() ? "finished" : absl::StrCat("failure: ", failed.message());
  const absl::Status s =
      backend::DumpFlightRecord(backend::FlightRecorder::Process(), info,
                                absl::StrCat(absl::GetFlag(FLAGS_dump_dir),
                                             "/flight_rank", rank, ".json"));
  if (!s.ok()) std::cerr << s.message() << "\n";
  if (failed.ok()) return 0;
  group->backend->Abort(failed);
  return 1;
}

}  // namespace
}  // namespace dtrain::tools

int main(int argc, char** argv) { return dtrain::tools::Main(argc, argv); }
