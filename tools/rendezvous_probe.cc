// rendezvous_probe: checks that N processes can find each other, the way a
// training job would, and prints what each learned as one JSON line. Use it to
// try an init method or a launcher (torchrun, srun, mpirun, //tools:launch)
// before starting a long job:
//
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 rendezvous_probe
//   & RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500
//   rendezvous_probe srun -n 4 rendezvous_probe --dist_url=tcp://node01:29500
//
// Exits 0 when the rendezvous completed, 1 with the reason on stderr otherwise.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/duration_flag.h"
#include "dist/rendezvous/init.h"
#include "dist/rendezvous/launch_env.h"

ABSL_FLAG(std::string, dist_url, "env://",
          "Init method: tcp://host:port, file:///path or env://.");
ABSL_FLAG(int, rank, -1,
          "This process's rank; -1: from the URL or the launcher.");
ABSL_FLAG(int, world_size, -1,
          "Number of processes; -1: from the URL or the launcher.");
ABSL_FLAG(int, local_rank, -1, "Rank on this node; -1: from the launcher.");
ABSL_FLAG(int, local_world_size, -1,
          "Ranks on this node, with --local_rank; -1: from the launcher or "
          "LOCAL_WORLD_SIZE.");
ABSL_FLAG(dtrain::base::DurationFlag, timeout,
          dtrain::base::DurationFlag(absl::Seconds(60)),
          "How long to wait for the store and the other ranks.");
ABSL_FLAG(std::string, bind_host, "",
          "Rank 0: address the store server binds (default: the master's "
          "address; *: every interface).");

namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "rendezvous_probe: unexpected argument '%s'\n",
                 rest[1]);
    return 2;
  }
  namespace rdzv = dtrain::rendezvous;
  rdzv::InitOptions options;
  options.url = absl::GetFlag(FLAGS_dist_url);
  options.timeout = absl::GetFlag(FLAGS_timeout).value;
  options.bind_host = absl::GetFlag(FLAGS_bind_host);
  if (absl::GetFlag(FLAGS_rank) >= 0)
    options.args.rank = absl::GetFlag(FLAGS_rank);
  if (absl::GetFlag(FLAGS_world_size) >= 0) {
    options.args.world_size = absl::GetFlag(FLAGS_world_size);
  }
  if (absl::GetFlag(FLAGS_local_rank) >= 0) {
    options.args.local_rank = absl::GetFlag(FLAGS_local_rank);
  }
  if (absl::GetFlag(FLAGS_local_world_size) >= 0) {
    options.args.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  }

  absl::StatusOr<rdzv::World> world =
      rdzv::InitWorld(options, rdzv::ProcessEnv());
  if (!world.ok()) {
    std::fprintf(stderr, "rendezvous_probe: %s\n",
                 std::string(world.status().message()).c_str());
    return 1;
  }
  // Rank 0 may host the store: it leaves only after every rank has read what it
  // needs.
  const absl::Status done =
      world->store->Set(absl::StrCat("probe/done/", world->rank), "1");
  if (!done.ok()) {
    std::fprintf(stderr, "rendezvous_probe: %s\n",
                 std::string(done.message()).c_str());
    return 1;
  }
  if (world->rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world->world_size; ++r)
      keys.push_back(absl::StrCat("probe/done/", r));
    const absl::Status all = world->store->Wait(keys, options.timeout);
    if (!all.ok()) {
      std::fprintf(stderr, "rendezvous_probe: [rank 0] %s\n",
                   std::string(all.message()).c_str());
      return 1;
    }
  }
  std::vector<std::string> peers;
  for (const rdzv::PeerInfo& p : world->peers) {
    peers.push_back(absl::StrCat(
        "{\"rank\":", p.rank, ",\"local_rank\":", p.local_rank,
        ",\"host\":", JsonString(p.host), ",\"pid\":", p.pid, "}"));
  }
  std::printf(
      "%s\n",
      absl::StrCat(
          "{\"rank\":", world->rank, ",\"world_size\":", world->world_size,
          ",\"local_rank\":", world->local_rank,
          ",\"local_world_size\":", world->local_world_size,
          ",\"source\":", JsonString(std::string(world->launch.source_name())),
          ",\"init_method\":", JsonString(world->method.ToString()),
          ",\"peers\":[", absl::StrJoin(peers, ","), "]}")
          .c_str());
  return 0;
}
