// train: the tutorials' data-parallel training in one C++ binary.
//
//   train                                   # ConvNet, Fashion-MNIST, 1 process
//   train --nproc_per_node=4 --batch_size=32     # 4 local processes (spawned)
//   launch --nproc_per_node=2 -- train      # under our launcher (or torchrun,
//                                           # srun, mpirun: env:// finds them)
//   train --model=resnet18 --dataset=stl10 --data_dir=/data/stl10
//         --dist_backend=nccl --device=cuda --nproc_per_node=8
//   train --model=resnet18 --dataset=imagefolder --data_dir=/data/pets
//         --workers=4 --nproc_per_node=2   # /data/pets/{train,val}/<class>/
//
// Built as //trainer:train, and as the train_main library that a user's own
// binary links together with its own registered models (docs/OWN_MODEL.md).
//
// Exit status: 0 when training finished, 1 when it failed (the message says
// which rank and why), 2 for bad flags, 128 + N when signal N (SIGINT,
// SIGTERM) stopped it after rank 0 saved a checkpoint at a step boundary.

#include <signal.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/cuda_device.h"
#include "base/duration_flag.h"
#include "base/malloc_tuning.h"
#include "base/open_file_limit.h"
#include "base/status_macros.h"
#include "base/user_path.h"
#include "dist/backend/factory.h"
#include "dist/launch/launcher.h"
#include "dist/rendezvous/init.h"
#include "dist/rendezvous/launch_env.h"
#include "trainer/train_options.h"
#include "trainer/trainer.h"

ABSL_FLAG(std::string, model, "convnet",
          "Model: convnet, resnet18, or a model that a library linked into "
          "this binary registered (docs/OWN_MODEL.md).");
ABSL_FLAG(bool, small_input_stem, false,
          "ResNet-18 with a 3x3 stride-1 stem and no max-pool, for small "
          "images.");
ABSL_FLAG(std::string, dataset, "fashion-mnist",
          "fashion-mnist (embedded default), mnist, stl10, synthetic, or "
          "imagefolder (your own images: --data_dir with train/ and val/, "
          "one folder of .jpg/.png per class).");
ABSL_FLAG(std::string, data_dir, "",
          "Folder with the dataset's files (default for fashion-mnist: "
          "/usr/share/datasets/fashion-mnist).");
ABSL_FLAG(int64_t, image_size, 0,
          "Resize images to this size (0: stl10 with resnet18 at 224, the "
          "rest as stored); for imagefolder the crop size (0: 224).");
ABSL_FLAG(int64_t, train_limit, 0,
          "Train on the first N examples only (0: all; imagefolder: N "
          "spread evenly over its classes).");
ABSL_FLAG(int64_t, val_limit, 0,
          "Validate on the first N test examples only (0: all).");
ABSL_FLAG(std::string, synthetic_shape, "1,28,28",
          "--dataset=synthetic: channels,height,width.");
ABSL_FLAG(int64_t, synthetic_train_size, 2048,
          "--dataset=synthetic: training examples.");
ABSL_FLAG(int64_t, synthetic_val_size, 512,
          "--dataset=synthetic: validation examples.");
ABSL_FLAG(int64_t, batch_size, 0,
          "Batch size per process (0: 128 for convnet, 32 for resnet18).");
ABSL_FLAG(int, workers, 0, "Loader threads per process.");
ABSL_FLAG(int64_t, epochs, 0, "Epochs (0: 1 for convnet, 2 for resnet18).");
ABSL_FLAG(int64_t, max_steps, 0, "Stop after this many steps (0: no limit).");
ABSL_FLAG(bool, skip_validation, false, "No validation pass.");
ABSL_FLAG(int64_t, num_sanity_val_steps, 2,
          "Validation batches per rank run before the first step, so that a "
          "broken validation split or model fails at once (0: none).");
ABSL_FLAG(std::string, optimizer, "",
          "sgd or adadelta (default: adadelta for convnet, sgd for "
          "resnet18).");
ABSL_FLAG(double, lr, 0, "Learning rate (0: 0.5 for adadelta, 0.1 for sgd).");
ABSL_FLAG(double, momentum, -1, "SGD momentum (default 0.9).");
ABSL_FLAG(double, weight_decay, -1,
          "Weight decay (default 1e-4 for sgd, 0 for adadelta).");
ABSL_FLAG(int64_t, lr_step_epochs, 30,
          "Multiply the learning rate by --lr_gamma every N epochs.");
ABSL_FLAG(double, lr_gamma, 0.1, "See --lr_step_epochs.");
ABSL_FLAG(std::string, lr_schedule, "step",
          "step (x --lr_gamma every --lr_step_epochs) or cosine (to 0 over "
          "--epochs, per step).");
ABSL_FLAG(double, warmup_epochs, 0,
          "Linear learning-rate warmup over this many epochs (fractions "
          "allowed), per step.");
ABSL_FLAG(int64_t, accumulate_steps, 1,
          "Average gradients over N batches per optimizer step (effective "
          "global batch: --batch_size x N x world size).");
ABSL_FLAG(std::string, amp, "off",
          "Mixed precision: off, bf16 (CPU or CUDA) or fp16 (CUDA, with loss "
          "scaling).");
ABSL_FLAG(double, clip_grad_norm, 0,
          "Clip the gradients' total 2-norm to this before each step (0: "
          "off).");
ABSL_FLAG(bool, evaluate, false,
          "Only validate the model from --init_state_dict, or from the "
          "newest checkpoint with --checkpoint_dir --resume.");
ABSL_FLAG(bool, fp16_allreduce, false,
          "DDP sends gradients as float16 (half the bytes, about three "
          "significant digits).");
ABSL_FLAG(uint64_t, seed, 0, "Seed of weights, shuffling and dropout.");
ABSL_FLAG(std::string, dist_backend, "gloo",
          "gloo (CPU), nccl (CUDA) or shm (CPU, every rank on one host, "
          "through shared memory).");
ABSL_FLAG(bool, shm, true,
          "gloo: ranks that share a host reduce through shared memory, and "
          "one leader per host talks Gloo over TCP to the other hosts. "
          "--shm=false: Gloo over TCP between every pair of ranks.");
ABSL_FLAG(std::string, dist_url, "env://",
          "tcp://HOST:PORT, file:///PATH or env://.");
ABSL_FLAG(int, world_size, -1, "Number of processes (default: launcher's).");
ABSL_FLAG(int, rank, -1, "This process's rank (default: launcher's).");
ABSL_FLAG(int, local_rank, -1,
          "This process's rank on its node (default: launcher's).");
ABSL_FLAG(int, local_world_size, -1,
          "Ranks on this node, with --local_rank (default: launcher's, or "
          "LOCAL_WORLD_SIZE).");
ABSL_FLAG(dtrain::base::DurationFlag, timeout,
          dtrain::base::DurationFlag(absl::Minutes(5)),
          "Bounds the rendezvous and every collective: seconds (30) or with a "
          "unit (30s, 5m).");
ABSL_FLAG(std::string, store_bind, "",
          "Rank 0: the address its store server binds (default: the master's "
          "address, so other interfaces cannot reach it; *: every "
          "interface). The store's token comes from DTRAIN_STORE_TOKEN or "
          "DTRAIN_STORE_TOKEN_FILE, never a flag.");
ABSL_FLAG(dtrain::base::DurationFlag, stall_warning,
          dtrain::base::DurationFlag(absl::ZeroDuration()),
          "A collective waiting this long gets a warning naming the ranks that "
          "have not reached it and what they last did; 0: half of --timeout, "
          "inf: off.");
ABSL_FLAG(dtrain::base::DurationFlag, failure_grace,
          dtrain::base::DurationFlag(absl::Seconds(5)),
          "With --nproc_per_node: after a rank fails, how long the others get "
          "to exit after SIGTERM before SIGKILL.");
ABSL_FLAG(std::string, device, "cpu", "cpu, cuda (cuda:LOCAL_RANK) or cuda:N.");
ABSL_FLAG(double, bucket_cap_mb, 25, "DDP gradient bucket size in MiB.");
ABSL_FLAG(bool, sync_gradients, true,
          "false: no gradient averaging (measures the no-communication "
          "bound; not a way to train).");
ABSL_FLAG(bool, sync_batchnorm, false,
          "Batch norm statistics over every rank's batch (PyTorch's "
          "SyncBatchNorm): resnet18 trains as one process on the global "
          "batch. No effect on convnet (no batch norm).");
ABSL_FLAG(int, intra_op_threads, 1, "LibTorch threads per process.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Where rank 0 writes checkpoints.");
ABSL_FLAG(std::string, init_state_dict, "",
          "Start from these weights: a PyTorch state_dict (.pt/.pth as "
          "torch.save writes it, or .safetensors), names, shapes and dtypes "
          "checked strictly (unless --init_state_dict_strict or "
          "--init_state_dict_exclude say otherwise).");
ABSL_FLAG(bool, init_state_dict_strict, true,
          "false: names of the model missing from --init_state_dict keep their "
          "fresh initialisation and the file's names not in the model are "
          "ignored, as PyTorch's load_state_dict(strict=False); shapes must "
          "still match.");
ABSL_FLAG(std::string, init_state_dict_exclude, "",
          "Comma-separated names or prefixes to leave out of "
          "--init_state_dict, on both sides: they keep their fresh "
          "initialisation, to fine-tune with a new head (fc for resnet18: "
          "fc.weight and fc.bias).");
ABSL_FLAG(std::string, save_state_dict, "",
          "Rank 0 writes the trained model's state_dict here at the end, as "
          ".pt/.pth (torch.load reads it) or .safetensors, by extension, "
          "with torchvision's and the book's names.");
ABSL_FLAG(bool, state_dict_with_checkpoints, false,
          "Also write --save_state_dict with every checkpoint.");
ABSL_FLAG(bool, resume, false,
          "Continue from the newest valid checkpoint in --checkpoint_dir "
          "(implied after a restart by the launcher).");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0,
          "Also checkpoint every N steps inside an epoch.");
ABSL_FLAG(int, keep_checkpoints, 2, "Checkpoints kept (newest first).");
ABSL_FLAG(std::string, metrics_json, "",
          "Rank 0 writes per-epoch metrics and the configuration here.");
ABSL_FLAG(std::string, progress, "auto",
          "auto (a bar on a terminal), bar, lines or none.");
ABSL_FLAG(int, print_freq, 10, "Batches between progress lines.");
// Live metrics and JSON lines (docs/MONITORING.md, "Training runs").
ABSL_FLAG(int, metrics_port, -1,
          "Serve live Prometheus metrics on http://BIND:PORT/metrics while "
          "training (rank 0; with --metrics_ranks=all every rank, on PORT + "
          "its local rank). 0: a free port, printed. -1: off.");
ABSL_FLAG(std::string, metrics_ranks, "0",
          "Which ranks serve --metrics_port: 0 (rank 0 only) or all.");
ABSL_FLAG(std::string, metrics_bind, "0.0.0.0",
          "Address --metrics_port binds (0.0.0.0: every interface, for a "
          "Prometheus on another host; 127.0.0.1: this host only).");
ABSL_FLAG(std::string, metrics_run_id, "",
          "A run_id label on every live metric (empty: none).");
ABSL_FLAG(std::string, log_jsonl, "",
          "Append one JSON line per logged step (every --print_freq batches) "
          "and per epoch here; rank 0 only, unless PATH holds {rank} (each "
          "rank its own file).");
ABSL_FLAG(bool, print_cuda_devices, false,
          "Print how many CUDA devices this binary's LibTorch sees, and exit.");
// Spawning local processes, as torch.multiprocessing.spawn / torchrun.
ABSL_FLAG(int, nproc_per_node, 0,
          "Spawn this many local ranks (0: this process is one rank).");
ABSL_FLAG(int, nnodes, 1, "With --nproc_per_node: number of nodes.");
ABSL_FLAG(int, node_rank, 0, "With --nproc_per_node: this node's index.");
ABSL_FLAG(std::string, master_addr, "",
          "Address of rank 0's node (default: launcher's, or 127.0.0.1 when "
          "spawning).");
ABSL_FLAG(int, master_port, 0,
          "Port of the rendezvous store (default: launcher's, or 29500; 0 with "
          "--nproc_per_node on one node: a free port, as torchrun's "
          "--standalone).");
ABSL_FLAG(int, max_restarts, 0,
          "With --nproc_per_node: restart the group this many times after a "
          "failure (it resumes from --checkpoint_dir).");

namespace dtrain::trainer {
namespace {

// Set by the first SIGINT or SIGTERM: the ranks stop together at the next
// step boundary after rank 0 saved a checkpoint. A second signal ends the
// process at once (the handler resets itself).
std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) {
  g_stop_signal.store(signal);
  g_stop_requested.store(true);
}

void InstallStopHandlers() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// Flags the spawning process consumes; its children get the rest.
constexpr const char* kSpawnFlags[] = {
    "nproc_per_node", "nnodes",       "node_rank",    "master_addr",
    "master_port",    "max_restarts", "failure_grace"};

// The flags named on the command line: an unset flag takes the model's
// default (ResolveDefaults), so "given" matters, not the value. (This
// Abseil keeps IsSpecifiedOnCommandLine private.)
absl::flat_hash_set<std::string>& GivenFlags() {
  static auto* const given = new absl::flat_hash_set<std::string>();
  return *given;
}

void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
    GivenFlags().insert(std::string(arg.substr(0, arg.find('='))));
  }
}

bool Specified(absl::string_view name) {
  return GivenFlags().contains(std::string(name));
}

absl::StatusOr<TrainOptions> OptionsFromFlags() {
  TrainOptions o;
  o.model.name = absl::GetFlag(FLAGS_model);
  o.model.small_input_stem = absl::GetFlag(FLAGS_small_input_stem);
  o.data.dataset = absl::GetFlag(FLAGS_dataset);
  o.data.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (Specified("image_size"))
    o.data.image_size = absl::GetFlag(FLAGS_image_size);
  if (Specified("train_limit"))
    o.data.train_limit = absl::GetFlag(FLAGS_train_limit);
  if (Specified("val_limit")) o.data.val_limit = absl::GetFlag(FLAGS_val_limit);
  o.data.synthetic_shape.clear();
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_synthetic_shape), ',')) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--synthetic_shape: '", part, "' is not a number"));
    }
    o.data.synthetic_shape.push_back(d);
  }
  o.data.synthetic_train_size = absl::GetFlag(FLAGS_synthetic_train_size);
  o.data.synthetic_val_size = absl::GetFlag(FLAGS_synthetic_val_size);
  if (Specified("batch_size"))
    o.data.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.data.workers = absl::GetFlag(FLAGS_workers);
  if (Specified("epochs")) o.optim.epochs = absl::GetFlag(FLAGS_epochs);
  o.optim.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.skip_validation = absl::GetFlag(FLAGS_skip_validation);
  o.num_sanity_val_steps = absl::GetFlag(FLAGS_num_sanity_val_steps);
  if (Specified("optimizer"))
    o.optim.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (Specified("lr")) o.optim.lr = absl::GetFlag(FLAGS_lr);
  if (Specified("momentum")) o.optim.momentum = absl::GetFlag(FLAGS_momentum);
  if (Specified("weight_decay"))
    o.optim.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optim.lr_step_epochs = absl::GetFlag(FLAGS_lr_step_epochs);
  o.optim.lr_gamma = absl::GetFlag(FLAGS_lr_gamma);
  o.optim.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o.optim.warmup_epochs = absl::GetFlag(FLAGS_warmup_epochs);
  o.optim.accumulate_steps = absl::GetFlag(FLAGS_accumulate_steps);
  o.optim.amp = absl::GetFlag(FLAGS_amp);
  o.optim.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  o.evaluate = absl::GetFlag(FLAGS_evaluate);
  o.parallel.fp16_allreduce = absl::GetFlag(FLAGS_fp16_allreduce);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.launch.dist_backend = absl::GetFlag(FLAGS_dist_backend);
  o.launch.dist_url = absl::GetFlag(FLAGS_dist_url);
  o.launch.shm = absl::GetFlag(FLAGS_shm);
  if (Specified("world_size"))
    o.launch.world_size = absl::GetFlag(FLAGS_world_size);
  if (Specified("rank")) o.launch.rank = absl::GetFlag(FLAGS_rank);
  if (Specified("local_rank"))
    o.launch.local_rank = absl::GetFlag(FLAGS_local_rank);
  if (Specified("local_world_size"))
    o.launch.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  if (Specified("master_addr"))
    o.launch.master_addr = absl::GetFlag(FLAGS_master_addr);
  if (Specified("master_port"))
    o.launch.master_port = absl::GetFlag(FLAGS_master_port);
  o.launch.timeout = absl::GetFlag(FLAGS_timeout).value;
  o.launch.device = absl::GetFlag(FLAGS_device);
  o.parallel.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  o.parallel.sync_gradients = absl::GetFlag(FLAGS_sync_gradients);
  o.parallel.sync_batchnorm = absl::GetFlag(FLAGS_sync_batchnorm);
  o.launch.intra_op_threads = absl::GetFlag(FLAGS_intra_op_threads);
  o.checkpoint.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.model.init_state_dict = absl::GetFlag(FLAGS_init_state_dict);
  o.model.init_state_dict_strict = absl::GetFlag(FLAGS_init_state_dict_strict);
  o.model.init_state_dict_exclude =
      absl::StrSplit(absl::GetFlag(FLAGS_init_state_dict_exclude), ',',
                     absl::SkipWhitespace());
  o.checkpoint.save_state_dict = absl::GetFlag(FLAGS_save_state_dict);
  o.checkpoint.state_dict_with_checkpoints =
      absl::GetFlag(FLAGS_state_dict_with_checkpoints);
  o.checkpoint.resume = absl::GetFlag(FLAGS_resume);
  // A group the launcher restarted (--max_restarts) continues from its last
  // checkpoint rather than from the beginning.
  // (The project's launcher's restarts, and torchrun's --max_restarts.)
  DTRAIN_ASSIGN_OR_RETURN(const int restart,
                          rendezvous::RestartCount(rendezvous::ProcessEnv()));
  if (restart > 0 && !o.checkpoint.checkpoint_dir.empty())
    o.checkpoint.resume = true;
  o.checkpoint.checkpoint_every_steps =
      absl::GetFlag(FLAGS_checkpoint_every_steps);
  o.checkpoint.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  o.report.metrics_json = absl::GetFlag(FLAGS_metrics_json);
  DTRAIN_ASSIGN_OR_RETURN(o.report.progress,
                          ParseProgressStyle(absl::GetFlag(FLAGS_progress)));
  o.report.print_freq = absl::GetFlag(FLAGS_print_freq);
  o.report.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.report.metrics_ranks = absl::GetFlag(FLAGS_metrics_ranks);
  o.report.metrics_bind = absl::GetFlag(FLAGS_metrics_bind);
  o.report.metrics_run_id = absl::GetFlag(FLAGS_metrics_run_id);
  o.report.log_jsonl = absl::GetFlag(FLAGS_log_jsonl);
  // Under `bazel run` the process starts in its runfiles tree: relative
  // paths mean the directory the user ran it from.
  const char* working_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  for (std::string* path :
       {&o.data.data_dir, &o.checkpoint.checkpoint_dir,
        &o.model.init_state_dict, &o.checkpoint.save_state_dict,
        &o.report.metrics_json, &o.report.log_jsonl}) {
    *path =
        base::ResolveUserPath(*path, working_dir != nullptr ? working_dir : "");
  }
  DTRAIN_ASSIGN_OR_RETURN(TrainOptions resolved, ResolveDefaults(std::move(o)));
  DTRAIN_RETURN_IF_ERROR(Validate(resolved));
  return resolved;
}

// The arguments for the spawned ranks: ours without the spawning flags, in
// both "--flag=value" and "--flag value" forms.
std::vector<std::string> ChildArguments(int argc, char** argv) {
  std::vector<std::string> out = {"/proc/self/exe"};
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) out[0].assign(self, static_cast<size_t>(n));
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    bool drop = false;
    for (const char* name : kSpawnFlags) {
      for (const std::string& prefix :
           {absl::StrCat("--", name), absl::StrCat("-", name)}) {
        if (arg == prefix) {
          drop = true;
          ++i;  // its value follows
        } else if (absl::StartsWith(arg, prefix + "=")) {
          drop = true;
        }
        if (drop) break;
      }
      if (drop) break;
    }
    if (!drop) out.push_back(arg);
  }
  return out;
}

int Spawn(int argc, char** argv) {
  launch::LaunchOptions l;
  l.nproc_per_node = absl::GetFlag(FLAGS_nproc_per_node);
  l.nnodes = absl::GetFlag(FLAGS_nnodes);
  l.node_rank = absl::GetFlag(FLAGS_node_rank);
  if (Specified("master_addr"))
    l.master_addr = absl::GetFlag(FLAGS_master_addr);
  if (Specified("master_port"))
    l.master_port = absl::GetFlag(FLAGS_master_port);
  l.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  l.failure_grace = absl::GetFlag(FLAGS_failure_grace).value;
  l.command = ChildArguments(argc, argv);
  absl::StatusOr<launch::LaunchResult> result = launch::Run(l, std::cerr);
  if (!result.ok()) {
    std::cerr << "train: " << result.status().message() << "\n";
    return 2;
  }
  return result->exit_code;
}

// This rank's CUDA device (-1: the CPU), made current before anything else
// touches CUDA, so that no context lands on another rank's GPU.
absl::StatusOr<int> SelectCudaDevice(const TrainOptions& options,
                                     const rendezvous::World& world) {
  if (options.launch.device == "cpu") return -1;
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=", options.launch.device,
        ": no CUDA device is usable (this LibTorch has no CUDA, or no GPU is "
        "visible); set LIBTORCH_HOME to a CUDA-enabled LibTorch (see the "
        "README) or train with --device=cpu --dist_backend=gloo"));
  }
  DTRAIN_ASSIGN_OR_RETURN(const int visible, base::CudaDeviceCount());
  RankPlacement placement;
  placement.rank = world.rank;
  placement.world_size = world.world_size;
  placement.local_rank = world.local_rank;
  placement.local_world_size = world.local_world_size;
  placement.local_inferred = world.launch.local_inferred;
  DTRAIN_ASSIGN_OR_RETURN(
      const int device,
      ChooseCudaDevice(options.launch.device, placement, visible));
  DTRAIN_RETURN_IF_ERROR(base::SetCurrentCudaDevice(device));
  return device;
}

int Main(int argc, char** argv) {
  const absl::Time start = absl::Now();
  base::TuneMallocForTraining();
  absl::SetProgramUsageMessage(
      "train [flags]: data-parallel training of the tutorials' models (see "
      "--help for the flags)");
  RecordGivenFlags(argc, argv);
  absl::ParseCommandLine(argc, argv);
  base::RaiseOpenFileLimitOrWarn("train");
  if (absl::GetFlag(FLAGS_print_cuda_devices)) {
    std::cout << (torch::cuda::is_available() ? torch::cuda::device_count() : 0)
              << "\n";
    return 0;
  }
  absl::StatusOr<TrainOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    std::cerr << "train: " << options.status().message() << "\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_nproc_per_node) > 0) {
    // Rank 0 runs on node 0: its outputs are checked before any process
    // starts (each rank checks its own again).
    if (absl::GetFlag(FLAGS_node_rank) == 0) {
      if (absl::Status s = CheckOutputPaths(*options, 0); !s.ok()) {
        std::cerr << "train: " << s.message() << "\n";
        return 2;
      }
    }
    return Spawn(argc, argv);
  }
  for (const char* name : {"nnodes", "node_rank", "max_restarts"}) {
    if (Specified(name)) {
      std::cerr << "train: --" << name
                << " needs --nproc_per_node (this process is one rank)\n";
      return 2;
    }
  }

  rendezvous::InitOptions init;
  init.url = options->launch.dist_url;
  init.timeout = options->launch.timeout;
  init.args.rank = options->launch.rank;
  init.args.world_size = options->launch.world_size;
  init.args.local_rank = options->launch.local_rank;
  init.args.local_world_size = options->launch.local_world_size;
  init.args.master_addr = options->launch.master_addr;
  init.args.master_port = options->launch.master_port;
  init.bind_host = absl::GetFlag(FLAGS_store_bind);
  absl::StatusOr<rendezvous::World> world =
      rendezvous::InitWorld(init, rendezvous::ProcessEnv());
  if (!world.ok()) {
    std::cerr << "train: " << world.status().message() << "\n";
    return 1;
  }
  if (world->rank == 0 && world->world_size > 1) {
    // The master only where env:// used it; tcp:// and file:// name their
    // store below.
    const bool env_master =
        init.url.empty() || absl::StartsWith(init.url, "env://");
    std::cerr << "train: "
              << (env_master ? world->launch.ToString()
                             : world->launch.PlacementString())
              << "; store " << world->store->Describe() << "\n";
  }
  // Before the backend: NCCL creates its context on the current device.
  absl::StatusOr<int> cuda_device = SelectCudaDevice(*options, *world);
  if (!cuda_device.ok()) {
    std::cerr << "train: [rank " << world->rank << "] "
              << cuda_device.status().message() << "\n";
    return 1;
  }
  backend::BackendConfig config;
  config.name = options->launch.dist_backend;
  config.rank = world->rank;
  config.world_size = world->world_size;
  config.store = world->store;
  config.timeout = options->launch.timeout;
  config.gloo_iface = world->launch.gloo_socket_ifname;
  config.shm = options->launch.shm;
  config.cuda_device = std::max(0, *cuda_device);
  config.stall_warning = absl::GetFlag(FLAGS_stall_warning).value;
  absl::StatusOr<std::unique_ptr<backend::Backend>> backend =
      backend::CreateBackend(config);
  if (!backend.ok()) {
    std::cerr << "train: [rank " << world->rank << "] "
              << backend.status().message() << "\n";
    return 1;
  }
  InstallStopHandlers();
  TrainContext context;
  context.stop_requested = &g_stop_requested;
  context.log = &std::cerr;
  context.log_is_terminal = ::isatty(STDERR_FILENO) == 1;
  context.start = start;
  context.cuda_device = *cuda_device;
  absl::StatusOr<TrainResult> result =
      Train(*options, *world, **backend, context);
  if (!result.ok()) {
    // Peers blocked on this rank learn of the failure now, and destroying
    // the backend does not wait for them (Gloo's exit otherwise waits).
    (*backend)->Abort(result.status());
    std::cerr << "train: " << result.status().message() << "\n";
    // Stopped as asked: the shell's convention for death by that signal.
    if (absl::IsCancelled(result.status()) && g_stop_signal.load() != 0)
      return 128 + g_stop_signal.load();
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dtrain::trainer

int main(int argc, char** argv) { return dtrain::trainer::Main(argc, argv); }
