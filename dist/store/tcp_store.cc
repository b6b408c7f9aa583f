#include "dist/store/tcp_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/store/tcp_socket.h"
#include "dist/store/tcp_store_protocol.h"
#include "dist/store/tcp_store_server.h"

namespace dtrain::store {
namespace {

using protocol::Reader;
using protocol::Reply;
using protocol::Request;
using protocol::Writer;

// Slack on top of a blocking call's own timeout: the server answers at the
// deadline, and this only covers a server that stopped answering altogether.
constexpr absl::Duration kReplyGrace = absl::Seconds(10);

std::string Quote(absl::string_view key) { return absl::StrCat("'", key, "'"); }

Writer& KeyList(Writer& w, absl::Span<const std::string> keys) {
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) w.Bytes(k);
  return w;
}

}  // namespace

absl::StatusOr<std::shared_ptr<TcpStore>> TcpStore::Create(
    const TcpStoreOptions& options) {
  if (options.port < 0 || options.port > 65535 ||
      (options.port == 0 && !options.is_server)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store port ", options.port,
                     " is out of range (1-65535; 0 only for the server)"));
  }
  if (options.token.size() > protocol::kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the store token is ", options.token.size(),
                     " bytes long; at most ", protocol::kMaxTokenBytes,
                     " (DTRAIN_STORE_TOKEN or the file "
                     "DTRAIN_STORE_TOKEN_FILE names)"));
  }
  std::shared_ptr<TcpStore> store(new TcpStore(options));
  if (options.is_server) {
    internal::TcpStoreServerOptions server_options;
    server_options.host = options.bind_host;
    server_options.token = options.token;
    server_options.port = options.port;
    DTRAIN_ASSIGN_OR_RETURN(store->server_,
                            internal::TcpStoreServer::Start(server_options));
    store->options_.port = store->server_->port();
  }
  DTRAIN_ASSIGN_OR_RETURN(base::UniqueFd fd,
                          store->Connect(options.connect_timeout));
  std::lock_guard<std::mutex> lock(store->mu_);
  store->idle_.push_back(std::move(fd));
  return store;
}

TcpStore::TcpStore(const TcpStoreOptions& options)
    : Store(options.timeout), options_(options) {}

TcpStore::~TcpStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.clear();
  }
  server_.reset();
}

std::string TcpStore::Describe() const {
  return absl::StrCat("tcp://",
                      internal::JoinHostPort(options_.host, options_.port));
}

absl::Status TcpStore::Hello(int fd) const {
  std::string ping;
  protocol::AppendFrame(static_cast<uint8_t>(Request::kPing),
                        Writer().Bytes(options_.token).data(), &ping);
  const absl::Time deadline = absl::Now() + options_.hello_timeout;
  char header[protocol::kHeaderSize];
  // If this fails, not even our bytes went out: retry.
  DTRAIN_RETURN_IF_ERROR(
      internal::SendAll(fd, ping.data(), ping.size(), deadline));
  const std::string advice = absl::StrCat(
      ". Is another program using this port? Under torchrun's default mode "
      "the ranks use torchrun's own store (TORCHELASTIC_USE_AGENT_STORE=True, "
      "set by torchrun); otherwise give the job a free --master_port");
  const absl::Status s =
      internal::RecvAll(fd, header, sizeof(header), deadline);
  if (!s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the program listening at ", Describe(),
        " is not a dtrain store server: ",
        s.code() == absl::StatusCode::kDeadlineExceeded
            ? absl::StrCat("it accepted the connection but did not answer the "
                           "store's hello within ",
                           absl::FormatDuration(options_.hello_timeout))
            : "it closed the connection without answering the store's hello",
        advice));
  }
  const protocol::Header h = protocol::DecodeHeader(header);
  if (h.magic != protocol::kMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the program listening at ", Describe(),
        " is not a dtrain store server: it answered the store's hello with "
        "bytes of another protocol (",
        absl::BytesToHexString(absl::string_view(header, 8)), "...)", advice));
  }
  if (h.version != protocol::kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the store server at ", Describe(), " speaks protocol version ",
        int{h.version}, ", this client version ", int{protocol::kVersion},
        ": run the same dtrain build on every rank"));
  }
  if (h.length > protocol::kDefaultMaxPayload) {
    return absl::FailedPreconditionError(absl::StrCat("the store server at ",
                                                      Describe(),
                                                      " answered the hello "
                                                      "with a frame of ",
                                                      h.length, " bytes"));
  }
  std::string rest(h.length, '\0');
  DTRAIN_RETURN_IF_ERROR(
      internal::RecvAll(fd, rest.data(), rest.size(), deadline));
  if (h.type == static_cast<uint8_t>(protocol::Reply::kRetry)) {
    // Busy with strangers or short of descriptors: connect again.
    protocol::Reader r(rest);
    return absl::UnavailableError(r.Bytes());
  }
  if (h.type != static_cast<uint8_t>(protocol::Reply::kOk)) {
    // A dtrain server that will not serve us (a token, the connection
    // limit): its words, at once.
    protocol::Reader r(rest);
    const absl::string_view message = r.Bytes();
    return absl::FailedPreconditionError(
        r.ok() ? std::string(message)
               : absl::StrCat("the store server at ", Describe(),
                              " refused the connection"));
  }
  return absl::OkStatus();
}

absl::StatusOr<base::UniqueFd> TcpStore::Connect(absl::Duration timeout) const {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  absl::Duration backoff = absl::Milliseconds(10);
  int attempts = 0;
  absl::Status last;
  while (true) {
    ++attempts;
    // Each attempt may take at most a few seconds, so a silently dropped SYN
    // does not eat the budget.
    const absl::Time attempt_deadline =
        std::min(deadline, absl::Now() + absl::Seconds(5));
    bool refused = false;
    absl::StatusOr<base::UniqueFd> fd = internal::ConnectOnce(
        options_.host, options_.port, attempt_deadline, &refused);
    if (fd.ok()) {
      // The hello: a dtrain server answers a ping at once. Whatever else
      // accepted the connection is named, and the client gives up now
      // instead of retrying until the timeout.
      absl::Status foreign = Hello(fd->get());
      if (foreign.ok()) {
        reached_ = true;
        return std::move(*fd);
      }
      if (foreign.code() == absl::StatusCode::kFailedPrecondition)
        return foreign;
      last = foreign;
    } else if (refused && reached_) {
      return absl::UnavailableError(absl::StrCat(
          "the store server at ", Describe(),
          " refused the connection after serving this client: its process "
          "(rank 0's, or the rank that took the store over) has exited"));
    } else {
      last = fd.status();
    }
    const absl::Time now = absl::Now();
    if (now + backoff >= deadline) {
      return absl::UnavailableError(
          absl::StrCat("could not reach the store server at ", Describe(),
                       " within ", absl::FormatDuration(timeout), " (",
                       attempts, " attempts; last error: ", last.message(),
                       "). Is rank 0 running, and is the address reachable "
                       "from this host?"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

absl::StatusOr<std::string> TcpStore::Call(Request type,
                                           absl::string_view payload,
                                           absl::string_view what,
                                           absl::Duration wait) {
  base::UniqueFd fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      fd = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!fd.valid()) {
    DTRAIN_ASSIGN_OR_RETURN(fd, Connect(options_.connect_timeout));
  }
  std::string frame;
  protocol::AppendFrame(static_cast<uint8_t>(type), payload, &frame);
  const absl::Time start = absl::Now();
  const bool blocking = type == Request::kGet || type == Request::kWait;
  const absl::Time deadline =
      options_.unresponsive_after.has_value()
          ? start + (blocking ? wait : absl::ZeroDuration()) +
                *options_.unresponsive_after
          : start + wait + kReplyGrace;
  auto lost = [&](const absl::Status& s) {
    return absl::UnavailableError(
        absl::StrCat(what, " at ", Describe(), " failed after ",
                     absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                      absl::Milliseconds(1))),
                     ": ",
                     s.code() == absl::StatusCode::kDeadlineExceeded
                         ? "the server stopped answering"
                         : s.message()));
  };
  absl::Status s =
      internal::SendAll(fd.get(), frame.data(), frame.size(), deadline);
  if (!s.ok()) return lost(s);
  char header[protocol::kHeaderSize];
  s = internal::RecvAll(fd.get(), header, sizeof(header), deadline);
  if (!s.ok()) return lost(s);
  const protocol::Header h = protocol::DecodeHeader(header);
  if (h.magic != protocol::kMagic || h.version != protocol::kVersion ||
      h.length > protocol::kDefaultMaxPayload) {
    return lost(absl::DataLossError("garbled reply from the server"));
  }
  std::string reply(h.length, '\0');
  s = internal::RecvAll(fd.get(), reply.data(), reply.size(), deadline);
  if (!s.ok()) return lost(s);
  const auto status = static_cast<Reply>(h.type);
  if (status != Reply::kProtocol) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(fd));
  }
  if (status == Reply::kOk) return reply;
  Reader r(reply);
  const std::string message(r.Bytes());
  switch (status) {
    case Reply::kInvalid:
      return absl::InvalidArgumentError(message);
    case Reply::kDeadline:
      return absl::DeadlineExceededError(message);
    default:
      return absl::InternalError(
          absl::StrCat(what, " at ", Describe(), ": ", message));
  }
}

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return Call(Request::kSet, Writer().Bytes(key).Bytes(value).data(),
              absl::StrCat("set ", Quote(key)), timeout())
      .status();
}

absl::StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                          absl::Duration timeout) {
  DTRAIN_ASSIGN_OR_RETURN(
      const std::string reply,
      Call(Request::kGet,
           Writer().I64(absl::ToInt64Milliseconds(timeout)).Bytes(key).data(),
           absl::StrCat("get ", Quote(key)), timeout));
  Reader r(reply);
  std::string value(r.Bytes());
  if (!r.Done()) return absl::DataLossError("malformed get reply");
  return value;
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  DTRAIN_ASSIGN_OR_RETURN(
      const std::string reply,
      Call(Request::kAdd, Writer().Bytes(key).I64(delta).data(),
           absl::StrCat("add to ", Quote(key)), timeout()));
  Reader r(reply);
  const int64_t value = r.I64();
  if (!r.Done()) return absl::DataLossError("malformed add reply");
  return value;
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key,
                                                 absl::string_view expected,
                                                 absl::string_view desired) {
  DTRAIN_ASSIGN_OR_RETURN(
      const std::string reply,
      Call(Request::kCompareSet,
           Writer().Bytes(key).Bytes(expected).Bytes(desired).data(),
           absl::StrCat("compare-set ", Quote(key)), timeout()));
  Reader r(reply);
  std::string value(r.Bytes());
  if (!r.Done()) return absl::DataLossError("malformed compare-set reply");
  return value;
}

absl::StatusOr<bool> TcpStore::Check(absl::Span<const std::string> keys) {
  Writer w;
  DTRAIN_ASSIGN_OR_RETURN(
      const std::string reply,
      Call(Request::kCheck, KeyList(w, keys).data(), "check", timeout()));
  Reader r(reply);
  const bool present = r.U8() != 0;
  if (!r.Done()) return absl::DataLossError("malformed check reply");
  return present;
}

absl::Status TcpStore::Wait(absl::Span<const std::string> keys,
                            absl::Duration timeout) {
  Writer w;
  w.I64(absl::ToInt64Milliseconds(timeout));
  return Call(Request::kWait, KeyList(w, keys).data(), "wait", timeout)
      .status();
}

absl::StatusOr<bool> TcpStore::Delete(absl::string_view key) {
  DTRAIN_ASSIGN_OR_RETURN(const std::string reply,
                          Call(Request::kDelete, Writer().Bytes(key).data(),
                               absl::StrCat("delete ", Quote(key)), timeout()));
  Reader r(reply);
  const bool existed = r.U8() != 0;
  if (!r.Done()) return absl::DataLossError("malformed delete reply");
  return existed;
}

absl::StatusOr<int64_t> TcpStore::NumKeys() {
  DTRAIN_ASSIGN_OR_RETURN(const std::string reply,
                          Call(Request::kNumKeys, "", "num-keys", timeout()));
  Reader r(reply);
  const int64_t n = r.I64();
  if (!r.Done()) return absl::DataLossError("malformed num-keys reply");
  return n;
}

}  // namespace dtrain::store
