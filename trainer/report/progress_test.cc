#include "trainer/report/progress.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Meters {
  AverageMeter time, data, loss, top1, top5;
  BatchReport Report(int64_t batch) {
    time.Update(0.05);
    data.Update(0.001);
    loss.Update(0.5);
    top1.Update(80);
    top5.Update(99);
    BatchReport r;
    r.batch = batch;
    r.batch_time = &time;
    r.data_time = &data;
    r.loss = &loss;
    r.top1 = &top1;
    r.top5 = &top5;
    r.samples_per_second = 12345.4;
    return r;
  }
};

int CountLines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(ProgressTest, LinesEveryPrintFreqBatchesAndTheLast) {
  std::ostringstream out;
  ProgressPrinter p(ProgressStyle::kAuto, /*is_terminal=*/false, 10, out);
  EXPECT_EQ(p.style(), ProgressStyle::kLines);
  Meters m;
  p.StartEpoch(0, 1, 25);
  for (int b = 0; b < 25; ++b) p.Batch(m.Report(b));
  p.EndEpoch();
  // Batches 0, 10, 20 and the last (24).
  EXPECT_EQ(CountLines(out.str()), 4);
  EXPECT_THAT(out.str(), HasSubstr("Epoch: [0][10/25]"));
  EXPECT_THAT(out.str(), HasSubstr("Prec@1 80.000"));
  EXPECT_THAT(out.str(), HasSubstr("12,345 samples/s"));
  EXPECT_THAT(out.str(), Not(HasSubstr("\r")));
}

TEST(ProgressTest, BarRedrawsInPlaceAndMessagesGetTheirOwnLine) {
  std::ostringstream out;
  ProgressPrinter p(ProgressStyle::kAuto, /*is_terminal=*/true, 10, out);
  EXPECT_EQ(p.style(), ProgressStyle::kBar);
  Meters m;
  p.StartEpoch(1, 3, 4);
  p.Batch(m.Report(0));
  p.Message("hello");
  p.Batch(m.Report(3));
  p.EndEpoch();
  const std::string s = out.str();
  EXPECT_THAT(s, HasSubstr("\repoch 2/3 ["));
  EXPECT_THAT(s, HasSubstr("ETA"));
  EXPECT_THAT(s, HasSubstr("took"));  // the last batch shows the epoch time
  EXPECT_THAT(s, HasSubstr("4/4"));
  EXPECT_THAT(s, HasSubstr("\r\x1b[Khello\n"));
  EXPECT_EQ(s.back(), '\n');
}

TEST(ProgressTest, NoneShowsOnlyMessages) {
  std::ostringstream out;
  ProgressPrinter p(ProgressStyle::kNone, true, 1, out);
  Meters m;
  p.StartEpoch(0, 1, 2);
  p.Batch(m.Report(0));
  p.Message("resumed");
  p.EndEpoch();
  EXPECT_EQ(out.str(), "resumed\n");
}

TEST(ProgressTest, ClockFormats) {
  EXPECT_EQ(FormatClock(absl::Seconds(5)), "0:05");
  EXPECT_EQ(FormatClock(absl::Seconds(125)), "2:05");
  EXPECT_EQ(FormatClock(absl::Seconds(3723)), "1:02:03");
  EXPECT_EQ(FormatClock(-absl::Seconds(3)), "0:00");
}

}  // namespace
}  // namespace dtrain::trainer
