#include "models/state_dict/torch_save.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"
#include "models/state_dict/torch_pickle.h"
#include "models/state_dict/zip_archive.h"

namespace dtrain::models::state_dict {
namespace {

// Elements of `shape`, or nullopt-like -1 when the product overflows.
int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;  // PyTorch's strides skip empty dims.
  }
  return strides;
}

// Copies the (bounds-checked) strided view `t` of `storage` out row-major.
std::string Gather(const TorchSaveFile::Tensor& t, absl::string_view storage,
                   int64_t numel) {
  const size_t element = DtypeSize(t.dtype);
  std::string out(numel * element, '\0');
  if (numel == 0) return out;
  bool contiguous = true;
  const std::vector<int64_t> dense = ContiguousStrides(t.size);
  for (size_t i = 0; i < t.size.size(); ++i)
    if (t.size[i] > 1 && t.stride[i] != dense[i]) contiguous = false;
  if (contiguous) {
    std::memcpy(out.data(), storage.data() + t.offset * element, out.size());
    return out;
  }
  std::vector<int64_t> index(t.size.size(), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t at = t.offset;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.stride[d];
    std::memcpy(out.data() + n * element, storage.data() + at * element,
                element);
    for (size_t d = index.size(); d-- > 0;) {  // Odometer, last dim fastest.
      if (++index[d] < t.size[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> EncodeTorchSave(
    const std::vector<TensorEntry>& tensors) {
  PickledStateDict state;
  std::vector<std::pair<std::string, std::string>> entries;
  const std::string folder = absl::StrCat(kTorchSaveFolder, "/");
  entries.emplace_back(folder + "data.pkl", "");  // Filled in below.
  entries.emplace_back(folder + "byteorder", "little");
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& e = tensors[i];
    if (e.name.empty() || !names.insert(e.name).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "state_dict name '", e.name, "' is empty or given twice"));
    const int64_t numel = Elements(e.shape);
    if (numel < 0 ||
        static_cast<uint64_t>(numel) * DtypeSize(e.dtype) != e.data.size())
      return absl::InvalidArgumentError(
          absl::StrCat(e.name, ": ", e.data.size(),
                       " bytes do not match its shape and dtype"));
    PickledTensor t;
    t.storage_key = absl::StrCat(i);
    t.dtype = e.dtype;
    t.storage_numel = numel;
    t.size = e.shape;
    t.stride = ContiguousStrides(e.shape);
    entries.emplace_back(absl::StrCat(folder, "data/", t.storage_key), e.data);
    state.emplace_back(e.name, std::move(t));
  }
  entries.emplace_back(folder + "version", "3\n");
  entries[0].second = WriteStateDictPickle(state);
  return WriteZip(entries);
}

namespace {

using Storages = absl::flat_hash_map<std::string, absl::string_view>;

// The pickle's tensors checked against their storages, each storage listed
// once however many tensors use it.
absl::StatusOr<TorchSaveFile> Resolve(const StateDictPickle& state,
                                      const Storages& storages) {
  TorchSaveFile out;
  absl::flat_hash_map<absl::string_view, size_t> storage_index;
  std::vector<std::string> first_user;  // Per tensor: a name, for errors.
  first_user.resize(state.tensors.size());
  for (auto it = state.names.rbegin(); it != state.names.rend(); ++it)
    first_user[it->second] = it->first;
  out.tensors.reserve(state.tensors.size());
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const PickledTensor& t = state.tensors[i];
    const std::string& name = first_user[i];
    auto it = storages.find(t.storage_key);
    if (it == storages.end())
      return absl::DataLossError(absl::StrCat(
          name, ": its storage data/", t.storage_key, " is not in the file"));
    const size_t element = DtypeSize(t.dtype);
    if (static_cast<uint64_t>(t.storage_numel) > it->second.size() / element ||
        it->second.size() != static_cast<uint64_t>(t.storage_numel) * element)
      return absl::DataLossError(
          absl::StrCat(name, ": storage data/", t.storage_key, " has ",
                       it->second.size(), " bytes, not ", t.storage_numel,
                       " elements of ", DtypeName(t.dtype)));
    const int64_t numel = Elements(t.size);
    if (numel < 0 || numel > t.storage_numel)
      return absl::InvalidArgumentError(
          absl::StrCat(name,
                       ": a view of more elements than its storage holds (an "
                       "expanded tensor; save a contiguous copy)"));
    auto [at, added] =
        storage_index.try_emplace(it->first, out.storages.size());
    if (added) out.storages.push_back(it->second);
    out.tensors.push_back({at->second, t.dtype, t.offset, t.size, t.stride});
  }
  out.names = state.names;
  return out;
}

// The format before PyTorch 1.6 (torch.save(..., _use_new_zipfile_
// serialization=False) still writes it): pickles back to back (a magic
// number, the protocol version 1001, system information, the object, the
// sorted storage keys), then each storage as u64 numel and its bytes.
constexpr absl::string_view kLegacyMagic(
    "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
constexpr absl::string_view kLegacyVersion("\x80\x02M\xe9\x03.", 6);

absl::StatusOr<TorchSaveFile> ParseLegacy(absl::string_view bytes) {
  const size_t file_size = bytes.size();
  bytes.remove_prefix(kLegacyMagic.size());
  if (!absl::ConsumePrefix(&bytes, kLegacyVersion))
    return absl::InvalidArgumentError(
        "a legacy torch.save file of an unknown protocol version (1001 is "
        "read)");
  DTRAIN_ASSIGN_OR_RETURN(size_t info, SkipPickle(bytes, file_size));
  bytes.remove_prefix(info);
  size_t end = 0;
  DTRAIN_ASSIGN_OR_RETURN(StateDictPickle state,
                          ReadStateDictPickle(bytes, &end, file_size));
  bytes.remove_prefix(end);
  DTRAIN_ASSIGN_OR_RETURN(std::vector<std::string> keys,
                          ReadStringListPickle(bytes, &end, file_size));
  bytes.remove_prefix(end);
  absl::flat_hash_map<absl::string_view, Dtype> dtypes;
  for (const PickledTensor& t : state.tensors) dtypes[t.storage_key] = t.dtype;
  Storages storages;
  base::ByteReader r(bytes, 0, "malformed legacy torch.save storages: ");
  for (const std::string& key : keys) {
    auto it = dtypes.find(key);
    if (it == dtypes.end())
      return absl::DataLossError(
          absl::StrCat("storage ", key, " is listed but no tensor uses it"));
    uint64_t numel = 0;
    DTRAIN_RETURN_IF_ERROR(r.U64("storage size", &numel));
    const size_t element = DtypeSize(it->second);
    if (numel > r.remaining() / element)
      return absl::DataLossError(absl::StrCat("storage ", key, " of ", numel,
                                              " elements runs past the file"));
    absl::string_view data;
    DTRAIN_RETURN_IF_ERROR(r.Raw(numel * element, "storage", &data));
    storages[key] = data;
  }
  return Resolve(state, storages);
}

}  // namespace

absl::StatusOr<TorchSaveFile> ParseTorchSave(absl::string_view bytes) {
  if (absl::StartsWith(bytes, kLegacyMagic)) return ParseLegacy(bytes);
  absl::StatusOr<std::vector<ZipEntry>> zip = ReadZip(bytes);
  if (!zip.ok()) {
    if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == 0x80) {
      return absl::InvalidArgumentError(
          "a bare pickle, neither a zip archive nor the legacy torch.save "
          "format: not a torch.save file");
    }
    return zip.status();
  }
  // The folder is whatever holds data.pkl; entries elsewhere are ignored.
  std::string folder;
  for (const ZipEntry& e : *zip) {
    absl::string_view name = e.name;
    if (absl::ConsumeSuffix(&name, "/data.pkl") &&
        !absl::StrContains(name, '/')) {
      if (!folder.empty())
        return absl::DataLossError(
            "two data.pkl entries: not a torch.save archive");
      folder = absl::StrCat(name, "/");
    }
  }
  if (folder.empty())
    return absl::InvalidArgumentError(
        "a zip archive without <folder>/data.pkl: not a torch.save file");
  absl::string_view pickle;
  Storages storages;
  for (const ZipEntry& e : *zip) {
    absl::string_view name = e.name;
    if (!absl::ConsumePrefix(&name, folder)) continue;
    if (name == "data.pkl") pickle = e.data;
    if (name == "byteorder" && e.data != "little")
      return absl::InvalidArgumentError(absl::StrCat(
          "byte order '", e.data, "': only little-endian files are read"));
    if (absl::ConsumePrefix(&name, "data/")) storages[name] = e.data;
  }
  DTRAIN_ASSIGN_OR_RETURN(
      StateDictPickle state,
      ReadStateDictPickle(pickle, /*end=*/nullptr, bytes.size()));
  return Resolve(state, storages);
}

absl::StatusOr<std::vector<TensorEntry>> DecodeTorchSave(
    absl::string_view bytes) {
  DTRAIN_ASSIGN_OR_RETURN(TorchSaveFile file, ParseTorchSave(bytes));
  const uint64_t limit = 2 * static_cast<uint64_t>(bytes.size()) + (1 << 20);
  uint64_t copied = 0;
  std::vector<TensorEntry> out;
  out.reserve(file.names.size());
  for (const auto& [name, index] : file.names) {
    const TorchSaveFile::Tensor& t = file.tensors[index];
    const int64_t numel = Elements(t.size);  // Checked by ParseTorchSave.
    copied += static_cast<uint64_t>(numel) * DtypeSize(t.dtype);
    if (copied > limit)
      return absl::ResourceExhaustedError(absl::StrCat(
          name,
          ": copying each name's view of its storage out takes more "
          "than ",
          limit, " bytes (twice the file's ", bytes.size(),
          " + 1 MiB): its names share storages; read it with ParseTorchSave"));
    out.push_back(
        {name, t.dtype, t.size, Gather(t, file.storages[t.storage], numel)});
  }
  return out;
}

}  // namespace dtrain::models::state_dict
