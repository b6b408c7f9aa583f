#include "trainer/train_options.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/machine_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrain::trainer {
namespace {

using ::testing::HasSubstr;

TEST(TrainOptionsTest, ConvNetDefaultsAreTheBooks) {
  absl::StatusOr<TrainOptions> o = ResolveDefaults(TrainOptions());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->model.name, "convnet");
  EXPECT_EQ(o->data.dataset, "fashion-mnist");
  EXPECT_EQ(*o->optim.optimizer, "adadelta");
  EXPECT_EQ(*o->optim.lr, 0.5);
  EXPECT_EQ(*o->data.batch_size, 128);
  EXPECT_EQ(*o->optim.epochs, 1);
  EXPECT_EQ(o->launch.dist_backend, "gloo");
  EXPECT_TRUE(o->launch.shm);
  EXPECT_EQ(o->launch.dist_url, "env://");
  EXPECT_EQ(o->launch.intra_op_threads, 1);
  EXPECT_FALSE(o->data.image_size.has_value());
  EXPECT_TRUE(Validate(*o).ok());
}

TEST(TrainOptionsTest, ResNetDefaultsAreTheAwsTutorials) {
  TrainOptions in;
  in.model.name = "resnet18";
  in.data.dataset = "stl10";
  in.data.data_dir = "/data/stl10";
  absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o->optim.optimizer, "sgd");
  EXPECT_EQ(*o->optim.lr, 0.1);
  EXPECT_EQ(*o->optim.momentum, 0.9);
  EXPECT_EQ(*o->optim.weight_decay, 1e-4);
  EXPECT_EQ(*o->data.batch_size, 32);
  EXPECT_EQ(*o->optim.epochs, 2);
  EXPECT_EQ(*o->data.image_size, 224);
  EXPECT_TRUE(Validate(*o).ok());
}

TEST(TrainOptionsTest, ExplicitValuesWin) {
  TrainOptions in;
  in.optim.lr = 0.01;
  in.data.batch_size = 32;
  in.optim.optimizer = "sgd";
  absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o->optim.lr, 0.01);
  EXPECT_EQ(*o->data.batch_size, 32);
  EXPECT_EQ(*o->optim.momentum, 0.9);  // SGD's default once SGD is chosen
}

// Adam and AdamW take PyTorch's defaults (AdamW's weight decay 0.01) and
// refuse a momentum, which their betas stand for.
TEST(TrainOptionsTest, AdamAndAdamWDefaultsArePyTorchs) {
  for (const char* name : {"adam", "adamw"}) {
    TrainOptions in;
    in.optim.optimizer = name;
    absl::StatusOr<TrainOptions> o = ResolveDefaults(in);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(*o->optim.lr, 1e-3) << name;
    EXPECT_EQ(*o->optim.momentum, 0.0) << name;
    EXPECT_EQ(*o->optim.weight_decay,
              std::string(name) == "adamw" ? 1e-2 : 0.0);
    EXPECT_TRUE(Validate(*o).ok()) << name;
    o->optim.momentum = 0.9;
    EXPECT_THAT(std::string(Validate(*o).message()), HasSubstr("--momentum: "))
        << name;
  }
}

// Each bad value fails naming its flag.
TEST(TrainOptionsTest, BadValuesNameTheirFlag) {
  struct Case {
    void (*mutate)(TrainOptions&);
    const char* flag;
  };
  const Case cases[] = {
      {[](TrainOptions& o) { o.data.dataset = "imagenet"; }, "--dataset"},
      {[](TrainOptions& o) { o.data.dataset = "stl10"; }, "--data_dir"},
      {[](TrainOptions& o) { o.data.batch_size = 0; }, "--batch_size"},
      {[](TrainOptions& o) { o.optim.epochs = 0; }, "--epochs"},
      {[](TrainOptions& o) { o.optim.lr = -1; }, "--lr"},
      {[](TrainOptions& o) { o.optim.optimizer = "rmsprop"; }, "--optimizer"},
      {[](TrainOptions& o) { o.optim.momentum = 0.9; }, "--momentum"},
      {[](TrainOptions& o) { o.launch.dist_backend = "mpi"; },
       "--dist_backend"},
      {[](TrainOptions& o) {
         o.launch.dist_backend = "shm";
         o.launch.shm = false;
       },
       "--shm"},
      {[](TrainOptions& o) { o.launch.dist_url = "http://x"; }, "--dist_url"},
      {[](TrainOptions& o) { o.checkpoint.save_state_dict = "w.ckpt"; },
       "--save_state_dict"},
      {[](TrainOptions& o) { o.model.init_state_dict = "w.bin"; },
       "--init_state_dict"},
      {[](TrainOptions& o) { o.model.init_state_dict_exclude = {"fc"}; },
       "--init_state_dict_exclude: needs --init_state_dict"},
      {[](TrainOptions& o) { o.model.init_state_dict_strict = false; },
       "--init_state_dict_strict: needs --init_state_dict"},
      {[](TrainOptions& o) { o.checkpoint.state_dict_with_checkpoints = true; },
       "--state_dict_with_checkpoints"},
      {[](TrainOptions& o) { o.launch.device = "tpu"; }, "--device"},
      {[](TrainOptions& o) { o.launch.device = "cuda:x"; }, "--device"},
      {[](TrainOptions& o) { o.launch.device = "cuda"; }, "--dist_backend"},
      {[](TrainOptions& o) { o.launch.dist_backend = "nccl"; },
       "--dist_backend"},
      {[](TrainOptions& o) { o.checkpoint.resume = true; }, "--resume"},
      {[](TrainOptions& o) { o.data.workers = -1; }, "--workers"},
      {[](TrainOptions& o) { o.launch.intra_op_threads = 0; },
       "--intra_op_threads"},
      {[](TrainOptions& o) { o.model.small_input_stem = true; },
       "--small_input_stem"},
      {[](TrainOptions& o) { o.launch.timeout = absl::ZeroDuration(); },
       "--timeout"},
      {[](TrainOptions& o) {
         o.parallel.sync_batchnorm = true;
         o.parallel.sync_gradients = false;
       },
       "--sync_batchnorm"},
      {[](TrainOptions& o) {
         o.data.dataset = "synthetic";
         o.data.synthetic_shape = {1, 0, 28};
       },
       "--synthetic_shape"},
      {[](TrainOptions& o) { o.report.metrics_port = 65536; },
       "--metrics_port"},
      {[](TrainOptions& o) { o.report.metrics_port = -2; }, "--metrics_port"},
      {[](TrainOptions& o) { o.report.metrics_ranks = "1"; },
       "--metrics_ranks"},
      {[](TrainOptions& o) { o.report.metrics_bind = ""; }, "--metrics_bind"},
      {[](TrainOptions& o) { o.parallel.comm_hook = "topk"; }, "--comm_hook"},
      {[](TrainOptions& o) {
         o.data.even_batches = false;
         o.optim.accumulate_steps = 2;
       },
       "--even_batches"},
      {[](TrainOptions& o) {
         o.data.even_batches = false;
         o.parallel.comm_hook = "local_sgd";
       },
       "--even_batches"},
      {[](TrainOptions& o) {
         o.parallel.comm_hook = "fp16";
         o.parallel.sync_gradients = false;
       },
       "--comm_hook"},
      {[](TrainOptions& o) { o.parallel.powersgd_rank = 0; },
       "--powersgd_rank"},
      {[](TrainOptions& o) { o.parallel.powersgd_min_compression_rate = 0.5; },
       "--powersgd_min_compression_rate"},
      {[](TrainOptions& o) {
         o.parallel.comm_hook = "powersgd";
         o.parallel.powersgd_start_step = 1;
       },
       "--powersgd_start_step"},
      {[](TrainOptions& o) { o.parallel.powersgd_seed = int64_t{1} << 32; },
       "--powersgd_seed"},
      {[](TrainOptions& o) { o.parallel.local_sgd_period = 0; },
       "--local_sgd_period"},
      {[](TrainOptions& o) { o.parallel.local_sgd_start_step = -1; },
       "--local_sgd_start_step"},
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

// Issue #29: thread, size and batch knobs beyond what the machine holds are
// refused naming the flag, the value, the bound and why, before anything
// starts (100,000 workers aborted on std::system_error, 100,000 intra-op
// threads hung, --bucket_cap_mb=1e300 overflowed its conversion).
TEST(TrainOptionsTest, KnobsBeyondTheMachineAreRefused) {
  const base::Limit threads = base::ThreadLimit();
  struct Case {
    std::function<void(TrainOptions&)> mutate;
    std::string message;
  };
  const Case cases[] = {
      {[](TrainOptions& o) { o.data.workers = 100000; },
       absl::StrCat("--workers=100000: at most ", threads.max, " (",
                    threads.why, ")")},
      {[](TrainOptions& o) { o.launch.intra_op_threads = 100000; },
       absl::StrCat("--intra_op_threads=100000: at most ", threads.max, " (",
                    threads.why, ")")},
      {[](TrainOptions& o) { o.data.batch_size = int64_t{1} << 40; },
       "--batch_size=1099511627776: at most 1048576"},
      {[](TrainOptions& o) { o.optim.accumulate_steps = int64_t{1} << 62; },
       "--accumulate_steps=4611686018427387904: at most"},
      {[](TrainOptions& o) { o.parallel.bucket_cap_mb = 1e300; },
       "--bucket_cap_mb=1e+300: at most"},
      {[](TrainOptions& o) { o.parallel.bucket_cap_mb = std::nan(""); },
       "--bucket_cap_mb=nan: must be a finite number > 0"},
      {[](TrainOptions& o) {
         o.parallel.bucket_cap_mb = std::numeric_limits<double>::infinity();
       },
       "--bucket_cap_mb=inf: must be a finite number > 0"},
      {[](TrainOptions& o) {
         o.data.dataset = "synthetic";
         o.data.synthetic_train_size = int64_t{1} << 40;
       },
       "--synthetic_train_size: 1099511627776 + 512 examples of 1x28x28"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TrainOptions> o = ResolveDefaults(TrainOptions());
    ASSERT_TRUE(o.ok());
    c.mutate(*o);
    const absl::Status s = Validate(*o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
}

// The bounds are generous: what a user oversubscribing the cores asks for
// passes.
TEST(TrainOptionsTest, OversubscriptionWithinTheBoundsPasses) {
  absl::StatusOr<TrainOptions> o = ResolveDefaults(TrainOptions());
  ASSERT_TRUE(o.ok());
  o->data.workers = static_cast<int>(base::ThreadLimit().max);
  o->launch.intra_op_threads = static_cast<int>(base::ThreadLimit().max);
  o->data.batch_size = 4096;
  o->parallel.bucket_cap_mb = 64;
  EXPECT_TRUE(Validate(*o).ok()) << Validate(*o);
}

TEST(TrainOptionsTest, UnknownModelListsTheKnownOnes) {
  TrainOptions in;
  in.model.name = "vgg";
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
