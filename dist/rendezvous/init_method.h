// The init method: the URL that tells every rank how to find the others, as
// in torch.distributed.init_process_group(init_method=...).
//
//   tcp://host:port    a TcpStore served by rank 0 at host:port; host is a
//                      name, an IPv4 address or a bracketed IPv6 address
//                      (tcp://[::1]:29500).
//   file:///abs/path   a FileStore in a file on a filesystem every rank sees;
//                      the file's directory must already exist.
//   env://             a TcpStore served by rank 0 at the master address and
//                      port of the launch environment: rank and world size
//                      from the launcher that started the process (torchrun,
//                      Open MPI, MPICH, Slurm), the master from MASTER_ADDR /
//                      MASTER_PORT or Slurm's node list, the port defaulting
//                      to 29500 (DiscoverLaunchEnv in launch_env.h, InitWorld
//                      in init.h).
//
// Every scheme takes PyTorch's query parameters "?rank=R&world_size=N", which
// fix this process's rank and the job's size (0 <= R < N).
//
// ParseInitMethod only reads the filesystem (to check a file:// directory);
// it is thread-safe.
#ifndef DTRAIN_DIST_RENDEZVOUS_INIT_METHOD_H_
#define DTRAIN_DIST_RENDEZVOUS_INIT_METHOD_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/optional.h"

namespace dtrain::rendezvous {

struct InitMethod {
  enum Scheme { kTcp, kFile, kEnv };

  Scheme scheme = kEnv;

  // kTcp only. `host` is without brackets ("::1", not "[::1]").
  std::string host;
  // kTcp only, 0..65535. Port 0 means "any free port" and makes sense only to
  // the process that starts the TcpStore server: it binds an ephemeral port
  // and must pass the real one to the others by another way. A client cannot
  // connect to port 0; connecting code must reject it.
  int port = 0;

  // kFile only: absolute path of the store file.
  std::string path;

  // From the query string, when given.
  absl::optional<int> rank;
  absl::optional<int> world_size;

  // The canonical URL, which ParseInitMethod parses back to an equal value:
  // "tcp://[::1]:29500?rank=0&world_size=2", "file:///shared/store", "env://".
  std::string ToString() const;
};

// "tcp", "file" or "env".
absl::string_view SchemeName(InitMethod::Scheme scheme);

// Parses and checks an init method URL. The scheme is case-insensitive.
// kInvalidArgument, quoting the URL, for: a string that is not a URL, an
// unknown scheme (the message lists the known ones); for tcp://, a missing or
// malformed host, an unbracketed IPv6 address, a missing port or one outside
// 0..65535, a path other than "/"; for file://, a host part or a relative
// path, a path naming a directory, a parent directory that does not exist
// (the message names it); for env://, anything between "env://" and the
// query; for every scheme, a fragment, an unknown or repeated query
// parameter, a rank or world size that is not a non-negative integer, a world
// size below 1, rank >= world_size.
absl::StatusOr<InitMethod> ParseInitMethod(absl::string_view url);

}  // namespace dtrain::rendezvous

#endif  // DTRAIN_DIST_RENDEZVOUS_INIT_METHOD_H_
