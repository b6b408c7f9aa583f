#include "dist/ddp/model_averager.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"

namespace dtrain::ddp {

PeriodicModelAverager::PeriodicModelAverager(
    backend::Backend& backend, const ModelAveragingOptions& options)
    : comm_(backend, c10::Device(c10::kCPU), options.timeout,
            absl::StrCat("[rank ", backend.rank(), "] model averaging: "),
            "the timeout"),
      options_(options) {}

absl::Status PeriodicModelAverager::Validate() const {
  if (options_.period < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        comm_.prefix(), "the period must be 1 or more, not ", options_.period));
  }
  if (options_.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(comm_.prefix(), "warmup steps must be 0 or more, not ",
                     options_.warmup_steps));
  }
  return absl::OkStatus();
}

bool PeriodicModelAverager::Due() const {
  return step_ >= options_.warmup_steps &&
         (step_ - options_.warmup_steps) % options_.period == 0;
}

absl::Status PeriodicModelAverager::AverageParameters(
    const std::vector<at::Tensor>& parameters) {
  DTRAIN_RETURN_IF_ERROR(Validate());
  const bool due = Due();
  const int64_t step = step_++;
  averaged_last_ = due;
  if (!due || comm_.world_size() == 1) return absl::OkStatus();
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        // One flat tensor per dtype (and device), in parameter order, so
        // that every rank issues the same allreduces.
        std::vector<std::vector<at::Tensor>> groups;
        for (const at::Tensor& p : parameters) {
          bool placed = false;
          for (auto& g : groups) {
            if (g[0].scalar_type() == p.scalar_type() &&
                g[0].device() == p.device()) {
              g.push_back(p);
              placed = true;
              break;
            }
          }
          if (!placed) groups.push_back({p});
        }
        for (const auto& g : groups) {
          std::vector<at::Tensor> flat;
          int64_t numel = 0;
          for (const at::Tensor& p : g) {
            flat.push_back(p.reshape(-1));
            numel += p.numel();
          }
          at::Tensor all = at::cat(flat);
          const absl::Time started = absl::Now();
          std::shared_ptr<backend::Work> work = comm_.backend().AllReduce(
              all, backend::ReduceOp::kAverage, "model averaging");
          DTRAIN_RETURN_IF_ERROR(comm_.Wait(
              *work,
              absl::StrCat("step ", step + 1, ": averaging ", numel, " ",
                           c10::toString(g[0].scalar_type()), " parameters"),
              started));
          int64_t offset = 0;
          for (const at::Tensor& p : g) {
            p.copy_(all.narrow(0, offset, p.numel()).view(p.sizes()));
            offset += p.numel();
          }
        }
        return absl::OkStatus();
      });
}

}  // namespace dtrain::ddp
