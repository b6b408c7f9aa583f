#include "dist/store/c10d_store.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace dtrain::store {
namespace {

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

std::vector<uint8_t> Bytes(absl::string_view s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string Text(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}

// c10d reports timeouts as exceptions whose text says so (DistStoreError in
// 2.x, runtime_error in 1.13); everything else is a lost or refused server.
absl::Status FromException(const std::exception& e, absl::string_view what,
                           const std::string& where) {
  const std::string message = e.what();
  const std::string text = absl::StrCat(
      what, " at ", where, " failed: ", message.substr(0, message.find('\n')));
  const std::string lower = absl::AsciiStrToLower(message);
  if (absl::StrContains(lower, "timeout") ||
      absl::StrContains(lower, "timed out"))
    return absl::DeadlineExceededError(text);
  return absl::UnavailableError(text);
}

std::string Quote(absl::string_view key) { return absl::StrCat("'", key, "'"); }

}  // namespace

absl::StatusOr<std::shared_ptr<C10dStore>> C10dStore::Connect(
    const C10dStoreOptions& options) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(options.port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = Millis(options.timeout);
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // 2.4 made libuv the default for clients too; Debian's build has none.
  o.useLibUV = false;
#endif
  const std::string where =
      absl::StrCat("c10d tcp://", options.host, ":", options.port);
  try {
    auto client = std::make_unique<c10d::TCPStore>(options.host, o);
    return std::shared_ptr<C10dStore>(
        new C10dStore(options, std::move(client)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "could not reach torchrun's agent store at ", where, " within ",
        absl::FormatDuration(options.timeout), ": ",
        std::string(e.what()).substr(0, std::string(e.what()).find('\n'))));
  }
}

C10dStore::C10dStore(const C10dStoreOptions& options,
                     std::unique_ptr<c10d::TCPStore> client)
    : Store(options.timeout), options_(options), client_(std::move(client)) {}

C10dStore::~C10dStore() = default;

std::string C10dStore::Describe() const {
  return absl::StrCat("c10d tcp://", options_.host, ":", options_.port);
}

absl::Status C10dStore::Set(absl::string_view key, absl::string_view value) {
  try {
    client_->set(std::string(key), Bytes(value));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("set ", Quote(key)), Describe());
  }
}

absl::StatusOr<std::string> C10dStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  const std::string k(key);
  absl::Status waited = Wait({k}, timeout);
  if (!waited.ok()) {
    if (waited.code() != absl::StatusCode::kDeadlineExceeded) return waited;
    return absl::DeadlineExceededError(
        absl::StrCat("get ", Quote(key), " at ", Describe(),
                     ": no such key after ", absl::FormatDuration(timeout)));
  }
  try {
    return Text(client_->get(k));
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("get ", Quote(key)), Describe());
  }
}

absl::StatusOr<int64_t> C10dStore::Add(absl::string_view key, int64_t delta) {
  const std::string k(key);
  try {
    // c10d's server parses the old value with std::stoll and does not survive
    // text that is no number: refuse that here (store.h's kInvalidArgument).
    if (client_->check({k})) {
      const std::string old = Text(client_->get(k));
      int64_t ignored = 0;
      if (!absl::SimpleAtoi(old, &ignored))
        return absl::InvalidArgumentError(
            absl::StrCat("add to ", Quote(key), " at ", Describe(),
                         ": its value is not an integer"));
    }
    return client_->add(k, delta);
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("add to ", Quote(key)), Describe());
  }
}

absl::StatusOr<std::string> C10dStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  const std::string k(key);
  try {
    std::string now =
        Text(client_->compareSet(k, Bytes(expected), Bytes(desired)));
    // c10d answers `expected` for an absent key; store.h says empty.
    if (!expected.empty() && now == expected && !client_->check({k}))
      return std::string();
    return now;
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("compare-set ", Quote(key)),
                         Describe());
  }
}

absl::StatusOr<bool> C10dStore::Check(absl::Span<const std::string> keys) {
  try {
    return client_->check(std::vector<std::string>(keys.begin(), keys.end()));
  } catch (const std::exception& e) {
    return FromException(e, "check", Describe());
  }
}

absl::Status C10dStore::Wait(absl::Span<const std::string> keys,
                             absl::Duration timeout) {
  // Polled with check rather than c10d's wait: c10d's client runs one request
  // at a time, and a blocking wait would hold back every other thread's calls
  // (a Set another thread's wait is waiting for, say) until it times out.
  const std::vector<std::string> list(keys.begin(), keys.end());
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (true) {
    try {
      if (client_->check(list)) return absl::OkStatus();
    } catch (const std::exception& e) {
      return FromException(
          e, absl::StrCat("wait for ", absl::StrJoin(keys, ", ")), Describe());
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "wait for ", absl::StrJoin(keys, ", "), " at ", Describe(),
          " timed out after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
}

absl::StatusOr<bool> C10dStore::Delete(absl::string_view key) {
  try {
    return client_->deleteKey(std::string(key));
  } catch (const std::exception& e) {
    return FromException(e, absl::StrCat("delete ", Quote(key)), Describe());
  }
}

absl::StatusOr<int64_t> C10dStore::NumKeys() {
  try {
    return client_->getNumKeys();
  } catch (const std::exception& e) {
    return FromException(e, "num-keys", Describe());
  }
}

}  // namespace dtrain::store
