#include "dist/backend/hierarchical/host_layout.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"

namespace dtrain::backend::hierarchical {

absl::StatusOr<std::string> LocalHostKey() {
  absl::StatusOr<std::string> boot =
      base::ReadFile("/proc/sys/kernel/random/boot_id", base::kTextFileLimit);
  struct stat ns = {};
  if (!boot.ok() || ::stat("/proc/self/ns/pid", &ns) != 0) {
    return absl::UnavailableError(
        "cannot tell which ranks share this host: /proc does not give the "
        "kernel's boot id and this process's PID namespace");
  }
  return absl::StrCat("boot ", absl::StripAsciiWhitespace(*boot), " pidns ",
                      ns.st_dev, ":", ns.st_ino);
}

int HostLayout::HostOf(int rank) const {
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (std::find(hosts[h].begin(), hosts[h].end(), rank) != hosts[h].end())
      return static_cast<int>(h);
  }
  return -1;
}

int HostLayout::LocalRankOf(int rank) const {
  const int h = HostOf(rank);
  if (h < 0) return -1;
  return static_cast<int>(std::find(hosts[h].begin(), hosts[h].end(), rank) -
                          hosts[h].begin());
}

std::string HostLayout::ToString() const {
  return absl::StrJoin(
      hosts, " | ", [](std::string* out, const std::vector<int>& h) {
        absl::StrAppend(out, h.size() == 1 ? "rank " : "ranks ",
                        absl::StrJoin(h, ", "));
      });
}

absl::StatusOr<HostLayout> LayoutFromKeys(absl::Span<const std::string> keys,
                                          int rank) {
  if (rank < 0 || rank >= static_cast<int>(keys.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the ", keys.size(), " host keys"));
  }
  HostLayout layout;
  std::map<std::string, int> host_of_key;
  for (int r = 0; r < static_cast<int>(keys.size()); ++r) {
    if (keys[r].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " published an empty host key"));
    }
    // Ranks ascend, so hosts come out ordered by their lowest rank.
    auto [it, added] = host_of_key.emplace(keys[r], layout.hosts.size());
    if (added) layout.hosts.emplace_back();
    layout.hosts[it->second].push_back(r);
  }
  layout.host = layout.HostOf(rank);
  layout.local_rank = layout.LocalRankOf(rank);
  return layout;
}

absl::StatusOr<std::vector<std::string>> ExchangeHostKeys(
    store::Store& store, int rank, int world_size, const std::string& key,
    absl::Time deadline) {
  if (absl::Status s = store.Set(absl::StrCat("host_key/", rank), key);
      !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("publishing this host's key: ", s.message()));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) {
    absl::StatusOr<std::string> k =
        store.Get(absl::StrCat("host_key/", r),
                  std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!k.ok()) {
      std::vector<int> missing;
      for (int m = r; m < world_size; ++m) {
        const std::string name = absl::StrCat("host_key/", m);
        absl::StatusOr<bool> there = store.Check({&name, 1});
        if (there.ok() && !*there) missing.push_back(m);
      }
      return absl::Status(
          k.status().code(),
          absl::StrCat(
              "waiting for the host keys of ",
              missing.empty()
                  ? absl::StrCat("rank ", r)
                  : absl::StrCat("ranks ", absl::StrJoin(missing, ", ")),
              ": ", k.status().message()));
    }
    keys.push_back(*std::move(k));
  }
  return keys;
}

}  // namespace dtrain::backend::hierarchical
