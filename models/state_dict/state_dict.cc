#include "models/state_dict/state_dict.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"
#include "base/name_list.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_guard.h"
#include "models/state_dict/torch_save.h"

namespace dtrain::models::state_dict {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the formats store little-endian data, copied as is");

constexpr std::pair<at::ScalarType, Dtype> kDtypes[] = {
    {at::kDouble, Dtype::kF64}, {at::kFloat, Dtype::kF32},
    {at::kHalf, Dtype::kF16},   {at::kBFloat16, Dtype::kBF16},
    {at::kLong, Dtype::kI64},   {at::kInt, Dtype::kI32},
    {at::kShort, Dtype::kI16},  {at::kChar, Dtype::kI8},
    {at::kByte, Dtype::kU8},    {at::kBool, Dtype::kBool},
};

absl::StatusOr<Dtype> FormatDtype(at::ScalarType t) {
  for (const auto& [torch_type, dtype] : kDtypes) {
    if (torch_type == t) return dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", base::DtypeName(t), " has no safetensors name"));
}

at::ScalarType TorchDtype(Dtype d) {
  for (const auto& [torch_type, dtype] : kDtypes) {
    if (dtype == d) return torch_type;
  }
  return at::kFloat;  // Unreachable: every Dtype is listed.
}

// At most 8 names, then how many more.
std::string Some(const std::vector<std::string>& names) {
  return base::JoinFirst(names, 8);
}

absl::Status Unsupported(const std::string& path) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown state_dict format (supported: ", kStateDictExtensions,
      ")"));
}

absl::Status WithPath(const std::string& path, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> NamedState(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& m : module.named_modules(/*name_prefix=*/"",
                                            /*include_self=*/true)) {
    const std::string prefix = m.key().empty() ? "" : m.key() + ".";
    for (const auto& p : m.value()->named_parameters(/*recurse=*/false))
      out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.value()->named_buffers(/*recurse=*/false))
      out.emplace_back(prefix + b.key(), b.value());
  }
  return out;
}

namespace {

absl::StatusOr<std::vector<TensorEntry>> TensorEntries(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  return base::GuardTorch(
      absl::StatusCode::kInternal,
      "state_dict: ", [&]() -> absl::StatusOr<std::vector<TensorEntry>> {
        std::vector<TensorEntry> entries;
        for (const auto& [name, tensor] : tensors) {
          absl::StatusOr<Dtype> dtype = FormatDtype(tensor.scalar_type());
          if (!dtype.ok()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "state_dict: ", name, ": ", dtype.status().message()));
          }
          const at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
          TensorEntry e;
          e.name = name;
          e.dtype = *dtype;
          e.shape.assign(cpu.sizes().begin(), cpu.sizes().end());
          e.data.assign(static_cast<const char*>(cpu.data_ptr()),
                        cpu.numel() * cpu.element_size());
          entries.push_back(std::move(e));
        }
        return entries;
      });
}

at::Tensor EntryTensor(const TensorEntry& e) {
  at::Tensor t =
      at::empty(e.shape, at::TensorOptions().dtype(TorchDtype(e.dtype)));
  if (!e.data.empty()) std::memcpy(t.data_ptr(), e.data.data(), e.data.size());
  return t;
}

}  // namespace

absl::StatusOr<std::vector<TensorEntry>> StateEntries(
    const torch::nn::Module& module) {
  return TensorEntries(NamedState(module));
}

absl::Status LoadEntries(const std::vector<TensorEntry>& entries,
                         torch::nn::Module& module) {
  std::map<std::string, const TensorEntry*> in_file;
  for (const TensorEntry& e : entries) in_file[e.name] = &e;
  // Each of the model's tensors with its entry; what is left in `in_file`
  // afterwards is not in the model.
  std::vector<std::pair<at::Tensor, const TensorEntry*>> matched;
  std::vector<std::string> missing, mismatched;
  for (const auto& [name, tensor] : NamedState(module)) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      missing.push_back(name);
      continue;
    }
    const TensorEntry& e = *it->second;
    matched.emplace_back(tensor, &e);
    const at::ScalarType dtype = TorchDtype(e.dtype);
    if (dtype != tensor.scalar_type() ||
        !tensor.sizes().equals(at::IntArrayRef(e.shape))) {
      mismatched.push_back(absl::StrCat(
          name, " (file ", base::ShapeString(e.shape), " ",
          base::DtypeName(dtype), ", model ", base::ShapeString(tensor.sizes()),
          " ", base::DtypeName(tensor.scalar_type()), ")"));
    }
    in_file.erase(it);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, e] : in_file) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::vector<std::string> parts;
    if (!missing.empty())
      parts.push_back(absl::StrCat("missing from the file: ", Some(missing)));
    if (!unexpected.empty()) {
      parts.push_back(absl::StrCat("not in the model: ", Some(unexpected)));
    }
    if (!mismatched.empty())
      parts.push_back(absl::StrCat("mismatched: ", Some(mismatched)));
    // Python's DDP prefixes every name with its wrapped module's.
    const bool ddp_names = !unexpected.empty() &&
                           std::all_of(unexpected.begin(), unexpected.end(),
                                       [](const std::string& n) {
                                         return absl::StartsWith(n, "module.");
                                       });
    return absl::InvalidArgumentError(absl::StrCat(
        "state_dict does not fit the model (", absl::StrJoin(parts, "; "), ")",
        ddp_names ? ": the file's names start with 'module.', as a "
                    "DistributedDataParallel wrapper's do; save "
                    "model.module.state_dict() in Python"
                  : ""));
  }
  return base::GuardTorch(absl::StatusCode::kInternal,
                          "state_dict: ", [&]() -> absl::Status {
                            at::NoGradGuard no_grad;
                            for (auto& [tensor, e] : matched)
                              tensor.copy_(EntryTensor(*e));
                            return absl::OkStatus();
                          });
}

namespace {

absl::Status WriteEntries(const std::vector<TensorEntry>& entries,
                          const std::string& path) {
  if (!IsStateDictPath(path)) return Unsupported(path);
  absl::StatusOr<std::string> bytes;
  if (IsSafetensorsPath(path)) {
    SafetensorsFile file;
    file.metadata["format"] = "pt";  // As PyTorch's writer.
    file.tensors = entries;
    bytes = EncodeSafetensors(file);
  } else {
    bytes = EncodeTorchSave(entries);
  }
  if (!bytes.ok()) return WithPath(path, bytes.status());
  return base::WriteFileAtomically(path, *bytes);
}

absl::StatusOr<std::vector<TensorEntry>> ReadEntries(const std::string& path) {
  if (!IsStateDictPath(path)) return Unsupported(path);
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes, base::ReadFile(path));
  absl::StatusOr<std::vector<TensorEntry>> entries;
  if (IsSafetensorsPath(path)) {
    absl::StatusOr<SafetensorsFile> file = DecodeSafetensors(bytes);
    if (!file.ok()) return WithPath(path, file.status());
    return std::move(file->tensors);
  }
  entries = DecodeTorchSave(bytes);
  if (!entries.ok()) return WithPath(path, entries.status());
  return entries;
}

}  // namespace

absl::Status SaveTensors(
    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::string& path) {
  absl::StatusOr<std::vector<TensorEntry>> entries = TensorEntries(tensors);
  if (!entries.ok()) return WithPath(path, entries.status());
  return WriteEntries(*entries, path);
}

absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> LoadTensors(
    const std::string& path) {
  DTRAIN_ASSIGN_OR_RETURN(std::vector<TensorEntry> entries, ReadEntries(path));
  return base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat(path, ": "),
      [&]() -> absl::StatusOr<std::vector<std::pair<std::string, at::Tensor>>> {
        std::vector<std::pair<std::string, at::Tensor>> out;
        for (const TensorEntry& e : entries)
          out.emplace_back(e.name, EntryTensor(e));
        return out;
      });
}

absl::Status SaveStateDict(const torch::nn::Module& module,
                           const std::string& path) {
  return SaveTensors(NamedState(module), path);
}

absl::Status LoadStateDict(const std::string& path, torch::nn::Module& module) {
  DTRAIN_ASSIGN_OR_RETURN(std::vector<TensorEntry> entries, ReadEntries(path));
  return WithPath(path, LoadEntries(entries, module));
}

}  // namespace dtrain::models::state_dict
