#include "trainer/report/step_log.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(StepLogPathTest, RankZeroOnlyUnlessThePathNamesTheRank) {
  EXPECT_EQ(StepLogPath("/tmp/log.jsonl", 0), "/tmp/log.jsonl");
  EXPECT_EQ(StepLogPath("/tmp/log.jsonl", 1), "");
  EXPECT_EQ(StepLogPath("/tmp/log.{rank}.jsonl", 0), "/tmp/log.0.jsonl");
  EXPECT_EQ(StepLogPath("/tmp/{rank}/log.{rank}.jsonl", 12),
            "/tmp/12/log.12.jsonl");
  EXPECT_EQ(StepLogPath("", 0), "");
}

TEST(StepLogTest, EachWriteIsOneParsableLine) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/steps.jsonl");
  std::remove(path.c_str());
  absl::StatusOr<std::unique_ptr<StepLog>> log = StepLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  StepLogLine line;
  line.time = 1795600000.5;
  line.rank = 1;
  line.epoch = 2;
  line.step = 11;
  line.batch = 10;
  line.loss = 0.4125;
  line.lr = 0.5;
  line.samples_per_second = 1210.5;
  line.step_seconds = 0.098;
  line.exposed_communication_seconds = 0.004;
  ASSERT_TRUE((*log)->Write(line).ok());
  // Written through at once: a reader (tail -f) sees the whole line.
  EXPECT_EQ(Lines(path).size(), 1u);
  line.event = "epoch";
  line.loss = std::numeric_limits<double>::infinity();
  ASSERT_TRUE((*log)->Write(line).ok());

  const std::string text = ReadAll(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json step = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(step["event"], "step");
  EXPECT_DOUBLE_EQ(step["time"].get<double>(), 1795600000.5);
  EXPECT_EQ(step["rank"], 1);
  EXPECT_EQ(step["epoch"], 2);
  EXPECT_EQ(step["step"], 11);
  EXPECT_EQ(step["batch"], 10);
  EXPECT_DOUBLE_EQ(step["loss"].get<double>(), 0.4125);
  EXPECT_DOUBLE_EQ(step["lr"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(step["samples_per_second"].get<double>(), 1210.5);
  EXPECT_DOUBLE_EQ(step["step_seconds"].get<double>(), 0.098);
  EXPECT_DOUBLE_EQ(step["exposed_communication_seconds"].get<double>(), 0.004);
  const nlohmann::json epoch = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(epoch["event"], "epoch");
  EXPECT_TRUE(epoch["loss"].is_null());
}

TEST(StepLogTest, AReopenedLogIsAppendedTo) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/again.jsonl");
  std::remove(path.c_str());
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<std::unique_ptr<StepLog>> log = StepLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    StepLogLine line;
    line.step = run;
    ASSERT_TRUE((*log)->Write(line).ok());
  }
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1])["step"], 1);
}

TEST(StepLogTest, AnUnwritablePathIsNamed) {
  absl::StatusOr<std::unique_ptr<StepLog>> log =
      StepLog::Open("/nonexistent/dir/steps.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(
      log.status().message(),
      HasSubstr("--log_jsonl: cannot open /nonexistent/dir/steps.jsonl"));
}

}  // namespace
}  // namespace dtrain::trainer
