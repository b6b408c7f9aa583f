// prometheus-cpp smoke test: a registry with a counter and a histogram
// serializes to the text format.

#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace {

using ::testing::HasSubstr;

TEST(PrometheusSmokeTest, RegistrySerializesToTextFormat) {
  prometheus::Registry registry;
  auto& steps = prometheus::BuildCounter()
                    .Name("smoke_steps_total")
                    .Help("Steps taken.")
                    .Register(registry);
  steps.Add({{"backend", "gloo"}}).Increment(3);
  auto& durations = prometheus::BuildHistogram()
                        .Name("smoke_step_duration_seconds")
                        .Help("Step durations.")
                        .Register(registry);
  durations.Add({}, prometheus::Histogram::BucketBoundaries{0.1, 1.0})
      .Observe(0.5);

  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("# TYPE smoke_steps_total counter"));
  EXPECT_THAT(text, HasSubstr("smoke_steps_total{backend=\"gloo\"} 3"));
  EXPECT_THAT(text,
              HasSubstr("smoke_step_duration_seconds_bucket{le=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("smoke_step_duration_seconds_count 1"));
}

TEST(PrometheusSmokeTest, ExposerServesOnAnEphemeralPort) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("smoke_served_total")
      .Help("Served.")
      .Register(*registry)
      .Add({})
      .Increment();
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  ASSERT_EQ(exposer.GetListeningPorts().size(), 1u);
  EXPECT_GT(exposer.GetListeningPorts()[0], 0);
}

}  // namespace
