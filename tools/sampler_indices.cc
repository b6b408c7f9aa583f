// sampler_indices: prints the dataset indices one rank trains on in one epoch,
// as one JSON array on stdout: exactly what PyTorch's
// torch.utils.data.distributed.DistributedSampler yields for the same
// arguments (data/distributed_sampler.h). Handy to check a partition by hand
// or against a Python run:
//
//   $ bazel run //tools:sampler_indices -- --size=10 --num_replicas=3
//         --rank=1 --epoch=1 --seed=0 --shuffle=true --drop_last=false
//   [6,0,3,5]
//
// Exits 0 on success, 1 with the reason on stderr for invalid arguments, 2
// for a usage error.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "data/distributed_sampler.h"

ABSL_FLAG(int64_t, size, -1, "Number of examples in the dataset (required).");
ABSL_FLAG(int64_t, num_replicas, 1, "Number of ranks (world size).");
ABSL_FLAG(int64_t, rank, 0, "The rank whose indices to print.");
ABSL_FLAG(int64_t, epoch, 0, "The epoch, as given to set_epoch.");
ABSL_FLAG(uint64_t, seed, 0, "The sampler's seed.");
ABSL_FLAG(bool, shuffle, true, "Shuffle with randperm seeded seed + epoch.");
ABSL_FLAG(bool, drop_last, false,
          "Drop the tail instead of padding to a multiple of num_replicas.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints one rank's indices of PyTorch's DistributedSampler as a JSON "
      "array.\nUsage: sampler_indices --size=N [--num_replicas=R] [--rank=r] "
      "[--epoch=e] [--seed=s] [--shuffle=true] [--drop_last=false]");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "sampler_indices: unexpected argument '%s'\n",
                 rest[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_size) < 0) {
    std::fprintf(stderr,
                 "sampler_indices: --size=N (the dataset size, >= 0) is "
                 "required\n");
    return 2;
  }
  // The permutation (int64), the rank's indices and their JSON: about 32
  // bytes per example, all in memory. More replicas than any job has would
  // pad the dataset to a multiple of them.
  const dtrain::base::Limit memory = dtrain::base::MemoryLimit();
  for (const absl::Status& s :
       {dtrain::base::CheckAtMost(
            "--size", absl::GetFlag(FLAGS_size),
            {memory.max / 32,
             absl::StrCat("about 32 bytes per example in ", memory.why)}),
        dtrain::base::CheckAtMost("--num_replicas",
                                  absl::GetFlag(FLAGS_num_replicas),
                                  dtrain::base::WorldSizeLimit())}) {
    if (!s.ok()) {
      std::fprintf(stderr, "sampler_indices: %s\n",
                   std::string(s.message()).c_str());
      return 2;
    }
  }
  dtrain::data::DistributedSamplerOptions options;
  options.num_replicas = absl::GetFlag(FLAGS_num_replicas);
  options.rank = absl::GetFlag(FLAGS_rank);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.shuffle = absl::GetFlag(FLAGS_shuffle);
  options.drop_last = absl::GetFlag(FLAGS_drop_last);
  absl::StatusOr<std::vector<int64_t>> indices =
      dtrain::data::DistributedSamplerIndices(
          absl::GetFlag(FLAGS_size), options, absl::GetFlag(FLAGS_epoch));
  if (!indices.ok()) {
    std::fprintf(stderr, "sampler_indices: %s\n",
                 std::string(indices.status().message()).c_str());
    return 1;
  }
  const std::string json = "[" + absl::StrJoin(*indices, ",") + "]\n";
  std::fwrite(json.data(), 1, json.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
