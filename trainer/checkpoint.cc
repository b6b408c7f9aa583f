#include "trainer/checkpoint.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <dirent.h>
#include <sys/stat.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "trainer/atomic_file.h"

namespace dtrain::trainer {
namespace {

constexpr absl::string_view kMagic = "DTRAINCK";
constexpr uint32_t kFormatVersion = 1;
static_assert(kCheckpointHeaderSize == 8 + 4 + 8 + 4);

// Archive keys.
constexpr char kModelKey[] = "model";
constexpr char kParameterNamesKey[] = "parameter_names";
constexpr char kParametersKey[] = "parameters";
constexpr char kBufferNamesKey[] = "buffer_names";
constexpr char kBuffersKey[] = "buffers";
constexpr char kOptimizerKey[] = "optimizer";
constexpr char kStateKey[] = "training_state";

constexpr absl::string_view kCheckpointPrefix = "checkpoint-";
constexpr absl::string_view kCheckpointSuffix = ".dtc";
constexpr char kBestName[] = "best.dtc";

void PutLittleEndian(uint64_t value, int size, char* out) {
  for (int i = 0; i < size; ++i) out[i] = static_cast<char>(value >> (8 * i));
}

uint64_t GetLittleEndian(const char* in, int size) {
  uint64_t value = 0;
  for (int i = 0; i < size; ++i) {
    value |= uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  }
  return value;
}

uint32_t Crc32(absl::string_view data) {
  // crc32_z takes a size_t length, so payloads over 4 GiB need no chunking.
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, Z_NULL, 0),
              reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

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
  const uint32_t version = static_cast<uint32_t>(GetLittleEndian(header, 4));
  const uint64_t length = GetLittleEndian(header + 4, 8);
  const uint32_t crc = static_cast<uint32_t>(GetLittleEndian(header + 12, 4));
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
  if (const uint32_t actual = Crc32(payload); actual != crc) {
    return absl::DataLossError(
        absl::StrFormat("checksum mismatch: header says CRC-32 %08x, the "
                        "%d-byte payload has %08x",
                        crc, payload.size(), actual));
  }
  return payload;
}

std::string TorchMessage(const std::exception& e) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return error->what_without_backtrace();
  }
  return e.what();
}

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
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

void WriteNamedTensors(const NamedTensors& named, const char* names_key,
                       const char* tensors_key,
                       torch::serialize::OutputArchive& archive) {
  c10::List<std::string> names;
  c10::List<torch::Tensor> tensors;
  for (size_t i = 0; i < named.names.size(); ++i) {
    names.push_back(named.names[i]);
    tensors.push_back(named.tensors[i].detach());
  }
  archive.write(names_key, c10::IValue(std::move(names)));
  archive.write(tensors_key, c10::IValue(std::move(tensors)));
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed checkpoint payload: ", what));
}

absl::StatusOr<c10::IValue> ReadValue(torch::serialize::InputArchive& archive,
                                      const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) return Malformed(absl::StrCat("no ", key));
  return value;
}

absl::StatusOr<int64_t> ReadInt(torch::serialize::InputArchive& archive,
                                const std::string& key) {
  absl::StatusOr<c10::IValue> value = ReadValue(archive, key);
  if (!value.ok()) return value.status();
  if (!value->isInt()) {
    return Malformed(absl::StrCat(key, " is a ", value->tagKind()));
  }
  return value->toInt();
}

absl::StatusOr<double> ReadDouble(torch::serialize::InputArchive& archive,
                                  const std::string& key) {
  absl::StatusOr<c10::IValue> value = ReadValue(archive, key);
  if (!value.ok()) return value.status();
  if (!value->isDouble()) {
    return Malformed(absl::StrCat(key, " is a ", value->tagKind()));
  }
  return value->toDouble();
}

absl::StatusOr<std::string> ReadString(torch::serialize::InputArchive& archive,
                                       const std::string& key) {
  absl::StatusOr<c10::IValue> value = ReadValue(archive, key);
  if (!value.ok()) return value.status();
  if (!value->isString()) {
    return Malformed(absl::StrCat(key, " is a ", value->tagKind()));
  }
  return value->toStringRef();
}

absl::Status ReadNested(torch::serialize::InputArchive& archive,
                        const std::string& key,
                        torch::serialize::InputArchive& nested) {
  if (!archive.try_read(key, nested))
    return Malformed(absl::StrCat("no ", key));
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> ReadNamedTensors(
    torch::serialize::InputArchive& archive, const std::string& names_key,
    const std::string& tensors_key) {
  absl::StatusOr<c10::IValue> names = ReadValue(archive, names_key);
  if (!names.ok()) return names.status();
  absl::StatusOr<c10::IValue> tensors = ReadValue(archive, tensors_key);
  if (!tensors.ok()) return tensors.status();
  if (!names->isList() || !tensors->isTensorList()) {
    return Malformed(absl::StrCat(names_key, " is a ", names->tagKind(), ", ",
                                  tensors_key, " a ", tensors->tagKind()));
  }
  NamedTensors out;
  for (const c10::IValue& name : names->toListRef()) {
    if (!name.isString()) {
      return Malformed(absl::StrCat(names_key, " holds a ", name.tagKind()));
    }
    out.names.push_back(name.toStringRef());
  }
  for (const torch::Tensor& tensor : tensors->toTensorVector()) {
    out.tensors.push_back(tensor);
  }
  if (out.names.size() != out.tensors.size()) {
    return Malformed(absl::StrCat(out.names.size(), " ", names_key, " for ",
                                  out.tensors.size(), " ", tensors_key));
  }
  return out;
}

// FailedPrecondition naming the first difference between what the
// checkpoint holds (`saved`) and what the model has (`model`).
absl::Status CheckFits(absl::string_view kind, const NamedTensors& saved,
                       const NamedTensors& model) {
  absl::flat_hash_map<absl::string_view, size_t> saved_index;
  for (size_t i = 0; i < saved.names.size(); ++i) {
    if (!saved_index.emplace(saved.names[i], i).second) {
      return Malformed(absl::StrCat(kind, " ", saved.names[i], " is twice"));
    }
  }
  for (size_t i = 0; i < model.names.size(); ++i) {
    const std::string& name = model.names[i];
    auto it = saved_index.find(name);
    if (it == saved_index.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint does not fit the model: it has no ", kind, " ", name,
          " (model shape ", ShapeString(model.tensors[i]), ")"));
    }
    const torch::Tensor& want = model.tensors[i];
    const torch::Tensor& have = saved.tensors[it->second];
    if (have.sizes() != want.sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint does not fit the model: ", kind, " ", name,
          " has shape ", ShapeString(have), " in the checkpoint, ",
          ShapeString(want), " in the model"));
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
        return absl::FailedPreconditionError(
            absl::StrCat("the checkpoint does not fit the model: it has ", kind,
                         " ", name, ", which the model does not"));
      }
    }
  }
  return absl::OkStatus();
}

// The device the model's tensors live on: checkpoint tensors are loaded there.
torch::Device ModelDevice(const torch::nn::Module& model) {
  for (const torch::Tensor& t : model.parameters()) {
    if (t.defined()) return t.device();
  }
  for (const torch::Tensor& t : model.buffers()) {
    if (t.defined()) return t.device();
  }
  return torch::kCPU;
}

absl::StatusOr<TrainingState> ReadTrainingState(
    torch::serialize::InputArchive& archive) {
  TrainingState state;
  absl::StatusOr<int64_t> epoch = ReadInt(archive, "epoch");
  if (!epoch.ok()) return epoch.status();
  state.epoch = *epoch;
  absl::StatusOr<std::string> sampler = ReadString(archive, "sampler");
  if (!sampler.ok()) return sampler.status();
  absl::StatusOr<data::SamplerState> parsed =
      data::SamplerState::Parse(*sampler);
  if (!parsed.ok()) return Malformed(parsed.status().message());
  state.sampler = *parsed;
  absl::StatusOr<int64_t> global_step = ReadInt(archive, "global_step");
  if (!global_step.ok()) return global_step.status();
  state.global_step = *global_step;
  absl::StatusOr<double> best_top1 = ReadDouble(archive, "best_top1");
  if (!best_top1.ok()) return best_top1.status();
  state.best_top1 = *best_top1;
  absl::StatusOr<std::string> model_name = ReadString(archive, "model_name");
  if (!model_name.ok()) return model_name.status();
  state.model_name = *std::move(model_name);
  absl::StatusOr<std::string> optimizer_name =
      ReadString(archive, "optimizer_name");
  if (!optimizer_name.ok()) return optimizer_name.status();
  state.optimizer_name = *std::move(optimizer_name);
  absl::StatusOr<int64_t> seed = ReadInt(archive, "seed");
  if (!seed.ok()) return seed.status();
  state.seed = static_cast<uint64_t>(*seed);
  absl::StatusOr<std::string> config_json = ReadString(archive, "config_json");
  if (!config_json.ok()) return config_json.status();
  state.config_json = *std::move(config_json);
  return state;
}

// Restores the optimizer's state and group options unless Commit() is
// called: Optimizer::load can throw halfway, and LibTorch's SGD merges the
// saved state into the existing one instead of replacing it.
class OptimizerRollback {
 public:
  explicit OptimizerRollback(torch::optim::Optimizer& optimizer)
      : optimizer_(optimizer), state_(std::move(optimizer.state())) {
    optimizer.state().clear();
    for (const torch::optim::OptimizerParamGroup& group :
         optimizer.param_groups()) {
      options_.push_back(group.has_options() ? group.options().clone()
                                             : nullptr);
    }
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
  ska::flat_hash_map<std::string,
                     std::unique_ptr<torch::optim::OptimizerParamState>>
      state_;
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options_;
  bool committed_ = false;
};

absl::Status ErrnoError(int err, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, ": ", std::strerror(err)));
}

// Deletes every file of `paths` that still exists.
absl::Status DeleteFiles(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      return ErrnoError(err, absl::StrCat("cannot delete ", path));
    }
  }
  return absl::OkStatus();
}

bool IsCheckpointName(absl::string_view name, int64_t* step) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) ||
      !absl::ConsumeSuffix(&name, kCheckpointSuffix) || name.empty()) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(name, step);
}

// Temporaries WriteFileAtomically leaves when its process dies while writing
// a checkpoint or best.dtc here.
bool IsStrayTemporary(absl::string_view name) {
  return IsAtomicWriteTemporary(name) &&
         (absl::StartsWith(name, absl::StrCat(".", kCheckpointPrefix)) ||
          absl::StartsWith(name, absl::StrCat(".", kBestName, ".")));
}

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
  try {
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive(archive.compilation_unit());
    WriteNamedTensors(Collect(model.named_parameters()), kParameterNamesKey,
                      kParametersKey, model_archive);
    WriteNamedTensors(Collect(model.named_buffers()), kBufferNamesKey,
                      kBuffersKey, model_archive);
    archive.write(kModelKey, model_archive);

    torch::serialize::OutputArchive optimizer_archive(
        archive.compilation_unit());
    optimizer.save(optimizer_archive);
    archive.write(kOptimizerKey, optimizer_archive);

    torch::serialize::OutputArchive state_archive(archive.compilation_unit());
    state_archive.write("epoch", c10::IValue(state.epoch));
    state_archive.write("sampler", c10::IValue(state.sampler.Serialize()));
    state_archive.write("global_step", c10::IValue(state.global_step));
    state_archive.write("best_top1", c10::IValue(state.best_top1));
    state_archive.write("model_name", c10::IValue(state.model_name));
    state_archive.write("optimizer_name", c10::IValue(state.optimizer_name));
    // IValues hold int64; the bits round-trip.
    state_archive.write("seed", c10::IValue(static_cast<int64_t>(state.seed)));
    state_archive.write("config_json", c10::IValue(state.config_json));
    archive.write(kStateKey, state_archive);

    archive.save_to([&out](const void* data, size_t size) {
      out.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot encode checkpoint: ", TorchMessage(e)));
  }
  const absl::string_view payload =
      absl::string_view(out).substr(kCheckpointHeaderSize);
  char* header = out.data();
  std::memcpy(header, kMagic.data(), kMagic.size());
  PutLittleEndian(kFormatVersion, 4, header + 8);
  PutLittleEndian(payload.size(), 8, header + 12);
  PutLittleEndian(Crc32(payload), 4, header + 20);
  return out;
}

absl::Status ValidateCheckpointBytes(absl::string_view bytes) {
  return CheckHeader(bytes).status();
}

absl::StatusOr<TrainingState> DecodeCheckpoint(
    absl::string_view bytes, torch::nn::Module& model,
    torch::optim::Optimizer& optimizer, absl::string_view expected_model_name,
    absl::string_view expected_optimizer_name) {
  absl::StatusOr<absl::string_view> payload = CheckHeader(bytes);
  if (!payload.ok()) return payload.status();

  torch::serialize::InputArchive archive;
  torch::serialize::InputArchive model_archive;
  torch::serialize::InputArchive optimizer_archive;
  torch::serialize::InputArchive state_archive;
  try {
    archive.load_from(payload->data(), payload->size(), ModelDevice(model));
  } catch (const std::exception& e) {
    return Malformed(
        absl::StrCat("not a readable LibTorch archive: ", TorchMessage(e)));
  }

  absl::StatusOr<TrainingState> state;
  NamedTensors parameters = Collect(model.named_parameters());
  NamedTensors buffers = Collect(model.named_buffers());
  absl::StatusOr<NamedTensors> saved_parameters;
  absl::StatusOr<NamedTensors> saved_buffers;
  try {
    if (absl::Status s = ReadNested(archive, kStateKey, state_archive);
        !s.ok()) {
      return s;
    }
    state = ReadTrainingState(state_archive);
    if (!state.ok()) return state.status();
    // Names first: loading another model's checkpoint should say so, not
    // list a missing parameter.
    if (!expected_model_name.empty() &&
        state->model_name != expected_model_name) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint is of model \"", state->model_name,
                       "\", not \"", expected_model_name, "\""));
    }
    if (!expected_optimizer_name.empty() &&
        state->optimizer_name != expected_optimizer_name) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint has the state of optimizer \"", state->optimizer_name,
          "\", not \"", expected_optimizer_name, "\""));
    }

    if (absl::Status s = ReadNested(archive, kModelKey, model_archive);
        !s.ok()) {
      return s;
    }
    saved_parameters =
        ReadNamedTensors(model_archive, kParameterNamesKey, kParametersKey);
    if (!saved_parameters.ok()) return saved_parameters.status();
    saved_buffers =
        ReadNamedTensors(model_archive, kBufferNamesKey, kBuffersKey);
    if (!saved_buffers.ok()) return saved_buffers.status();
    if (absl::Status s = ReadNested(archive, kOptimizerKey, optimizer_archive);
        !s.ok()) {
      return s;
    }
  } catch (const std::exception& e) {
    return Malformed(TorchMessage(e));
  }
  if (absl::Status s = CheckFits("parameter", *saved_parameters, parameters);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckFits("buffer", *saved_buffers, buffers); !s.ok()) {
    return s;
  }

  // The optimizer before the model: its load can fail on a valid file (an
  // optimizer of another type), copying tensors cannot.
  OptimizerRollback rollback(optimizer);
  try {
    optimizer.load(optimizer_archive);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint's optimizer state does not fit the "
                     "optimizer: ",
                     TorchMessage(e)));
  }

  try {
    torch::NoGradGuard no_grad;
    for (NamedTensors* group : {&parameters, &buffers}) {
      const NamedTensors& saved =
          group == &parameters ? *saved_parameters : *saved_buffers;
      absl::flat_hash_map<absl::string_view, const torch::Tensor*> by_name;
      for (size_t i = 0; i < saved.names.size(); ++i) {
        by_name.emplace(saved.names[i], &saved.tensors[i]);
      }
      for (size_t i = 0; i < group->names.size(); ++i) {
        group->tensors[i].copy_(*by_name.at(group->names[i]));
      }
    }
  } catch (const std::exception& e) {
    // Only a device failure gets here, after the checks above.
    return absl::InternalError(absl::StrCat(
        "copying the checkpoint into the model failed: ", TorchMessage(e)));
  }
  rollback.Commit();
  return state;
}

absl::StatusOr<CheckpointDir> CheckpointDir::Open(std::string path, int keep) {
  if (path.empty()) {
    return absl::InvalidArgumentError("checkpoint directory: empty path");
  }
  if (keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint directory ", path, ": keep must be >= 1, not ", keep));
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  // mkdir -p, one component at a time.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string part = path.substr(0, end);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      return ErrnoError(err, absl::StrCat("cannot create checkpoint directory ",
                                          path, ": mkdir ", part));
    }
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return ErrnoError(err,
                      absl::StrCat("cannot open checkpoint directory ", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open checkpoint directory ", path, ": not a directory"));
  }
  return CheckpointDir(std::move(path), keep);
}

std::string CheckpointDir::Join(absl::string_view name) const {
  return path_ == "/" ? absl::StrCat("/", name)
                      : absl::StrCat(path_, "/", name);
}

absl::Status CheckpointDir::Scan(std::vector<Entry>* checkpoints,
                                 std::vector<std::string>* temporaries) const {
  DIR* dir = ::opendir(path_.c_str());
  if (dir == nullptr) {
    const int err = errno;
    return ErrnoError(err,
                      absl::StrCat("cannot list checkpoint directory ", path_));
  }
  while (true) {
    errno = 0;
    const struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const absl::string_view name = entry->d_name;
    int64_t step = 0;
    if (IsCheckpointName(name, &step)) {
      checkpoints->push_back({step, std::string(name)});
    } else if (temporaries != nullptr && IsStrayTemporary(name)) {
      temporaries->push_back(Join(name));
    }
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) {
    return ErrnoError(err,
                      absl::StrCat("cannot list checkpoint directory ", path_));
  }
  std::sort(checkpoints->begin(), checkpoints->end(),
            [](const Entry& a, const Entry& b) {
              return std::tie(a.step, a.name) < std::tie(b.step, b.name);
            });
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointDir::Write(absl::string_view name,
                                                 absl::string_view bytes,
                                                 std::vector<Entry>* listed) {
  const std::string path = Join(name);
  auto failed = [&path](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("cannot save checkpoint ", path,
                                               ": ", s.message()));
  };
  // Temporaries here are strays (one writer per directory). Deleting them
  // first also frees their names: WriteFileAtomically's temporary names
  // repeat when a restarted container gives the writer the same pid.
  std::vector<Entry> checkpoints;
  std::vector<std::string> temporaries;
  if (absl::Status s = Scan(&checkpoints, &temporaries); !s.ok()) {
    return failed(s);
  }
  if (absl::Status s = DeleteFiles(temporaries); !s.ok()) return failed(s);
  if (absl::Status s = WriteFileAtomically(path, bytes); !s.ok()) {
    return failed(s);
  }
  if (listed != nullptr) *listed = std::move(checkpoints);
  return path;
}

absl::StatusOr<std::string> CheckpointDir::Save(int64_t global_step,
                                                absl::string_view bytes) {
  if (global_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", path_,
                     ": global step must be >= 0, not ", global_step));
  }
  const std::string name = absl::StrFormat("%s%09d%s", kCheckpointPrefix,
                                           global_step, kCheckpointSuffix);
  std::vector<Entry> checkpoints;
  absl::StatusOr<std::string> written = Write(name, bytes, &checkpoints);
  if (!written.ok()) return written.status();

  // The listing from before the write is current: this is the only writer.
  std::vector<std::string> doomed;
  int kept = 1;  // the file written
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    if (it->name == name) continue;
    if (it->step < global_step && kept < keep_) {
      ++kept;
      continue;
    }
    doomed.push_back(Join(it->name));
  }
  if (absl::Status s = DeleteFiles(doomed); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("wrote ", *written, ", then: ", s.message()));
  }
  return written;
}

absl::StatusOr<std::string> CheckpointDir::SaveBest(absl::string_view bytes) {
  return Write(kBestName, bytes, nullptr);
}

absl::StatusOr<CheckpointDir::Found> CheckpointDir::Latest() const {
  std::vector<Entry> checkpoints;
  if (absl::Status s = Scan(&checkpoints, nullptr); !s.ok()) return s;
  if (checkpoints.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path_, " (no ",
                                            kCheckpointPrefix, "<step>",
                                            kCheckpointSuffix, " file)"));
  }
  Found found;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    std::string path = Join(it->name);
    absl::StatusOr<std::string> bytes = ReadFile(path);
    absl::Status valid =
        bytes.ok() ? ValidateCheckpointBytes(*bytes) : bytes.status();
    if (valid.ok()) {
      found.path = std::move(path);
      found.bytes = *std::move(bytes);
      return found;
    }
    found.skipped.push_back(absl::StrCat(path, ": ", valid.message()));
  }
  return absl::DataLossError(absl::StrCat("no valid checkpoint in ", path_,
                                          ": ",
                                          absl::StrJoin(found.skipped, "; ")));
}

std::vector<std::string> CheckpointDir::List() const {
  std::vector<Entry> checkpoints;
  std::vector<std::string> paths;
  if (!Scan(&checkpoints, nullptr).ok()) return paths;
  for (const Entry& entry : checkpoints) paths.push_back(Join(entry.name));
  return paths;
}

}  // namespace dtrain::trainer
