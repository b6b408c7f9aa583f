// hook_reference: one rank of a small data-parallel training under DDP with a
// communication hook, writing every step's averaged gradients, for comparing
// with PyTorch's DDP and its own hooks (hook_reference.py does the same in
// Python; hook_reference_test.sh compares them). Every rank runs it:
//
//   hook_reference --rank=0 --world_size=2 --init_method=file:///tmp/rdv
//       --backend=gloo --configs='fp16;powersgd:rank=1,start=2'
//       --steps=6 --output_dir=out &
//   hook_reference --rank=1 ... (the same flags)
//
// The model, its weights, the inputs and the update are defined by integer
// formulas both sides evaluate exactly (see hook_reference.py, which states
// them once for both). Per configuration i each rank writes
// <output_dir>/<i>.rank<r>.f32 (every step's gradients after
// SynchronizeGradients, parameters in registration order, float32 little-
// endian) and rank 0 <output_dir>/<i>.buckets.txt (each bucket's parameter
// names, sorted, one line per bucket).
//
// Exits 0 on success, 1 with the reason on stderr.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "dist/backend/process_group.h"
#include "dist/ddp/ddp.h"
#include "dist/ddp/hooks/compress_hook.h"
#include "dist/ddp/hooks/powersgd_hook.h"

ABSL_FLAG(int, rank, 0, "This process's rank.");
ABSL_FLAG(int, world_size, 2, "The number of ranks.");
ABSL_FLAG(std::string, init_method, "",
          "Where the ranks meet, e.g. file:///tmp/x (required).");
ABSL_FLAG(std::string, backend, "gloo",
          "gloo (Gloo over TCP, no shared memory) or shm.");
ABSL_FLAG(std::string, configs, "allreduce",
          "Hooks to run one after the other, ';'-separated: allreduce, fp16, "
          "bf16, powersgd[:key=value,...] with keys rank, start, min_rate, "
          "error_feedback, warm_start, epsilon, seed, batch.");
ABSL_FLAG(int, steps, 6, "Training steps per configuration.");
ABSL_FLAG(std::string, output_dir, "", "Where to write (required).");

namespace dtrain::tools {
namespace {

// The bucket caps both sides use, the first bucket's too (PyTorch 2 caps its
// first bucket with an explicit bucket_cap_mb): the buckets are
// {fc4, fc3, fc2}, {fc1}.
constexpr int64_t kFirstBucketBytes = 8400;
constexpr int64_t kBucketBytes = 8400;
constexpr double kLearningRate = 0.1;

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 32));
    fc3 = register_module("fc3", torch::nn::Linear(32, 32));
    fc4 = register_module("fc4", torch::nn::Linear(32, 8));
  }
  at::Tensor forward(const at::Tensor& x) {
    return fc4(fc3(fc2(fc1(x).tanh()).tanh()).tanh());
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, fc4{nullptr};
};
TORCH_MODULE(Net);

// ((i * a + b) mod m - c) / d for i = 0.., exact in float32.
at::Tensor Formula(int64_t n, int64_t a, int64_t b, int64_t m, int64_t c,
                   double d) {
  return (at::arange(n, at::kLong) * a + b)
      .remainder(m)
      .sub(c)
      .to(at::kFloat)
      .div(d);
}

Net MakeNet() {
  Net net;
  at::NoGradGuard no_grad;
  int64_t k = 0;
  for (at::Tensor& p : net->parameters()) {
    p.copy_(Formula(p.numel(), 37, 101 * k++, 61, 30, 256).view_as(p));
  }
  return net;
}

at::Tensor Input(int rank, int step) {
  return Formula(4 * 16, 13, 7 * rank + 29 * step, 23, 11, 8).view({4, 16});
}

at::Tensor Target(int rank, int step) {
  return Formula(4 * 8, 5, 3 * rank + step, 9, 4, 4).view({4, 8});
}

absl::StatusOr<std::shared_ptr<ddp::CommHook>> MakeHook(
    const std::string& config) {
  if (config == "allreduce") return std::shared_ptr<ddp::CommHook>();
  if (config == "fp16") return ddp::hooks::Fp16CompressHook();
  if (config == "bf16") return ddp::hooks::Bf16CompressHook();
  std::vector<std::string> parts =
      absl::StrSplit(config, absl::MaxSplits(':', 1));
  if (parts[0] != "powersgd") {
    return absl::InvalidArgumentError(
        absl::StrCat("--configs: unknown hook '", parts[0], "'"));
  }
  ddp::hooks::PowerSgdOptions o;
  if (parts.size() == 2) {
    for (absl::string_view kv : absl::StrSplit(parts[1], ',')) {
      std::vector<std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      bool ok = p.size() == 2;
      int64_t i = 0;
      double d = 0;
      if (ok && (p[0] == "epsilon" || p[0] == "min_rate")) {
        ok = absl::SimpleAtod(p[1], &d);
        (p[0] == "epsilon" ? o.orthogonalization_epsilon
                           : o.min_compression_rate) = d;
      } else if (ok) {
        ok = absl::SimpleAtoi(p[1], &i);
        if (p[0] == "rank") {
          o.matrix_approximation_rank = static_cast<int>(i);
        } else if (p[0] == "start") {
          o.start_powersgd_iter = i;
        } else if (p[0] == "error_feedback") {
          o.use_error_feedback = i != 0;
        } else if (p[0] == "warm_start") {
          o.warm_start = i != 0;
        } else if (p[0] == "seed") {
          o.random_seed = i;
        } else if (p[0] == "batch") {
          o.batch_tensors_with_same_shape = i != 0;
        } else {
          ok = false;
        }
      }
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--configs: bad PowerSGD option '", kv, "' in '", config, "'"));
      }
    }
  }
  return std::make_shared<ddp::hooks::PowerSgdHook>(o);
}

absl::Status WriteFile(const std::string& path, const void* data,
                       size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  f.close();
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status RunConfig(backend::Backend& backend, int index,
                       const std::string& config, int steps,
                       const std::string& dir) {
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<ddp::CommHook> hook,
                          MakeHook(config));
  Net net = MakeNet();
  ddp::DdpOptions options;
  options.first_bucket_cap_bytes = kFirstBucketBytes;
  options.bucket_cap_bytes = kBucketBytes;
  DTRAIN_ASSIGN_OR_RETURN(auto ddp, ddp::DistributedDataParallel::Create(
                                        net.ptr(), backend, options));
  if (hook != nullptr) DTRAIN_RETURN_IF_ERROR(ddp->RegisterCommHook(hook));
  std::vector<float> out;
  for (int step = 0; step < steps; ++step) {
    DTRAIN_RETURN_IF_ERROR(ddp->PrepareForward());
    at::Tensor loss = (net->forward(Input(backend.rank(), step)) -
                       Target(backend.rank(), step))
                          .pow(2)
                          .mean();
    loss.backward();
    DTRAIN_RETURN_IF_ERROR(ddp->SynchronizeGradients());
    at::NoGradGuard no_grad;
    for (at::Tensor& p : net->parameters()) {
      const at::Tensor g = p.grad().contiguous();
      out.insert(out.end(), g.data_ptr<float>(),
                 g.data_ptr<float>() + g.numel());
      p.add_(p.grad(), -kLearningRate);
      p.mutable_grad().zero_();
    }
  }
  const std::string prefix = absl::StrCat(dir, "/", index);
  DTRAIN_RETURN_IF_ERROR(
      WriteFile(absl::StrCat(prefix, ".rank", backend.rank(), ".f32"),
                out.data(), out.size() * sizeof(float)));
  if (backend.rank() != 0) return absl::OkStatus();
  std::string layout;
  for (const ddp::BucketInfo& b : ddp->buckets()) {
    std::vector<std::string> names = b.parameters;
    std::sort(names.begin(), names.end());
    absl::StrAppend(&layout, absl::StrJoin(names, ","), "\n");
  }
  return WriteFile(absl::StrCat(prefix, ".buckets.txt"), layout.data(),
                   layout.size());
}

absl::Status Run() {
  backend::ProcessGroupOptions o;
  o.init.url = absl::GetFlag(FLAGS_init_method);
  o.init.args.rank = absl::GetFlag(FLAGS_rank);
  o.init.args.world_size = absl::GetFlag(FLAGS_world_size);
  o.init.timeout = absl::Seconds(60);
  o.timeout = absl::Seconds(60);
  const std::string name = absl::GetFlag(FLAGS_backend);
  if (name != "gloo" && name != "shm") {
    return absl::InvalidArgumentError("--backend: gloo or shm");
  }
  o.backend.name = name;
  o.backend.shm = false;  // "gloo": Gloo's own transport, as PyTorch's
  DTRAIN_ASSIGN_OR_RETURN(backend::ProcessGroup group,
                          backend::InitProcessGroup(o));
  const std::vector<std::string> configs =
      absl::StrSplit(absl::GetFlag(FLAGS_configs), ';', absl::SkipEmpty());
  int index = 0;
  for (const std::string& config : configs) {
    DTRAIN_RETURN_IF_ERROR(base::GuardTorch(
        absl::StatusCode::kInternal, absl::StrCat(config, ": "), [&] {
          return RunConfig(*group.backend, index, config,
                           absl::GetFlag(FLAGS_steps),
                           absl::GetFlag(FLAGS_output_dir));
        }));
    ++index;
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dtrain::tools

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One rank of a small DDP training with a communication hook, writing "
      "each step's gradients (compared with PyTorch by hook_reference.py).");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_init_method).empty() ||
      absl::GetFlag(FLAGS_output_dir).empty()) {
    std::fprintf(
        stderr,
        "hook_reference: --init_method and --output_dir are required\n");
    return 1;
  }
  const absl::Status s = dtrain::tools::Run();
  if (s.ok()) return 0;
  std::fprintf(stderr, "hook_reference: %s\n", s.ToString().c_str());
  return 1;
}
