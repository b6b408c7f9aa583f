#include "trainer/train_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

TEST(TrainOptionsTest, ConvNetDefaultsAreTheBooks) {
  absl::StatusOr<TrainOptions> o = ResolveDefaults(TrainOptions());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model, "convnet");
  EXPECT_EQ(o->dataset, "fashion-mnist");
  EXPECT_EQ(*o->optimizer, "adadelta");
  EXPECT_EQ(*o->lr, 0.5);
  EXPECT_EQ(*o->batch_size, 128);
  EXPECT_EQ(*o->epochs, 1);
  EXPECT_EQ(o->dist_backend, "gloo");
  EXPECT_EQ(o->dist_url, "env://");
  EXPECT_EQ(o->intra_op_threads, 1);
  EXPECT_FALSE(o->image_size.has_value());
  EXPECT_TRUE(Validate(*o).ok());
}

TEST(TrainOptionsTest, ResNetDefaultsAreTheAwsTutorials) {
  TrainOptions in;
  in.model = "resnet18";
  in.dataset = "stl10";
  in.data_dir = "/data/stl10";
  absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->optimizer, "sgd");
  EXPECT_EQ(*o->lr, 0.1);
  EXPECT_EQ(*o->momentum, 0.9);
  EXPECT_EQ(*o->weight_decay, 1e-4);
  EXPECT_EQ(*o->batch_size, 32);
  EXPECT_EQ(*o->epochs, 2);
  EXPECT_EQ(*o->image_size, 224);
  EXPECT_TRUE(Validate(*o).ok());
}

TEST(TrainOptionsTest, ExplicitValuesWin) {
  TrainOptions in;
  in.lr = 0.01;
  in.batch_size = 32;
  in.optimizer = "sgd";
  absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o->lr, 0.01);
  EXPECT_EQ(*o->batch_size, 32);
  EXPECT_EQ(*o->momentum, 0.9);  // SGD's default once SGD is chosen
}

// Each bad value fails naming its flag.
TEST(TrainOptionsTest, BadValuesNameTheirFlag) {
  struct Case {
    void (*mutate)(TrainOptions&);
    const char* flag;
  };
  const Case cases[] = {
      {[](TrainOptions& o) { o.dataset = "imagenet"; }, "--dataset"},
      {[](TrainOptions& o) { o.dataset = "stl10"; }, "--data_dir"},
      {[](TrainOptions& o) { o.batch_size = 0; }, "--batch_size"},
      {[](TrainOptions& o) { o.epochs = 0; }, "--epochs"},
      {[](TrainOptions& o) { o.lr = -1; }, "--lr"},
      {[](TrainOptions& o) { o.optimizer = "adam"; }, "--optimizer"},
      {[](TrainOptions& o) { o.momentum = 0.9; }, "--momentum"},
      {[](TrainOptions& o) { o.dist_backend = "mpi"; }, "--dist_backend"},
      {[](TrainOptions& o) { o.dist_url = "http://x"; }, "--dist_url"},
      {[](TrainOptions& o) { o.device = "tpu"; }, "--device"},
      {[](TrainOptions& o) { o.device = "cuda:x"; }, "--device"},
      {[](TrainOptions& o) { o.device = "cuda"; }, "--dist_backend"},
      {[](TrainOptions& o) { o.dist_backend = "nccl"; }, "--dist_backend"},
      {[](TrainOptions& o) { o.resume = true; }, "--resume"},
      {[](TrainOptions& o) { o.workers = -1; }, "--workers"},
      {[](TrainOptions& o) { o.intra_op_threads = 0; }, "--intra_op_threads"},
      {[](TrainOptions& o) { o.small_input_stem = true; },
       "--small_input_stem"},
      {[](TrainOptions& o) { o.timeout = absl::ZeroDuration(); }, "--timeout"},
      {[](TrainOptions& o) {
         o.dataset = "synthetic";
         o.synthetic_shape = {1, 0, 28};
       },
       "--synthetic_shape"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TrainOptions> o = ResolveDefaults(TrainOptions());
    ASSERT_TRUE(o.ok());
    c.mutate(*o);
    const absl::Status s = Validate(*o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.flag;
    EXPECT_THAT(s.message(), HasSubstr(c.flag));
  }
}

TEST(TrainOptionsTest, UnknownModelListsTheKnownOnes) {
  TrainOptions in;
  in.model = "vgg";
  absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.status().message(), HasSubstr("convnet, resnet18"));
}

TEST(TrainOptionsTest, ProgressStylesRoundTrip) {
  for (const char* name : {"auto", "bar", "lines", "none"}) {
    absl::StatusOr<ProgressStyle> s = ParseProgressStyle(name);
    ASSERT_TRUE(s.ok());
    EXPECT_STREQ(ProgressStyleName(*s), name);
  }
  EXPECT_FALSE(ParseProgressStyle("fancy").ok());
}

}  // namespace
}  // namespace dtrain::trainer
