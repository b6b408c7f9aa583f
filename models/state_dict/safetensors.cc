#include "models/state_dict/safetensors.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/byte_codec.h"
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
    absl::StatusOr<uint64_t> bytes =
        ByteSize(t.shape, DtypeSize(t.dtype), t.name);
    if (!bytes.ok()) return bytes.status();
    if (*bytes != t.data.size()) {
      return Bad(absl::StrCat("'", t.name, "' has ", t.data.size(),
                              " bytes of data, its shape needs ", *bytes));
    }
    header[t.name] = {{"dtype", std::string(DtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  base::PutLittleEndian(json.size(), 8, out.data());
  out += json;
  for (const TensorEntry& t : file.tensors) out += t.data;
  return out;
}

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
  const nlohmann::json header =
      nlohmann::json::parse(text.begin(), text.end(), nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad("the header is not a JSON object");
  }
  const absl::string_view data = bytes.substr(8 + n);
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // per tensor
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == kMetadata) {
      if (!v.is_object()) return Bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(absl::StrCat("__metadata__ entry '", m.key(),
                                  "' is not a string"));
        }
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() ||
        !v["shape"].is_array() || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2) {
      return Bad(absl::StrCat(where,
                              " needs a string dtype, a shape array and two "
                              "data_offsets"));
    }
    TensorEntry t;
    t.name = name;
    absl::StatusOr<Dtype> dtype = ParseDtype(v["dtype"].get<std::string>());
    if (!dtype.ok()) {
      return Bad(absl::StrCat(where, ": ", dtype.status().message()));
    }
    t.dtype = *dtype;
    for (const nlohmann::json& d : v["shape"]) {
      if (!d.is_number_integer()) {
        return Bad(absl::StrCat(where, ": a dimension is not an integer"));
      }
      t.shape.push_back(d.get<int64_t>());
    }
    const nlohmann::json& off = v["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Bad(
          absl::StrCat(where, ": data_offsets are not two integers >= 0"));
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (begin > end || end > data.size()) {
      return Bad(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                              ") are outside the ", data.size(),
                              " bytes of data"));
    }
    absl::StatusOr<uint64_t> size = ByteSize(t.shape, DtypeSize(t.dtype), name);
    if (!size.ok()) return size.status();
    if (*size != end - begin) {
      return Bad(absl::StrCat(where, ": shape [", absl::StrJoin(t.shape, ", "),
                              "] of ", DtypeName(t.dtype), " needs ", *size,
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
