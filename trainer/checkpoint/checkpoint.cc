#include "trainer/checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/byte_codec.h"
#include "base/crc32.h"
#include "base/status_macros.h"
#include "base/tensor_text.h"
#include "base/torch_compat.h"
#include "base/torch_guard.h"
#include "trainer/checkpoint/optimizer_codec.h"
#include "trainer/checkpoint/payload.h"
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer {
namespace {

using internal::CodecFor;
using internal::kEncodeError;
using internal::Malformed;
using internal::NamedTensors;
using internal::OptimizerCodec;
using internal::Quoted;
using internal::SavedCheckpoint;
using internal::SavedGroup;
using internal::SavedOptimizer;
using internal::SavedParamState;
using internal::SupportedOptimizers;

using internal::kFormatVersion;
using internal::kOldestFormatVersion;

constexpr absl::string_view kMagic = "DTRAINCK";
static_assert(kCheckpointHeaderSize == 8 + 4 + 8 + 4);

struct HeaderFields {
  uint32_t version = 0;
  uint32_t crc = 0;
};

// "versions 2 and 3", for messages.
std::string VersionsRead() {
  return absl::StrCat("versions ", kOldestFormatVersion, " and ",
                      kFormatVersion);
}

// The header's checks that need only its bytes (`header`, a prefix of the
// file) and the file's size: returns the version and the CRC-32 the header
// states.
absl::StatusOr<HeaderFields> CheckHeaderFields(absl::string_view header,
                                               uint64_t file_size) {
  const absl::string_view magic = header.substr(0, kMagic.size());
  // A prefix of the magic is a file cut short, not a foreign one.
  if (!absl::StartsWith(kMagic, magic)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a dtrain checkpoint (magic \"", absl::CHexEscape(magic),
        "\" instead of \"", kMagic, "\")"));
  }
  if (file_size < kCheckpointHeaderSize) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", file_size, " bytes, shorter than the ",
                     kCheckpointHeaderSize, "-byte header"));
  }
  if (header.size() < kCheckpointHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint header: ", header.size(), " bytes given, ",
                     kCheckpointHeaderSize, " needed"));
  }
  const char* fields = header.data() + kMagic.size();
  const uint32_t version =
      static_cast<uint32_t>(base::GetLittleEndian(fields, 4));
  const uint64_t length = base::GetLittleEndian(fields + 4, 8);
  const uint32_t crc =
      static_cast<uint32_t>(base::GetLittleEndian(fields + 12, 4));
  if (version == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint format version 1 is no longer read; this build reads ",
        VersionsRead(),
        " (version 1 held a LibTorch archive, which cannot be read safely): "
        "start the run afresh"));
  }
  if (version < kOldestFormatVersion || version > kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported checkpoint format version ", version,
                     " (this build reads ", VersionsRead(), ")"));
  }
  const uint64_t payload_size = file_size - kCheckpointHeaderSize;
  if (payload_size < length) {
    return absl::DataLossError(absl::StrCat("truncated: header says ", length,
                                            " payload bytes, found ",
                                            payload_size));
  }
  if (payload_size > length) {
    return absl::DataLossError(absl::StrCat(
        "header says ", length, " payload bytes, found ", payload_size, " (",
        payload_size - length, " unexpected bytes at the end)"));
  }
  return HeaderFields{version, crc};
}

struct CheckedBytes {
  uint32_t version = 0;
  absl::string_view payload;
};

// The version and payload of a checkpoint whose header checks pass.
absl::StatusOr<CheckedBytes> CheckHeader(absl::string_view bytes) {
  DTRAIN_ASSIGN_OR_RETURN(const HeaderFields header,
                          CheckHeaderFields(bytes, bytes.size()));
  const absl::string_view payload = bytes.substr(kCheckpointHeaderSize);
  if (const uint32_t actual = base::Crc32(payload); actual != header.crc) {
    return absl::DataLossError(
        absl::StrFormat("checksum mismatch: header says CRC-32 %08x, the "
                        "%d-byte payload has %08x",
                        header.crc, payload.size(), actual));
  }
  return CheckedBytes{header.version, payload};
}

// --- Loading ----------------------------------------------------------------

// FailedPrecondition naming the first difference between what the
// checkpoint holds (`saved`) and what the model has (`model`).
absl::Status CheckFits(absl::string_view kind, const NamedTensors& saved,
                       const NamedTensors& model) {
  absl::flat_hash_map<absl::string_view, size_t> saved_index;
  for (size_t i = 0; i < saved.names.size(); ++i) {
    if (!saved_index.emplace(saved.names[i], i).second) {
      return Malformed(
          absl::StrCat(kind, " ", Quoted(saved.names[i]), " is twice"));
    }
  }
  for (size_t i = 0; i < model.names.size(); ++i) {
    const std::string& name = model.names[i];
    auto it = saved_index.find(name);
    if (it == saved_index.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint does not fit the model: it has no ", kind, " ", name,
          " (model shape ", base::ShapeString(model.tensors[i].sizes()), ")"));
    }
    const torch::Tensor& want = model.tensors[i];
    const torch::Tensor& have = saved.tensors[it->second];
    if (have.sizes() != want.sizes()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint does not fit the model: ", kind, " ",
                       name, " has shape ", base::ShapeString(have.sizes()),
                       " in the checkpoint, ", base::ShapeString(want.sizes()),
                       " in the model"));
    }
    if (have.scalar_type() != want.scalar_type()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint does not fit the model: ", kind, " ",
                       name, " has dtype ", c10::toString(have.scalar_type()),
                       " in the checkpoint, ",
                       c10::toString(want.scalar_type()), " in the model"));
    }
  }
  if (saved.names.size() != model.names.size()) {
    // Same names found, so the checkpoint has extra ones.
    for (const std::string& name : saved.names) {
      if (std::find(model.names.begin(), model.names.end(), name) ==
          model.names.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the checkpoint does not fit the model: it has ", kind, " ",
            absl::CHexEscape(name), ", which the model does not"));
      }
    }
  }
  return absl::OkStatus();
}

// FailedPrecondition unless the saved state maps onto the optimizer's
// parameters by position: same optimizer type, group count, parameter count
// per group, and state tensors of each parameter's shape.
absl::Status CheckOptimizerFits(const SavedOptimizer& saved,
                                const torch::optim::Optimizer& optimizer) {
  auto unfit = [](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint's optimizer state does not fit the optimizer: ", why));
  };
  const OptimizerCodec* codec = CodecFor(optimizer);
  if (codec == nullptr) {
    return unfit(absl::StrCat("checkpoints support ", SupportedOptimizers(),
                              ", and the optimizer is neither"));
  }
  if (codec != saved.codec) {
    return unfit(absl::StrCat("the checkpoint holds ", saved.codec->name(),
                              " state, the optimizer is ", codec->name()));
  }
  const std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer.param_groups();
  if (saved.groups.size() != groups.size()) {
    return unfit(absl::StrCat("the checkpoint has ", saved.groups.size(),
                              " parameter groups, the optimizer ",
                              groups.size()));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<torch::Tensor>& params = groups[g].params();
    const std::vector<SavedParamState>& states = saved.groups[g].params;
    if (states.size() != params.size()) {
      return unfit(absl::StrCat("parameter group ", g, " has ", states.size(),
                                " parameters in the checkpoint, ",
                                params.size(), " in the optimizer"));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (!states[i].present) continue;
      for (const at::Tensor& t : states[i].tensors) {
        if (t.sizes() != params[i].sizes()) {
          return unfit(absl::StrCat(
              "parameter ", i, " of group ", g, " has shape ",
              base::ShapeString(params[i].sizes()),
              ", its state in the checkpoint ", base::ShapeString(t.sizes())));
        }
      }
    }
  }
  return absl::OkStatus();
}

using OptimizerState = torch_compat::OptimizerStateMap;

// The optimizer's new state, on each parameter's device and (as PyTorch's
// load_state_dict) in a floating-point parameter's dtype. Throws on device
// errors; changes nothing.
OptimizerState BuildOptimizerState(const SavedOptimizer& saved,
                                   const torch::optim::Optimizer& optimizer) {
  OptimizerState out;
  const std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const SavedParamState& state = saved.groups[g].params[i];
      if (!state.present) continue;
      const torch::Tensor& param = groups[g].params()[i];
      torch::TensorOptions to = torch::TensorOptions().device(param.device());
      if (param.is_floating_point()) to = to.dtype(param.scalar_type());
      out[torch_compat::OptimizerStateKeyOf(param)] =
          saved.codec->BuildState(state, to);
    }
  }
  return out;
}

// Puts the optimizer's state and group options back unless Commit() is
// called, for a failure after they were replaced.
class OptimizerRollback {
 public:
  // Takes the optimizer's state out (leaving it empty) and copies its
  // options; throws, changing nothing, when a copy cannot be made.
  explicit OptimizerRollback(torch::optim::Optimizer& optimizer)
      : optimizer_(optimizer) {
    for (const torch::optim::OptimizerParamGroup& group :
         optimizer.param_groups()) {
      options_.push_back(group.has_options() ? group.options().clone()
                                             : nullptr);
    }
    state_ = std::move(optimizer.state());
    optimizer.state().clear();
  }
  ~OptimizerRollback() {
    if (committed_) return;
    optimizer_.state() = std::move(state_);
    std::vector<torch::optim::OptimizerParamGroup>& groups =
        optimizer_.param_groups();
    for (size_t i = 0; i < groups.size() && i < options_.size(); ++i) {
      if (options_[i] != nullptr) groups[i].set_options(std::move(options_[i]));
    }
  }
  OptimizerRollback(const OptimizerRollback&) = delete;
  OptimizerRollback& operator=(const OptimizerRollback&) = delete;

  void Commit() { committed_ = true; }

 private:
  torch::optim::Optimizer& optimizer_;
  OptimizerState state_;
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options_;
  bool committed_ = false;
};

}  // namespace

absl::StatusOr<std::string> EncodeCheckpoint(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state, const HookState& hook) {
  // The header goes first; its length and CRC are filled in at the end.
  std::string out(kCheckpointHeaderSize, '\0');
  base::ByteWriter w(&out, kEncodeError);
  absl::Status encoded = base::GuardTorch(
      // Copying a tensor to the CPU failed, or memory ran out.
      absl::StatusCode::kInternal, kEncodeError,
      [&] { return internal::WritePayload(model, optimizer, state, hook, w); });
  DTRAIN_RETURN_IF_ERROR(encoded);
  const absl::string_view payload =
      absl::string_view(out).substr(kCheckpointHeaderSize);
  char* header = out.data();
  std::memcpy(header, kMagic.data(), kMagic.size());
  base::PutLittleEndian(kFormatVersion, 4, header + 8);
  base::PutLittleEndian(payload.size(), 8, header + 12);
  base::PutLittleEndian(base::Crc32(payload), 4, header + 20);
  return out;
}

absl::Status ValidateCheckpointHeader(absl::string_view header,
                                      uint64_t file_size) {
  return CheckHeaderFields(header, file_size).status();
}

absl::Status ValidateCheckpointBytes(absl::string_view bytes) {
  DTRAIN_ASSIGN_OR_RETURN(const CheckedBytes checked, CheckHeader(bytes));
  SavedCheckpoint saved;
  return base::GuardTorch(
      absl::StatusCode::kInternal, "cannot decode checkpoint: ", [&] {
        return internal::ReadPayload(checked.payload, checked.version, &saved);
      });
}

absl::StatusOr<TrainingState> DecodeCheckpoint(
    absl::string_view bytes, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, absl::string_view expected_model_name,
    absl::string_view expected_optimizer_name, HookState* hook) {
  DTRAIN_ASSIGN_OR_RETURN(const CheckedBytes checked, CheckHeader(bytes));
  SavedCheckpoint saved;
  // Every size is checked against the payload: only memory can run out.
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
      absl::StatusCode::kInternal, "cannot decode checkpoint: ", [&] {
        return internal::ReadPayload(checked.payload, checked.version, &saved);
      }));

  // Names first: loading another model's checkpoint should say so, not list
  // a missing parameter.
  if (!expected_model_name.empty() &&
      saved.state.model_name != expected_model_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the checkpoint is of model ", Quoted(saved.state.model_name),
        ", not \"", expected_model_name, "\""));
  }
  if (!expected_optimizer_name.empty() &&
      saved.state.optimizer_name != expected_optimizer_name) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint has the state of optimizer ",
                     Quoted(saved.state.optimizer_name), ", not \"",
                     expected_optimizer_name, "\""));
  }
  NamedTensors parameters = internal::Collect(model.named_parameters());
  NamedTensors buffers = internal::Collect(model.named_buffers());
  DTRAIN_RETURN_IF_ERROR(CheckFits("parameter", saved.parameters, parameters));
  DTRAIN_RETURN_IF_ERROR(CheckFits("buffer", saved.buffers, buffers));
  DTRAIN_RETURN_IF_ERROR(CheckOptimizerFits(saved.optimizer, optimizer));

  // Everything is checked. What can still fail is the device (a copy, an
  // allocation), so the tensors are moved there before anything changes,
  // then the optimizer is replaced, then the model (rolling the optimizer
  // back if that fails).
  return base::GuardTorch(
      // Only a device failure gets here, after the checks above.
      absl::StatusCode::kInternal,
      "loading the checkpoint into the model and optimizer failed: ",
      [&]() -> absl::StatusOr<TrainingState> {
        std::vector<torch::Tensor> sources;
        std::vector<torch::Tensor> targets;
        for (const bool is_parameter : {true, false}) {
          const NamedTensors& have = is_parameter ? parameters : buffers;
          const NamedTensors& from =
              is_parameter ? saved.parameters : saved.buffers;
          absl::flat_hash_map<absl::string_view, size_t> index;
          for (size_t i = 0; i < from.names.size(); ++i) {
            index.emplace(from.names[i], i);
          }
          for (size_t i = 0; i < have.names.size(); ++i) {
            const torch::Tensor& target = have.tensors[i];
            sources.push_back(
                from.tensors[index.at(have.names[i])].to(target.device()));
            targets.push_back(target);
          }
        }
        OptimizerState state = BuildOptimizerState(saved.optimizer, optimizer);
        std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
        if (saved.optimizer.codec->RestoresOptions()) {
          for (SavedGroup& group : saved.optimizer.groups) {
            options.push_back(std::move(group.options));
          }
        }

        OptimizerRollback rollback(optimizer);
        optimizer.state() = std::move(state);
        for (size_t g = 0; g < options.size(); ++g) {
          optimizer.param_groups()[g].set_options(std::move(options[g]));
        }
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < targets.size(); ++i)
          targets[i].copy_(sources[i]);
        rollback.Commit();
        if (hook != nullptr) *hook = std::move(saved.hook);
        return saved.state;
      });
}

}  // namespace dtrain::trainer
