#include "trainer/checkpoint/sharded_state.h"

#include <ATen/ATen.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "base/torch_compat.h"
#include "base/torch_guard.h"
#include "dist/backend/backend.h"
#include "dist/backend/small_collectives.h"
#include "dist/ddp/ddp.h"
#include "trainer/checkpoint/optimizer_codec.h"

namespace dtrain::trainer {
namespace {

using internal::CodecFor;
using internal::OptimizerCodec;
using internal::SavedParamState;

std::string Who(zero::ShardedOptimizer& sharded) {
  return absl::StrCat("[rank ", sharded.ddp().backend().rank(),
                      "] zero checkpoint");
}

// What the checks of the rank holding `full` found wrong, or "".
std::string CheckFull(const OptimizerCodec* codec,
                      const torch::optim::Optimizer& sharded,
                      const torch::optim::Optimizer& full) {
  if (codec == nullptr) {
    return absl::StrCat("checkpoints support ", internal::SupportedOptimizers(),
                        ", and the sharded optimizer is neither");
  }
  if (CodecFor(full) != codec) {
    return absl::StrCat("the unsharded optimizer is not ", codec->type_name(),
                        " as the sharded one is");
  }
  if (full.param_groups().size() != 1 || sharded.param_groups().size() != 1) {
    return absl::StrCat("the unsharded optimizer has ",
                        full.param_groups().size(),
                        " parameter groups and the sharded one ",
                        sharded.param_groups().size(), "; both need one");
  }
  return "";
}

// The state of `param` in `optimizer`, or nullptr.
const torch::optim::OptimizerParamState* StateOf(
    const torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto it = optimizer.state().find(torch_compat::OptimizerStateKeyOf(param));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

// The tensor options of state for `t`, as DecodeCheckpoint makes them.
at::TensorOptions StateOptions(const at::Tensor& t) {
  at::TensorOptions to = at::TensorOptions().device(t.device());
  if (t.is_floating_point()) to = to.dtype(t.scalar_type());
  return to;
}

}  // namespace

absl::Status GatherShardedState(zero::ShardedOptimizer& sharded,
                                torch::optim::Optimizer* full) {
  const std::string who = Who(sharded);
  ddp::DistributedDataParallel& ddp = sharded.ddp();
  backend::Backend& backend = ddp.backend();
  const int world = backend.size();
  const std::vector<zero::BucketShard>& shards = sharded.shards();
  const std::vector<at::Tensor>& shares = sharded.shares();
  torch::optim::Optimizer& mine = sharded.optimizer();
  const OptimizerCodec* codec = CodecFor(mine);
  if (codec == nullptr) {  // the same on every rank
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": checkpoints support ", internal::SupportedOptimizers(),
        ", and the sharded optimizer is neither"));
  }
  const std::string unfit =
      full != nullptr ? CheckFull(codec, mine, *full) : "";
  if (shards.empty()) {  // no parameters: nothing to gather
    return unfit.empty()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(absl::StrCat(who, ": ", unfit));
  }

  // Each share's state, and what the ranks agree on: per bucket the maxima
  // of (present, tensors, step) and of their negations over the ranks whose
  // share is not empty (the others send the lowest value), so that every
  // rank sees the minima too; first, whether `full` failed its checks.
  std::vector<SavedParamState> state(shards.size());
  constexpr double kNone = -std::numeric_limits<double>::max();
  std::vector<double> values = {unfit.empty() ? 0.0 : 1.0};
  for (size_t b = 0; b < shards.size(); ++b) {
    if (shares[b].numel() == 0) {
      values.insert(values.end(), 6, kNone);
      continue;
    }
    DTRAIN_ASSIGN_OR_RETURN(
        state[b], codec->Extract(StateOf(mine, shares[b]),
                                 absl::StrCat("bucket ", b, "'s share")));
    const double v[3] = {state[b].present ? 1.0 : 0.0,
                         static_cast<double>(state[b].tensors.size()),
                         static_cast<double>(state[b].step)};
    values.insert(values.end(), {v[0], v[1], v[2], -v[0], -v[1], -v[2]});
  }
  const at::Device device = ddp.buckets().front().device;
  backend::SmallCollectives sync(backend, device, ddp.options().timeout,
                                 absl::StrCat(who, ": "),
                                 "DdpOptions::timeout");
  DTRAIN_ASSIGN_OR_RETURN(std::vector<double> max,
                          sync.AllReduce(values, backend::ReduceOp::kMax));
  if (max[0] > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ",
        !unfit.empty() ? unfit
                       : "the unsharded optimizer of the rank that gathers "
                         "the state does not fit (that rank says why)"));
  }

  // On the writing rank: each bucket parameter's place in `full`.
  std::map<const c10::TensorImpl*, at::Tensor> in_full;
  if (full != nullptr) {
    for (const at::Tensor& p : full->param_groups()[0].params()) {
      in_full[p.unsafeGetTensorImpl()] = p;
    }
  }
  torch_compat::OptimizerStateMap gathered;
  for (size_t b = 0; b < shards.size(); ++b) {
    const double* m = &max[1 + 6 * b];
    if (m[0] == kNone) continue;  // no rank has a share: an empty bucket
    if (m[0] != -m[3] || m[1] != -m[4] || m[2] != -m[5]) {
      return absl::InternalError(absl::StrCat(
          who, ": the ranks' shares of bucket ", b,
          " disagree on their optimizer state (stepped or not, tensors, step "
          "count)"));
    }
    if (m[0] == 0) continue;  // not stepped yet
    const zero::BucketShard& s = shards[b];
    const ddp::BucketInfo& info = ddp.buckets()[b];
    const std::vector<at::Tensor>& params = sharded.bucket_parameters()[b];
    const int tensors = static_cast<int>(m[1]);
    std::vector<SavedParamState> saved(params.size());
    for (SavedParamState& p : saved) {
      p.present = true;
      p.step = static_cast<int64_t>(m[2]);
    }
    for (int k = 0; k < tensors; ++k) {
      at::Tensor part;
      at::Tensor whole;
      std::vector<at::Tensor> parts;
      DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
          absl::StatusCode::kInternal, absl::StrCat(who, ": bucket ", b, ": "),
          [&]() -> absl::Status {
            const at::TensorOptions to =
                at::TensorOptions(info.dtype).device(info.device);
            part = at::zeros({s.share}, to);
            if (s.length > 0) {
              part.narrow(0, 0, s.length).copy_(state[b].tensors[k]);
            }
            whole = at::empty({world * s.share}, to);
            for (int r = 0; r < world; ++r) {
              parts.push_back(whole.narrow(0, r * s.share, s.share));
            }
            return absl::OkStatus();
          }));
      const absl::Time started = absl::Now();
      std::shared_ptr<backend::Work> work = backend.AllGather(parts, part);
      DTRAIN_RETURN_IF_ERROR(sync.Wait(
          *work,
          absl::StrCat("the allgather of bucket ", b, "'s state tensor ", k),
          started));
      if (full == nullptr) continue;
      DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
          absl::StatusCode::kInternal, absl::StrCat(who, ": bucket ", b, ": "),
          [&]() -> absl::Status {
            for (size_t p = 0; p < params.size(); ++p) {
              saved[p].tensors.push_back(
                  whole.narrow(0, s.param_offsets[p], params[p].numel())
                      .view(params[p].sizes())
                      .clone());
            }
            return absl::OkStatus();
          }));
    }
    if (full == nullptr) continue;
    for (size_t p = 0; p < params.size(); ++p) {
      auto it = in_full.find(params[p].unsafeGetTensorImpl());
      if (it == in_full.end()) continue;
      gathered[torch_compat::OptimizerStateKeyOf(it->second)] =
          codec->BuildState(saved[p], StateOptions(it->second));
    }
  }
  if (full != nullptr) {
    full->state() = std::move(gathered);
    full->param_groups()[0].set_options(
        mine.param_groups()[0].options().clone());
  }
  return absl::OkStatus();
}

absl::Status ScatterShardedState(const torch::optim::Optimizer& full,
                                 zero::ShardedOptimizer& sharded) {
  const std::string who = Who(sharded);
  torch::optim::Optimizer& mine = sharded.optimizer();
  const OptimizerCodec* codec = CodecFor(mine);
  const std::string unfit = CheckFull(codec, mine, full);
  if (!unfit.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", unfit));
  }
  const std::vector<zero::BucketShard>& shards = sharded.shards();
  const std::vector<at::Tensor>& shares = sharded.shares();

  // Every bucket parameter's state, checked on every rank alike: all present
  // or none, and within a bucket one step count and one number of tensors.
  std::vector<std::vector<SavedParamState>> saved(shards.size());
  int with_state = 0;
  int without = 0;
  for (size_t b = 0; b < shards.size(); ++b) {
    const std::vector<at::Tensor>& params = sharded.bucket_parameters()[b];
    for (size_t p = 0; p < params.size(); ++p) {
      const std::string what = absl::StrCat("parameter ", p, " of bucket ", b);
      DTRAIN_ASSIGN_OR_RETURN(SavedParamState s,
                              codec->Extract(StateOf(full, params[p]), what));
      (s.present ? with_state : without) += 1;
      if (s.present && !saved[b].empty() && saved[b].front().present &&
          (s.step != saved[b].front().step ||
           s.tensors.size() != saved[b].front().tensors.size())) {
        return absl::FailedPreconditionError(absl::StrCat(
            who, ": ", what, " has state of step ", s.step, " with ",
            s.tensors.size(), " tensors, parameter 0 of the bucket of step ",
            saved[b].front().step, " with ", saved[b].front().tensors.size(),
            ": ZeRO steps a bucket's share as one tensor"));
      }
      saved[b].push_back(std::move(s));
    }
  }
  if (with_state > 0 && without > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": ", without, " of the ", with_state + without,
        " parameters in DDP's buckets have no optimizer state and the others "
        "have: ZeRO steps every parameter of a bucket together"));
  }

  torch_compat::OptimizerStateMap mine_state;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat(who, ": "),
      [&]() -> absl::Status {
        if (with_state == 0) return absl::OkStatus();
        for (size_t b = 0; b < shards.size(); ++b) {
          const at::Tensor& share = shares[b];
          if (share.numel() == 0) continue;
          const SavedParamState& first = saved[b].front();
          SavedParamState out;
          out.present = true;
          out.step = first.step;
          for (size_t k = 0; k < first.tensors.size(); ++k) {
            at::Tensor t = at::zeros({share.numel()}, StateOptions(share));
            for (const zero::ParamPiece& piece : shards[b].pieces) {
              t.narrow(0, piece.share_offset, piece.numel)
                  .copy_(saved[b][piece.param].tensors[k].reshape({-1}).narrow(
                      0, piece.param_offset, piece.numel));
            }
            out.tensors.push_back(std::move(t));
          }
          mine_state[torch_compat::OptimizerStateKeyOf(share)] =
              codec->BuildState(out, StateOptions(share));
        }
        return absl::OkStatus();
      }));
  mine.state() = std::move(mine_state);
  mine.param_groups()[0].set_options(full.param_groups()[0].options().clone());
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
