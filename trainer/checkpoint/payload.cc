#include "trainer/checkpoint/payload.h"

#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/torch_compat.h"
#include "trainer/checkpoint/hook_state.h"
#include "trainer/checkpoint/tensor_codec.h"

namespace dtrain::trainer::internal {
namespace {

constexpr absl::string_view kModelSection = "MODL";
constexpr absl::string_view kOptimizerSection = "OPTM";
constexpr absl::string_view kStateSection = "STAT";
constexpr absl::string_view kHookSection = "HOOK";

// MODL entries.
constexpr uint8_t kParameterKind = 0;
constexpr uint8_t kBufferKind = 1;

// Smallest encodings, to cap counts by the bytes left: a MODL entry is a
// name length, a kind and a tensor; a parameter of an optimizer group at
// least its has-state byte; a HOOK entry a name length, a name of one byte
// or more and a tensor.
constexpr size_t kMinModelEntrySize = 4 + 1 + kMinTensorSize;
constexpr size_t kMinGroupParameterSize = 1;
constexpr size_t kMinHookEntrySize = 4 + 1 + kMinTensorSize;

}  // namespace

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

namespace {

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

// The shared entries, then rank 0's per-rank entries, rank 1's, ...
absl::Status WriteHook(const HookState& hook, base::ByteWriter& w) {
  DTRAIN_RETURN_IF_ERROR(w.String(hook.name, "the communication hook's name"));
  size_t count = hook.tensors.size();
  for (const auto& entries : hook.ranks) count += entries.size();
  DTRAIN_RETURN_IF_ERROR(w.Count(count, "communication hook state entries"));
  auto write = [&](const std::string& name, const at::Tensor& tensor) {
    const std::string what =
        absl::StrCat("communication hook state ", Quoted(name));
    DTRAIN_RETURN_IF_ERROR(w.String(name, what));
    return WriteTensor(tensor, what, w);
  };
  for (const auto& [name, tensor] : hook.tensors)
    DTRAIN_RETURN_IF_ERROR(write(name, tensor));
  for (size_t r = 0; r < hook.ranks.size(); ++r) {
    for (const auto& [name, tensor] : hook.ranks[r])
      DTRAIN_RETURN_IF_ERROR(
          write(RankEntryName(static_cast<int>(r), name), tensor));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WritePayload(const torch::nn::Module& model,
                          const torch::optim::Optimizer& optimizer,
                          const TrainingState& state, const HookState& hook,
                          base::ByteWriter& w) {
  // What a reader would refuse is not written.
  if (absl::Status valid = CheckTrainingState(state); !valid.ok()) {
    return w.Error(absl::StrCat("the training state: ", valid.message()));
  }
  if (absl::Status valid = CheckHookState(hook); !valid.ok()) {
    return w.Error(valid.message());
  }
  const OptimizerCodec* codec = CodecFor(optimizer);
  if (codec != nullptr && !state.optimizer_name.empty() &&
      state.optimizer_name != codec->name()) {
    return w.Error(absl::StrCat("the training state's optimizer_name ",
                                Quoted(state.optimizer_name), " is not ",
                                codec->name(), ", the optimizer's"));
  }
  DTRAIN_RETURN_IF_ERROR(
      WriteSection(kModelSection, w, [&] { return WriteModel(model, w); }));
  DTRAIN_RETURN_IF_ERROR(WriteSection(
      kOptimizerSection, w, [&] { return WriteOptimizer(optimizer, w); }));
  DTRAIN_RETURN_IF_ERROR(WriteSection(
      kStateSection, w, [&] { return WriteTrainingState(state, w); }));
  return WriteSection(kHookSection, w, [&] { return WriteHook(hook, w); });
}

namespace {

// --- Reading ----------------------------------------------------------------

// The sections, in order: MODL, OPTM, STAT, HOOK (version 3).
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
  DTRAIN_RETURN_IF_ERROR(r.ExpectEnd("section STAT"));
  // Fields that parse but lie (a step near 2^63, a negative epoch) would
  // overflow or stop the resumed run later: refused here, as damage.
  if (absl::Status valid = CheckTrainingState(*state); !valid.ok()) {
    return Malformed(absl::StrCat("section STAT: ", valid.message()));
  }
  return absl::OkStatus();
}

// Names and counts are checked as WritePayload's CheckHookState checks them,
// each naming its offset.
absl::Status ReadHook(base::ByteReader& r, HookState* hook) {
  const size_t name_at = r.offset();
  DTRAIN_RETURN_IF_ERROR(r.String("communication hook name", &hook->name));
  if (hook->name.size() > kMaxCheckpointNameSize) {
    return Malformed(absl::StrCat(
        "communication hook name at offset ", name_at, " has ",
        hook->name.size(), " bytes, more than ", kMaxCheckpointNameSize));
  }
  const size_t count_at = r.offset();
  size_t count = 0;
  DTRAIN_RETURN_IF_ERROR(
      r.Count("communication hook state count", kMinHookEntrySize, &count));
  if (count > 0 && hook->name.empty()) {
    return Malformed(absl::StrCat("communication hook state count at offset ",
                                  count_at, " is ", count,
                                  ", but the hook has no name"));
  }
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const size_t at = r.offset();
    std::string name;
    DTRAIN_RETURN_IF_ERROR(r.String(
        absl::StrCat("name of communication hook state entry ", i), &name));
    if (name.empty() || name.size() > kMaxCheckpointNameSize) {
      return Malformed(absl::StrCat(
          "name of communication hook state entry ", i, " at offset ", at,
          " has ", name.size(), " bytes (1 to ", kMaxCheckpointNameSize, ")"));
    }
    if (!names.insert(name).second) {
      return Malformed(absl::StrCat("communication hook state entry ", i,
                                    " at offset ", at, ": ", Quoted(name),
                                    " is twice"));
    }
    int rank = -1;
    absl::string_view own;
    if (absl::StrContains(name, '/') &&
        (!ParseRankEntryName(name, &rank, &own) ||
         static_cast<size_t>(rank) >= count)) {
      return Malformed(absl::StrCat(
          "communication hook state entry ", i, " at offset ", at, ": ",
          Quoted(name), " has a '/' but is not rank<r>/<name> with r below ",
          count, " (the entry count)"));
    }
    at::Tensor tensor;
    DTRAIN_RETURN_IF_ERROR(ReadTensor(
        r, absl::StrCat("communication hook state ", Quoted(name)), &tensor));
    if (rank < 0) {
      hook->tensors.emplace_back(std::move(name), std::move(tensor));
      continue;
    }
    if (hook->ranks.size() <= static_cast<size_t>(rank))
      hook->ranks.resize(rank + 1);
    hook->ranks[rank].emplace_back(std::string(own), std::move(tensor));
  }
  // Each rank of the writer's run has rank 0's names, in its order.
  for (size_t k = 1; k < hook->ranks.size(); ++k) {
    const auto& first = hook->ranks[0];
    const auto& entries = hook->ranks[k];
    bool same = entries.size() == first.size();
    for (size_t i = 0; same && i < entries.size(); ++i)
      same = entries[i].first == first[i].first;
    if (!same) {
      return Malformed(
          absl::StrCat("section HOOK: the per-rank entries of rank ", k, " (",
                       entries.size(), ") do not have the names of rank 0's (",
                       first.size(), ") in their order"));
    }
  }
  return r.ExpectEnd("section HOOK");
}

}  // namespace

absl::Status ReadPayload(absl::string_view payload, uint32_t version,
                         SavedCheckpoint* out) {
  base::ByteReader r(payload, 0, kMalformed);
  base::ByteReader section(absl::string_view(), 0, kMalformed);
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kModelSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadModel(section, &out->parameters, &out->buffers));
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kOptimizerSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadOptimizer(section, &out->optimizer));
  DTRAIN_RETURN_IF_ERROR(ReadSection(r, kStateSection, &section));
  DTRAIN_RETURN_IF_ERROR(ReadTrainingState(section, &out->state));
  if (version >= 3) {
    DTRAIN_RETURN_IF_ERROR(ReadSection(r, kHookSection, &section));
    DTRAIN_RETURN_IF_ERROR(ReadHook(section, &out->hook));
  }
  DTRAIN_RETURN_IF_ERROR(r.ExpectEnd("the payload"));
  // An optimizer_name is what the writer ran, so it names the state's codec.
  const std::string& named = out->state.optimizer_name;
  if (!named.empty() && named != out->optimizer.codec->name()) {
    return Malformed(absl::StrCat("section STAT: optimizer_name ",
                                  Quoted(named), " but section OPTM holds ",
                                  out->optimizer.codec->name(), " state"));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::trainer::internal
