// The scaling sweep's plan: which trainings to run, from the runner's flags.
// For each implementation (ours, optionally PyTorch's), backend, model and
// process count it runs the training with gradient averaging, once per DDP
// communication hook and ZeRO stage, and for more than one process also
// without (the no-communication bound, one run for all hooks and stages: it
// averages nothing),
// `repeats` times each. DDP's knobs (the hooks' own, bucket views, static
// graph) and any further flags go to every training, ours and PyTorch's.
//
// A sweep may span nodes as torchrun does: the same command on every node
// with --nnodes, --node_rank, --master_addr and --master_port. World sizes
// are then total process counts spread evenly over the nodes. Every node
// plans the same runs in the same order, and each run meets on its own port
// (master_port + its slot), so consecutive runs cannot collide.
#ifndef DTRAIN_EXPERIMENTS_SWEEP_H_
#define DTRAIN_EXPERIMENTS_SWEEP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/optional.h"

namespace dtrain::experiments {

// What the Python torch beside the reference script can do (probed once by
// the runner: experiments/pytorch_reference.py --probe).
struct PythonTorch {
  std::string version;  // "1.13.1"
  bool cuda = false;    // built with CUDA
  int cuda_devices = 0;
  bool nccl = false;
  // Its Gloo sums bfloat16 tensors (--comm_hook=bf16); 1.13's cannot. True
  // where the probe does not say (the run then tells).
  bool gloo_bfloat16 = true;
  // Its Gloo sums float16 tensors (--comm_hook=fp16); Debian's 2.14 cannot.
  bool gloo_float16 = true;
};

// The hooks --comm_hooks takes: train's --comm_hook values (powersgd where
// train has it), which pytorch_reference.py maps to PyTorch's own hooks.
inline constexpr const char* kCommHooks[] = {"allreduce", "fp16", "bf16",
                                             "powersgd", "local_sgd"};
// Train's default: a plain allreduce, no hook registered.
inline constexpr char kDefaultCommHook[] = "allreduce";

// How a run observes itself (--instrumentation): "default" (train's defaults:
// the flight recorder on, no trace), "trace" (train --trace of every step),
// "no_flight_recorder" (--flight_recorder=0). The other two exist to measure
// what the default and the trace cost against it, in one sweep.
inline constexpr const char* kInstrumentations[] = {"default", "trace",
                                                    "no_flight_recorder"};
inline constexpr char kDefaultInstrumentation[] = "default";

// DDP's knobs for every training of a sweep, ours and PyTorch's alike:
// train's flags of these names, which pytorch_reference.py takes too. Unset
// ones are left to the trainers' defaults (the same in both).
struct DdpKnobs {
  absl::optional<int64_t> powersgd_rank;
  absl::optional<int64_t> powersgd_start_step;
  absl::optional<double> powersgd_min_compression_rate;
  absl::optional<bool> powersgd_error_feedback;
  absl::optional<bool> powersgd_warm_start;
  absl::optional<int64_t> powersgd_seed;
  absl::optional<int64_t> local_sgd_start_step;
  absl::optional<int64_t> local_sgd_period;
  absl::optional<bool> gradient_as_bucket_view;
  absl::optional<bool> static_graph;
};

// The set knobs as flags, in the struct's order: {"--powersgd_rank=2",
// "--static_graph=true", ...}.
std::vector<std::string> KnobFlags(const DdpKnobs& knobs);

// torchrun's default rendezvous port, the first run's port on several nodes.
inline constexpr int kDefaultMasterPort = 29500;

// The book's global batch: without --batch_sizes or --global_batch, each
// world size N trains with kDefaultGlobalBatch / N per process.
inline constexpr int64_t kDefaultGlobalBatch = 128;

// The default batch per process for `world_size` processes:
// kDefaultGlobalBatch / world_size, rounded down where it does not divide
// (3 processes: 42, a global batch of 126), and at least 1.
int64_t DefaultBatchSize(int world_size);

struct SweepOptions {
  // "gloo": Gloo over TCP between every pair of ranks (train --shm=false, as
  // PyTorch's gloo); "gloo+shm": train's default CPU path, shared memory
  // within a host and Gloo between hosts; "shm": shared memory only;
  // "nccl".
  std::vector<std::string> backends = {"gloo", "gloo+shm"};
  std::vector<std::string> models = {"convnet", "resnet18"};
  // DDP communication hooks (kCommHooks), each with runs of its own.
  std::vector<std::string> comm_hooks = {kDefaultCommHook};
  // ZeRO stages (train's --zero; 0: none), each with runs of its own for
  // every hook it combines with. Must hold 0: ZeRO's rows are read against
  // plain DDP's (speedup baseline, one-process bound).
  std::vector<int> zero_stages = {0};
  // kInstrumentations, each with runs of its own for this project's
  // synchronised runs, interleaved with the default's in an order rotated
  // from repeat to repeat. Must hold "default".
  std::vector<std::string> instrumentation = {kDefaultInstrumentation};
  // For every training: the knobs' flags (KnobFlags), then these
  // (--train_flags), each "--name=value" or "--name".
  DdpKnobs knobs;
  std::vector<std::string> train_flags;
  std::vector<int> world_sizes = {1, 2, 4};
  // Per process, one per world size (or one for all). Ignored when
  // global_batch > 0. Empty: DefaultBatchSize of each world size (128, 64,
  // 32 for 1, 2, 4), so any list of world sizes works with the defaults.
  std::vector<int64_t> batch_sizes;
  // > 0: every run has this global batch, split over its processes.
  int64_t global_batch = 0;
  int64_t epochs = 1;
  // Per model: steps per run (0: whole epochs). Unset models: convnet whole
  // epochs, resnet18 8 steps (a short run on small images).
  int64_t convnet_max_steps = 0;
  int64_t resnet18_max_steps = 8;
  // Examples of the training split to use (0: all).
  int64_t train_limit = 0;
  int repeats = 1;
  // Measure the no-communication bound (world size > 1 only).
  bool bound = true;
  // Also run the PyTorch reference script.
  bool reference_pytorch = false;
  // Each of this project's runs writes the merged trace of its first steps
  // (train --trace) to <output dir>/traces/<slug>.json.
  bool trace = false;
  // Only read with reference_pytorch: PyTorch's NCCL runs need CUDA, NCCL
  // and enough devices there.
  PythonTorch python_torch;
  // CUDA devices visible on each node: NCCL runs need one per process of a
  // node.
  int cuda_devices = 0;
  // The nodes the sweep spans (torchrun's flags, the same on every node but
  // node_rank). master_addr is required with nnodes > 1.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  // The first run's rendezvous port; run slot i uses master_port + i.
  // 0: each run picks a free local port (one node), or kDefaultMasterPort
  // (several nodes).
  int master_port = 0;
};

struct RunConfig {
  std::string implementation;  // "dtrain" or "pytorch"
  std::string backend;
  std::string model;
  // The no-sync runs: kDefaultCommHook (they average nothing).
  std::string comm_hook = kDefaultCommHook;
  int zero = 0;  // ZeRO stage; 0 for the no-sync runs
  int world_size = 1;
  int64_t batch_size = 0;  // per process
  int64_t max_steps = 0;   // 0: whole epochs
  int64_t epochs = 1;
  int64_t train_limit = 0;
  bool sync_gradients = true;
  int repeat = 0;
  // Nodes the world_size processes are spread over, evenly.
  int nnodes = 1;
  std::string master_addr;  // with nnodes > 1
  // The rendezvous port; 0: a free local port picked when the run starts.
  int master_port = 0;
  // Flags for the training beyond the sweep's own: the knobs', then
  // --train_flags (the same for every run of a sweep).
  std::vector<std::string> train_flags;
  // Every rank records its steps and rank 0 writes the trace
  // (traces/<slug>.json in the sweep's folder); this project's runs only.
  bool trace = false;
  // kInstrumentations; "trace" also writes traces/<slug>.json.
  std::string instrumentation = kDefaultInstrumentation;

  int ProcessesPerNode() const { return world_size / nnodes; }

  // "dtrain gloo convnet np=2 bs=64" (+ " no-sync", " #2"), a hook other
  // than the default and a ZeRO stage after the model: "dtrain gloo convnet
  // fp16 np=2 bs=64", "dtrain gloo resnet18 zero1 np=2 bs=64"; then an
  // instrumentation other than the default: "... bs=64 trace".
  std::string Name() const;
  // A file-name-safe form: "dtrain_gloo_convnet_np2_bs64_sync_r0",
  // "dtrain_gloo_convnet_fp16_np2_bs64_sync_r0",
  // "dtrain_gloo_resnet18_zero1_np2_bs64_sync_r0".
  std::string Slug() const;
};

struct Skipped {
  std::string what;  // "nccl", "nccl np=4", "pytorch nccl", "np=1"
  std::string why;
};

struct SweepPlan {
  std::vector<RunConfig> runs;
  std::vector<Skipped> skipped;
};

// The runs in order. A run's port depends only on the flags shared by all
// nodes (its slot counts skipped configurations too), so a node that skips
// a run another node makes (different devices) does not shift the ports of
// the runs after it. Skips, each listed once with the reason: world sizes
// that do not split evenly over the nodes; our NCCL runs where a node has
// fewer CUDA devices (cuda_devices) than processes; PyTorch's where its
// Python torch lacks CUDA, NCCL or devices (python_torch), and its fp16 or
// bf16 runs on Gloo where that Gloo cannot sum float16 or bfloat16.
//
// Also skipped: ZeRO stage 2 with a hook other than the default (its
// reduce-scatter is the hook), ZeRO with local_sgd, and PyTorch's stage 2
// (its ZeroRedundancyOptimizer is stage 1).
//
// Within a backend, model and process count: per implementation each hook's
// runs in comm_hooks' order, each hook's ZeRO stages in zero_stages' order,
// then the no-sync run; repeats outermost.
//
// kInvalidArgument naming the flag for: an unknown backend, model or hook, a
// hook given twice, ZeRO stages other than 0, 1 and 2, given twice or
// without 0, world sizes below 1, a batch list whose length is
// neither 1 nor that of the world sizes, a global batch not divisible by a
// world size, repeats < 1, knobs outside train's ranges (--powersgd_rank,
// --local_sgd_period < 1, --powersgd_start_step, --local_sgd_start_step < 0,
// --powersgd_min_compression_rate below 1 or not finite, --powersgd_seed
// outside 0 .. 2^32 - 1, --powersgd_start_step below 2 where powersgd is
// among the hooks with error feedback or warm start), a train flag that
// is not --name[=value], one the sweep sets itself (--model, --comm_hook,
// ...) or one given twice (also as a knob), nnodes < 1, node_rank outside
// [0, nnodes), nnodes > 1 without master_addr, ports beyond 65535; and
// beyond base/machine_limits.h's
// bounds: more processes per node than base::LocalProcessLimit(), world sizes
// or nnodes above 2^20, a batch per process above 2^20, repeats above 1000.
absl::StatusOr<SweepPlan> PlanSweep(const SweepOptions& options);

}  // namespace dtrain::experiments

#endif  // DTRAIN_EXPERIMENTS_SWEEP_H_
