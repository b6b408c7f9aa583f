#include "trainer/checkpoint.h"

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <dirent.h>
#include <sys/stat.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>
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
#include "base/atomic_file.h"
#include "base/status_macros.h"
#include "base/torch_compat.h"
#include "models/adadelta.h"

namespace dtrain::trainer {
namespace {

// Tensor data is copied as the host stores it.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint format is little-endian");

constexpr absl::string_view kMagic = "DTRAINCK";
constexpr uint32_t kFormatVersion = 2;
static_assert(kCheckpointHeaderSize == 8 + 4 + 8 + 4);

constexpr absl::string_view kModelSection = "MODL";
constexpr absl::string_view kOptimizerSection = "OPTM";
constexpr absl::string_view kStateSection = "STAT";

// MODL entries.
constexpr uint8_t kParameterKind = 0;
constexpr uint8_t kBufferKind = 1;

// OPTM's first byte.
constexpr uint8_t kSgdKind = 1;
constexpr uint8_t kAdadeltaKind = 2;

constexpr int kMaxDims = 8;
// Smallest encodings, to cap counts by the bytes left: a tensor is at least
// its dtype and ndim bytes; a MODL entry adds a name length and a kind; an
// optimizer group is 4 doubles, a bool and a parameter count; a parameter of
// a group at least its has-state byte.
constexpr size_t kMinTensorSize = 1 + 1;
constexpr size_t kMinModelEntrySize = 4 + 1 + kMinTensorSize;
constexpr size_t kMinGroupSize = 4 * 8 + 1 + 4;
constexpr size_t kMinGroupParameterSize = 1;

struct Dtype {
  uint8_t code;
  c10::ScalarType type;
  const char* name;
};
constexpr Dtype kDtypes[] = {
    {1, c10::ScalarType::Float, "float32"},
    {2, c10::ScalarType::Double, "float64"},
    {3, c10::ScalarType::Half, "float16"},
    {4, c10::ScalarType::BFloat16, "bfloat16"},
    {5, c10::ScalarType::Long, "int64"},
    {6, c10::ScalarType::Int, "int32"},
    {7, c10::ScalarType::Byte, "uint8"},
    {8, c10::ScalarType::Char, "int8"},
    {9, c10::ScalarType::Short, "int16"},
    {10, c10::ScalarType::Bool, "bool"},
};

const Dtype* DtypeOfCode(uint8_t code) {
  for (const Dtype& d : kDtypes) {
    if (d.code == code) return &d;
  }
  return nullptr;
}

const Dtype* DtypeOfType(c10::ScalarType type) {
  for (const Dtype& d : kDtypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

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

std::string ShapeString(c10::IntArrayRef sizes) {
  return absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
}

std::string ShapeString(const torch::Tensor& t) {
  return ShapeString(t.sizes());
}

// Text from a checkpoint, for a message.
std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("malformed checkpoint payload: ", what));
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

// Appends little-endian fields to a string.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(*out) {}

  void U8(uint8_t value) { out_.push_back(static_cast<char>(value)); }
  void Bool(bool value) { U8(value ? 1 : 0); }
  void U32(uint32_t value) { Put(value, 4); }
  void U64(uint64_t value) { Put(value, 8); }
  void I64(int64_t value) { U64(static_cast<uint64_t>(value)); }
  void F64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    U64(bits);
  }
  void Raw(const void* data, size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }
  // A count of what follows, as a uint32.
  absl::Status Count(size_t count, absl::string_view what) {
    if (count > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot encode checkpoint: ", count, " ", what, " (at most ",
          std::numeric_limits<uint32_t>::max(), ")"));
    }
    U32(static_cast<uint32_t>(count));
    return absl::OkStatus();
  }
  // A uint32 length, then the bytes.
  absl::Status String(absl::string_view s, absl::string_view what) {
    if (s.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot encode checkpoint: ", what, " has ", s.size(),
          " bytes (at most ", std::numeric_limits<uint32_t>::max(), ")"));
    }
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
    return absl::OkStatus();
  }
  // A section's tag and a length that EndSection fills in.
  size_t BeginSection(absl::string_view tag) {
    out_.append(tag.data(), tag.size());
    const size_t length_at = out_.size();
    U64(0);
    return length_at;
  }
  void EndSection(size_t length_at) {
    PutLittleEndian(out_.size() - length_at - 8, 8, &out_[length_at]);
  }

 private:
  void Put(uint64_t value, int size) {
    char bytes[8];
    PutLittleEndian(value, size, bytes);
    out_.append(bytes, size);
  }

  std::string& out_;
};

// dtype, ndim, dims, data. Throws when LibTorch cannot copy the tensor to
// the CPU.
absl::Status WriteTensor(const torch::Tensor& tensor, absl::string_view what,
                         Writer& w) {
  const Dtype* dtype = DtypeOfType(tensor.scalar_type());
  if (dtype == nullptr) {
    std::vector<std::string> names;
    for (const Dtype& d : kDtypes) names.push_back(d.name);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode checkpoint: ", what, " has dtype ",
                     c10::toString(tensor.scalar_type()), "; checkpoints hold ",
                     absl::StrJoin(names, ", "), " tensors"));
  }
  if (tensor.layout() != torch::kStrided) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode checkpoint: ", what,
                     " is not a dense (strided) tensor"));
  }
  if (tensor.dim() > kMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode checkpoint: ", what, " has ", tensor.dim(),
                     " dimensions (at most ", kMaxDims, ")"));
  }
  w.U8(dtype->code);
  w.U8(static_cast<uint8_t>(tensor.dim()));
  for (int64_t size : tensor.sizes()) w.I64(size);
  const torch::Tensor cpu =
      tensor.detach().resolve_neg().to(torch::kCPU).contiguous();
  if (cpu.nbytes() > 0) w.Raw(cpu.data_ptr(), cpu.nbytes());
  return absl::OkStatus();
}

absl::Status WriteModel(const torch::nn::Module& model, Writer& w) {
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

// kSgdKind, kAdadeltaKind, or 0 for another optimizer.
uint8_t OptimizerKind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) {
    return kSgdKind;
  }
  if (dynamic_cast<const models::Adadelta*>(&optimizer) != nullptr) {
    return kAdadeltaKind;
  }
  return 0;
}

const char* OptimizerKindName(uint8_t kind) {
  return kind == kSgdKind ? "sgd" : kind == kAdadeltaKind ? "adadelta" : "?";
}

absl::Status WriteOptimizer(const torch::optim::Optimizer& optimizer,
                            Writer& w) {
  const uint8_t kind = OptimizerKind(optimizer);
  if (kind == 0) {
    return absl::InvalidArgumentError(
        "cannot encode checkpoint: checkpoints support sgd and adadelta "
        "(torch::optim::SGD, models::Adadelta), not this optimizer");
  }
  w.U8(kind);
  const std::vector<torch::optim::OptimizerParamGroup>& groups =
      optimizer.param_groups();
  DTRAIN_RETURN_IF_ERROR(w.Count(groups.size(), "optimizer groups"));
  for (size_t g = 0; g < groups.size(); ++g) {
    const torch::optim::OptimizerParamGroup& group = groups[g];
    const torch::optim::OptimizerOptions& options =
        group.has_options() ? group.options() : optimizer.defaults();
    auto wrong_options = [g, kind] {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot encode checkpoint: optimizer group ", g,
                       " does not have ", OptimizerKindName(kind), " options"));
    };
    if (kind == kSgdKind) {
      const auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&options);
      if (sgd == nullptr) return wrong_options();
      w.F64(sgd->lr());
      w.F64(sgd->momentum());
      w.F64(sgd->dampening());
      w.F64(sgd->weight_decay());
      w.Bool(sgd->nesterov());
    } else {
      const auto* adadelta =
          dynamic_cast<const models::AdadeltaOptions*>(&options);
      if (adadelta == nullptr) return wrong_options();
      w.F64(adadelta->lr());
      w.F64(adadelta->rho());
      w.F64(adadelta->eps());
      w.F64(adadelta->weight_decay());
      w.Bool(adadelta->maximize());
    }
    const std::vector<torch::Tensor>& params = group.params();
    DTRAIN_RETURN_IF_ERROR(w.Count(
        params.size(), absl::StrCat("parameters in optimizer group ", g)));
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string what =
          absl::StrCat("optimizer group ", g, " parameter ", i);
      auto it =
          optimizer.state().find(torch_compat::OptimizerStateKeyOf(params[i]));
      const torch::optim::OptimizerParamState* state =
          it == optimizer.state().end() ? nullptr : it->second.get();
      if (kind == kSgdKind) {
        const auto* sgd =
            dynamic_cast<const torch::optim::SGDParamState*>(state);
        if (state != nullptr && sgd == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot encode checkpoint: ", what, " has no SGD state"));
        }
        // State without a momentum buffer is no state.
        const bool present = sgd != nullptr && sgd->momentum_buffer().defined();
        w.Bool(present);
        if (present) {
          DTRAIN_RETURN_IF_ERROR(
              WriteTensor(sgd->momentum_buffer(),
                          absl::StrCat(what, " momentum_buffer"), w));
        }
      } else {
        const auto* adadelta =
            dynamic_cast<const models::AdadeltaParamState*>(state);
        if (state != nullptr && adadelta == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot encode checkpoint: ", what, " has no Adadelta state"));
        }
        w.Bool(adadelta != nullptr);
        if (adadelta != nullptr) {
          w.I64(adadelta->step());
          DTRAIN_RETURN_IF_ERROR(WriteTensor(
              adadelta->square_avg(), absl::StrCat(what, " square_avg"), w));
          DTRAIN_RETURN_IF_ERROR(WriteTensor(
              adadelta->acc_delta(), absl::StrCat(what, " acc_delta"), w));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WriteTrainingState(const TrainingState& state, Writer& w) {
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

// Reads fields front to back. Every read checks the bytes left before it
// uses them; errors are kDataLoss naming the field and its payload offset.
class Reader {
 public:
  // `data` starts at payload offset `base`.
  Reader(absl::string_view data, size_t base) : data_(data), base_(base) {}

  size_t remaining() const { return data_.size() - pos_; }
  size_t offset() const { return base_ + pos_; }

  absl::Status Raw(uint64_t size, absl::string_view what,
                   absl::string_view* out) {
    if (size > remaining()) {
      return Malformed(absl::StrCat(what, " needs ", size, " bytes at offset ",
                                    offset(), ", ", remaining(), " left"));
    }
    *out = data_.substr(pos_, size);
    pos_ += size;
    return absl::OkStatus();
  }
  absl::Status U8(absl::string_view what, uint8_t* value) {
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(Raw(1, what, &bytes));
    *value = static_cast<uint8_t>(bytes[0]);
    return absl::OkStatus();
  }
  absl::Status Bool(absl::string_view what, bool* value) {
    const size_t at = offset();
    uint8_t byte = 0;
    DTRAIN_RETURN_IF_ERROR(U8(what, &byte));
    if (byte > 1) {
      return Malformed(
          absl::StrCat(what, " at offset ", at, " is ", byte, ", not 0 or 1"));
    }
    *value = byte == 1;
    return absl::OkStatus();
  }
  absl::Status U32(absl::string_view what, uint32_t* value) {
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(Raw(4, what, &bytes));
    *value = static_cast<uint32_t>(GetLittleEndian(bytes.data(), 4));
    return absl::OkStatus();
  }
  absl::Status U64(absl::string_view what, uint64_t* value) {
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(Raw(8, what, &bytes));
    *value = GetLittleEndian(bytes.data(), 8);
    return absl::OkStatus();
  }
  absl::Status I64(absl::string_view what, int64_t* value) {
    uint64_t bits = 0;
    DTRAIN_RETURN_IF_ERROR(U64(what, &bits));
    *value = static_cast<int64_t>(bits);
    return absl::OkStatus();
  }
  absl::Status F64(absl::string_view what, double* value) {
    uint64_t bits = 0;
    DTRAIN_RETURN_IF_ERROR(U64(what, &bits));
    std::memcpy(value, &bits, sizeof(bits));
    return absl::OkStatus();
  }
  absl::Status String(absl::string_view what, std::string* value) {
    uint32_t size = 0;
    DTRAIN_RETURN_IF_ERROR(U32(absl::StrCat("length of ", what), &size));
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(Raw(size, what, &bytes));
    value->assign(bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  // A uint32 count of items that take at least `min_size` bytes each: more
  // than the bytes left can hold is an error before anything is allocated.
  absl::Status Count(absl::string_view what, size_t min_size, size_t* count) {
    const size_t at = offset();
    uint32_t value = 0;
    DTRAIN_RETURN_IF_ERROR(U32(what, &value));
    if (value > remaining() / min_size) {
      return Malformed(absl::StrCat(
          what, " at offset ", at, " is ", value, ", but the ", remaining(),
          " bytes left hold at most ", remaining() / min_size));
    }
    *count = value;
    return absl::OkStatus();
  }
  absl::Status ExpectEnd(absl::string_view what) const {
    if (remaining() != 0) {
      return Malformed(absl::StrCat(remaining(), " unexpected bytes at offset ",
                                    offset(), ", the end of ", what));
    }
    return absl::OkStatus();
  }

 private:
  absl::string_view data_;
  size_t base_;
  size_t pos_ = 0;
};

// What WriteTensor wrote, as a fresh contiguous CPU tensor.
absl::Status ReadTensor(Reader& r, absl::string_view what,
                        torch::Tensor* tensor) {
  const size_t at = r.offset();
  uint8_t code = 0;
  DTRAIN_RETURN_IF_ERROR(r.U8(absl::StrCat("dtype of ", what), &code));
  const Dtype* dtype = DtypeOfCode(code);
  if (dtype == nullptr) {
    return Malformed(absl::StrCat(what, " at offset ", at,
                                  " has unknown dtype code ", code));
  }
  uint8_t ndim = 0;
  DTRAIN_RETURN_IF_ERROR(r.U8(absl::StrCat("ndim of ", what), &ndim));
  if (ndim > kMaxDims) {
    return Malformed(absl::StrCat(what, " at offset ", at, " has ", ndim,
                                  " dimensions (at most ", kMaxDims, ")"));
  }
  const int64_t element_size =
      static_cast<int64_t>(c10::elementSize(dtype->type));
  std::vector<int64_t> sizes(ndim);
  // The product of the sizes, counting 0 as 1, bounds the strides LibTorch
  // computes: it must fit in int64 bytes even when there are no elements.
  int64_t bound = 1;
  bool empty = false;
  for (int64_t& size : sizes) {
    DTRAIN_RETURN_IF_ERROR(r.I64(absl::StrCat("shape of ", what), &size));
    if (size < 0) {
      return Malformed(
          absl::StrCat(what, " at offset ", at, " has a negative size ", size));
    }
    if (size == 0) empty = true;
    if (__builtin_mul_overflow(bound, std::max<int64_t>(size, 1), &bound) ||
        bound > std::numeric_limits<int64_t>::max() / element_size) {
      return Malformed(
          absl::StrCat(what, " at offset ", at, " has too large a shape"));
    }
  }
  const uint64_t nbytes = empty ? 0
                                : static_cast<uint64_t>(bound) *
                                      static_cast<uint64_t>(element_size);
  absl::string_view data;
  DTRAIN_RETURN_IF_ERROR(r.Raw(nbytes, absl::StrCat("data of ", what), &data));
  if (dtype->type == c10::ScalarType::Bool) {
    for (char c : data) {
      if (c != 0 && c != 1) {
        return Malformed(absl::StrCat(what, " at offset ", at,
                                      " holds a bool that is not 0 or 1"));
      }
    }
  }
  *tensor = torch::empty(sizes, torch::TensorOptions().dtype(dtype->type));
  if (nbytes > 0) std::memcpy(tensor->data_ptr(), data.data(), nbytes);
  return absl::OkStatus();
}

// The sections, in order: MODL, OPTM, STAT.
absl::Status ReadSection(Reader& payload, absl::string_view tag,
                         Reader* section) {
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
  *section = Reader(body, base);
  return absl::OkStatus();
}

absl::Status ReadModel(Reader& r, NamedTensors* parameters,
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
    torch::Tensor tensor;
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

// One parameter's saved optimizer state.
struct SavedParamState {
  bool present = false;
  int64_t step = 0;      // Adadelta
  torch::Tensor first;   // SGD: momentum_buffer; Adadelta: square_avg
  torch::Tensor second;  // Adadelta: acc_delta
};

struct SavedGroup {
  // Adadelta's options, which are restored; SGD's are only written.
  models::AdadeltaOptions adadelta;
  std::vector<SavedParamState> params;
};

struct SavedOptimizer {
  uint8_t kind = 0;
  std::vector<SavedGroup> groups;
};

absl::Status ReadOptimizer(Reader& r, SavedOptimizer* out) {
  const size_t at = r.offset();
  DTRAIN_RETURN_IF_ERROR(r.U8("optimizer kind", &out->kind));
  if (out->kind != kSgdKind && out->kind != kAdadeltaKind) {
    return Malformed(
        absl::StrCat("unknown optimizer kind ", out->kind, " at offset ", at));
  }
  size_t groups = 0;
  DTRAIN_RETURN_IF_ERROR(
      r.Count("optimizer group count", kMinGroupSize, &groups));
  for (size_t g = 0; g < groups; ++g) {
    const std::string where = absl::StrCat("optimizer group ", g);
    SavedGroup group;
    double values[4];
    bool flag = false;
    for (double& value : values) {
      DTRAIN_RETURN_IF_ERROR(r.F64(absl::StrCat("options of ", where), &value));
    }
    DTRAIN_RETURN_IF_ERROR(r.Bool(absl::StrCat("options of ", where), &flag));
    if (out->kind == kAdadeltaKind) {
      group.adadelta.lr(values[0])
          .rho(values[1])
          .eps(values[2])
          .weight_decay(values[3])
          .maximize(flag);
      if (absl::Status valid = models::Validate(group.adadelta); !valid.ok()) {
        return Malformed(absl::StrCat(where, ": ", valid.message()));
      }
    }
    size_t params = 0;
    DTRAIN_RETURN_IF_ERROR(r.Count(absl::StrCat("parameter count of ", where),
                                   kMinGroupParameterSize, &params));
    for (size_t i = 0; i < params; ++i) {
      const std::string what = absl::StrCat(where, " parameter ", i);
      SavedParamState state;
      DTRAIN_RETURN_IF_ERROR(
          r.Bool(absl::StrCat("has-state byte of ", what), &state.present));
      if (state.present && out->kind == kSgdKind) {
        DTRAIN_RETURN_IF_ERROR(ReadTensor(
            r, absl::StrCat(what, " momentum_buffer"), &state.first));
      } else if (state.present) {
        const size_t step_at = r.offset();
        DTRAIN_RETURN_IF_ERROR(
            r.I64(absl::StrCat("step of ", what), &state.step));
        if (state.step < 0) {
          return Malformed(absl::StrCat("step of ", what, " at offset ",
                                        step_at, " is ", state.step));
        }
        DTRAIN_RETURN_IF_ERROR(
            ReadTensor(r, absl::StrCat(what, " square_avg"), &state.first));
        DTRAIN_RETURN_IF_ERROR(
            ReadTensor(r, absl::StrCat(what, " acc_delta"), &state.second));
      }
      group.params.push_back(std::move(state));
    }
    out->groups.push_back(std::move(group));
  }
  return r.ExpectEnd("section OPTM");
}

absl::Status ReadTrainingState(Reader& r, TrainingState* state) {
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
  Reader r(payload, 0);
  Reader section(absl::string_view(), 0);
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
  const uint8_t kind = OptimizerKind(optimizer);
  if (kind == 0) {
    return unfit(
        "checkpoints support sgd and adadelta (torch::optim::SGD, "
        "models::Adadelta), and the optimizer is neither");
  }
  if (kind != saved.kind) {
    return unfit(
        absl::StrCat("the checkpoint holds ", OptimizerKindName(saved.kind),
                     " state, the optimizer is ", OptimizerKindName(kind)));
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
      const SavedParamState& state = states[i];
      if (!state.present) continue;
      for (const torch::Tensor* t : {&state.first, &state.second}) {
        if (t->defined() && t->sizes() != params[i].sizes()) {
          return unfit(absl::StrCat("parameter ", i, " of group ", g,
                                    " has shape ", ShapeString(params[i]),
                                    ", its state in the checkpoint ",
                                    ShapeString(*t)));
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
      if (saved.kind == kSgdKind) {
        auto sgd = std::make_unique<torch::optim::SGDParamState>();
        sgd->momentum_buffer(state.first.to(to));
        out[torch_compat::OptimizerStateKeyOf(param)] = std::move(sgd);
      } else {
        auto adadelta = std::make_unique<models::AdadeltaParamState>();
        adadelta->step(state.step);
        adadelta->square_avg(state.first.to(to));
        adadelta->acc_delta(state.second.to(to));
        out[torch_compat::OptimizerStateKeyOf(param)] = std::move(adadelta);
      }
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
  return base::IsAtomicWriteTemporary(name) &&
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
  Writer w(&out);
  try {
    size_t length_at = w.BeginSection(kModelSection);
    DTRAIN_RETURN_IF_ERROR(WriteModel(model, w));
    w.EndSection(length_at);
    length_at = w.BeginSection(kOptimizerSection);
    DTRAIN_RETURN_IF_ERROR(WriteOptimizer(optimizer, w));
    w.EndSection(length_at);
    length_at = w.BeginSection(kStateSection);
    DTRAIN_RETURN_IF_ERROR(WriteTrainingState(state, w));
    w.EndSection(length_at);
  } catch (const std::exception& e) {
    // Copying a tensor to the CPU failed, or memory ran out.
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

  SavedCheckpoint saved;
  try {
    DTRAIN_RETURN_IF_ERROR(ReadPayload(*payload, &saved));
  } catch (const std::exception& e) {
    // Every size was checked against the payload: memory ran out.
    return absl::InternalError(
        absl::StrCat("cannot decode checkpoint: ", TorchMessage(e)));
  }

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
  try {
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
    if (saved.optimizer.kind == kAdadeltaKind) {
      for (const SavedGroup& group : saved.optimizer.groups) {
        options.push_back(
            std::make_unique<models::AdadeltaOptions>(group.adadelta));
      }
    }

    OptimizerRollback rollback(optimizer);
    optimizer.state() = std::move(state);
    for (size_t g = 0; g < options.size(); ++g) {
      optimizer.param_groups()[g].set_options(std::move(options[g]));
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < targets.size(); ++i) targets[i].copy_(sources[i]);
    rollback.Commit();
  } catch (const std::exception& e) {
    // Only a device failure gets here, after the checks above.
    return absl::InternalError(absl::StrCat(
        "loading the checkpoint into the model and optimizer failed: ",
        TorchMessage(e)));
  }
  return saved.state;
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
  if (absl::Status s = base::WriteFileAtomically(path, bytes); !s.ok()) {
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
    absl::StatusOr<std::string> bytes = base::ReadFile(path);
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

#undef DTRAIN_RETURN_IF_ERROR
