#include "models/state_dict/hostile_weights.h"

#include <sys/resource.h>

#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "models/state_dict/torch_pickle.h"
#include "models/state_dict/zip_archive.h"

namespace dtrain::models::state_dict {
namespace {

std::string Archive(const std::string& pickle, const std::string& storage) {
  std::vector<std::pair<std::string, std::string>> entries = {
      {"archive/data.pkl", pickle}};
  if (!storage.empty()) entries.emplace_back("archive/data/0", storage);
  entries.emplace_back("archive/version", "3\n");
  return *WriteZip(entries);
}

std::string Str(const std::string& s) {
  char n[4];
  base::PutLittleEndian(s.size(), 4, n);
  return absl::StrCat("X", absl::string_view(n, 4), s);
}

}  // namespace

std::string SharedStorageArchive(int names, size_t storage_bytes,
                                 bool memoized) {
  std::string storage(storage_bytes, '\0');
  for (size_t i = 0; i < storage_bytes / 4; ++i) {
    const float v = static_cast<float>(i % 1000);
    std::memcpy(storage.data() + 4 * i, &v, 4);
  }
  PickledTensor t;
  t.storage_key = "0";
  t.storage_numel = storage_bytes / 4;
  t.size = {t.storage_numel};
  t.stride = {1};
  if (!memoized) {
    PickledStateDict state;
    for (int i = 0; i < names; ++i) state.emplace_back(absl::StrCat("w", i), t);
    return Archive(WriteStateDictPickle(state), storage);
  }
  // The writer's pickle of one tensor, its tensor memoized (BINPUT 1)
  // before SETITEMS, then BINGET 1 for every other name.
  std::string pickle = WriteStateDictPickle({{"w0", t}});
  pickle.resize(pickle.size() - 2);  // SETITEMS, STOP.
  pickle += "q\x01";
  for (int i = 1; i < names; ++i)
    absl::StrAppend(&pickle, Str(absl::StrCat("w", i)), "h\x01");
  pickle += "u.";
  return Archive(pickle, storage);
}

std::string RepeatedOpcodeArchive(const std::string& opcodes, size_t count) {
  std::string pickle = "\x80\x02";
  pickle.reserve(2 + opcodes.size() * count + 1);
  for (size_t i = 0; i < count; ++i) pickle += opcodes;
  pickle += ".";
  return Archive(pickle, "");
}

bool CanLimitAddressSpace() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#endif
#endif
  return true;
}

bool LimitAddressSpace(uint64_t extra) {
  if (!CanLimitAddressSpace()) return false;
  std::ifstream status("/proc/self/status");
  std::string line;
  uint64_t kib = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) kib = std::stoull(line.substr(7));
  }
  if (kib == 0) return false;
  const rlimit limit = {kib * 1024 + extra, kib * 1024 + extra};
  return setrlimit(RLIMIT_AS, &limit) == 0;
}

}  // namespace dtrain::models::state_dict
