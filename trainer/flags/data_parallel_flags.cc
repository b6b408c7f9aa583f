// The data-parallel section's flags
// (trainer/options/data_parallel_options.h).

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(double, bucket_cap_mb, 25, "DDP gradient bucket size in MiB.");
ABSL_FLAG(std::string, comm_hook, "allreduce",
          "How DDP averages gradients (PyTorch's register_comm_hook): "
          "allreduce; fp16 or bf16 (16-bit on the wire: half the bytes, "
          "about three significant digits); powersgd (low-rank "
          "approximation with error feedback, --powersgd_*); local_sgd "
          "(post-local SGD: gradients averaged for --local_sgd_start_step "
          "steps, then parameters every --local_sgd_period steps).");
ABSL_FLAG(bool, fp16_allreduce, false, "Another name for --comm_hook=fp16.");
ABSL_FLAG(int64_t, powersgd_rank, 1,
          "PowerSGD's matrix_approximation_rank: higher is more accurate "
          "and sends more.");
ABSL_FLAG(int64_t, powersgd_start_step, 1000,
          "PowerSGD's start_powerSGD_iter: plain allreduce for this many "
          "steps first.");
ABSL_FLAG(double, powersgd_min_compression_rate, 2,
          "PowerSGD's min_compression_rate: a tensor that would not shrink "
          "this much goes uncompressed.");
ABSL_FLAG(bool, powersgd_error_feedback, true,
          "PowerSGD's use_error_feedback: carry the approximation error "
          "into the next step.");
ABSL_FLAG(bool, powersgd_warm_start, true,
          "PowerSGD's warm_start: reuse the last step's Q.");
ABSL_FLAG(int64_t, powersgd_seed, 0,
          "PowerSGD's random_seed for the first Q matrices.");
ABSL_FLAG(int64_t, local_sgd_start_step, 100,
          "Post-local SGD: steps with global gradient averaging first "
          "(PyTorch's start_localSGD_iter and the averager's warmup_steps).");
ABSL_FLAG(int64_t, local_sgd_period, 4,
          "Post-local SGD: average the parameters every this many steps.");
ABSL_FLAG(bool, gradient_as_bucket_view, true,
          "DDP's .grad are views of its buckets: no copies per step.");
ABSL_FLAG(bool, static_graph, false,
          "DDP's static_graph: the graph is the same every step (learned "
          "in the first; a change is an error).");
ABSL_FLAG(bool, sync_gradients, true,
          "false: no gradient averaging (measures the no-communication "
          "bound; not a way to train).");
ABSL_FLAG(bool, sync_batchnorm, false,
          "Batch norm statistics over every rank's batch (PyTorch's "
          "SyncBatchNorm): resnet18 trains as one process on the global "
          "batch. No effect on convnet (no batch norm).");
ABSL_FLAG(int, zero, 0,
          "ZeRO: 1 shards the optimizer state over the ranks (each keeps "
          "and steps 1/N, then the parameters are allgathered), 2 also "
          "reduce-scatters the gradients; 0 off.");

namespace dtrain::trainer {

absl::Status ReadDataParallelFlags(DataParallelOptions* o) {
  o->bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  o->comm_hook = absl::GetFlag(FLAGS_comm_hook);
  if (absl::GetFlag(FLAGS_fp16_allreduce)) {
    if (o->comm_hook != "allreduce" && o->comm_hook != "fp16") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--fp16_allreduce is --comm_hook=fp16; it cannot go with "
          "--comm_hook=",
          o->comm_hook));
    }
    o->comm_hook = "fp16";
  }
  o->powersgd_rank = absl::GetFlag(FLAGS_powersgd_rank);
  o->powersgd_start_step = absl::GetFlag(FLAGS_powersgd_start_step);
  o->powersgd_min_compression_rate =
      absl::GetFlag(FLAGS_powersgd_min_compression_rate);
  o->powersgd_error_feedback = absl::GetFlag(FLAGS_powersgd_error_feedback);
  o->powersgd_warm_start = absl::GetFlag(FLAGS_powersgd_warm_start);
  o->powersgd_seed = absl::GetFlag(FLAGS_powersgd_seed);
  o->local_sgd_start_step = absl::GetFlag(FLAGS_local_sgd_start_step);
  o->local_sgd_period = absl::GetFlag(FLAGS_local_sgd_period);
  o->gradient_as_bucket_view = absl::GetFlag(FLAGS_gradient_as_bucket_view);
  o->static_graph = absl::GetFlag(FLAGS_static_graph);
  o->sync_gradients = absl::GetFlag(FLAGS_sync_gradients);
  o->sync_batchnorm = absl::GetFlag(FLAGS_sync_batchnorm);
  o->zero = absl::GetFlag(FLAGS_zero);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
