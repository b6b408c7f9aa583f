#include "dist/rendezvous/init_method.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/posix_io.h"
#include "base/status_macros.h"

namespace dtrain::rendezvous {
namespace {

constexpr absl::string_view kExpected =
    "expected tcp://host:port, file:///absolute/path or env://";

bool IsDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Builds errors that quote the URL, so that a message read far from the
// command line still shows what was given.
class UrlErrors {
 public:
  explicit UrlErrors(absl::string_view url) : url_(url) {}
  absl::Status operator()(absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat("init method '", url_, "': ", why));
  }

 private:
  absl::string_view url_;
};

absl::Status ParseQuery(absl::string_view query, const UrlErrors& error,
                        InitMethod* method) {
  if (query.empty()) return absl::OkStatus();
  for (absl::string_view param : absl::StrSplit(query, '&')) {
    if (param.empty()) return error("empty query parameter");
    const size_t eq = param.find('=');
    if (eq == absl::string_view::npos) {
      return error(absl::StrCat("query parameter '", param,
                                "' has no value (expected name=value)"));
    }
    const absl::string_view name = param.substr(0, eq);
    const absl::string_view value = param.substr(eq + 1);
    absl::optional<int>* field = nullptr;
    if (name == "rank") {
      field = &method->rank;
    } else if (name == "world_size") {
      field = &method->world_size;
    } else {
      return error(absl::StrCat("unknown query parameter '", name,
                                "' (known: rank, world_size)"));
    }
    if (field->has_value()) {
      return error(absl::StrCat("query parameter '", name, "' is repeated"));
    }
    int parsed = 0;
    if (!IsDigits(value) || !absl::SimpleAtoi(value, &parsed)) {
      return error(
          absl::StrCat(name, "='", value, "' is not a non-negative integer"));
    }
    *field = parsed;
  }
  if (method->world_size.has_value() && *method->world_size < 1) {
    return error(
        absl::StrCat("world_size=", *method->world_size, " is less than 1"));
  }
  if (method->rank.has_value() && method->world_size.has_value() &&
      *method->rank >= *method->world_size) {
    return error(
        absl::StrCat("rank=", *method->rank,
                     " is not less than world_size=", *method->world_size));
  }
  return absl::OkStatus();
}

// Names, IPv4 addresses; IPv6 comes bracketed and is checked elsewhere.
absl::Status CheckHostName(absl::string_view host, const UrlErrors& error) {
  bool digits_and_dots = true;
  for (char c : host) {
    const unsigned char uc = static_cast<unsigned char>(c);
    if (!absl::ascii_isalnum(uc) && c != '-' && c != '.' && c != '_') {
      return error(absl::StrCat("host '", host, "' is not a valid host name"));
    }
    if (!absl::ascii_isdigit(uc) && c != '.') digits_and_dots = false;
  }
  // "10.0.0.256" would otherwise pass as a host name and fail later in DNS.
  in_addr v4;
  if (digits_and_dots &&
      inet_pton(AF_INET, std::string(host).c_str(), &v4) != 1) {
    return error(absl::StrCat("host '", host, "' is not a valid IPv4 address"));
  }
  return absl::OkStatus();
}

absl::Status ParseTcp(absl::string_view rest, const UrlErrors& error,
                      InitMethod* method) {
  absl::string_view authority = rest;
  const size_t slash = rest.find('/');
  if (slash != absl::string_view::npos) {
    authority = rest.substr(0, slash);
    const absl::string_view path = rest.substr(slash);
    if (path != "/") {
      return error(absl::StrCat("tcp:// takes no path, got '", path, "'"));
    }
  }
  if (authority.empty()) return error("no host: expected tcp://host:port");

  absl::string_view host;
  absl::string_view port_text;
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return error("'[' of the IPv6 address is not closed");
    }
    host = authority.substr(1, close - 1);
    const absl::string_view after = authority.substr(close + 1);
    if (after.empty()) return error("missing port: expected tcp://[ipv6]:port");
    if (after.front() != ':') {
      return error(absl::StrCat("expected ':' and a port after '[", host,
                                "]', got '", after, "'"));
    }
    port_text = after.substr(1);
    in6_addr v6;
    if (inet_pton(AF_INET6, std::string(host).c_str(), &v6) != 1) {
      return error(absl::StrCat("'[", host, "]' is not a valid IPv6 address"));
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon == absl::string_view::npos) {
      return error("missing port: expected tcp://host:port");
    }
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
    if (host.find(':') != absl::string_view::npos) {
      return error(
          "an IPv6 address must be in brackets, as in tcp://[::1]:29500");
    }
    if (host.empty()) return error("no host: expected tcp://host:port");
    DTRAIN_RETURN_IF_ERROR(CheckHostName(host, error));
  }
  if (port_text.empty()) return error("missing port after ':'");
  if (!IsDigits(port_text)) {
    return error(absl::StrCat("port '", port_text, "' is not a number"));
  }
  int port = 0;
  if (port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) ||
      port > 65535) {
    return error(absl::StrCat("port ", port_text, " is out of range 0..65535"));
  }
  method->host = std::string(host);
  method->port = port;
  return absl::OkStatus();
}

absl::Status ParseFile(absl::string_view path, const UrlErrors& error,
                       InitMethod* method) {
  if (path.empty()) return error("no path: expected file:///absolute/path");
  if (path.front() != '/') {
    return error(absl::StrCat("path '", path,
                              "' is not absolute: write "
                              "file:///absolute/path (three slashes)"));
  }
  if (path.back() == '/') {
    return error(absl::StrCat("path '", path,
                              "' names a directory; the store needs a file"));
  }
  // The store creates the file but not its directory: a missing directory is
  // almost always a typo or a filesystem not mounted on this node.
  const std::string dir(path.substr(0, std::max<size_t>(path.rfind('/'), 1)));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return error(absl::StrCat("directory '", dir, "' does not exist"));
    }
    return error(absl::StrCat("cannot access directory '", dir,
                              "': ", base::ErrnoText(err)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return error(absl::StrCat("'", dir, "' is not a directory"));
  }
  const std::string file(path);
  if (stat(file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return error(absl::StrCat("path '", path,
                              "' is a directory; the store needs a file"));
  }
  method->path = file;
  return absl::OkStatus();
}

}  // namespace

absl::string_view SchemeName(InitMethod::Scheme scheme) {
  switch (scheme) {
    case InitMethod::kTcp:
      return "tcp";
    case InitMethod::kFile:
      return "file";
    case InitMethod::kEnv:
      return "env";
  }
  return "unknown";
}

std::string InitMethod::ToString() const {
  std::string url = absl::StrCat(SchemeName(scheme), "://");
  switch (scheme) {
    case kTcp:
      if (host.find(':') != std::string::npos) {
        absl::StrAppend(&url, "[", host, "]:", port);
      } else {
        absl::StrAppend(&url, host, ":", port);
      }
      break;
    case kFile:
      absl::StrAppend(&url, path);
      break;
    case kEnv:
      break;
  }
  std::vector<std::string> params;
  if (rank.has_value()) params.push_back(absl::StrCat("rank=", *rank));
  if (world_size.has_value()) {
    params.push_back(absl::StrCat("world_size=", *world_size));
  }
  if (!params.empty()) absl::StrAppend(&url, "?", absl::StrJoin(params, "&"));
  return url;
}

absl::StatusOr<InitMethod> ParseInitMethod(absl::string_view url) {
  const UrlErrors error(url);
  if (url.empty()) return error(absl::StrCat("empty; ", kExpected));
  const size_t sep = url.find("://");
  if (sep == absl::string_view::npos || sep == 0) {
    return error(absl::StrCat("not a URL; ", kExpected));
  }
  const absl::string_view scheme_text = url.substr(0, sep);
  const std::string scheme = absl::AsciiStrToLower(scheme_text);
  InitMethod method;
  if (scheme == "tcp") {
    method.scheme = InitMethod::kTcp;
  } else if (scheme == "file") {
    method.scheme = InitMethod::kFile;
  } else if (scheme == "env") {
    method.scheme = InitMethod::kEnv;
  } else {
    return error(absl::StrCat("unknown scheme '", scheme_text,
                              "' (known: tcp, file, env)"));
  }

  absl::string_view rest = url.substr(sep + 3);
  if (rest.find('#') != absl::string_view::npos) {
    return error("a fragment ('#...') is not allowed");
  }
  const size_t question = rest.find('?');
  if (question != absl::string_view::npos) {
    DTRAIN_RETURN_IF_ERROR(
        ParseQuery(rest.substr(question + 1), error, &method));
    rest = rest.substr(0, question);
  }

  absl::Status s;
  switch (method.scheme) {
    case InitMethod::kTcp:
      s = ParseTcp(rest, error, &method);
      break;
    case InitMethod::kFile:
      s = ParseFile(rest, error, &method);
      break;
    case InitMethod::kEnv:
      if (!rest.empty()) {
        s = error(absl::StrCat(
            "env:// takes no host or path, got '", rest,
            "' (MASTER_ADDR and MASTER_PORT come from the environment)"));
      }
      break;
  }
  DTRAIN_RETURN_IF_ERROR(s);
  return method;
}

}  // namespace dtrain::rendezvous
