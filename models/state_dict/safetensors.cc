#include "models/state_dict/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace dtrain::models::state_dict {
namespace {

constexpr char kMetadata[] = "__metadata__";
// The reference implementation's cap: a header past it is not a model file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  int size;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::kF64, "F64", 8},   {Dtype::kF32, "F32", 4}, {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2}, {Dtype::kI64, "I64", 8}, {Dtype::kI32, "I32", 4},
    {Dtype::kI16, "I16", 2},   {Dtype::kI8, "I8", 1},   {Dtype::kU8, "U8", 1},
    {Dtype::kBool, "BOOL", 1},
};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors: ", what));
}

// product(shape) * element, or an error when a dimension is negative or the
// product overflows.
absl::StatusOr<uint64_t> ByteSize(const std::vector<int64_t>& shape,
                                  int element, absl::string_view name) {
  uint64_t n = static_cast<uint64_t>(element);
  for (int64_t d : shape) {
    if (d < 0)
      return Bad(absl::StrCat("'", name, "' has a negative dimension"));
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) {
      return Bad(absl::StrCat("'", name, "': shape [",
                              absl::StrJoin(shape, ", "), "] overflows"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

absl::string_view DtypeName(Dtype dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

absl::StatusOr<Dtype> ParseDtype(absl::string_view name) {
  std::vector<std::string> known;
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return d.dtype;
    known.push_back(d.name);
  }
  return Bad(absl::StrCat("unknown dtype '", name,
                          "' (known: ", absl::StrJoin(known, ", "), ")"));
}

int DtypeSize(Dtype dtype) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.dtype == dtype) return d.size;
  }
  return 0;
}

absl::StatusOr<std::string> EncodeSafetensors(const SafetensorsFile& file) {
  nlohmann::json header = nlohmann::json::object();
  if (!file.metadata.empty()) header[kMetadata] = file.metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorEntry& t : file.tensors) {
    if (t.name.empty() || t.name == kMetadata || !names.insert(t.name).second) {
      return Bad(absl::StrCat("cannot write a tensor named '", t.name,
                              "' (empty, reserved or repeated)"));
    }
    DTRAIN_ASSIGN_OR_RETURN(const uint64_t bytes,
                            ByteSize(t.shape, DtypeSize(t.dtype), t.name));
    if (bytes != t.data.size()) {
      return Bad(absl::StrCat("'", t.name, "' has ", t.data.size(),
                              " bytes of data, its shape needs ", bytes));
    }
    header[t.name] = {{"dtype", std::string(DtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  base::PutLittleEndian(json.size(), 8, out.data());
  out += json;
  for (const TensorEntry& t : file.tensors) out += t.data;
  return out;
}

namespace {

// The header's JSON read straight into entries, no document tree: a tree
// costs tens of bytes per byte of JSON ("{},{},..."); this keeps the names,
// shapes and metadata, each bounded by the text it came from. Anything but
// the format's shape is refused as it arrives.
class HeaderReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  using Json = nlohmann::json;
  struct Entry {
    TensorEntry tensor;
    std::vector<uint64_t> offsets;
    bool has_dtype = false, has_shape = false;
  };
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  std::string error;  // Why parsing stopped, or empty for the JSON's fault.

  bool null() override { return Scalar(); }
  bool boolean(bool) override { return Scalar(); }
  bool number_integer(Json::number_integer_t v) override {
    if (v < 0 && field_ == Field::kOffsets && skip_ == 0)
      return Fail("data_offsets are not two integers >= 0");
    return Number(v, true);
  }
  bool number_unsigned(Json::number_unsigned_t v) override {
    return Number(static_cast<int64_t>(v), v <= INT64_MAX, v);
  }
  bool number_float(Json::number_float_t, const Json::string_t&) override {
    if (skip_ > 0) return true;
    if (field_ == Field::kShape) return Fail("a dimension is not an integer");
    if (field_ == Field::kOffsets)
      return Fail("data_offsets are not two integers >= 0");
    return Scalar();
  }
  bool string(Json::string_t& v) override {
    if (skip_ > 0 || field_ == Field::kOther) return Scalar();
    if (depth_ == 2 && in_metadata_) {
      metadata[key_] = std::move(v);
      return true;
    }
    if (field_ == Field::kDtype) {
      absl::StatusOr<Dtype> dtype = ParseDtype(v);
      if (!dtype.ok()) return Fail(dtype.status().message());
      entries.back().tensor.dtype = *dtype;
      entries.back().has_dtype = true;
      field_ = Field::kNone;
      return true;
    }
    return Shape();
  }
  bool binary(Json::binary_t&) override { return Scalar(); }
  bool start_object(std::size_t) override {
    if (skip_ > 0 || field_ == Field::kOther) return Skip();
    if (depth_ == 0) return ++depth_;
    if (depth_ == 1 && in_metadata_) return ++depth_;
    if (depth_ == 1) {
      entries.emplace_back();
      entries.back().tensor.name = key_;
      return ++depth_;
    }
    if (in_metadata_)
      return Fail(absl::StrCat("entry '", key_, "' is not a string"));
    return Shape();
  }
  bool key(Json::string_t& k) override {
    if (skip_ > 0) return true;
    if (depth_ == 1) {
      if (!names_.insert(k).second)
        return Fail(absl::StrCat("'", k, "' is named twice"));
      in_metadata_ = k == kMetadata;
    } else if (depth_ == 2 && !in_metadata_) {
      field_ = k == "dtype"          ? Field::kDtype
               : k == "shape"        ? Field::kShape
               : k == "data_offsets" ? Field::kOffsets
                                     : Field::kOther;
      if (field_ != Field::kOther && !fields_.insert(k).second)
        return Fail(absl::StrCat("gives ", k, " twice"));
      return true;
    } else if (depth_ == 2 && metadata.count(k) != 0) {
      return Fail(absl::StrCat("gives '", k, "' twice"));
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (skip_ > 0) return Unskip();
    if (--depth_ == 1) {
      fields_.clear();
      in_metadata_ = false;
    }
    return true;
  }
  bool start_array(std::size_t) override {
    if (skip_ > 0 || field_ == Field::kOther) return Skip();
    if (depth_ == 2 && !in_metadata_ && !in_array_ &&
        (field_ == Field::kShape || field_ == Field::kOffsets)) {
      in_array_ = true;
      if (field_ == Field::kShape) entries.back().has_shape = true;
      return true;
    }
    if (in_metadata_)
      return Fail(absl::StrCat("entry '", key_, "' is not a string"));
    return Shape();
  }
  bool end_array() override {
    if (skip_ > 0) return Unskip();
    in_array_ = false;
    field_ = Field::kNone;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  enum class Field { kNone, kDtype, kShape, kOffsets, kOther };

  bool Fail(absl::string_view why) {
    std::string where = "the header";
    if (in_metadata_) {
      where = kMetadata;
    } else if (depth_ >= 2 && !entries.empty()) {
      where = absl::StrCat("tensor '", entries.back().tensor.name, "'");
    } else if (depth_ == 1 && !key_.empty()) {
      where = absl::StrCat("entry '", key_, "'");
    }
    error = absl::StrCat(where, ": ", why);
    return false;
  }
  bool Shape() {
    return Fail(
        "not a JSON object of tensors (a string dtype, a shape array and two "
        "data_offsets each) and string __metadata__");
  }
  // A value of a field this reader does not know: walked, not kept.
  bool Skip() {
    ++skip_;
    return true;
  }
  bool Unskip() {
    if (--skip_ == 0) field_ = Field::kNone;
    return true;
  }
  bool Scalar() {
    if (skip_ > 0) return true;
    if (in_metadata_ && depth_ == 2)
      return Fail(absl::StrCat("entry '", key_, "' is not a string"));
    if (field_ == Field::kOther) {
      field_ = Field::kNone;
      return true;
    }
    if (field_ == Field::kShape) return Fail("a dimension is not an integer");
    return Shape();
  }
  bool Number(int64_t v, bool fits, uint64_t u = 0) {
    if (skip_ > 0 || !in_array_) return Scalar();
    if (field_ == Field::kShape) {
      if (!fits) return Fail("a dimension does not fit 64 bits");
      entries.back().tensor.shape.push_back(v);
      return true;
    }
    std::vector<uint64_t>& offsets = entries.back().offsets;
    if (offsets.size() == 2) return Fail("more than two data_offsets");
    offsets.push_back(fits ? static_cast<uint64_t>(v) : u);
    return true;
  }

  int depth_ = 0;
  int skip_ = 0;
  bool in_metadata_ = false;
  bool in_array_ = false;
  Field field_ = Field::kNone;
  std::string key_;
  std::set<std::string> names_;
  std::set<std::string> fields_;
};

}  // namespace

absl::StatusOr<SafetensorsFile> DecodeSafetensors(absl::string_view bytes) {
  if (bytes.size() < 8) {
    return Bad(absl::StrCat("a file of ", bytes.size(),
                            " bytes is too short for the 8-byte header size"));
  }
  const uint64_t n = base::GetLittleEndian(bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
    return Bad(absl::StrCat("the header claims ", n, " bytes; the file has ",
                            bytes.size() - 8, " after the size (and at most ",
                            kMaxHeaderBytes, " are allowed)"));
  }
  const absl::string_view text = bytes.substr(8, n);
  if (text.empty() || text[0] != '{') {
    return Bad("the header does not start with '{'");
  }
  HeaderReader header;
  if (!nlohmann::json::sax_parse(text.begin(), text.end(), &header)) {
    return Bad(header.error.empty() ? "the header is not a JSON object"
                                    : header.error);
  }
  const absl::string_view data = bytes.substr(8 + n);
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // per tensor
  for (HeaderReader::Entry& e : header.entries) {
    TensorEntry& t = e.tensor;
    const std::string& name = t.name;
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!e.has_dtype || !e.has_shape || e.offsets.size() != 2) {
      return Bad(absl::StrCat(where,
                              " needs a string dtype, a shape array and two "
                              "data_offsets"));
    }
    const uint64_t begin = e.offsets[0];
    const uint64_t end = e.offsets[1];
    if (begin > end || end > data.size()) {
      return Bad(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                              ") are outside the ", data.size(),
                              " bytes of data"));
    }
    DTRAIN_ASSIGN_OR_RETURN(const uint64_t size,
                            ByteSize(t.shape, DtypeSize(t.dtype), name));
    if (size != end - begin) {
      return Bad(absl::StrCat(where, ": shape [", absl::StrJoin(t.shape, ", "),
                              "] of ", DtypeName(t.dtype), " needs ", size,
                              " bytes, data_offsets give ", end - begin));
    }
    ranges.emplace_back(begin, end);
    file.tensors.push_back(std::move(t));
  }
  // Data order, and every byte covered exactly once.
  std::vector<size_t> order(file.tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t covered = 0;
  SafetensorsFile sorted;
  sorted.metadata = std::move(file.metadata);
  for (size_t i : order) {
    if (ranges[i].first != covered) {
      return Bad(absl::StrCat(
          "tensor '", file.tensors[i].name, "' starts at byte ",
          ranges[i].first, " of the data where ", covered,
          ranges[i].first < covered ? " (it overlaps the one before)"
                                    : " (a hole before it)",
          " was expected"));
    }
    covered = ranges[i].second;
    TensorEntry t = std::move(file.tensors[i]);
    t.data = std::string(
        data.substr(ranges[i].first, ranges[i].second - ranges[i].first));
    sorted.tensors.push_back(std::move(t));
  }
  if (covered != data.size()) {
    return Bad(absl::StrCat("the data has ", data.size() - covered,
                            " bytes that no tensor names"));
  }
  return sorted;
}

}  // namespace dtrain::models::state_dict
