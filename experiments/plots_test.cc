#include "experiments/plots.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

RunRecord Record(const std::string& impl, const std::string& backend,
                 int world_size, bool sync, double samples_per_second,
                 int repeat = 0) {
  RunRecord r;
  r.config.implementation = impl;
  r.config.backend = backend;
  r.config.model = "convnet";
  r.config.world_size = world_size;
  r.config.batch_size = 128 / world_size;
  r.config.sync_gradients = sync;
  r.config.repeat = repeat;
  r.ok = true;
  r.samples = 60000;
  r.samples_per_second = samples_per_second;
  r.epoch_seconds = 60000 / samples_per_second;
  return r;
}

// The default sweep's shape with --reference=pytorch: both of our backends
// and PyTorch's gloo at 1, 2 and 4 processes.
std::vector<RunRecord> Sweep(int repeats) {
  std::vector<RunRecord> out;
  for (int r = 0; r < repeats; ++r) {
    const double noise = 1 + 0.05 * r;
    for (const auto& [impl, backend, one] :
         {std::tuple<std::string, std::string, double>{"dtrain", "gloo", 2500},
          {"dtrain", "gloo+shm", 2600},
          {"pytorch", "gloo", 3500}}) {
      out.push_back(Record(impl, backend, 1, true, one * noise, r));
      out.push_back(Record(impl, backend, 2, true, one * 1.6 * noise, r));
      out.push_back(Record(impl, backend, 2, false, one * 1.8 * noise, r));
      out.push_back(Record(impl, backend, 4, true, one * 1.3 * noise, r));
      out.push_back(Record(impl, backend, 4, false, one * 1.5 * noise, r));
    }
  }
  return out;
}

TEST(PlotsTest, ScriptDrawsEveryLineWithBarsAndTheCoresMarker) {
  PlotSpec spec;
  spec.title = "convnet: \"every\" one\nsecond line";
  spec.png_path = "/tmp/x.png";
  spec.lines = {{"dtrain gloo", "/d/a.dat"}, {"pytorch gloo", "/d/b.dat"}};
  std::string s = GnuplotScript(spec);
  EXPECT_THAT(s, HasSubstr("title \"convnet: \\\"every\\\" one\\nsecond "
                           "line\""));
  EXPECT_THAT(s, HasSubstr("\"/d/a.dat\" using 1:2 title \"dtrain gloo\""));
  EXPECT_THAT(s, HasSubstr("\"/d/b.dat\" using 1:5 title \"pytorch gloo\""));
  EXPECT_THAT(s, HasSubstr("\"/d/b.dat\" using 1:8 title \"pytorch gloo\""));
  EXPECT_THAT(s, Not(HasSubstr("yerrorlines")));
  EXPECT_THAT(s, Not(HasSubstr("set arrow")));
  EXPECT_THAT(s, HasSubstr("noenhanced"));  // '_' is not a subscript

  spec.error_bars = true;
  spec.cores_marker = 2;
  spec.cores_per_node = 2;
  s = GnuplotScript(spec);
  EXPECT_THAT(s, HasSubstr("using 1:2:3:4 title \"dtrain gloo\" with "
                           "yerrorlines"));
  EXPECT_THAT(s, HasSubstr("using 1:5:6:7 title \"pytorch gloo\" with "
                           "yerrorlines"));
  EXPECT_THAT(s, HasSubstr("set arrow from 2.5, graph 0 to 2.5, graph 1"));
  EXPECT_THAT(s, HasSubstr("set label \"> 2 cores\" at 2.5"));
}

bool HaveGnuplot() { return ::access("/usr/bin/gnuplot", X_OK) == 0; }

TEST(PlotsTest, ComparisonSetsEveryBackendAndImplementationSideBySide) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot (gnuplot-nox) not installed";
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/single";
  const std::vector<ResultRow> rows = Summarize(Sweep(1));
  absl::StatusOr<std::vector<std::string>> pngs =
      WritePlots(rows, Machine{2, "AMD EPYC", 1}, dir);
  ASSERT_TRUE(pngs.ok()) << pngs.status();
  ASSERT_EQ(pngs->size(), 3u);
  EXPECT_EQ((*pngs)[0], dir + "/compare_convnet.png");
  EXPECT_EQ((*pngs)[1], dir + "/gloo_convnet.png");
  EXPECT_EQ((*pngs)[2], dir + "/gloo+shm_convnet.png");
  for (const std::string& png : *pngs)
    EXPECT_EQ(ReadAll(png).substr(1, 3), "PNG") << png;

  const std::string script = ReadAll(dir + "/compare_convnet.gp");
  for (const char* line : {"dtrain gloo", "dtrain gloo+shm", "pytorch gloo"})
    EXPECT_THAT(script, HasSubstr(absl::StrCat("title \"", line, "\"")));
  // The baseline, the machine and the repeats in the title; the cores
  // marked.
  EXPECT_THAT(script, HasSubstr("speedup over pytorch's one-process 3500 "
                                "samples/s"));
  EXPECT_THAT(script, HasSubstr("2 cores (AMD EPYC)"));
  EXPECT_THAT(script, HasSubstr("single run per point (--repeats=1)"));
  EXPECT_THAT(script, HasSubstr("\"> 2 cores\""));
  EXPECT_THAT(script, Not(HasSubstr("yerrorlines")));
  // A backend's plot holds only its implementations.
  const std::string shm = ReadAll(dir + "/gloo+shm_convnet.gp");
  EXPECT_THAT(shm, HasSubstr("title \"dtrain\""));
  EXPECT_THAT(shm, Not(HasSubstr("title \"pytorch\"")));
  // dtrain gloo at 2 processes: 1.6 x 2500 over PyTorch's 3500.
  EXPECT_THAT(ReadAll(dir + "/gloo_convnet_dtrain.dat"),
              HasSubstr("\n2 1.1429 1.1429 1.1429 57.14 57.14 57.14 88.89\n"));
}

// A hook other than the default is a line of its own, beside the same
// implementation and backend with plain averaging.
TEST(PlotsTest, EveryHookIsALineOfItsOwn) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot (gnuplot-nox) not installed";
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/hooks";
  std::vector<RunRecord> records;
  for (const char* hook : {"allreduce", "fp16"}) {
    for (int n : {1, 2}) {
      records.push_back(Record("dtrain", "gloo", n, true, 2500 * n));
      records.back().config.comm_hook = hook;
    }
  }
  absl::StatusOr<std::vector<std::string>> pngs =
      WritePlots(Summarize(records), Machine{2, "", 1}, dir);
  ASSERT_TRUE(pngs.ok()) << pngs.status();
  const std::string script = ReadAll(dir + "/compare_convnet.gp");
  EXPECT_THAT(script, HasSubstr("title \"dtrain gloo\""));
  EXPECT_THAT(script, HasSubstr("title \"dtrain gloo fp16\""));
  EXPECT_THAT(ReadAll(dir + "/gloo_convnet.gp"),
              HasSubstr("title \"dtrain fp16\""));
  // Each line has one point per process count.
  EXPECT_EQ(ReadAll(dir + "/gloo_convnet_dtrain_fp16.dat"),
            ReadAll(dir + "/gloo_convnet_dtrain.dat"));
}

TEST(PlotsTest, RepeatsDrawTheSpreadAsBars) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot (gnuplot-nox) not installed";
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/three";
  absl::StatusOr<std::vector<std::string>> pngs =
      WritePlots(Summarize(Sweep(3)), Machine{8, "", 1}, dir);
  ASSERT_TRUE(pngs.ok()) << pngs.status();
  const std::string script = ReadAll(dir + "/compare_convnet.gp");
  EXPECT_THAT(script, HasSubstr("median of up to 3 runs per point, bars: min "
                                "to max"));
  EXPECT_THAT(script, HasSubstr("yerrorlines"));
  EXPECT_THAT(script, Not(HasSubstr("set arrow")));  // 8 cores
}

}  // namespace
}  // namespace dtrain::experiments
