#include "dist/zero/sharded_optimizer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/malloc_tuning.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"

namespace dtrain::zero {
namespace {

std::string Who(ddp::DistributedDataParallel& ddp) {
  return absl::StrCat("[rank ", ddp.backend().rank(), "] zero");
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(
    ddp::DistributedDataParallel& ddp, const ShardedOptimizerOptions& options,
    const ShardOptimizerFactory& make_optimizer) {
  const std::string who = Who(ddp);
  if (options.stage != 1 && options.stage != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": stage ", options.stage,
        " is not 1 (optimizer state sharded) or 2 (gradients too)"));
  }
  if (options.stage == 2 && ddp.comm_hook().name() != "allreduce") {
    return absl::InvalidArgumentError(absl::StrCat(
        who,
        ": stage 2 averages gradients with a reduce-scatter hook, but DDP "
        "already has the '",
        ddp.comm_hook().name(),
        "' hook: use stage 1 with it, or no hook with stage 2"));
  }
  if (options.stage == 2 && !ddp.options().pad_buckets_to_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        who,
        ": stage 2 reduce-scatters DDP's buckets in place, in N equal shares: "
        "create DDP with DdpOptions::pad_buckets_to_world_size"));
  }
  backend::Backend& backend = ddp.backend();
  const int rank = backend.rank();
  const int world = backend.size();
  std::unique_ptr<ShardedOptimizer> z(new ShardedOptimizer(ddp, options));

  std::map<std::string, at::Tensor> by_name;
  for (const auto& item : ddp.module().named_parameters(/*recurse=*/true)) {
    by_name[item.key()] = item.value();
  }
  std::vector<std::vector<int64_t>> numels;
  for (const ddp::BucketInfo& info : ddp.buckets()) {
    std::vector<at::Tensor> params;
    std::vector<int64_t> n;
    for (const std::string& name : info.parameters) {
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        return absl::InternalError(absl::StrCat(
            who, ": DDP's bucket ", info.index, " names parameter '", name,
            "', which the module does not have"));
      }
      params.push_back(it->second);
      n.push_back(it->second.numel());
    }
    z->params_.push_back(std::move(params));
    numels.push_back(std::move(n));
  }
  z->shards_ = PlanShards(numels, rank, world);

  // Each bucket's parameters moved into one flat tensor, padded to N shares:
  // in the backend's shared memory on CPU (a collective, in bucket order).
  for (size_t b = 0; b < z->shards_.size(); ++b) {
    const BucketShard& s = z->shards_[b];
    const ddp::BucketInfo& info = ddp.buckets()[b];
    at::Tensor flat;
    if (info.device.is_cpu()) {
      absl::StatusOr<at::Tensor> buffer =
          backend.AllocateBuffer(world * s.share, info.dtype);
      if (!buffer.ok()) {
        return absl::Status(
            buffer.status().code(),
            absl::StrCat(who, ": allocating bucket ", b,
                         "'s parameters: ", buffer.status().message()));
      }
      flat = *std::move(buffer);
    }
    DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
        absl::StatusCode::kInternal,
        absl::StrCat(who, ": moving bucket ", b, "'s parameters: "),
        [&]() -> absl::Status {
          at::NoGradGuard no_grad;
          if (!flat.defined()) {
            flat = at::zeros({world * s.share},
                             at::TensorOptions(info.dtype).device(info.device));
          }
          for (size_t p = 0; p < z->params_[b].size(); ++p) {
            at::Tensor& param = z->params_[b][p];
            at::Tensor view = flat.narrow(0, s.param_offsets[p], param.numel())
                                  .view(param.sizes());
            view.copy_(param.detach());
            param.set_data(view);
          }
          std::vector<at::Tensor> parts;
          for (int r = 0; r < world; ++r) {
            parts.push_back(flat.narrow(0, r * s.share, s.share));
          }
          z->shares_.push_back(parts[rank].narrow(0, 0, s.length));
          z->parts_.push_back(std::move(parts));
          return absl::OkStatus();
        }));
    z->flat_.push_back(std::move(flat));
    // The parameters' old storage is free now, but a training process keeps
    // freed memory (base/malloc_tuning.h): give it back, bucket by bucket,
    // or ZeRO's resident memory would hold the model twice.
    base::ReleaseFreedMemory();
  }

  if (options.stage == 2) {
    z->hook_ = std::make_shared<ReduceScatterHook>(z->shards_);
    DTRAIN_RETURN_IF_ERROR(ddp.RegisterCommHook(z->hook_));
  }
  std::vector<at::Tensor> stepped;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInvalidArgument,
      absl::StrCat(who, ": making the optimizer: "), [&]() -> absl::Status {
        for (size_t b = 0; b < z->shares_.size(); ++b) {
          at::Tensor& share = z->shares_[b];
          if (options.stage == 2) {
            share.mutable_grad() = z->hook_->share(static_cast<int>(b));
          } else {
            z->grads_.emplace_back();  // allocated only if needed (Step)
          }
          if (share.numel() > 0) stepped.push_back(share);
        }
        z->optimizer_ = make_optimizer(stepped);
        return absl::OkStatus();
      }));
  if (z->optimizer_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the optimizer factory made no optimizer"));
  }
  return z;
}

absl::Status ShardedOptimizer::Step() {
  const std::string who = Who(ddp_);
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat(who, ": step: "),
      [&]() -> absl::Status {
        at::NoGradGuard no_grad;
        if (options_.stage == 1) {
          for (size_t b = 0; b < shards_.size(); ++b) {
            if (shares_[b].numel() == 0) continue;
            at::Tensor view = BucketGradientShare(b);
            if (view.defined()) {
              shares_[b].mutable_grad() = view;
              continue;
            }
            // .grad is not DDP's bucket (gradient_as_bucket_view off, or
            // replaced): the share's gradients are copied out of it.
            if (!grads_[b].defined()) grads_[b] = at::zeros_like(shares_[b]);
            for (const ParamPiece& p : shards_[b].pieces) {
              at::Tensor into = grads_[b].narrow(0, p.share_offset, p.numel);
              const at::Tensor& grad = params_[b][p.param].grad();
              if (grad.defined()) {
                into.copy_(
                    grad.reshape({-1}).narrow(0, p.param_offset, p.numel));
              } else {
                into.zero_();
              }
            }
            shares_[b].mutable_grad() = grads_[b];
          }
        }
        optimizer_->step();
        return absl::OkStatus();
      }));
  // Every bucket's parameters gathered in place, all launched before the
  // first wait.
  backend::Backend& backend = ddp_.backend();
  std::vector<std::shared_ptr<backend::Work>> works;
  for (size_t b = 0; b < parts_.size(); ++b) {
    works.push_back(backend.AllGather(parts_[b], parts_[b][backend.rank()]));
  }
  absl::Status first;
  for (size_t b = 0; b < works.size(); ++b) {
    const absl::Status s = works[b]->Wait(ddp_.options().timeout);
    if (!s.ok() && first.ok()) {
      first =
          absl::Status(s.code(), absl::StrCat(who, ": allgather of bucket ", b,
                                              "'s parameters: ", s.message()));
    }
  }
  return first;
}

at::Tensor ShardedOptimizer::BucketGradientShare(size_t b) const {
  const BucketShard& s = shards_[b];
  at::Tensor first;
  int64_t base = 0;  // the bucket's first element in the gradients' storage
  for (const ParamPiece& p : s.pieces) {
    const at::Tensor& grad = params_[b][p.param].grad();
    if (!grad.defined() || !grad.is_contiguous()) return at::Tensor();
    const int64_t at = grad.storage_offset() - s.param_offsets[p.param];
    if (!first.defined()) {
      first = grad;
      base = at;
    } else if (!grad.storage().is_alias_of(first.storage()) || at != base ||
               grad.scalar_type() != first.scalar_type()) {
      return at::Tensor();
    }
  }
  if (!first.defined()) return at::Tensor();
  return at::empty({0}, first.options())
      .set_(first.storage(), base + s.begin, {s.length}, {1});
}

std::vector<at::Tensor> ShardedOptimizer::StepGradientShares() const {
  std::vector<at::Tensor> out;
  for (const at::Tensor& share : shares_) {
    if (share.numel() > 0) out.push_back(share);
  }
  return out;
}

backend::SmallCollectives ShardedOptimizer::Sync() const {
  const c10::Device device = ddp_.buckets().empty() ? c10::Device(c10::kCPU)
                                                    : ddp_.buckets()[0].device;
  return backend::SmallCollectives(
      ddp_.backend(), device, ddp_.options().timeout,
      absl::StrCat(Who(ddp_), ": "), "DdpOptions::timeout");
}

absl::StatusOr<bool> ShardedOptimizer::AnyRank(bool mine) {
  if (options_.stage == 1) return mine;
  DTRAIN_ASSIGN_OR_RETURN(
      std::vector<double> any,
      Sync().AllReduce({mine ? 1.0 : 0.0}, backend::ReduceOp::kMax));
  return any[0] > 0;
}

absl::StatusOr<double> ShardedOptimizer::ClipShareGradNorm(double max_norm) {
  const std::string who = Who(ddp_);
  if (options_.stage == 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": at stage 1 the parameters' .grad are averaged: clip those"));
  }
  const std::vector<at::Tensor> shares = StepGradientShares();
  double squares = 0;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat(who, ": gradient norm: "),
      [&]() -> absl::Status {
        for (const at::Tensor& share : shares) {
          squares += share.grad().to(at::kDouble).pow(2).sum().item<double>();
        }
        return absl::OkStatus();
      }));
  DTRAIN_ASSIGN_OR_RETURN(std::vector<double> total,
                          Sync().AllReduce({squares}, backend::ReduceOp::kSum));
  const double norm = std::sqrt(total[0]);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1) {
    DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
        absl::StatusCode::kInternal, absl::StrCat(who, ": clipping: "),
        [&]() -> absl::Status {
          at::NoGradGuard no_grad;
          for (const at::Tensor& share : shares) {
            share.grad().mul_(coefficient);
          }
          return absl::OkStatus();
        }));
  }
  return norm;
}

int64_t ShardedOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const BucketShard& s : shards_) n += s.length;
  return n;
}

}  // namespace dtrain::zero
