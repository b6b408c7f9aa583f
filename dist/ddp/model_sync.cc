#include "dist/ddp/model_sync.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/name_list.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "dist/backend/describe.h"
#include "dist/ddp/model_fingerprint.h"

namespace dtrain::ddp::internal {
namespace {

using base::DtypeName;

// One line of the cross-rank model check: "parameter fc1.weight [64, 4608]
// float32", with " (frozen)" when it does not require grad and the device
// type when not the CPU.
std::string DescribeEntry(absl::string_view kind, const std::string& name,
                          const at::Tensor& t) {
  std::string s =
      absl::StrCat(kind, " ", name, " ", base::ShapeString(t.sizes()), " ",
                   DtypeName(t.scalar_type()));
  // The device type only: ranks use different CUDA devices.
  if (!t.is_cpu()) {
    absl::StrAppend(&s, " (",
                    c10::DeviceTypeName(t.device().type(), /*lower_case=*/true),
                    ")");
  }
  if (kind == "parameter" && !t.requires_grad()) {
    absl::StrAppend(&s, " (frozen)");
  }
  return s;
}

// The gradient dtypes both backends average (Gloo stages bfloat16 in
// float32).
bool Averageable(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf ||
         t == at::kBFloat16;
}

// What the broadcasts carry: the above, the integers both backends sum, and
// bool (sent as uint8).
bool Carryable(at::ScalarType t) {
  return Averageable(t) || t == at::kInt || t == at::kLong || t == at::kByte ||
         t == at::kChar || t == at::kBool;
}

// "fc1.weight, fc1.bias, fc2.weight and 3 more".
std::string SomeNames(const std::vector<std::string>& names) {
  return base::JoinFirst(names, 3);
}

// Refuses, before any collective, what the backend cannot reduce: tensors on
// several devices (a rank drives one device), on a device of the wrong kind
// for the backend ("gloo", "shm", "gloo+shm": the CPU, "nccl": CUDA; others are
// not checked), and dtypes neither backend reduces. Mixed floating dtypes are
// fine: each bucket and each broadcast holds one dtype.
absl::Status CheckPlacement(
    const std::string& prefix, absl::string_view backend,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<at::Device> devices;
  std::vector<std::vector<std::string>> names;  // per entry of `devices`
  std::vector<std::string> refused;
  for (const auto& [name, t] : tensors) {
    auto it = std::find(devices.begin(), devices.end(), t.device());
    if (it == devices.end()) {
      devices.push_back(t.device());
      names.emplace_back();
      it = devices.end() - 1;
    }
    names[it - devices.begin()].push_back(name);
    const bool trainable = t.requires_grad();
    if (trainable ? !Averageable(t.scalar_type())
                  : !Carryable(t.scalar_type())) {
      refused.push_back(absl::StrCat(name, " (", DtypeName(t.scalar_type()),
                                     trainable ? ", trainable)" : ")"));
    }
  }
  if (devices.size() > 1) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < devices.size(); ++i)
      parts.push_back(
          absl::StrCat(devices[i].str(), ": ", SomeNames(names[i])));
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "the model's parameters and buffers are on ", devices.size(),
        " devices (", absl::StrJoin(parts, "; "),
        "); DDP needs them all on this rank's one device: move the module "
        "there (module->to(device)) before wrapping it"));
  }
  if (devices.size() == 1) {
    const at::Device device = devices[0];
    if (backend == "nccl" && !device.is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "the nccl backend reduces CUDA tensors, but the model is on ",
          device.str(), " (", SomeNames(names[0]),
          "): move the module to this rank's GPU (module->to(device)) before "
          "wrapping it"));
    }
    if ((backend == "gloo" || backend == "shm" || backend == "gloo+shm") &&
        !device.is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "the ", backend,
          " backend reduces CPU tensors, but the model is on ", device.str(),
          " (", SomeNames(names[0]),
          "): use the nccl backend for a model on the GPU, or keep it on the "
          "CPU"));
    }
  }
  if (!refused.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "the ", backend, " backend cannot reduce ", SomeNames(refused),
        ": trainable parameters must be float32, float64, float16 or bfloat16 "
        "(mixing them is fine), other parameters and buffers one of those, "
        "an integer type (8, 32 or 64 bits) or bool; convert the module's "
        "tensors or freeze them"));
  }
  return absl::OkStatus();
}

}  // namespace

ModelSync::ModelSync(backend::Backend& backend, absl::Duration timeout)
    : comm_(DdpCollectives(backend, timeout)) {}

absl::StatusOr<std::unique_ptr<ModelSync>> ModelSync::Create(
    const torch::nn::Module& module, backend::Backend& backend,
    absl::Duration timeout, bool broadcast) {
  std::unique_ptr<ModelSync> sync(new ModelSync(backend, timeout));

  // Entries for the model check, and the tensors to broadcast.
  std::vector<std::string> entries;
  std::vector<at::Tensor> all_tensors;
  std::vector<std::pair<std::string, at::Tensor>> named;
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, sync->comm_.torch_prefix(), [&] {
        for (const auto& item : module.named_parameters(/*recurse=*/true)) {
          const at::Tensor& t = item.value();
          if (!t.defined()) continue;
          entries.push_back(DescribeEntry("parameter", item.key(), t));
          all_tensors.push_back(t);
          sync->parameters_.push_back(t);
          named.emplace_back(item.key(), t);
          if (t.requires_grad()) sync->trainable_.emplace_back(item.key(), t);
        }
        for (const auto& item : module.named_buffers(/*recurse=*/true)) {
          const at::Tensor& t = item.value();
          if (!t.defined()) continue;
          entries.push_back(DescribeEntry("buffer", item.key(), t));
          all_tensors.push_back(t);
          named.emplace_back(item.key(), t);
          sync->buffers_.push_back(t);
        }
        if (!all_tensors.empty()) {
          sync->control_device_ = all_tensors[0].device();
        }
        return absl::OkStatus();
      }));

  DTRAIN_RETURN_IF_ERROR(
      CheckPlacement(sync->comm_.prefix(), backend.name(), named));
  DTRAIN_RETURN_IF_ERROR(sync->CheckSameModel(entries));
  if (broadcast) {
    DTRAIN_RETURN_IF_ERROR(
        sync->BroadcastFrom(0, all_tensors, "parameters and buffers"));
  }
  return sync;
}

absl::Status ModelSync::BroadcastBuffers(absl::string_view what, int root) {
  return BroadcastFrom(root, buffers_, what);
}

absl::Status ModelSync::BroadcastModel(absl::string_view what, int root,
                                       bool buffers) {
  std::vector<at::Tensor> tensors = parameters_;
  if (buffers) tensors.insert(tensors.end(), buffers_.begin(), buffers_.end());
  return BroadcastFrom(root, tensors, what);
}

absl::Status ModelSync::CheckSameModel(
    const std::vector<std::string>& entries) {
  const int world = comm_.backend().size();
  const uint64_t fingerprint = Fingerprint(entries);
  int64_t signed_fingerprint;
  std::memcpy(&signed_fingerprint, &fingerprint, sizeof(fingerprint));
  const std::string joined = JoinEntries(entries);
  const absl::Time start = absl::Now();
  // Fingerprint and description length in one collective.
  at::Tensor header;
  DTRAIN_RETURN_IF_ERROR(comm_.WaitForResult(
      *comm_.GatherBySum(
          at::tensor({signed_fingerprint, static_cast<int64_t>(joined.size())},
                     at::kLong),
          control_device_, &header, "ddp model fingerprints"),
      "exchange of model fingerprints", start));
  header = header.cpu();
  const auto h = header.accessor<int64_t, 2>();
  bool same = true;
  int64_t longest = 1;
  for (int r = 0; r < world; ++r) {
    same = same && h[r][0] == signed_fingerprint;
    longest = std::max(longest, h[r][1]);
  }
  if (same) return absl::OkStatus();

  at::Tensor mine = at::zeros({longest}, at::kByte);
  std::memcpy(mine.data_ptr(), joined.data(), joined.size());
  at::Tensor all;
  DTRAIN_RETURN_IF_ERROR(comm_.WaitForResult(
      *comm_.GatherBySum(mine, control_device_, &all, "ddp model descriptions"),
      "exchange of model descriptions", start));
  all = all.cpu();
  std::vector<std::vector<std::string>> per_rank;
  for (int r = 0; r < world; ++r) {
    per_rank.push_back(SplitEntries(
        absl::string_view(static_cast<const char*>(all.select(0, r).data_ptr()),
                          static_cast<size_t>(h[r][1]))));
  }
  std::string mismatch = DescribeFirstMismatch(per_rank);
  if (mismatch.empty()) mismatch = "fingerprints differ but descriptions match";
  return absl::InvalidArgumentError(absl::StrCat(
      comm_.prefix(), "the model differs across ranks at ", mismatch,
      " (parameters, then buffers, in registration order; every rank must "
      "build the same model)"));
}

absl::Status ModelSync::BroadcastFrom(int root,
                                      const std::vector<at::Tensor>& tensors,
                                      absl::string_view what) {
  struct Group {
    std::vector<at::Tensor> members;
    at::Tensor flat;
    std::shared_ptr<backend::Work> work;
  };
  std::vector<Group> groups;
  backend::Backend& backend = comm_.backend();
  const bool is_root = backend.rank() == root;
  DTRAIN_RETURN_IF_ERROR(
      base::GuardTorch(absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (const at::Tensor& t : tensors) {
          auto it = std::find_if(groups.begin(), groups.end(), [&](Group& g) {
            return g.members.front().scalar_type() == t.scalar_type() &&
                   g.members.front().device() == t.device();
          });
          if (it == groups.end()) {
            groups.emplace_back();
            it = groups.end() - 1;
          }
          it->members.push_back(t);
        }
        for (Group& g : groups) {
          // Always a copy: a failed collective must not leave zeros behind.
          std::vector<at::Tensor> flat;
          for (const at::Tensor& t : g.members) flat.push_back(t.reshape(-1));
          g.flat = at::cat(flat);
          // Backends sum no bool: one byte each.
          if (g.flat.scalar_type() == at::kBool) g.flat = g.flat.to(at::kByte);
          if (!is_root) g.flat.zero_();
        }
        return absl::OkStatus();
      }));
  // Sums rather than Broadcast: see Collectives::GatherBySum.
  const absl::Time start = absl::Now();
  const std::string label = absl::StrCat("ddp broadcast of ", what);
  for (Group& g : groups) {
    g.work = backend.AllReduce(g.flat, backend::ReduceOp::kSum, label);
  }
  absl::Status result;
  for (Group& g : groups) {
    absl::Status s = comm_.Wait(
        *g.work,
        absl::StrCat(
            "broadcast of ", what, " from rank ", root, " (", g.members.size(),
            " x ", DtypeName(g.members[0].scalar_type()), ", ",
            backend::FormatBytes(g.flat.numel() * g.flat.element_size()), ")"),
        start);
    if (!s.ok() && result.ok()) result = s;
  }
  if (!result.ok() || is_root) return result;
  return base::GuardTorch(
      absl::StatusCode::kInternal, comm_.torch_prefix(), [&] {
        at::NoGradGuard no_grad;
        for (Group& g : groups) {
          int64_t offset = 0;
          for (at::Tensor& t : g.members) {
            t.copy_(g.flat.narrow(0, offset, t.numel()).view(t.sizes()));
            offset += t.numel();
          }
        }
        return absl::OkStatus();
      });
}

}  // namespace dtrain::ddp::internal
