// The reducer's handling of parameters that got no gradient in a
// synchronised step: filling them in (their .grad or zeros, as PyTorch's
// find_unused_parameters), and UnusedParameters::kError's exchange of which
// parameters went unused where and its verdict. See reducer.h.
#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/ddp/model_fingerprint.h"
#include "dist/ddp/reducer.h"

namespace dtrain::ddp::internal {

std::vector<char> Reducer::FillInUnused(std::vector<std::string>* names) {
  // Parameters whose gradient is not in its bucket yet contribute .grad or
  // zeros (PyTorch's find_unused_parameters); marking them ready launches
  // every bucket still pending, in order, even when a copy failed, so the
  // ranks stay in step.
  std::vector<char> unused(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    if (options_.static_graph) {
      // Unused: no gradient at all. After the first step, fewer gradients
      // than the first step had means the graph changed.
      unused[i] = hook_counts_[i] == 0 ? 1 : 0;
      if (static_known_ && !ready_[i] &&
          hook_counts_[i] != expected_hooks_[i] &&
          std::find(graph_changed_.begin(), graph_changed_.end(), p.name) ==
              graph_changed_.end()) {
        graph_changed_.push_back(p.name);
      }
    } else {
      unused[i] = ready_[i] ? 0 : 1;
    }
    if (unused[i]) names->push_back(p.name);
    if (ready_[i]) continue;
    CopyGradIntoBucket(p);
    MarkReady(static_cast<int>(i), /*in_backward=*/false);
  }
  return unused;
}

absl::StatusOr<std::shared_ptr<backend::Work>> Reducer::ExchangeUnused(
    const std::vector<char>& unused, at::Tensor* unused_maps) {
  std::shared_ptr<backend::Work> work;
  if (options_.unused_parameters != UnusedParameters::kError) return work;
  DTRAIN_RETURN_IF_ERROR(
      base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::Tensor mine =
            at::empty({static_cast<int64_t>(unused.size())}, at::kByte);
        std::copy(unused.begin(), unused.end(), mine.data_ptr<uint8_t>());
        work = comm_.GatherBySum(mine, control_device_, unused_maps,
                                 "ddp unused parameters");
        return absl::OkStatus();
      }));
  return work;
}

absl::Status Reducer::CheckUnused(const std::string& step_name,
                                  const at::Tensor& unused_maps) const {
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        const at::Tensor maps = unused_maps.cpu();
        const auto flags = maps.accessor<uint8_t, 2>();
        std::vector<std::string> named;
        for (size_t i = 0; i < params_.size(); ++i) {
          std::vector<int> ranks;
          for (int r = 0; r < comm_.backend().size(); ++r) {
            if (flags[r][static_cast<int64_t>(i)] != 0) ranks.push_back(r);
          }
          if (ranks.empty()) continue;
          named.push_back(
              absl::StrCat(params_[i].name, " (", FormatRanks(ranks), ")"));
        }
        if (named.empty()) return absl::OkStatus();
        return absl::FailedPreconditionError(absl::StrCat(
            comm_.prefix(), step_name, ": ", named.size(),
            named.size() == 1 ? " parameter" : " parameters",
            " received no gradient: ", absl::StrJoin(named, ", "),
            "; they were averaged as zeros (or their accumulated .grad). Use "
            "UnusedParameters::kZero if the model leaves them unused on "
            "purpose"));
      });
}

}  // namespace dtrain::ddp::internal
