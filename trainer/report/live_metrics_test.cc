#include "trainer/report/live_metrics.h"

#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Labels = std::map<std::string, std::string>;

std::string Text(const LiveMetrics& m) {
  return prometheus::TextSerializer().Serialize(m.collectable()->Collect());
}

StepSample Step(double seconds, int64_t samples, double loss,
                int64_t global_step) {
  StepSample s;
  s.step_seconds = seconds;
  s.data_wait_seconds = 0.5;
  s.exposed_communication_seconds = 0.25;
  s.samples = samples;
  s.loss = loss;
  s.samples_per_second = 100;
  s.global_step = global_step;
  return s;
}

TEST(LiveMetricsTest, StepsAreCountedAndTheLastValuesKept) {
  LiveMetrics m({{"rank", "3"}, {"model", "convnet"}});
  m.SetEpoch(2, 0.05);
  m.RecordStep(Step(0.02, 16, 2.5, 41));   // <= 0.025
  m.RecordStep(Step(0.04, 16, 2.25, 42));  // <= 0.05
  m.RecordStep(Step(20, 8, 2.0, 43));      // above every bound
  const std::string text = Text(m);
  const std::string labels = "{model=\"convnet\",rank=\"3\"}";
  EXPECT_THAT(text, HasSubstr("dtrain_train_steps_total" + labels + " 3\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_samples_total" + labels + " 40\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_loss" + labels + " 2\n"));
  EXPECT_THAT(text,
              HasSubstr("dtrain_train_learning_rate" + labels + " 0.05\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_epoch" + labels + " 2\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_global_step" + labels + " 43\n"));
  EXPECT_THAT(text,
              HasSubstr("dtrain_train_samples_per_second" + labels + " 100\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_data_wait_seconds_total" + labels +
                              " 1.5\n"));
  EXPECT_THAT(text,
              HasSubstr("dtrain_train_exposed_communication_seconds_total" +
                        labels + " 0.75\n"));
  // Cumulative buckets over the step-time bounds of the metrics JSON.
  EXPECT_THAT(text, HasSubstr("# TYPE dtrain_train_step_duration_seconds "
                              "histogram"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_step_duration_seconds_bucket{model="
                              "\"convnet\",rank=\"3\",le=\"0.01\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("le=\"0.025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("le=\"0.05\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("le=\"10\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("le=\"+Inf\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_step_duration_seconds_count" +
                              labels + " 3\n"));
  EXPECT_THAT(text, HasSubstr("dtrain_train_step_duration_seconds_sum" +
                              labels + " 20.06"));
}

TEST(LiveMetricsTest, EverySeriesCarriesTheLabels) {
  LiveMetrics m({{"rank", "1"}, {"run_id", "r7"}});
  m.RecordStep(Step(0.01, 4, 1, 1));
  int series = 0;
  for (const prometheus::MetricFamily& family : m.collectable()->Collect()) {
    EXPECT_EQ(family.name.rfind("dtrain_train_", 0), 0u) << family.name;
    for (const prometheus::ClientMetric& metric : family.metric) {
      ++series;
      std::map<std::string, std::string> labels;
      for (const auto& l : metric.label) labels[l.name] = l.value;
      EXPECT_EQ(labels["rank"], "1") << family.name;
      EXPECT_EQ(labels["run_id"], "r7") << family.name;
    }
  }
  EXPECT_EQ(series, 10);
}

TEST(LiveMetricsTest, NegativeOrNonFiniteTimesDoNotCorruptCounters) {
  LiveMetrics m(Labels{{"rank", "0"}});
  StepSample s = Step(0.01, 4, 1, 1);
  s.data_wait_seconds = -1;
  s.exposed_communication_seconds = std::numeric_limits<double>::quiet_NaN();
  m.RecordStep(s);
  const std::string text = Text(m);
  EXPECT_THAT(text, HasSubstr("dtrain_train_data_wait_seconds_total{rank=\"0\"}"
                              " 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("_total{rank=\"0\"} Nan")));
  EXPECT_THAT(text, Not(HasSubstr("_total{rank=\"0\"} nan")));
}

TEST(LiveMetricsTest, CollectingWhileRecordingIsSafe) {
  LiveMetrics m(Labels{{"rank", "0"}});
  std::thread scraper([&] {
    for (int i = 0; i < 200; ++i) Text(m);
  });
  for (int i = 0; i < 2000; ++i) m.RecordStep(Step(0.001, 1, 1, i + 1));
  scraper.join();
  EXPECT_THAT(Text(m),
              HasSubstr("dtrain_train_steps_total{rank=\"0\"} 2000\n"));
}

}  // namespace
}  // namespace dtrain::trainer
