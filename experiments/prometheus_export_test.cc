#include "experiments/prometheus_export.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"

namespace dtrain::experiments {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ResultRow Row(int world_size) {
  ResultRow r;
  r.implementation = "dtrain";
  r.backend = "gloo";
  r.model = "convnet";
  r.world_size = world_size;
  r.batch_size = 128 / world_size;
  r.runs = 1;
  r.epoch_seconds = 10;
  r.samples_per_second = 6000;
  r.speedup = world_size * 0.9;
  r.efficiency = 0.9;
  r.communication_efficiency = 0.95;
  r.bound_epoch_seconds = 9.5;
  r.step_histogram = {0, 0, 0, 0, 5, 3, 0, 0, 0, 0, 0, 0, 0, 1};
  r.step_seconds_sum = 12.5;
  return r;
}

TEST(PrometheusExportTest, SeriesCarryTheConfigurationLabels) {
  ScalingMetrics metrics("r1");
  metrics.Update({Row(1), Row(2)});
  const std::string text = ExpositionText(metrics);
  EXPECT_THAT(text, HasSubstr("# TYPE ddp_speedup_ratio gauge"));
  EXPECT_THAT(text,
              HasSubstr("ddp_speedup_ratio{backend=\"gloo\",batch_size=\"64\","
                        "comm_hook=\"allreduce\",implementation=\"dtrain\","
                        "model=\"convnet\",run_id=\"r1\",world_size=\"2\","
                        "zero=\"0\"} 1.8"));
  EXPECT_THAT(text, HasSubstr("# TYPE ddp_step_duration_seconds histogram"));
  // Cumulative buckets: 5 steps <= 25 ms, 8 <= 50 ms, all 9 at +Inf.
  EXPECT_THAT(text, HasSubstr("le=\"0.025\"} 5"));
  EXPECT_THAT(text, HasSubstr("le=\"0.05\"} 8"));
  EXPECT_THAT(text, HasSubstr("le=\"+Inf\"} 9"));
  EXPECT_THAT(text, HasSubstr("ddp_step_duration_seconds_sum{"));
  EXPECT_THAT(text, HasSubstr("# TYPE ddp_runs_total counter"));
  EXPECT_THAT(text, HasSubstr("ddp_no_communication_epoch_duration_seconds{"));
  // What communication adds to a step, where the row has it.
  EXPECT_THAT(text, Not(HasSubstr("ddp_step_communication_seconds{")));
  ResultRow fp16 = Row(2);
  fp16.comm_hook = "fp16";
  fp16.communication_seconds_per_step = 0.004;
  metrics.Update({Row(2), fp16});
  EXPECT_THAT(ExpositionText(metrics),
              HasSubstr("ddp_step_communication_seconds{backend=\"gloo\","
                        "batch_size=\"64\",comm_hook=\"fp16\","
                        "implementation=\"dtrain\",model=\"convnet\","
                        "run_id=\"r1\",world_size=\"2\",zero=\"0\"} 0.004"));
  // A ZeRO stage is a label of its own.
  ResultRow zero = Row(2);
  zero.zero = 1;
  metrics.Update({Row(2), zero});
  EXPECT_THAT(ExpositionText(metrics),
              HasSubstr("ddp_speedup_ratio{backend=\"gloo\",batch_size=\"64\","
                        "comm_hook=\"allreduce\",implementation=\"dtrain\","
                        "model=\"convnet\",run_id=\"r1\",world_size=\"2\","
                        "zero=\"1\"} 1.8"));
  // An instrumentation other than the default is labelled; the default's
  // series keep the labels above.
  ResultRow traced = Row(2);
  traced.instrumentation = "trace";
  traced.speedup = 1.7;
  metrics.Update({Row(2), traced});
  EXPECT_THAT(ExpositionText(metrics),
              HasSubstr("ddp_speedup_ratio{backend=\"gloo\",batch_size=\"64\","
                        "comm_hook=\"allreduce\",implementation=\"dtrain\","
                        "instrumentation=\"trace\",model=\"convnet\","
                        "run_id=\"r1\",world_size=\"2\",zero=\"0\"} 1.7"));
}

TEST(PrometheusExportTest, UpdateReplacesEverySeries) {
  ScalingMetrics metrics("r2");
  std::shared_ptr<prometheus::Collectable> exposed = metrics.collectable();
  metrics.Update({Row(1), Row(2)});
  metrics.Update({Row(4)});
  const std::string text = ExpositionText(metrics);
  EXPECT_THAT(text, HasSubstr("world_size=\"4\""));
  EXPECT_THAT(text, Not(HasSubstr("world_size=\"2\"")));
  // What an Exposer registered before the updates sees the latest too.
  EXPECT_EQ(exposed->Collect().size(), metrics.collectable()->Collect().size());
}

TEST(PrometheusExportTest, BadGatewayAddressIsRejected) {
  ScalingMetrics metrics("r3");
  EXPECT_EQ(PushToGateway(metrics, "nohostport").code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing listens on port 1.
  EXPECT_EQ(PushToGateway(metrics, "127.0.0.1:1").code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dtrain::experiments
