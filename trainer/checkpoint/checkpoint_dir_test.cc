// The checkpoint directory: opening it, Save and SaveBest with the rotation,
// write failures, and Latest choosing the newest valid file.
#include "trainer/checkpoint/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/checkpoint_testing.h"

namespace dtrain::trainer {
namespace {

using ::dtrain::trainer::testing::Exists;
using ::dtrain::trainer::testing::FilesIn;
using ::dtrain::trainer::testing::MakeTempDir;
using ::dtrain::trainer::testing::SomeState;
using ::dtrain::trainer::testing::StatusIs;
using ::dtrain::trainer::testing::Tiny;
using ::dtrain::trainer::testing::TinyCheckpoint;
using ::dtrain::trainer::testing::WriteRaw;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Ne;
using ::testing::SizeIs;

TEST(CheckpointDirTest, OpenCreatesParentsAndRejectsBadArguments) {
  const std::string root = MakeTempDir();
  const std::string nested = absl::StrCat(root, "/a/b/c/");
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(nested, 3);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(dir->path(), absl::StrCat(root, "/a/b/c"));
  EXPECT_EQ(dir->keep(), 3);
  EXPECT_TRUE(Exists(dir->path()));
  EXPECT_THAT(dir->List(), IsEmpty());
  // Opening again is fine.
  EXPECT_TRUE(CheckpointDir::Open(nested).ok());

  EXPECT_EQ(CheckpointDir::Open("").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckpointDir::Open(root, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::string file = absl::StrCat(root, "/file");
  WriteRaw(file, "x");
  EXPECT_THAT(CheckpointDir::Open(file).status(),
              StatusIs(Ne(absl::StatusCode::kOk), HasSubstr(file)));
  EXPECT_THAT(CheckpointDir::Open(absl::StrCat(file, "/sub")).status(),
              StatusIs(Ne(absl::StatusCode::kOk),
                       HasSubstr(absl::StrCat(file, "/sub"))));
}

TEST(CheckpointDirTest, SaveWritesAtomicallyAndRotates) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (int64_t step : {100, 200, 300}) {
    absl::StatusOr<std::string> path =
        dir->Save(step, absl::StrCat("bytes of ", step));
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, absl::StrCat(root, "/checkpoint-000000", step, ".dtc"));
    EXPECT_EQ(*base::ReadFile(*path, base::kCheckpointFileLimit),
              absl::StrCat("bytes of ", step));
  }
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000200.dtc"),
                          absl::StrCat(root, "/checkpoint-000000300.dtc")));
  // Overwriting a step replaces its content; no temporary stays behind.
  ASSERT_TRUE(dir->Save(300, "new bytes").ok());
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000300.dtc"),
                            base::kCheckpointFileLimit),
            "new bytes");
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000200.dtc",
                                         "checkpoint-000000300.dtc"));

  // best.dtc is not a checkpoint of the rotation.
  absl::StatusOr<std::string> best = dir->SaveBest("best bytes");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, absl::StrCat(root, "/best.dtc"));
  EXPECT_EQ(*base::ReadFile(*best, base::kCheckpointFileLimit), "best bytes");
  ASSERT_TRUE(dir->Save(400, "400").ok());
  EXPECT_THAT(FilesIn(root), ElementsAre("best.dtc", "checkpoint-000000300.dtc",
                                         "checkpoint-000000400.dtc"));

  // Steps of more than nine digits sort by value.
  ASSERT_TRUE(dir->Save(1234567890, "big").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000400.dtc"),
                          absl::StrCat(root, "/checkpoint-1234567890.dtc")));
  EXPECT_EQ(dir->Save(-1, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointDirTest, KeepOneLeavesOnlyTheNewest) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 1);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(1, "a").ok());
  ASSERT_TRUE(dir->Save(2, "b").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000002.dtc")));
}

TEST(CheckpointDirTest, SaveDeletesCheckpointsOfAnAbandonedLongerRun) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, "100").ok());
  ASSERT_TRUE(dir->Save(300, "300").ok());
  // Resumed from step 100; the file written is kept even though 300 is newer.
  ASSERT_TRUE(dir->Save(200, "200").ok());
  EXPECT_THAT(dir->List(),
              ElementsAre(absl::StrCat(root, "/checkpoint-000000100.dtc"),
                          absl::StrCat(root, "/checkpoint-000000200.dtc")));
}

TEST(CheckpointDirTest, SaveDeletesStrayTemporariesOnly) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  WriteRaw(absl::StrCat(root, "/.checkpoint-000000100.dtc.123.0.tmp"), "part");
  WriteRaw(absl::StrCat(root, "/.best.dtc.123.1.tmp"), "part");
  WriteRaw(absl::StrCat(root, "/.someone-else.tmp"), "keep me");
  WriteRaw(absl::StrCat(root, "/notes.txt"), "keep me");
  ASSERT_TRUE(dir->Save(100, "100").ok());
  EXPECT_THAT(FilesIn(root),
              ElementsAre(".someone-else.tmp", "checkpoint-000000100.dtc",
                          "notes.txt"));
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc"),
                            base::kCheckpointFileLimit),
            "100");
}

TEST(CheckpointDirTest, FailedWriteNamesThePathAndLeavesNoTemporary) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, "100").ok());
  // A directory where the file should go: the rename fails (even for root).
  const std::string blocked = absl::StrCat(root, "/checkpoint-000000200.dtc");
  ASSERT_EQ(::mkdir(blocked.c_str(), 0755), 0);
  EXPECT_THAT(dir->Save(200, "200").status(),
              StatusIs(Ne(absl::StatusCode::kOk), HasSubstr(blocked)));
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000100.dtc",
                                         "checkpoint-000000200.dtc"));
  EXPECT_EQ(*base::ReadFile(absl::StrCat(root, "/checkpoint-000000100.dtc"),
                            base::kCheckpointFileLimit),
            "100");
}

TEST(CheckpointDirTest, UnwritableDirectoryNamesThePath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to read-only directories";
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 2);
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(::chmod(root.c_str(), 0555), 0);
  absl::StatusOr<std::string> saved = dir->Save(100, "100");
  ::chmod(root.c_str(), 0755);
  EXPECT_THAT(
      saved.status(),
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr(absl::StrCat(root, "/checkpoint-000000100.dtc"))));
  EXPECT_THAT(FilesIn(root), IsEmpty());
}

TEST(CheckpointDirTest, LatestSkipsInvalidNewerFiles) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 3);
  ASSERT_TRUE(dir.ok());
  EXPECT_THAT(dir->Latest().status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(root)));

  const std::string good = TinyCheckpoint(1);
  ASSERT_TRUE(dir->Save(100, good).ok());
  const std::string newer = TinyCheckpoint(2);
  ASSERT_TRUE(dir->Save(200, newer).ok());
  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000200.dtc"));
  EXPECT_EQ(latest->bytes, newer);
  EXPECT_THAT(latest->skipped, IsEmpty());

  // The newest is cut short (as by a copy that ran out of disk).
  ASSERT_TRUE(dir->Save(300, good.substr(0, good.size() - 10)).ok());
  latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000200.dtc"));
  EXPECT_EQ(latest->bytes, newer);
  ASSERT_THAT(latest->skipped, SizeIs(1));
  EXPECT_THAT(latest->skipped[0],
              HasSubstr(absl::StrCat(root,
                                     "/checkpoint-000000300.dtc: "
                                     "truncated: header says")));

  // All invalid: every file and its reason.
  std::string flipped = newer;
  flipped[kCheckpointHeaderSize + 5] ^= 1;
  WriteRaw(absl::StrCat(root, "/checkpoint-000000200.dtc"), flipped);
  WriteRaw(absl::StrCat(root, "/checkpoint-000000100.dtc"), "");
  EXPECT_THAT(
      dir->Latest().status(),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr(absl::StrCat("no valid checkpoint in ", root)),
                     HasSubstr("checkpoint-000000300.dtc: truncated"),
                     HasSubstr("checkpoint-000000200.dtc: checksum mismatch"),
                     HasSubstr("checkpoint-000000100.dtc: truncated: 0 "
                               "bytes"))));
}

TEST(CheckpointDirTest, CheckpointFromLatestDecodes) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root);
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(dir->Save(100, TinyCheckpoint(1)).ok());
  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  torch::manual_seed(9);
  Tiny model;
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  absl::StatusOr<TrainingState> state =
      DecodeCheckpoint(latest->bytes, *model, sgd, "tiny", "sgd");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, SomeState("tiny", "sgd"));
}

// A directory or FIFO named like a checkpoint is skipped with its reason at
// resume (a FIFO without blocking), and left in place by the rotation, which
// warns and goes on.
TEST(CheckpointDirTest, NonRegularFilesNamedLikeCheckpointsAreSkipped) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 1);
  ASSERT_TRUE(dir.ok());
  const std::string good = TinyCheckpoint(1);
  ASSERT_TRUE(dir->Save(100, good).ok());
  const std::string subdir = absl::StrCat(root, "/checkpoint-000000300.dtc");
  const std::string fifo = absl::StrCat(root, "/checkpoint-000000200.dtc");
  ASSERT_TRUE(std::filesystem::create_directory(subdir));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);

  absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, absl::StrCat(root, "/checkpoint-000000100.dtc"));
  EXPECT_THAT(latest->skipped,
              ElementsAre(absl::StrCat(subdir,
                                       ": a directory, not a regular "
                                       "file"),
                          absl::StrCat(fifo, ": a FIFO, not a regular file")));

  // Rotation with keep 1 would delete both: it warns instead.
  std::vector<std::string> warnings;
  absl::StatusOr<std::string> saved = dir->Save(400, good, &warnings);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_THAT(warnings,
              ElementsAre(HasSubstr(absl::StrCat(subdir, " is a directory")),
                          HasSubstr(absl::StrCat(fifo, " is a FIFO"))));
  EXPECT_THAT(FilesIn(root), ElementsAre("checkpoint-000000200.dtc",
                                         "checkpoint-000000300.dtc",
                                         "checkpoint-000000400.dtc"));
  latest = dir->Latest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->path, *saved);
}

// A stray sparse file of 3 GiB named like the newest checkpoint: its header
// is read, not its 3 GiB. Measured in a child process by its peak RSS.
TEST(CheckpointDirTest, AHugeStrayFileIsRefusedByItsHeaderAlone) {
  const std::string root = MakeTempDir();
  absl::StatusOr<CheckpointDir> dir = CheckpointDir::Open(root, 3);
  ASSERT_TRUE(dir.ok());
  const std::string good = TinyCheckpoint(1);
  const std::string zeros = absl::StrCat(root, "/checkpoint-000000099.dtc");
  const std::string lying = absl::StrCat(root, "/checkpoint-000000300.dtc");
  // A valid header whose payload is followed by 3 GiB of holes.
  WriteRaw(lying, good);
  for (const std::string& path : {zeros, lying}) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, int64_t{3} << 30), 0);
    ::close(fd);
  }
  struct rusage self;
  ASSERT_EQ(::getrusage(RUSAGE_SELF, &self), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const absl::StatusOr<CheckpointDir::Found> latest = dir->Latest();
    // Both are refused.
    const bool ok =
        !latest.ok() &&
        absl::StrContains(latest.status().message(),
                          "checkpoint-000000300.dtc: header says") &&
        absl::StrContains(latest.status().message(),
                          "checkpoint-000000099.dtc: not a dtrain checkpoint");
    if (!ok) std::fprintf(stderr, "%s\n", latest.status().ToString().c_str());
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  struct rusage children;
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &children), 0);
  // ru_maxrss is in KiB; the child starts with the parent's pages.
  EXPECT_LT(children.ru_maxrss, self.ru_maxrss + (256 << 10))
      << "the child's peak RSS grew by "
      << (children.ru_maxrss - self.ru_maxrss) / 1024 << " MiB";
}

}  // namespace
}  // namespace dtrain::trainer
