#include "trainer/checkpoint/checkpoint.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
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
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer {
namespace {

using internal::CodecFor;
using internal::CodecOfKind;
using internal::kEncodeError;
using internal::kMalformed;
using internal::kMinTensorSize;
using internal::Malformed;
using internal::OptimizerCodec;
using internal::Quoted;
using internal::ReadTensor;
using internal::SavedGroup;
using internal::SavedParamState;
using internal::SupportedOptimizers;
using internal::WriteTensor;

constexpr absl::string_view kMagic = "DTRAINCK";
constexpr uint32_t kFormatVersion = 2;
static_assert(kCheckpointHeaderSize == 8 + 4 + 8 + 4);

constexpr absl::string_view kModelSection = "MODL";
constexpr absl::string_view kOptimizerSection = "OPTM";
constexpr absl::string_view kStateSection = "STAT";

// MODL entries.
constexpr uint8_t kParameterKind = 0;
constexpr uint8_t kBufferKind = 1;

// Smallest encodings, to cap counts by the bytes left: a MODL entry is a
// name length, a kind and a tensor; a parameter of an optimizer group at
// least its has-state byte.
constexpr size_t kMinModelEntrySize = 4 + 1 + kMinTensorSize;
constexpr size_t kMinGroupParameterSize = 1;

// The payload of a checkpoint whose header checks pass.
absl::StatusOr<absl::string_view> CheckHeader(absl::string_view bytes) {
  const absl::string_view magic = bytes.substr(0, kMagic.size());
  // A prefix of the magic is a file cut short, not a foreign one.
  if (!absl::StartsWith(kMagic, magic)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a dtrain checkpoint (magic \"", absl::CHexEscape(magic),
        "\" instead of \"", kMagic, "\")"));
  }
  if (bytes.size() < kCheckpointHeaderSize) {
    return absl::DataLossError(
        absl::StrCat("truncated: ", bytes.size(), " bytes, shorter than the ",
                     kCheckpointHeaderSize, "-byte header"));
  }
  const char* header = bytes.data() + kMagic.size();
  const uint32_t version =
      static_cast<uint32_t>(base::GetLittleEndian(header, 4));
  const uint64_t length = base::GetLittleEndian(header + 4, 8);
  const uint32_t crc =
      static_cast<uint32_t>(base::GetLittleEndian(header + 12, 4));
  if (version == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint format version 1 is no longer read; this build reads "
        "version ",
        kFormatVersion,
        " (version 1 held a LibTorch archive, which cannot be read safely): "
        "start the run afresh"));
  }
  if (version != kFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported checkpoint format version ", version,
                     " (this build reads version ", kFormatVersion, ")"));
  }
  const absl::string_view payload = bytes.substr(kCheckpointHeaderSize);
  if (payload.size() < length) {
    return absl::DataLossError(absl::StrCat("truncated: header says ", length,
                                            " payload bytes, found ",
                                            payload.size()));
  }
  if (payload.size() > length) {
    return absl::DataLossError(absl::StrCat(
        "header says ", length, " payload bytes, found ", payload.size(), " (",
        payload.size() - length, " unexpected bytes at the end)"));
  }
  if (const uint32_t actual = base::Crc32(payload); actual != crc) {
    return absl::DataLossError(
        absl::StrFormat("checksum mismatch: header says CRC-32 %08x, the "
                        "%d-byte payload has %08x",
                        crc, payload.size(), actual));
  }
  return payload;
}

// Defined tensors only: modules may register an undefined one (e.g. a
// Linear without bias), which has nothing to save.
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
};

NamedTensors Collect(
    const torch::OrderedDict<std::string, torch::Tensor>& items) {
  NamedTensors out;
  for (const auto& item : items) {
    if (!item.value().defined()) continue;
    out.names.push_back(item.key());
    out.tensors.push_back(item.value());
  }
  return out;
}

// --- Writing ----------------------------------------------------------------

// A section: its tag, a uint64 length, and what `write` appends.
template <typename F>
absl::Status WriteSection(absl::string_view tag, base::ByteWriter& w,
                          F&& write) {
  w.Raw(tag);
  const size_t length_at = w.position();
  w.U64(0);
  DTRAIN_RETURN_IF_ERROR(write());
  w.PatchU64(length_at, w.position() - length_at - 8);
  return absl::OkStatus();
}

absl::Status WriteModel(const torch::nn::Module& model, base::ByteWriter& w) {
  const NamedTensors parameters = Collect(model.named_parameters());
  const NamedTensors buffers = Collect(model.named_buffers());
  DTRAIN_RETURN_IF_ERROR(w.Count(parameters.names.size() + buffers.names.size(),
                                 "parameters and buffers"));
  for (const uint8_t kind : {kParameterKind, kBufferKind}) {
    const NamedTensors& named = kind == kParameterKind ? parameters : buffers;
    for (size_t i = 0; i < named.names.size(); ++i) {
      const std::string what = absl::StrCat(
          kind == kParameterKind ? "parameter " : "buffer ", named.names[i]);
      DTRAIN_RETURN_IF_ERROR(w.String(named.names[i], what));
      w.U8(kind);
      DTRAIN_RETURN_IF_ERROR(WriteTensor(named.tensors[i], what, w));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteOptimizer(const torch::optim::Optimizer& optimizer,
                            base::ByteWriter& w) {
  const OptimizerCodec* codec = CodecFor(optimizer);
  if (codec == nullptr) {
    return w.Error(absl::StrCat("checkpoints support ", SupportedOptimizers(),
                                ", not this optimizer"));
  }
  w.U8(codec->kind());
  const std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer.param_groups();
  DTRAIN_RETURN_IF_ERROR(w.Count(groups.size(), "optimizer groups"));
  for (size_t g = 0; g < groups.size(); ++g) {
    const torch::optim::OptimizerParamGroup& group = groups[g];
    DTRAIN_RETURN_IF_ERROR(codec->WriteOptions(
        group.has_options() ? group.options() : optimizer.defaults(), g, w));
    const std::vector<torch::Tensor>& params = group.params();
    DTRAIN_RETURN_IF_ERROR(w.Count(
        params.size(), absl::StrCat("parameters in optimizer group ", g)));
    for (size_t i = 0; i < params.size(); ++i) {
      auto it =
          optimizer.state().find(torch_compat::OptimizerStateKeyOf(params[i]));
      DTRAIN_RETURN_IF_ERROR(codec->WriteState(
          it == optimizer.state().end() ? nullptr : it->second.get(),
          absl::StrCat("optimizer group ", g, " parameter ", i), w));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteTrainingState(const TrainingState& state,
                                base::ByteWriter& w) {
  w.I64(state.epoch);
  DTRAIN_RETURN_IF_ERROR(
      w.String(state.sampler.Serialize(), "the sampler state"));
  w.I64(state.global_step);
  w.F64(state.best_top1);
  DTRAIN_RETURN_IF_ERROR(w.String(state.model_name, "model_name"));
  DTRAIN_RETURN_IF_ERROR(w.String(state.optimizer_name, "optimizer_name"));
  w.U64(state.seed);
  DTRAIN_RETURN_IF_ERROR(w.String(state.config_json, "config_json"));
  return absl::OkStatus();
}

// --- Reading ----------------------------------------------------------------

// The sections, in order: MODL, OPTM, STAT.
absl::Status ReadSection(base::ByteReader& payload, absl::string_view tag,
                         base::ByteReader* section) {
  const size_t at = payload.offset();
  absl::string_view found;
  DTRAIN_RETURN_IF_ERROR(
      payload.Raw(tag.size(), absl::StrCat("section ", tag), &found));
  if (found != tag) {
    return Malformed(absl::StrCat("expected section ", tag, " at offset ", at,
                                  ", found ", Quoted(found)));
  }
  uint64_t length = 0;
  DTRAIN_RETURN_IF_ERROR(
      payload.U64(absl::StrCat("length of section ", tag), &length));
  const size_t base = payload.offset();
  absl::string_view body;
  DTRAIN_RETURN_IF_ERROR(
      payload.Raw(length, absl::StrCat("section ", tag), &body));
  *section = base::ByteReader(body, base, kMalformed);
  return absl::OkStatus();
}

absl::Status ReadModel(base::ByteReader& r, NamedTensors* parameters,
                       NamedTensors* buffers) {
  size_t count = 0;
  DTRAIN_RETURN_IF_ERROR(
      r.Count("model tensor count", kMinModelEntrySize, &count));
  for (size_t i = 0; i < count; ++i) {
    std::string name;
    DTRAIN_RETURN_IF_ERROR(
        r.String(absl::StrCat("name of model tensor ", i), &name));
    const size_t at = r.offset();
    uint8_t kind = 0;
    DTRAIN_RETURN_IF_ERROR(
        r.U8(absl::StrCat("kind of model tensor ", i), &kind));
    if (kind != kParameterKind && kind != kBufferKind) {
      return Malformed(absl::StrCat("model tensor ", i, " (", Quoted(name),
                                    ") at offset ", at, " has unknown kind ",
                                    kind));
    }
    NamedTensors* out = kind == kParameterKind ? parameters : buffers;
    at::Tensor tensor;
    DTRAIN_RETURN_IF_ERROR(ReadTensor(
        r,
        absl::StrCat(kind == kParameterKind ? "parameter " : "buffer ",
                     Quoted(name)),
        &tensor));
    out->names.push_back(std::move(name));
    out->tensors.push_back(std::move(tensor));
  }
  return r.ExpectEnd("section MODL");
}

struct SavedOptimizer {
  const OptimizerCodec* codec = nullptr;
  std::vector<SavedGroup> groups;
};

absl::Status ReadOptimizer(base::ByteReader& r, SavedOptimizer* out) {
  const size_t at = r.offset();
  uint8_t kind = 0;
  DTRAIN_RETURN_IF_ERROR(r.U8("optimizer kind", &kind));
  out->codec = CodecOfKind(kind);
  if (out->codec == nullptr) {
    return Malformed(
        absl::StrCat("unknown optimizer kind ", kind, " at offset ", at));
  }
  // Options, then a parameter count.
  const size_t min_group_size = out->codec->min_options_size() + 4;
  size_t groups = 0;
  DTRAIN_RETURN_IF_ERROR(
      r.Count("optimizer group count", min_group_size, &groups));
  for (size_t g = 0; g < groups; ++g) {
    const std::string where = absl::StrCat("optimizer group ", g);
    SavedGroup group;
    DTRAIN_RETURN_IF_ERROR(out->codec->ReadOptions(r, where, &group));
    size_t params = 0;
    DTRAIN_RETURN_IF_ERROR(r.Count(absl::StrCat("parameter count of ", where),
                                   kMinGroupParameterSize, &params));
    for (size_t i = 0; i < params; ++i) {
      SavedParamState state;
      DTRAIN_RETURN_IF_ERROR(out->codec->ReadState(
          r, absl::StrCat(where, " parameter ", i), &state));
      group.params.push_back(std::move(state));
    }
    out->groups.push_back(std::move(group));
  }
  return r.ExpectEnd("section OPTM");
}

absl::Status ReadTrainingState(base::ByteReader& r, TrainingState* state) {
  DTRAIN_RETURN_IF_ERROR(r.I64("epoch", &state->epoch));
  const size_t sampler_at = r.offset();
  std::string sampler;
  DTRAIN_RETURN_IF_ERROR(r.String("sampler state", &sampler));
  for (char c : sampler) {
    if (!absl::ascii_isprint(static_cast<unsigned char>(c))) {
      return Malformed(
          absl::StrCat("the sampler state at offset ", sampler_at,
                       " is not printable text: ", Quoted(sampler)));
    }
  }
  absl::StatusOr<data::SamplerState> parsed =
      data::SamplerState::Parse(sampler);
  if (!parsed.ok()) return Malformed(parsed.status().message());
  state->sampler = *parsed;
  DTRAIN_RETURN_IF_ERROR(r.I64("global_step", &state->global_step));
  DTRAIN_RETURN_IF_ERROR(r.F64("best_top1", &state->best_top1));
  DTRAIN_RETURN_IF_ERROR(r.String("model_name", &state->model_name));
  DTRAIN_RETURN_IF_ERROR(r.String("optimizer_name", &state->optimizer_name));
  DTRAIN_RETURN_IF_ERROR(r.U64("seed", &state->seed));
  DTRAIN_RETURN_IF_ERROR(r.String("config_json", &state->config_json));
  return r.ExpectEnd("section STAT");
}

struct SavedCheckpoint {
  NamedTensors parameters;
  NamedTensors buffers;
  SavedOptimizer optimizer;
  TrainingState state;
};

// The whole payload, checked field by field. Throws only when a tensor
// cannot be allocated.
absl::Status ReadPayload(absl::string_view payload, SavedCheckpoint* out) {
  base::ByteReader r(payload, 0, kMalformed);
  base::ByteReader section(absl::string_view(), 0, kMalformed);
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kModelSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadModel(section, &out->parameters, &out->buffers));
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kOptimizerSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadOptimizer(section, &out->optimizer));
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kStateSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadTrainingState(section, &out->state));
  return r.ExpectEnd("the payload");
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

bool operator==(const TrainingState& a, const TrainingState& b) {
  return a.epoch == b.epoch && a.sampler == b.sampler &&
         a.global_step == b.global_step && a.best_top1 == b.best_top1 &&
         a.model_name == b.model_name && a.optimizer_name == b.optimizer_name &&
         a.seed == b.seed && a.config_json == b.config_json;
}

absl::StatusOr<std::string> EncodeCheckpoint(
    const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
    const TrainingState& state) {
  // The header goes first; its length and CRC are filled in at the end.
  std::string out(kCheckpointHeaderSize, '\0');
  base::ByteWriter w(&out, kEncodeError);
  absl::Status encoded = base::GuardTorch(
      // Copying a tensor to the CPU failed, or memory ran out.
      absl::StatusCode::kInternal, kEncodeError, [&]() -> absl::Status {
        DTRAIN_RETURN_IF_ERROR(WriteSection(
            kModelSection, w, [&] { return WriteModel(model, w); }));
        DTRAIN_RETURN_IF_ERROR(WriteSection(kOptimizerSection, w, [&] {
          return WriteOptimizer(optimizer, w);
        }));
        return WriteSection(kStateSection, w,
                            [&] { return WriteTrainingState(state, w); });
      });
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

absl::Status ValidateCheckpointBytes(absl::string_view bytes) {
  return CheckHeader(bytes).status();
}

absl::StatusOr<TrainingState> DecodeCheckpoint(
    absl::string_view bytes, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, absl::string_view expected_model_name,
    absl::string_view expected_optimizer_name) {
  DTRAIN_ASSIGN_OR_RETURN(const absl::string_view payload, CheckHeader(bytes));
  SavedCheckpoint saved;
  // Every size is checked against the payload: only memory can run out.
  DTRAIN_RETURN_IF_ERROR(base::GuardTorch(absl::StatusCode::kInternal,
                                          "cannot decode checkpoint: ", [&] {
                                            return ReadPayload(payload, &saved);
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
  NamedTensors parameters = Collect(model.named_parameters());
  NamedTensors buffers = Collect(model.named_buffers());
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
        return saved.state;
      });
}

}  // namespace dtrain::trainer
