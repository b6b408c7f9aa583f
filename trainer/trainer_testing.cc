#include "trainer/trainer_testing.h"

#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dist/backend/backend_testing.h"
#include "dist/backend/gloo/gloo_backend.h"
#include "gtest/gtest.h"

namespace dtrain::trainer::testing {

absl::StatusOr<std::unique_ptr<backend::Backend>> Gloo(
    int rank, int world_size, std::shared_ptr<store::Store> store) {
  backend::Membership group;
  group.rank = rank;
  group.world_size = world_size;
  group.store = std::move(store);
  group.timeout = absl::Seconds(60);
  backend::GlooBackendOptions o;
  o.hostname = "127.0.0.1";
  return backend::CreateGlooBackend(group, o);
}

TrainOptions SmallRun() {
  TrainOptions o;
  o.data.dataset = "synthetic";
  o.data.synthetic_train_size = 384;
  o.data.synthetic_val_size =
      101;  // odd: the sampler pads, validation must not
  o.data.synthetic_shape = {1, 12, 12};
  o.data.batch_size = 16;
  o.optim.epochs = 2;
  o.report.progress = ProgressStyle::kNone;
  o.launch.timeout = absl::Seconds(60);
  return *ResolveDefaults(o);
}

std::string TempDir(const std::string& name) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<absl::StatusOr<TrainResult>> TrainOnRanks(
    const TrainOptions& options, int world_size, std::ostream* log,
    int cuda_device) {
  return TrainOnRanks(options, world_size,
                      [&](int rank, TrainContext& context) {
                        context.cuda_device = cuda_device;
                        if (rank == 0 && log != nullptr) context.log = log;
                      });
}

std::vector<absl::StatusOr<TrainResult>> TrainOnRanks(
    const TrainOptions& options, int world_size,
    const std::function<void(int rank, TrainContext& context)>& configure,
    const std::function<int(int rank)>& fail_at, const absl::Status& failure) {
  std::vector<absl::StatusOr<TrainResult>> results(
      world_size, absl::UnknownError("rank did not run"));
  backend::testing::RunRanks(world_size, Gloo, [&](backend::Backend& b) {
    rendezvous::World world;
    world.rank = b.rank();
    world.world_size = b.size();
    world.local_rank = b.rank();
    world.local_world_size = b.size();
    TrainContext context;
    std::ostringstream quiet;
    context.log = &quiet;
    if (configure) configure(b.rank(), context);
    FailingBackend failing(b, fail_at ? fail_at(b.rank()) : 0, failure);
    results[b.rank()] = Train(options, world, failing, context);
    // As train's main does: the peers learn of it now.
    if (!results[b.rank()].ok()) b.Abort(results[b.rank()].status());
  });
  return results;
}

namespace {

class FailedWork : public backend::Work {
 public:
  explicit FailedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait(absl::Duration) override { return status_; }
  bool IsCompleted() override { return true; }
  absl::Status status() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

std::shared_ptr<backend::Work> FailingBackend::AllReduce(
    at::Tensor tensor, backend::ReduceOp op, absl::string_view label) {
  if (++allreduces_ == fail_at_) return std::make_shared<FailedWork>(status_);
  return inner_.AllReduce(std::move(tensor), op, label);
}

std::vector<at::Tensor> Parameters(const TrainResult& r) {
  std::vector<at::Tensor> out;
  for (const auto& p : r.model->named_parameters()) out.push_back(p.value());
  for (const auto& p : r.model->named_buffers()) out.push_back(p.value());
  return out;
}

void ExpectSameParameters(const TrainResult& a, const TrainResult& b) {
  const std::vector<at::Tensor> pa = Parameters(a);
  const std::vector<at::Tensor> pb = Parameters(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(pa[i].equal(pb[i])) << "tensor " << i;
}

}  // namespace dtrain::trainer::testing
