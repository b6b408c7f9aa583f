#include "trainer/checkpoint/checkpoint_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"
#include "base/status_macros.h"
#include "trainer/checkpoint/checkpoint.h"

namespace dtrain::trainer {
namespace {

constexpr absl::string_view kCheckpointPrefix = "checkpoint-";
constexpr absl::string_view kCheckpointSuffix = ".dtc";
constexpr char kBestName[] = "best.dtc";

// Deletes every file of `paths` that still exists.
absl::Status DeleteFiles(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      return base::ErrnoStatus(err, absl::StrCat("cannot delete ", path));
    }
  }
  return absl::OkStatus();
}

bool IsCheckpointName(absl::string_view name, int64_t* step) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) ||
      !absl::ConsumeSuffix(&name, kCheckpointSuffix) || name.empty()) {
    return false;
  }
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(name, step);
}

// Temporaries WriteFileAtomically leaves when its process dies while writing
// a checkpoint or best.dtc here.
bool IsStrayTemporary(absl::string_view name) {
  return base::IsAtomicWriteTemporary(name) &&
         (absl::StartsWith(name, absl::StrCat(".", kCheckpointPrefix)) ||
          absl::StartsWith(name, absl::StrCat(".", kBestName, ".")));
}

// The bytes of a checkpoint file whose header passes: a stray file of many
// gigabytes, or one whose header lies about its size, is refused after
// reading 24 bytes.
absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path) {
  DTRAIN_ASSIGN_OR_RETURN(
      base::OpenedFile file,
      base::OpenForReading(path, base::kCheckpointFileLimit));
  char header[kCheckpointHeaderSize];
  size_t got = 0;
  if (const int err =
          base::PreadFull(file.fd.get(), header, sizeof(header), 0, &got);
      err != 0) {
    return base::ErrnoStatus(err, absl::StrCat("cannot read ", path));
  }
  DTRAIN_RETURN_IF_ERROR(ValidateCheckpointHeader(
      absl::string_view(header, got), static_cast<uint64_t>(file.size)));
  // No more than the size checked above (+1 to see a file that grew).
  return base::ReadOpenedFile(
      path, file,
      base::FileLimit{"a checkpoint file of the size its header states",
                      file.size});
}

}  // namespace

absl::StatusOr<CheckpointDir> CheckpointDir::Open(std::string path, int keep) {
  if (path.empty()) {
    return absl::InvalidArgumentError("checkpoint directory: empty path");
  }
  if (keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint directory ", path, ": keep must be >= 1, not ", keep));
  }
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  // mkdir -p, one component at a time.
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string part = path.substr(0, end);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      return base::ErrnoStatus(
          err, absl::StrCat("cannot create checkpoint directory ", path,
                            ": mkdir ", part));
    }
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return base::ErrnoStatus(
        err, absl::StrCat("cannot open checkpoint directory ", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open checkpoint directory ", path, ": not a directory"));
  }
  return CheckpointDir(std::move(path), keep);
}

std::string CheckpointDir::Join(absl::string_view name) const {
  return path_ == "/" ? absl::StrCat("/", name)
                      : absl::StrCat(path_, "/", name);
}

absl::Status CheckpointDir::Scan(std::vector<Entry>* checkpoints,
                                 std::vector<std::string>* temporaries) const {
  DIR* dir = ::opendir(path_.c_str());
  if (dir == nullptr) {
    const int err = errno;
    return base::ErrnoStatus(
        err, absl::StrCat("cannot list checkpoint directory ", path_));
  }
  while (true) {
    errno = 0;
    const struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    const absl::string_view name = entry->d_name;
    int64_t step = 0;
    if (IsCheckpointName(name, &step)) {
      // Followed through symlinks: what a read would open.
      struct stat st;
      std::string not_regular;
      if (::fstatat(::dirfd(dir), entry->d_name, &st, 0) == 0 &&
          !S_ISREG(st.st_mode)) {
        not_regular = std::string(base::FileTypeName(st.st_mode));
      }
      checkpoints->push_back({step, std::string(name), std::move(not_regular)});
    } else if (temporaries != nullptr && IsStrayTemporary(name)) {
      temporaries->push_back(Join(name));
    }
  }
  const int err = errno;
  ::closedir(dir);
  if (err != 0) {
    return base::ErrnoStatus(
        err, absl::StrCat("cannot list checkpoint directory ", path_));
  }
  std::sort(checkpoints->begin(), checkpoints->end(),
            [](const Entry& a, const Entry& b) {
              return std::tie(a.step, a.name) < std::tie(b.step, b.name);
            });
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointDir::Write(absl::string_view name,
                                                 absl::string_view bytes,
                                                 std::vector<Entry>* listed) {
  const std::string path = Join(name);
  auto failed = [&path](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("cannot save checkpoint ", path,
                                               ": ", s.message()));
  };
  // Temporaries here are strays (one writer per directory). Deleting them
  // first also frees their names: WriteFileAtomically's temporary names
  // repeat when a restarted container gives the writer the same pid.
  std::vector<Entry> checkpoints;
  std::vector<std::string> temporaries;
  if (absl::Status s = Scan(&checkpoints, &temporaries); !s.ok()) {
    return failed(s);
  }
  if (absl::Status s = DeleteFiles(temporaries); !s.ok()) return failed(s);
  if (absl::Status s = base::WriteFileAtomically(path, bytes); !s.ok()) {
    return failed(s);
  }
  if (listed != nullptr) *listed = std::move(checkpoints);
  return path;
}

absl::StatusOr<std::string> CheckpointDir::Save(
    int64_t global_step, absl::string_view bytes,
    std::vector<std::string>* warnings) {
  if (global_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory ", path_,
                     ": global step must be >= 0, not ", global_step));
  }
  const std::string name = absl::StrFormat("%s%09d%s", kCheckpointPrefix,
                                           global_step, kCheckpointSuffix);
  std::vector<Entry> checkpoints;
  DTRAIN_ASSIGN_OR_RETURN(std::string written,
                          Write(name, bytes, &checkpoints));

  // The listing from before the write is current: this is the only writer.
  std::vector<std::string> doomed;
  int kept = 1;  // the file written
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    if (it->name == name) continue;
    if (!it->not_regular.empty()) {
      // Not ours to delete, and deleting it (rmdir -r?) is not rotation's
      // job: the run goes on without it.
      if (warnings != nullptr) {
        warnings->push_back(absl::StrCat(
            Join(it->name), " is ", it->not_regular,
            ", not a checkpoint file: rotation leaves it in place"));
      }
      continue;
    }
    if (it->step < global_step && kept < keep_) {
      ++kept;
      continue;
    }
    doomed.push_back(Join(it->name));
  }
  if (absl::Status s = DeleteFiles(doomed); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("wrote ", written, ", then: ", s.message()));
  }
  return written;
}

absl::StatusOr<std::string> CheckpointDir::SaveBest(absl::string_view bytes) {
  return Write(kBestName, bytes, nullptr);
}

absl::StatusOr<CheckpointDir::Found> CheckpointDir::Latest() const {
  std::vector<Entry> checkpoints;
  DTRAIN_RETURN_IF_ERROR(Scan(&checkpoints, nullptr));
  if (checkpoints.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path_, " (no ",
                                            kCheckpointPrefix, "<step>",
                                            kCheckpointSuffix, " file)"));
  }
  Found found;
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    std::string path = Join(it->name);
    if (!it->not_regular.empty()) {
      found.skipped.push_back(
          absl::StrCat(path, ": ", it->not_regular, ", not a regular file"));
      continue;
    }
    absl::StatusOr<std::string> bytes = ReadCheckpointFile(path);
    absl::Status valid =
        bytes.ok() ? ValidateCheckpointBytes(*bytes) : bytes.status();
    if (valid.ok()) {
      found.path = std::move(path);
      found.bytes = *std::move(bytes);
      return found;
    }
    found.skipped.push_back(absl::StrCat(path, ": ", valid.message()));
  }
  return absl::DataLossError(absl::StrCat("no valid checkpoint in ", path_,
                                          ": ",
                                          absl::StrJoin(found.skipped, "; ")));
}

std::vector<std::string> CheckpointDir::List() const {
  std::vector<Entry> checkpoints;
  std::vector<std::string> paths;
  if (!Scan(&checkpoints, nullptr).ok()) return paths;
  for (const Entry& entry : checkpoints) paths.push_back(Join(entry.name));
  return paths;
}

}  // namespace dtrain::trainer
