#include "models/state_dict/state_dict.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
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

using Named = std::vector<std::pair<std::string, at::Tensor>>;

// A tensor over `e`'s bytes, which must outlive it: no copy.
at::Tensor ViewOfEntry(const TensorEntry& e) {
  return at::from_blob(const_cast<char*>(e.data.data()), e.shape,
                       at::TensorOptions().dtype(TorchDtype(e.dtype)));
}

// A tensor that takes over `e`'s bytes (a heap string, 16-byte aligned, or
// the inline buffer of a short one: aligned for every dtype's 8 bytes).
at::Tensor TensorOfEntry(TensorEntry&& e) {
  auto* owned = new std::string(std::move(e.data));
  return at::from_blob(
      owned->data(), e.shape, [owned](void*) { delete owned; },
      at::TensorOptions().dtype(TorchDtype(e.dtype)));
}

// A torch.save file's tensors as torch.load makes them: one storage per
// storage of the file (its bytes copied once), each tensor object a view of
// its storage, each name a handle to its tensor; names that alias share.
Named TorchSaveTensors(const TorchSaveFile& file) {
  std::vector<c10::Storage> storages;
  storages.reserve(file.storages.size());
  for (absl::string_view bytes : file.storages) {
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes.size(),
                         c10::GetDefaultCPUAllocator(), /*resizable=*/false);
    // DataPtr::get() is the writable pointer in every LibTorch the project
    // builds against (Storage::data() is const since 2.1).
    if (!bytes.empty())
      std::memcpy(storage.data_ptr().get(), bytes.data(), bytes.size());
    storages.push_back(std::move(storage));
  }
  std::vector<at::Tensor> tensors;
  tensors.reserve(file.tensors.size());
  for (const TorchSaveFile::Tensor& t : file.tensors) {
    at::Tensor view =
        at::empty({0}, at::TensorOptions().dtype(TorchDtype(t.dtype)));
    view.set_(storages[t.storage], t.offset, t.size, t.stride);
    tensors.push_back(std::move(view));
  }
  Named out;
  out.reserve(file.names.size());
  for (const auto& [name, index] : file.names)
    out.emplace_back(name, tensors[index]);
  return out;
}

}  // namespace

absl::StatusOr<std::vector<TensorEntry>> StateEntries(
    const torch::nn::Module& module) {
  return TensorEntries(NamedState(module));
}

namespace {

// Whether exclusion `pattern` covers `name`: the name itself and what is
// under it ("fc": "fc", "fc.weight"), or a prefix ending in '.' as given.
bool Covers(const std::string& pattern, const std::string& name) {
  if (absl::EndsWith(pattern, ".")) return absl::StartsWith(name, pattern);
  return name == pattern ||
         (absl::StartsWith(name, pattern) && name.size() > pattern.size() &&
          name[pattern.size()] == '.');
}

// The modules that hold `names` ("fc.weight", "fc.bias": "fc"), each once,
// in order: what to leave out to keep a module's own values.
std::vector<std::string> Owners(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& name : names) {
    const size_t dot = name.rfind('.');
    std::string owner = dot == std::string::npos ? name : name.substr(0, dot);
    if (std::find(out.begin(), out.end(), owner) == out.end())
      out.push_back(std::move(owner));
  }
  return out;
}

// The first component of each name ("conv1", "layer1", "fc"), each once.
std::vector<std::string> TopLevel(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& name : names) {
    std::string top = name.substr(0, name.find('.'));
    if (std::find(out.begin(), out.end(), top) == out.end())
      out.push_back(std::move(top));
  }
  return out;
}

}  // namespace

std::string LoadReport::Summary() const {
  const size_t total = loaded.size() + excluded.size() + missing.size();
  std::string out =
      absl::StrCat(loaded.size(), " of ", total, " entries loaded");
  if (!excluded.empty())
    absl::StrAppend(&out, "; left out (kept as initialised): ", Some(excluded));
  if (!missing.empty()) {
    absl::StrAppend(
        &out, "; missing from the file (kept as initialised): ", Some(missing));
  }
  if (!unexpected.empty())
    absl::StrAppend(&out, "; not in the model (ignored): ", Some(unexpected));
  return out;
}

namespace {

// LoadEntries' work on tensors from a file or entries, copied straight from
// them into the module (a view's elements included, nothing staged).
absl::StatusOr<LoadReport> LoadNamed(const Named& entries,
                                     torch::nn::Module& module,
                                     const LoadOptions& options) {
  std::vector<bool> used(options.exclude.size(), false);
  auto excluded = [&](const std::string& name) {
    bool any = false;
    for (size_t i = 0; i < options.exclude.size(); ++i) {
      if (Covers(options.exclude[i], name)) used[i] = any = true;
    }
    return any;
  };
  LoadReport report;
  std::map<absl::string_view, const at::Tensor*> in_file;
  for (const auto& [name, tensor] : entries) {
    if (excluded(name)) {
      report.skipped.push_back(name);
    } else {
      in_file[name] = &tensor;
    }
  }
  // Each of the model's tensors with its entry; what is left in `in_file`
  // afterwards is not in the model.
  const auto state = NamedState(module);
  std::vector<std::pair<at::Tensor, const at::Tensor*>> matched;
  std::vector<std::string> mismatched, mismatched_names;
  for (const auto& [name, tensor] : state) {
    if (excluded(name)) {
      report.excluded.push_back(name);
      continue;
    }
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      report.missing.push_back(name);
      continue;
    }
    const at::Tensor& e = *it->second;
    matched.emplace_back(tensor, &e);
    report.loaded.push_back(name);
    const at::ScalarType dtype = e.scalar_type();
    if (dtype != tensor.scalar_type() || !tensor.sizes().equals(e.sizes())) {
      mismatched_names.push_back(name);
      mismatched.push_back(absl::StrCat(
          name, " (file ", base::ShapeString(e.sizes()), " ",
          base::DtypeName(dtype), ", model ", base::ShapeString(tensor.sizes()),
          " ", base::DtypeName(tensor.scalar_type()), ")"));
    }
    in_file.erase(it);
  }
  // The file's order, not the map's.
  for (const auto& [name, tensor] : entries) {
    if (in_file.count(name) != 0) report.unexpected.push_back(name);
  }

  std::vector<std::string> unknown;
  for (size_t i = 0; i < options.exclude.size(); ++i) {
    if (!used[i]) unknown.push_back(absl::StrCat("'", options.exclude[i], "'"));
  }
  if (!unknown.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, tensor] : state) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat(
        options.exclude_flag.empty() ? "exclude" : options.exclude_flag, ": ",
        absl::StrJoin(unknown, ", "),
        " names no entry of the file or the model (the model's modules: ",
        Some(TopLevel(names)), ")"));
  }

  const bool refused =
      !mismatched.empty() || (options.strict && (!report.missing.empty() ||
                                                 !report.unexpected.empty()));
  if (refused) {
    std::vector<std::string> parts;
    if (options.strict && !report.missing.empty()) {
      parts.push_back(
          absl::StrCat("missing from the file: ", Some(report.missing)));
    }
    if (options.strict && !report.unexpected.empty()) {
      parts.push_back(
          absl::StrCat("not in the model: ", Some(report.unexpected)));
    }
    if (!mismatched.empty())
      parts.push_back(absl::StrCat("mismatched: ", Some(mismatched)));
    std::string message = absl::StrCat("state_dict does not fit the model (",
                                       absl::StrJoin(parts, "; "), ")");
    // Python's DDP prefixes every name with its wrapped module's.
    const std::vector<std::string>& unexpected = report.unexpected;
    if (options.strict && !unexpected.empty() &&
        std::all_of(unexpected.begin(), unexpected.end(),
                    [](const std::string& n) {
                      return absl::StartsWith(n, "module.");
                    })) {
      absl::StrAppend(&message,
                      ": the file's names start with 'module.', as a "
                      "DistributedDataParallel wrapper's do; save "
                      "model.module.state_dict() in Python");
    }
    if (!mismatched.empty() && !options.exclude_flag.empty()) {
      absl::StrAppend(&message, "; to train ",
                      mismatched.size() == 1 ? "it" : "them",
                      " from scratch instead (a new classifier head, say), "
                      "leave ",
                      mismatched.size() == 1 ? "it" : "them",
                      " out: ", options.exclude_flag, "=",
                      absl::StrJoin(Owners(mismatched_names), ","));
    }
    if (options.strict && !options.strict_flag.empty() &&
        (!report.missing.empty() || !report.unexpected.empty())) {
      absl::StrAppend(&message, "; ", options.strict_flag,
                      "=false allows missing and unexpected names, as "
                      "PyTorch's strict=False");
    }
    return absl::InvalidArgumentError(message);
  }
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, "state_dict: ", [&]() -> absl::Status {
        at::NoGradGuard no_grad;
        for (auto& [tensor, e] : matched) tensor.copy_(*e);
        return absl::OkStatus();
      }));
  return report;
}

}  // namespace

absl::StatusOr<LoadReport> LoadEntries(const std::vector<TensorEntry>& entries,
                                       torch::nn::Module& module,
                                       const LoadOptions& options) {
  DTRAIN_ASSIGN_OR_RETURN(
      Named named,
      base::GuardTorch(absl::StatusCode::kInternal,
                       "state_dict: ", [&]() -> absl::StatusOr<Named> {
                         Named out;
                         for (const TensorEntry& e : entries)
                           out.emplace_back(e.name, ViewOfEntry(e));
                         return out;
                       }));
  return LoadNamed(named, module, options);
}

absl::Status LoadEntries(const std::vector<TensorEntry>& entries,
                         torch::nn::Module& module) {
  return LoadEntries(entries, module, LoadOptions()).status();
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

// The file's tensors; memory a small multiple of its size however its
// names alias (docs/RELIABILITY.md).
absl::StatusOr<Named> ReadNamed(const std::string& path) {
  if (!IsStateDictPath(path)) return Unsupported(path);
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes,
                          base::ReadFile(path, base::kWeightsFileLimit));
  if (IsSafetensorsPath(path)) {
    absl::StatusOr<SafetensorsFile> file = DecodeSafetensors(bytes);
    if (!file.ok()) return WithPath(path, file.status());
    bytes = std::string();  // The entries hold copies.
    return base::GuardTorch(
        absl::StatusCode::kInternal, absl::StrCat(path, ": "),
        [&]() -> absl::StatusOr<Named> {
          Named out;
          for (TensorEntry& e : file->tensors) {
            std::string name = std::move(e.name);
            out.emplace_back(std::move(name), TensorOfEntry(std::move(e)));
          }
          return out;
        });
  }
  absl::StatusOr<TorchSaveFile> file = ParseTorchSave(bytes);
  if (!file.ok()) return WithPath(path, file.status());
  return base::GuardTorch(
      absl::StatusCode::kInternal, absl::StrCat(path, ": "),
      [&]() -> absl::StatusOr<Named> { return TorchSaveTensors(*file); });
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
  return ReadNamed(path);
}

absl::Status SaveStateDict(const torch::nn::Module& module,
                           const std::string& path) {
  return SaveTensors(NamedState(module), path);
}

absl::Status LoadStateDict(const std::string& path, torch::nn::Module& module) {
  return LoadStateDict(path, module, LoadOptions()).status();
}

absl::StatusOr<LoadReport> LoadStateDict(const std::string& path,
                                         torch::nn::Module& module,
                                         const LoadOptions& options) {
  DTRAIN_ASSIGN_OR_RETURN(Named tensors, ReadNamed(path));
  absl::StatusOr<LoadReport> report = LoadNamed(tensors, module, options);
  if (!report.ok()) return WithPath(path, report.status());
  return report;
}

}  // namespace dtrain::models::state_dict
