// scaling: the main job. How much faster does training get with 1, 2 and 4
// processes when a global batch of 128 is split 128/64/32? Runs every
// configuration as a real multi-process training through the launcher, with
// and without gradient averaging, and reports speedup and efficiency as a
// table (printed and saved as table.txt), CSV, JSON, PNG plots (one setting
// every backend and implementation side by side per model) and Prometheus
// metrics.
//
//   bazel run //experiments:scaling
//   bazel run //experiments:scaling -- --models=convnet --repeats=3
//   bazel run //experiments:scaling -- --pushgateway=localhost:9091
//   bazel run //experiments:scaling -- --reference=pytorch
//
// DDP's communication hooks side by side, with their knobs, ours and
// PyTorch's (the knobs and --train_flags go to every training of both):
//   bazel run //experiments:scaling -- --comm_hooks=allreduce,powersgd
//       --powersgd_rank=2 --powersgd_start_step=10 --reference=pytorch
//
// ZeRO against DDP, with memory per rank, ours and PyTorch's
// ZeroRedundancyOptimizer (stage 1):
//   bazel run //experiments:scaling -- --zero_stages=0,1,2 --models=resnet18
//       --train_flags=--optimizer=adam --reference=pytorch
//
// What the flight recorder (on by default) and the trace cost, each
// configuration's runs interleaved with its default's:
//   bazel run //experiments:scaling -- --backends=gloo+shm --models=convnet
//       --instrumentation=default,trace,no_flight_recorder --repeats=5
//
// Over several nodes, as torchrun: the same command on every node (K = 0, 1,
// ...), world sizes counting all processes; node 0 measures and reports.
//   bazel run //experiments:scaling -- --backends=nccl --world_sizes=2,4
//       --nnodes=2 --node_rank=K --master_addr=NODE0 --master_port=29500

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/duration_flag.h"
#include "base/machine_limits.h"
#include "base/metrics_server.h"
#include "base/open_file_limit.h"
#include "base/status_macros.h"
#include "experiments/plots.h"
#include "experiments/prometheus_export.h"
#include "experiments/results.h"
#include "experiments/results_files.h"
#include "experiments/results_table.h"
#include "experiments/run_training.h"
#include "experiments/sweep.h"

ABSL_FLAG(
    std::vector<std::string>, backends,
    std::vector<std::string>({"gloo", "gloo+shm"}),
    "Backends: gloo (CPU, Gloo over TCP between every pair of ranks: train "
    "--shm=false, as PyTorch's gloo), gloo+shm (CPU, train's default: shared "
    "memory between the ranks of a host, Gloo between hosts), nccl (NCCL runs "
    "where CUDA devices exist), shm (CPU, shared memory only, every rank on "
    "one host).");
ABSL_FLAG(std::vector<std::string>, models,
          std::vector<std::string>({"convnet", "resnet18"}),
          "Models: convnet (full epochs), resnet18 (a short run on 28-pixel "
          "images).");
ABSL_FLAG(std::vector<std::string>, world_sizes,
          std::vector<std::string>({"1", "2", "4"}), "Process counts.");
ABSL_FLAG(std::vector<std::string>, comm_hooks,
          std::vector<std::string>({dtrain::experiments::kDefaultCommHook}),
          "DDP communication hooks (train's --comm_hook), each with runs of "
          "its own: allreduce, fp16, bf16, powersgd, local_sgd. The "
          "no-communication bound runs once for all. Speedups divide by the "
          "allreduce one-process baseline (without allreduce in the list: "
          "each hook's own).");
ABSL_FLAG(std::vector<std::string>, zero_stages,
          std::vector<std::string>({"0"}),
          "ZeRO stages (train's --zero), each with runs of its own for every "
          "hook it combines with: 0 (none, required: ZeRO's rows are read "
          "against DDP's), 1 (optimizer state sharded), 2 (gradients too; "
          "with the allreduce hook only). The table then adds each "
          "configuration's optimizer state and peak memory per rank.");
ABSL_FLAG(std::vector<std::string>, instrumentation,
          std::vector<std::string>({"default"}),
          "How this project's runs observe themselves, each with runs of its "
          "own interleaved with the default's: default (train's: the flight "
          "recorder on, no trace; required), trace (--trace of every step), "
          "no_flight_recorder (--flight_recorder=0). The table then adds what "
          "each costs in step time against the default.");
// DDP's knobs: train's flags of the same names, for every training (ours and
// PyTorch's); unset, the trainers' defaults.
ABSL_FLAG(std::optional<int64_t>, powersgd_rank, std::nullopt,
          "Every training's --powersgd_rank (unset: train's default).");
ABSL_FLAG(std::optional<int64_t>, powersgd_start_step, std::nullopt,
          "Every training's --powersgd_start_step (unset: train's default).");
ABSL_FLAG(std::optional<double>, powersgd_min_compression_rate, std::nullopt,
          "Every training's --powersgd_min_compression_rate (unset: train's "
          "default).");
ABSL_FLAG(std::optional<bool>, powersgd_error_feedback, std::nullopt,
          "Every training's --powersgd_error_feedback=true|false (unset: "
          "train's default).");
ABSL_FLAG(std::optional<bool>, powersgd_warm_start, std::nullopt,
          "Every training's --powersgd_warm_start=true|false (unset: train's "
          "default).");
ABSL_FLAG(std::optional<int64_t>, powersgd_seed, std::nullopt,
          "Every training's --powersgd_seed (unset: train's default).");
ABSL_FLAG(std::optional<int64_t>, local_sgd_start_step, std::nullopt,
          "Every training's --local_sgd_start_step (unset: train's default).");
ABSL_FLAG(std::optional<int64_t>, local_sgd_period, std::nullopt,
          "Every training's --local_sgd_period (unset: train's default).");
ABSL_FLAG(std::optional<bool>, gradient_as_bucket_view, std::nullopt,
          "Every training's --gradient_as_bucket_view=true|false (unset: "
          "train's default, true; the PyTorch reference's is the same).");
ABSL_FLAG(std::optional<bool>, static_graph, std::nullopt,
          "Every training's --static_graph=true|false (unset: train's "
          "default).");
ABSL_FLAG(std::vector<std::string>, train_flags, std::vector<std::string>(),
          "More flags for every training, ours and PyTorch's, comma-separated "
          "(--train_flags=--bucket_cap_mb=5); not those the sweep sets itself "
          "(--model, --batch_size, --comm_hook, ...).");
ABSL_FLAG(std::vector<std::string>, batch_sizes, std::vector<std::string>(),
          "Batch per process, one per process count or one for all "
          "(default: a global batch of 128 split over the processes, 128 / N "
          "each, rounded down: 128, 64, 32 for 1, 2, 4).");
ABSL_FLAG(int64_t, global_batch, 0,
          "Instead of --batch_sizes: this global batch split over the "
          "processes.");
ABSL_FLAG(int64_t, epochs, 1, "Epochs per run.");
ABSL_FLAG(int64_t, max_steps, -1,
          "Steps per run for every model (-1: convnet whole epochs, resnet18 "
          "8 steps; 0: whole epochs).");
ABSL_FLAG(int64_t, train_limit, 0,
          "Train on the first N examples only (0: all).");
ABSL_FLAG(int, repeats, 1,
          "Runs per configuration (median and spread; 1: a single run each, "
          "as the table says).");
ABSL_FLAG(bool, trace, false,
          "Each of this project's runs also writes the merged trace of its "
          "first 50 steps (train --trace) to OUTPUT_DIR/traces/<run>.json, "
          "for ui.perfetto.dev or chrome://tracing.");
ABSL_FLAG(bool, bound, true,
          "Also measure the no-communication bound (same processes, no "
          "gradient averaging).");
ABSL_FLAG(std::string, reference, "",
          "pytorch: also run the same training in Python with Debian's "
          "python3-torch.");
ABSL_FLAG(int, nnodes, 1,
          "Nodes the sweep spans, each running this same command; world "
          "sizes count the processes of all nodes, spread evenly.");
ABSL_FLAG(int, node_rank, 0,
          "This node's index in [0, nnodes); node 0 holds rank 0, measures "
          "and writes the results.");
ABSL_FLAG(std::string, master_addr, "",
          "With --nnodes > 1: the address of node 0, where every run's "
          "rendezvous is served.");
ABSL_FLAG(int, master_port, 0,
          "Port of the first run's rendezvous; the i-th configuration the "
          "flags name (skipped ones counted) uses master_port + i (0: a free "
          "local port per run on one node, 29500 on several).");
ABSL_FLAG(bool, nodes_share_cores, false,
          "With --nnodes > 1: every node runs on this one machine (as "
          "//experiments:sim_cluster's hosts), so the table compares all of a "
          "run's processes with the cores, not one node's.");
ABSL_FLAG(std::string, output_dir, "scaling_results",
          "Where table.txt, results.csv, results.json, plots and logs go "
          "(relative to the directory bazel run was started in).");
ABSL_FLAG(bool, no_plots, false, "Do not draw the PNG plots.");
ABSL_FLAG(std::string, pushgateway, "",
          "host:port of a Prometheus Pushgateway to push the results to.");
ABSL_FLAG(int, metrics_port, 0,
          "Serve the results on http://0.0.0.0:PORT/metrics during the sweep "
          "(0: off).");
ABSL_FLAG(dtrain::base::DurationFlag, metrics_linger,
          dtrain::base::DurationFlag(absl::Seconds(30)),
          "With --metrics_port: keep serving this long after the sweep, so "
          "Prometheus scrapes the final values.");
ABSL_FLAG(std::string, run_id, "",
          "Label of this sweep's metrics (default: the start time).");
ABSL_FLAG(dtrain::base::DurationFlag, run_timeout,
          dtrain::base::DurationFlag(absl::Minutes(10)),
          "Stop a training that runs longer than this.");
ABSL_FLAG(std::string, cluster_table, "",
          "Only print the combined table of //experiments:sim_cluster's CSV "
          "at this path (its combined.csv; relative to the directory bazel "
          "run was started in), as sim_cluster ends with it; runs nothing.");
ABSL_FLAG(std::string, train_binary, "",
          "The train binary (default: from this binary's runfiles).");
ABSL_FLAG(std::string, launch_binary, "",
          "The launch binary (default: from this binary's runfiles).");

namespace dtrain::experiments {
namespace {

absl::StatusOr<std::vector<int64_t>> Numbers(
    const std::vector<std::string>& texts, const char* flag) {
  std::vector<int64_t> out;
  for (const std::string& t : texts) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(t, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", t, "' is not a number"));
    }
    out.push_back(v);
  }
  return out;
}

bool Exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

// A file of this binary's runfiles (bazel run and bazel test set them up).
std::string Runfile(const char* argv0, const std::string& relative) {
  std::vector<std::string> roots;
  if (const char* dir = std::getenv("RUNFILES_DIR")) roots.push_back(dir);
  roots.push_back(absl::StrCat(argv0, ".runfiles"));
  // The workspace's folder there: "dtrain" under Bazel 4, "_main" under
  // Bazel 7.
  for (const std::string& root : roots) {
    for (const char* workspace : {"dtrain", "_main"}) {
      const std::string path =
          absl::StrCat(root, "/", workspace, "/", relative);
      if (Exists(path)) return path;
    }
  }
  // bazel run starts in the runfiles tree.
  if (Exists(relative)) {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd)) != nullptr)
      return absl::StrCat(cwd, "/", relative);
  }
  return "";
}

// A path flag: relative ones are taken from where bazel run was started.
std::string UserPath(const std::string& flag) {
  if (flag.empty() || flag[0] == '/') return flag;
  const char* base = std::getenv("BUILD_WORKING_DIRECTORY");
  return base != nullptr ? absl::StrCat(base, "/", flag) : flag;
}

// One line per finished run; on a terminal also a live line while it runs.
class Display {
 public:
  explicit Display(bool terminal) : terminal_(terminal) {}
  void Tick(int index, int total, const std::string& name, absl::Duration t) {
    if (!terminal_) return;
    std::cerr << absl::StrFormat("\r[%d/%d] %s  %.0f s \x1b[K", index, total,
                                 name, absl::ToDoubleSeconds(t))
              << std::flush;
  }
  void Started(int index, int total, const std::string& name) {
    if (terminal_) return Tick(index, total, name, absl::ZeroDuration());
    std::cerr << absl::StrFormat("[%d/%d] %s ...\n", index, total, name)
              << std::flush;
  }
  void Finished(int index, int total, const RunRecord& r) {
    std::string line;
    if (!r.ok) {
      line = absl::StrFormat("[%d/%d] %s: FAILED: %s", index, total,
                             r.config.Name(), r.error);
    } else if (r.metrics_path.empty()) {  // another node measured it
      line = absl::StrFormat("[%d/%d] %s: took part, %.1f s wall", index, total,
                             r.config.Name(), r.wall_seconds);
    } else {
      line = absl::StrFormat(
          "[%d/%d] %s: %.2f s training, %.0f samples/s, %.1f s wall", index,
          total, r.config.Name(), r.epoch_seconds, r.samples_per_second,
          r.wall_seconds);
    }
    std::cerr << (terminal_ ? "\r\x1b[K" : "") << line << "\n" << std::flush;
  }

 private:
  const bool terminal_;
};

// Runs this node's share of every run of the plan, in order, showing each
// and handing its record to `done`. Errors only for what prevents starting a
// run.
absl::Status RunPlan(const SweepPlan& plan, const Programs& programs,
                     int node_rank, const std::string& dir,
                     const std::function<void(RunRecord)>& done) {
  Display display(::isatty(STDERR_FILENO) == 1);
  const int total = static_cast<int>(plan.runs.size());
  for (int i = 0; i < total; ++i) {
    const RunConfig& c = plan.runs[i];
    display.Started(i + 1, total, c.Name());
    DTRAIN_ASSIGN_OR_RETURN(
        RunRecord r, RunTraining(c, programs, node_rank, dir,
                                 absl::GetFlag(FLAGS_run_timeout).value,
                                 [&](absl::Duration t) {
                                   display.Tick(i + 1, total, c.Name(), t);
                                 }));
    display.Finished(i + 1, total, r);
    done(std::move(r));
  }
  return absl::OkStatus();
}

// A node other than 0: runs its ranks of every run of the plan, in the same
// order as node 0; measuring and reporting are node 0's. Exit status 1 when
// a run failed here.
int TakePart(const SweepOptions& o, const SweepPlan& plan,
             const Programs& programs, const std::string& dir) {
  std::cerr << absl::StrFormat(
      "scaling: node %d of %d takes part in %d runs (logs in %s); node 0 at "
      "%s measures them and writes the table, results, plots and "
      "metrics\n",
      o.node_rank, o.nnodes, plan.runs.size(), dir, o.master_addr);
  for (const Skipped& s : plan.skipped)
    std::cerr << "skipped " << s.what << ": " << s.why << "\n";
  int failed = 0;
  const absl::Status s = RunPlan(plan, programs, o.node_rank, dir,
                                 [&](RunRecord r) { failed += !r.ok; });
  if (!s.ok()) {
    std::cerr << "scaling: " << s.message() << "\n";
    return 2;
  }
  std::cout << absl::StrFormat(
      "node %d took part in %d runs (%d failed); the results are node 0's\n",
      o.node_rank, plan.runs.size(), failed);
  return failed > 0 ? 1 : 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "scaling [flags]: speedup and efficiency of data-parallel training over "
      "1, 2 and 4 processes");
  absl::ParseCommandLine(argc, argv);
  auto fail = [](const absl::Status& s) {
    std::cerr << "scaling: " << s.message() << "\n";
    return 2;
  };
  if (const std::string csv = absl::GetFlag(FLAGS_cluster_table);
      !csv.empty()) {
    absl::StatusOr<std::string> table =
        ReadClusterTable(UserPath(csv), ThisMachine(1));
    if (!table.ok()) return fail(table.status());
    std::cout << *table;
    return 0;
  }
  base::RaiseOpenFileLimitOrWarn("scaling");

  SweepOptions o;
  o.backends = absl::GetFlag(FLAGS_backends);
  o.models = absl::GetFlag(FLAGS_models);
  o.comm_hooks = absl::GetFlag(FLAGS_comm_hooks);
  auto knob = [](const auto& flag, auto* field) {
    if (const auto value = absl::GetFlag(flag); value.has_value())
      *field = *value;
  };
  knob(FLAGS_powersgd_rank, &o.knobs.powersgd_rank);
  knob(FLAGS_powersgd_start_step, &o.knobs.powersgd_start_step);
  knob(FLAGS_powersgd_min_compression_rate,
       &o.knobs.powersgd_min_compression_rate);
  knob(FLAGS_powersgd_error_feedback, &o.knobs.powersgd_error_feedback);
  knob(FLAGS_powersgd_warm_start, &o.knobs.powersgd_warm_start);
  knob(FLAGS_powersgd_seed, &o.knobs.powersgd_seed);
  knob(FLAGS_local_sgd_start_step, &o.knobs.local_sgd_start_step);
  knob(FLAGS_local_sgd_period, &o.knobs.local_sgd_period);
  knob(FLAGS_gradient_as_bucket_view, &o.knobs.gradient_as_bucket_view);
  knob(FLAGS_static_graph, &o.knobs.static_graph);
  o.train_flags = absl::GetFlag(FLAGS_train_flags);
  absl::StatusOr<std::vector<int64_t>> sizes =
      Numbers(absl::GetFlag(FLAGS_world_sizes), "world_sizes");
  if (!sizes.ok()) return fail(sizes.status());
  // Checked as int64, before they are narrowed to int.
  for (int64_t n : *sizes) {
    if (absl::Status s =
            base::CheckAtMost("--world_sizes", n, base::WorldSizeLimit());
        !s.ok())
      return fail(s);
  }
  o.world_sizes.assign(sizes->begin(), sizes->end());
  absl::StatusOr<std::vector<int64_t>> stages =
      Numbers(absl::GetFlag(FLAGS_zero_stages), "zero_stages");
  if (!stages.ok()) return fail(stages.status());
  for (int64_t z : *stages) {
    // PlanSweep names the stages it takes; this keeps the narrowing safe.
    if (z < 0 || z > 2) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--zero_stages: ", z, " is not 0, 1 or 2")));
    }
  }
  o.zero_stages.assign(stages->begin(), stages->end());
  o.instrumentation = absl::GetFlag(FLAGS_instrumentation);
  absl::StatusOr<std::vector<int64_t>> batches =
      Numbers(absl::GetFlag(FLAGS_batch_sizes), "batch_sizes");
  if (!batches.ok()) return fail(batches.status());
  o.batch_sizes = *batches;
  o.global_batch = absl::GetFlag(FLAGS_global_batch);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  if (const int64_t steps = absl::GetFlag(FLAGS_max_steps); steps >= 0) {
    o.convnet_max_steps = o.resnet18_max_steps = steps;
  }
  o.train_limit = absl::GetFlag(FLAGS_train_limit);
  o.repeats = absl::GetFlag(FLAGS_repeats);
  o.bound = absl::GetFlag(FLAGS_bound);
  o.trace = absl::GetFlag(FLAGS_trace);
  const std::string reference = absl::GetFlag(FLAGS_reference);
  if (!reference.empty() && reference != "pytorch") {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--reference: '", reference, "' is not pytorch (or empty)")));
  }
  o.reference_pytorch = reference == "pytorch";
  o.nnodes = absl::GetFlag(FLAGS_nnodes);
  o.node_rank = absl::GetFlag(FLAGS_node_rank);
  o.master_addr = absl::GetFlag(FLAGS_master_addr);
  o.master_port = absl::GetFlag(FLAGS_master_port);

  Programs programs;
  programs.train = absl::GetFlag(FLAGS_train_binary);
  if (programs.train.empty())
    programs.train = Runfile(argv[0], "trainer/train");
  programs.launch = absl::GetFlag(FLAGS_launch_binary);
  if (programs.launch.empty())
    programs.launch = Runfile(argv[0], "tools/launch/launch");
  programs.python = "/usr/bin/python3";
  programs.reference_script =
      Runfile(argv[0], "experiments/pytorch_reference.py");
  if (programs.train.empty() || programs.launch.empty()) {
    return fail(absl::NotFoundError(
        "cannot find the train and launch binaries: run through `bazel run "
        "//experiments:scaling`, or give --train_binary and --launch_binary"));
  }
  o.cuda_devices = CountCudaDevices(programs);
  if (o.reference_pytorch) {
    absl::StatusOr<PythonTorch> torch = ProbePythonTorch(programs);
    if (!torch.ok()) return fail(torch.status());
    o.python_torch = *std::move(torch);
  }
  absl::StatusOr<SweepPlan> plan = PlanSweep(o);
  if (!plan.ok()) return fail(plan.status());
  const std::string dir = UserPath(absl::GetFlag(FLAGS_output_dir));
  if (dir.empty())
    return fail(absl::InvalidArgumentError("--output_dir: empty"));
  std::error_code mkdir_error;
  std::filesystem::create_directories(dir, mkdir_error);
  if (mkdir_error) {
    return fail(absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", mkdir_error.message())));
  }
  // Node 0 holds rank 0 of every run: it measures and reports.
  if (o.node_rank != 0) return TakePart(o, *plan, programs, dir);
  std::string run_id = absl::GetFlag(FLAGS_run_id);
  if (run_id.empty())
    run_id =
        absl::FormatTime("%Y%m%dT%H%M%S", absl::Now(), absl::UTCTimeZone());

  ScalingMetrics metrics(run_id);
  std::unique_ptr<trainer::MetricsServer> exposer;
  if (const int port = absl::GetFlag(FLAGS_metrics_port); port > 0) {
    absl::StatusOr<std::unique_ptr<trainer::MetricsServer>> server =
        trainer::MetricsServer::Start("0.0.0.0", port, metrics.collectable());
    if (!server.ok()) {
      return fail(absl::Status(server.status().code(),
                               absl::StrCat("--metrics_port=", port, ": ",
                                            server.status().message())));
    }
    exposer = *std::move(server);
    std::cerr << "serving metrics on " << exposer->url() << "\n";
  }

  std::cerr << absl::StrFormat(
      "scaling: %d runs (%s)%s, results in %s\n", plan->runs.size(),
      absl::StrJoin(o.models, ", "),
      o.nnodes > 1 ? absl::StrCat(" over ", o.nnodes, " nodes") : "", dir);
  for (const Skipped& s : plan->skipped)
    std::cerr << "skipped " << s.what << ": " << s.why << "\n";

  std::vector<RunRecord> records;
  const absl::Time start = absl::Now();
  if (absl::Status s = RunPlan(*plan, programs, o.node_rank, dir,
                               [&](RunRecord r) {
                                 records.push_back(std::move(r));
                                 metrics.Update(Summarize(records));
                               });
      !s.ok()) {
    return fail(s);
  }

  const std::vector<ResultRow> rows = Summarize(records);
  Machine machine = ThisMachine(o.nnodes);
  machine.nodes_share_cores = absl::GetFlag(FLAGS_nodes_share_cores);
  std::vector<std::string> skipped;
  for (const Skipped& s : plan->skipped)
    skipped.push_back(absl::StrCat(s.what, ": ", s.why));
  // The table as printed, also saved: the terminal's scrollback is not a
  // record.
  std::cout << "\n" << TableText(rows, machine, skipped);
  int status = 0;
  absl::StatusOr<std::vector<std::string>> saved =
      WriteResults(dir, rows, records, skipped, machine);
  if (saved.ok()) {
    std::cout << "\ntable, results: " << absl::StrJoin(*saved, ", ") << "\n";
  } else {
    std::cerr << "scaling: " << saved.status().message() << "\n";
    status = 1;
  }
  if (!absl::GetFlag(FLAGS_no_plots)) {
    absl::StatusOr<std::vector<std::string>> plots =
        WritePlots(rows, machine, absl::StrCat(dir, "/plots"));
    if (plots.ok()) {
      std::cout << "plots: " << absl::StrJoin(*plots, ", ") << "\n";
    } else {
      std::cerr << "scaling: " << plots.status().message() << "\n";
      status = 1;
    }
  }
  if (const std::string gateway = absl::GetFlag(FLAGS_pushgateway);
      !gateway.empty()) {
    if (absl::Status s = PushToGateway(metrics, gateway); s.ok()) {
      std::cout << "pushed to the Pushgateway at " << gateway << " (run_id "
                << run_id << ")\n";
    } else {
      std::cerr << "scaling: " << s.message() << "\n";
      status = 1;
    }
  }
  std::cout << absl::StrFormat("sweep took %.0f s\n",
                               absl::ToDoubleSeconds(absl::Now() - start));
  for (const ResultRow& r : rows) {
    if (r.failed > 0) status = 1;
  }
  if (exposer != nullptr) {
    const absl::Duration linger = absl::GetFlag(FLAGS_metrics_linger).value;
    std::cerr << "serving the final metrics for "
              << absl::FormatDuration(linger) << "\n";
    absl::SleepFor(linger);
  }
  return status;
}

}  // namespace
}  // namespace dtrain::experiments

int main(int argc, char** argv) {
  return dtrain::experiments::Main(argc, argv);
}
