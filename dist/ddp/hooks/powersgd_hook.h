// PowerSGD gradient compression (Vogels et al., 2019), with the semantics of
// PyTorch's powerSGD_hook and PowerSGDState (not batched_powerSGD_hook):
//
//   PowerSgdOptions o;
//   o.matrix_approximation_rank = 2;
//   o.start_powersgd_iter = 1000;
//   DTRAIN_RETURN_IF_ERROR(
//       ddp->RegisterCommHook(std::make_shared<hooks::PowerSgdHook>(o)));
//
// The first start_powersgd_iter steps average each bucket with a plain
// allreduce (divided by the world size first, as PyTorch's _allreduce_fut).
// From then on, per bucket and step:
//  1. With error feedback, the error the compression left last step is added
//     to the local gradients (zero the first time), and a copy is kept.
//  2. Each gradient is viewed as a matrix M (its first dimension by the
//     rest). Those where (rows + cols) * rank * min_compression_rate is not
//     below rows * cols (every bias, for the default rate 2) are summed with
//     one allreduce of their concatenation and divided by the world size.
//  3. For the others, in groups of one shape (in the order each shape first
//     appears in the bucket, as PyTorch's shape_to_tensors): Q (cols x rank)
//     is drawn from a standard normal and orthogonalized (Gram-Schmidt for
//     rank <= 2, else QR) the first time, or with warm start last step's Q
//     orthogonalized again; P = M Q; every P summed with one allreduce and
//     orthogonalized; Q = M^T P; every Q summed with one allreduce and divided
//     by the world size; M = P Q^T, the rank-r approximation of the average.
//  4. With error feedback, error = the copy of step 1 - the bucket's result
//     (for the uncompressed gradients too, as PyTorch).
// A step's collectives per bucket: Launch issues the uncompressed allreduce
// and the P allreduce (PyTorch issues P after the first has finished: the
// same sums, one round sooner); the first Continue waits for both and issues
// the Q allreduce (kMore); the second finishes (kDone). An empty group issues
// no allreduce. Every rank computes the same plan from the same buckets, so
// all issue the same collectives in the same order.
//
// Random Q matrices are PyTorch's: a numpy RandomState(random_seed) draws
// randint(1_000_000_000) per bucket whenever Qs are drawn, which seeds a
// fresh CPU generator (torch.manual_seed) for torch.randn of each Q in turn,
// copied to the bucket's device. So with the same buckets, options and
// gradients the results equal PyTorch's (tools/hook_reference compares them).
//
// The step counter advances when the last bucket is launched (plain steps)
// or finished (compressed steps), as PowerSGDState.maybe_increase_iter.
// State/LoadState carry what every rank holds alike: the counter, the random
// state and (with warm start) each bucket's Q; RankState/LoadRankState carry
// each bucket's error, which is each rank's own. With both, a resumed run
// continues exactly on every rank.
//
// Memory: P, Q and the concatenated uncompressed gradients live for the
// hook's lifetime (allocated in Setup; on the CPU with Backend::
// AllocateBuffer, so the shm backend reduces them in place); error feedback
// adds two copies of each bucket from the first compressed step on.
//
// Thread safety and call order: as CommHook (comm_hook.h). A hook object
// serves one DDP; every rank must register one with the same options.
#ifndef DTRAIN_DIST_DDP_HOOKS_POWERSGD_HOOK_H_
#define DTRAIN_DIST_DDP_HOOKS_POWERSGD_HOOK_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "dist/ddp/comm_hook.h"
#include "dist/ddp/hooks/numpy_random_state.h"

namespace dtrain::ddp::hooks {

// PyTorch's PowerSGDState arguments, with its defaults.
struct PowerSgdOptions {
  // r: P is rows x r and Q cols x r (capped at both). At least 1.
  int matrix_approximation_rank = 1;
  // Plain allreduce for this many steps first. With error feedback or warm
  // start it must be at least 2, as PyTorch requires (there because its DDP
  // rebuilds buckets after step 1; kept so that a PyTorch configuration is
  // refused or accepted alike).
  int64_t start_powersgd_iter = 1000;
  // A gradient is compressed when (rows + cols) * r * min_compression_rate <
  // rows * cols. Finite, at least 0.
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  // Added to each column's norm in Gram-Schmidt, against zero columns (an
  // all-zero gradient gives NaN with 0, as in PyTorch). Finite, at least 0.
  double orthogonalization_epsilon = 0;
  // numpy's seeds: 0 .. 2^32 - 1.
  int64_t random_seed = 0;
  // Stack gradients of one shape and compress them in one batched product
  // (faster for many equal layers; the results differ from unbatched because
  // each stack draws one random tensor, as in PyTorch).
  bool batch_tensors_with_same_shape = false;
};

// kInvalidArgument naming the option, or OK.
absl::Status CheckPowerSgdOptions(const PowerSgdOptions& options);

class PowerSgdHook : public CommHook {
 public:
  explicit PowerSgdHook(const PowerSgdOptions& options = {});
  ~PowerSgdHook() override;

  std::string name() const override { return "powersgd"; }
  // Checks the options (kInvalidArgument before any collective), plans each
  // bucket and allocates its P, Q and uncompressed buffers.
  absl::Status Setup(const std::vector<GradBucket>& buckets,
                     backend::Backend& backend) override;
  // The compressed steps' bytes: uncompressed gradients, P and Q.
  int64_t CommunicatedBytes(const GradBucket& bucket) const override;
  std::unique_ptr<BucketWork> Launch(GradBucket& bucket,
                                     BucketComm& comm) override;

  // "powersgd.iter" (int64 scalar), "powersgd.rng" (int64: numpy's 624 key
  // words, then the position), and per bucket i once it has one
  // "powersgd.bucket<i>.q" (the bucket's dtype). Copies, on the CPU.
  std::vector<std::pair<std::string, at::Tensor>> State() const override;
  // Per bucket i once error feedback has begun (the same step on every
  // rank): "powersgd.bucket<i>.error" (the bucket's dtype and numel). Copies,
  // on the CPU.
  std::vector<std::pair<std::string, at::Tensor>> RankState() const override;
  // After RegisterCommHook (kFailedPrecondition before Setup), before the
  // first step. kInvalidArgument naming the entry for names this hook does
  // not know, missing counter or random state, shapes or dtypes that do not
  // fit the buckets, or an error or Q while error feedback or warm start is
  // off. Nothing changes unless all of it fits. Error entries are accepted
  // too (states written before RankState existed held rank 0's errors here)
  // and replace every bucket's error, as LoadRankState.
  absl::Status LoadState(
      const std::vector<std::pair<std::string, at::Tensor>>& state) override;
  // The errors of RankState, after LoadState; every bucket without an entry
  // starts its error feedback afresh. Errors as LoadState's; nothing changes
  // unless all of it fits.
  absl::Status LoadRankState(
      const std::vector<std::pair<std::string, at::Tensor>>& state) override;

  // PowerSGDState.iter: steps begun (plain) or finished (compressed).
  int64_t iteration() const { return iter_; }
  const PowerSgdOptions& options() const { return options_; }

  // Per bucket, what Setup planned and what carries over between steps
  // (defined in the .cc file).
  struct Bucket;

 private:
  // Checks a "powersgd.bucket<i>.<error|q>" entry against the buckets and
  // options into `errors` or `qs` (indexed by bucket).
  absl::Status TakeBucketEntry(const std::string& name, const at::Tensor& t,
                               std::vector<at::Tensor>& errors,
                               std::vector<at::Tensor>& qs) const;
  // Replaces every bucket's error with `errors` (undefined: none yet).
  absl::Status SetErrors(const std::vector<at::Tensor>& errors);

  PowerSgdOptions options_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  NumpyRandomState rng_;
  int64_t iter_ = 0;
  bool set_up_ = false;
};

}  // namespace dtrain::ddp::hooks

#endif  // DTRAIN_DIST_DDP_HOOKS_POWERSGD_HOOK_H_
