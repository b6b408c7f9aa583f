#include "dist/backend/gloo/gloo_backend.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "dist/backend/gloo/gloo_store.h"
#include "dist/backend/gloo/ring_reduce_scatter.h"
#include "dist/backend/ordered_worker.h"
#include "dist/backend/work.h"
#include "dist/store/prefix_store.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "third_party/gloo_compat.h"

namespace dtrain::backend {
namespace {

// Gloo writes to its peers' sockets without MSG_NOSIGNAL, so with SIGPIPE's
// default action a peer's death kills this process instead of failing the
// collective with the peer named. Python ignores SIGPIPE at startup, which is
// why PyTorch users never meet this; a C++ program must. A handler the
// program installed itself is left alone.
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current = {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

using internal::CompletionWork;

// The store namespace; messages use the name the options give.
constexpr char kName[] = "gloo";
// How long a destroyed backend waits for the other ranks to finish.
constexpr absl::Duration kMaxExitWait = absl::Seconds(60);

template <typename T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with the C++ type Gloo uses for `type` (bfloat16 is staged
// in float32).
template <typename F>
void DispatchGlooType(at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat:
    case at::kBFloat16:
      return f(Tag<float>{});
    case at::kDouble:
      return f(Tag<double>{});
    case at::kHalf:
      return f(Tag<gloo::float16>{});
    case at::kInt:
      return f(Tag<int32_t>{});
    case at::kLong:
      return f(Tag<int64_t>{});
    case at::kByte:
      return f(Tag<uint8_t>{});
    case at::kChar:
      return f(Tag<int8_t>{});
    default:
      throw std::logic_error("dtype not checked before dispatch");
  }
}

template <typename T>
const gloo::ReductionFunction<T>* ReductionFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kMin:
      return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<T>::max;
    case ReduceOp::kProduct:
      return gloo::ReductionFunction<T>::product;
  }
  return gloo::ReductionFunction<T>::sum;
}

// The element-wise reduction in the signature of Gloo's unbound-buffer API.
template <typename T>
gloo::AllreduceOptions::Func NewApiReduction(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case ReduceOp::kMin:
      return static_cast<Fn>(&gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<Fn>(&gloo::max<T>);
    case ReduceOp::kProduct:
      return static_cast<Fn>(&gloo::product<T>);
    default:
      return static_cast<Fn>(&gloo::sum<T>);
  }
}

// Runs one of Gloo's option-struct collectives (gloo::allreduce(opts), ...).
// When it throws, the transport has failed, and Gloo's device thread may still
// be signalling that failure to the call's unbound buffers, which `opts` owns:
// destroying them then races with it (ThreadSanitizer caught it in the
// killed-rank test). The backend is unusable after a failure, so the options
// of the failed call are deliberately left allocated.
template <typename Options, typename Run>
void RunKeepingBuffersOnFailure(std::unique_ptr<Options> opts, Run run) {
  try {
    run(*opts);
  } catch (...) {
    (void)opts.release();
    throw;
  }
}

// Runs one of Gloo's algorithm classes (AllreduceHalvingDoubling, ...), which
// do not wait for all of their own sends: when run() returns, a notification
// can still be queued in the transport, and destroying the algorithm frees the
// buffer Gloo's device thread is about to complete (ThreadSanitizer caught it:
// heap-use-after-free in tcp::Buffer::handleSendCompletion). A barrier after
// run() means every peer has finished the call, so has received every send of
// this rank, so each was written and completed: only then is the algorithm
// destroyed. It costs one barrier per call (the default picks these classes
// only for small messages on 16 ranks or more). On failure the algorithm is
// left allocated, as in RunKeepingBuffersOnFailure.
template <typename Algorithm>
void RunAlgorithmClass(const std::shared_ptr<gloo::Context>& context,
                       std::unique_ptr<Algorithm> algorithm) {
  try {
    algorithm->run();
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
  } catch (...) {
    (void)algorithm.release();
    throw;
  }
}

template <typename T>
void RunAllReduce(const std::shared_ptr<gloo::Context>& context, T* data,
                  int count, ReduceOp op, GlooAlgorithm algorithm) {
  if (algorithm == GlooAlgorithm::kRing || algorithm == GlooAlgorithm::kAuto) {
    // Gloo's newer API works on the caller's memory: unlike the algorithm
    // classes below, it allocates no message-sized scratch per call (measured:
    // docs/PERFORMANCE.md).
    auto opts = std::make_unique<gloo::AllreduceOptions>(context);
    opts->setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts->setOutput<T>(data, static_cast<size_t>(count));
    opts->setReduceFunction(NewApiReduction<T>(op));
    RunKeepingBuffersOnFailure(
        std::move(opts), [](gloo::AllreduceOptions& o) { gloo::allreduce(o); });
    return;
  }
  const gloo::ReductionFunction<T>* fn = ReductionFor<T>(op);
  const std::vector<T*> ptrs{data};
  switch (algorithm) {
    case GlooAlgorithm::kRing:
    case GlooAlgorithm::kAuto:
      return;
    case GlooAlgorithm::kHalvingDoubling:
      RunAlgorithmClass(context,
                        std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
                            context, ptrs, count, fn));
      return;
    case GlooAlgorithm::kBcube:
      RunAlgorithmClass(context, std::make_unique<gloo::AllreduceBcube<T>>(
                                     context, ptrs, count, fn));
      return;
    case GlooAlgorithm::kRingChunked:
      RunAlgorithmClass(context,
                        std::make_unique<gloo::AllreduceRingChunked<T>>(
                            context, ptrs, count, fn));
      return;
  }
}

// The tensor Gloo works on: the tensor itself, or a float32 copy for bfloat16.
at::Tensor Staged(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t;
}

// Broadcast and allgather only move bits: bfloat16 travels as a 16-bit type.
at::ScalarType BitsType(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? at::kHalf : t.scalar_type();
}

// The address Gloo binds and advertises when none is given: this host's name if
// it resolves, else loopback. `*loopback_only` tells whether that address only
// reaches this machine (Debian maps the host name to 127.0.1.1), which is fine
// on one machine and fatal on several.
std::string DefaultHostname(bool* loopback_only) {
  *loopback_only = true;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    if (::getaddrinfo(name, nullptr, &hints, &result) == 0) {
      for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
        const bool loopback =
            a->ai_family == AF_INET
                ? (ntohl(reinterpret_cast<sockaddr_in*>(a->ai_addr)
                             ->sin_addr.s_addr) >>
                   24) == 127
                : IN6_IS_ADDR_LOOPBACK(
                      &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
        if (!loopback) *loopback_only = false;
      }
      ::freeaddrinfo(result);
      return name;
    }
  }
  return "127.0.0.1";
}

class GlooBackend : public Backend {
 public:
  GlooBackend(const Membership& group, const GlooBackendOptions& options,
              std::shared_ptr<store::Store> store,
              std::shared_ptr<gloo::Context> context,
              std::vector<std::pair<std::string, int>> peer_addresses)
      : rank_(group.rank),
        size_(group.world_size),
        name_(options.name),
        layout_(options.layout),
        algorithm_(options.algorithm),
        exit_timeout_(std::min(group.timeout, kMaxExitWait)),
        store_(std::move(store)),
        context_(std::move(context)),
        peer_addresses_(std::move(peer_addresses)),
        worker_(std::make_unique<internal::OrderedWorker>(name_, rank_)) {}

  // Runs what was issued, then waits (bounded) until every rank got here.
  ~GlooBackend() override {
    const absl::Status broken = worker_->Shutdown();
    if (size_ > 1) {
      // Gloo shuts its sockets down abruptly, which can discard data a slower
      // peer has not read yet: close only once every rank has finished its last
      // collective. A broken backend still says it is leaving, so that healthy
      // peers do not wait for it, but does not wait itself.
      std::vector<std::string> keys;
      for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("exit/", r));
      if (store_->Set(keys[rank_], "").ok() && broken.ok()) {
        (void)store_->Wait(keys, exit_timeout_);
      }
    }
  }

  absl::string_view name() const override { return name_; }
  std::string layout() const override { return layout_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Gloo cannot interrupt a running collective; breaking the worker stops
  // the rest and spares destruction the wait for peers. Closing the
  // connections (a reset, which each pair does under its own lock) fails the
  // peers' collectives at once: a process that lives on after aborting (an
  // elastic run) would otherwise leave them waiting for the timeout.
  void Abort(const absl::Status& reason) override {
    worker_->Break(reason);
    if (!connections_closed_.exchange(true)) context_->closeConnections();
  }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    // Validation comes after: an undefined tensor has no element size.
    const int64_t bytes =
        tensor.defined() ? tensor.numel() * tensor.element_size() : 0;
    const GlooAlgorithm algorithm =
        algorithm_ == GlooAlgorithm::kAuto
            ? ChooseGlooAllReduceAlgorithm(bytes, size_)
            : algorithm_;
    absl::StatusOr<internal::Description> what = internal::PrepareAllReduce(
        name_, check_, tensor, op, {GlooAlgorithmName(algorithm), label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, op, algorithm]() mutable {
      if (tensor.numel() == 0) return;
      at::Tensor staged = Staged(tensor);
      DispatchGlooType(staged.scalar_type(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        RunAllReduce<T>(context_, static_cast<T*>(staged.data_ptr()),
                        static_cast<int>(staged.numel()), op, algorithm);
      });
      if (op == ReduceOp::kAverage) staged.div_(size_);
      if (!staged.is_same(tensor)) tensor.copy_(staged);
    });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(name_, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, root]() mutable {
      if (tensor.numel() == 0) return;
      DispatchGlooType(BitsType(tensor), [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto opts = std::make_unique<gloo::BroadcastOptions>(context_);
        opts->setRoot(root);
        opts->setOutput<T>(static_cast<T*>(tensor.data_ptr()),
                           static_cast<size_t>(tensor.numel()));
        RunKeepingBuffersOnFailure(
            std::move(opts),
            [](gloo::BroadcastOptions& o) { gloo::broadcast(o); });
      });
    });
  }

  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllGather(name_, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, outputs, input]() mutable {
      const int64_t n = input.numel();
      if (n == 0) return;
      if (size_ == 1) {  // Gloo's ring needs a neighbour.
        outputs[0].view({-1}).copy_(input.view({-1}));
        return;
      }
      // Outputs back to back (ZeRO's parameter shares) are gathered into in
      // place, without a message-sized scratch; and with this rank's output
      // as the input, Gloo's in-place form copies nothing.
      const bool direct = internal::BackToBack(outputs);
      const at::Tensor flat =
          direct ? at::from_blob(outputs[0].data_ptr(), {size_ * n},
                                 outputs[0].options())
                 : at::empty({size_ * n}, input.options());
      const bool in_place =
          direct && input.data_ptr() == outputs[rank_].data_ptr();
      DispatchGlooType(BitsType(input), [&](auto tag) {
        using T = typename decltype(tag)::type;
        auto opts = std::make_unique<gloo::AllgatherOptions>(context_);
        if (!in_place) {
          opts->setInput<T>(static_cast<T*>(input.data_ptr()),
                            static_cast<size_t>(n));
        }
        opts->setOutput<T>(static_cast<T*>(flat.data_ptr()),
                           static_cast<size_t>(size_ * n));
        RunKeepingBuffersOnFailure(
            std::move(opts),
            [](gloo::AllgatherOptions& o) { gloo::allgather(o); });
      });
      if (direct) return;
      for (int r = 0; r < size_; ++r) {
        outputs[r].view({-1}).copy_(flat.narrow(0, r * n, n));
      }
    });
  }

  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    absl::StatusOr<internal::Description> what = internal::PrepareReduceScatter(
        name_, check_, size_, output, inputs, op);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, output, inputs, op]() mutable {
      const int64_t n = output.numel();
      if (n == 0) return;
      // The ring reduces in place. With the output this rank's own input and
      // the inputs back to back (ZeRO stage 2's padded bucket), in the
      // inputs themselves (the other ranks' parts are left with partial
      // sums, as backend.h allows); otherwise in a copy, so that the inputs
      // stay as given.
      const bool in_place = internal::BackToBack(inputs) &&
                            output.data_ptr() == inputs[rank_].data_ptr() &&
                            output.scalar_type() != at::kBFloat16;
      at::Tensor flat;
      if (in_place) {
        flat =
            at::from_blob(inputs[0].data_ptr(), {size_ * n}, output.options());
      } else {
        std::vector<at::Tensor> flat_inputs;
        for (const at::Tensor& t : inputs)
          flat_inputs.push_back(Staged(t).view({-1}));
        flat = at::cat(flat_inputs);
      }
      DispatchGlooType(flat.scalar_type(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        RingReduceScatter(context_, flat.data_ptr(), static_cast<size_t>(n),
                          sizeof(T), NewApiReduction<T>(op));
      });
      at::Tensor mine = flat.narrow(0, rank_ * n, n);
      if (op == ReduceOp::kAverage) mine.div_(size_);
      if (!in_place) output.view({-1}).copy_(mine);
    });
  }

  std::shared_ptr<Work> Barrier() override {
    return Enqueue(internal::Description{"barrier", ""}, [this] {
      RunKeepingBuffersOnFailure(
          std::make_unique<gloo::BarrierOptions>(context_),
          [](gloo::BarrierOptions& o) { gloo::barrier(o); });
    });
  }

 private:
  absl::Status Check(absl::string_view op, const at::Tensor& t) const {
    absl::Status s = internal::CheckTensor(name_, op, t, /*want_cuda=*/false,
                                           internal::kCollectiveDtypes);
    if (s.ok() && t.numel() > std::numeric_limits<int>::max() / size_) {
      s = absl::InvalidArgumentError(
          absl::StrCat(name_, " ", op, ": ", internal::DescribeTensor(t),
                       " is more elements than Gloo can address"));
    }
    return s;
  }

  const internal::TensorCheck check_ = [this](absl::string_view op,
                                              const at::Tensor& t) {
    return Check(op, t);
  };

  // Queues `run` on the ordered worker, turning Gloo's exceptions into a
  // Status: its timeouts (IoExceptions saying so) into kDeadlineExceeded, and
  // the peer named by address into "peer: rank R".
  std::shared_ptr<Work> Enqueue(const internal::Description& description,
                                std::function<void()> run) {
    return worker_->Enqueue(
        description, [this, run = std::move(run)](const std::string&) {
          absl::Status result;
          try {
            run();
          } catch (const gloo::IoException& e) {
            result = absl::UnavailableError(e.what());
          } catch (const c10::Error& e) {
            result = absl::InternalError(e.what_without_backtrace());
          } catch (const std::exception& e) {
            result = absl::InternalError(e.what());
          }
          if (result.ok()) return result;
          const std::string message(result.message());
          const std::string lower = absl::AsciiStrToLower(message);
          const bool timed_out = absl::StrContains(lower, "timeout") ||
                                 absl::StrContains(lower, "timed out");
          std::string peer;
          for (const auto& [address, peer_rank] : peer_addresses_) {
            if (absl::StrContains(message, address)) {
              peer = absl::StrCat(" (peer: rank ", peer_rank, ")");
            }
          }
          // Gloo sometimes prints an address this rank never learnt for its
          // peer (seen about once in four runs of a whole test binary); with
          // one peer, a connection's failure is that peer's all the same.
          if (peer.empty() && peer_addresses_.size() == 1 &&
              (absl::StrContains(message, "Read error") ||
               absl::StrContains(message, "Write error") ||
               absl::StrContains(message, "closed by peer"))) {
            peer =
                absl::StrCat(" (peer: rank ", peer_addresses_[0].second, ")");
          }
          return absl::Status(
              timed_out ? absl::StatusCode::kDeadlineExceeded : result.code(),
              absl::StrCat(message, peer));
        });
  }

  const int rank_;
  const int size_;
  const std::string name_;
  const std::string layout_;
  const GlooAlgorithm algorithm_;
  const absl::Duration exit_timeout_;
  const std::shared_ptr<store::Store> store_;  // This backend's namespace.
  const std::shared_ptr<gloo::Context> context_;
  std::atomic<bool> connections_closed_{false};
  // The address each peer's end of its connection to us has, as Gloo prints it
  // in errors.
  const std::vector<std::pair<std::string, int>> peer_addresses_;

  // Last: its thread starts once everything above is constructed.
  std::unique_ptr<internal::OrderedWorker> worker_;
};

}  // namespace

bool GlooBuilt() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> CreateGlooBackend(
    const Membership& group, const GlooBackendOptions& options) {
  IgnoreSigpipe();
  const std::string who =
      absl::StrCat("[rank ", group.rank, "] ", options.name);
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  if (options.algorithm == GlooAlgorithm::kBcube &&
      (group.world_size & (group.world_size - 1)) != 0) {
    // Gloo's bcube silently returns wrong results for other sizes.
    return absl::InvalidArgumentError(absl::StrCat(
        who,
        ": the bcube allreduce needs a world size that is a power of 2, not ",
        group.world_size, "; use ring_chunked or halving_doubling"));
  }
  gloo::transport::tcp::attr attr;
  bool loopback_only = false;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else {
    attr.hostname = options.hostname.empty() ? DefaultHostname(&loopback_only)
                                             : options.hostname;
  }
  const std::string where = !options.iface.empty()
                                ? absl::StrCat("interface ", options.iface)
                                : absl::StrCat("address ", attr.hostname);
  const absl::Time start = absl::Now();
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(
        group.rank, group.world_size);
    context->setTimeout(absl::ToChronoMilliseconds(group.timeout));
    DTRAIN_ASSIGN_OR_RETURN(
        std::shared_ptr<store::Store> namespaced,
        internal::BackendNamespace(group.store, kName, group.rank));
    std::shared_ptr<store::Store> store = std::move(namespaced);
    gloo_compat::ConnectFullMesh(*context, std::make_shared<GlooStore>(store),
                                 device);
    // Publish the address of our end of each connection, so that a peer's error
    // message ("closed by peer [10.0.0.3]:41234") can be turned into a rank.
    for (int p = 0; p < group.world_size; ++p) {
      if (p == group.rank) continue;
      absl::Status s =
          store->Set(absl::StrCat("pair_address/", group.rank, "/", p),
                     context->getPair(p)->address().str());
      if (!s.ok())
        return absl::Status(s.code(), absl::StrCat(who, ": ", s.message()));
    }
    std::vector<std::pair<std::string, int>> peer_addresses;
    for (int p = 0; p < group.world_size; ++p) {
      if (p == group.rank) continue;
      absl::StatusOr<std::string> address = store->Get(
          absl::StrCat("pair_address/", p, "/", group.rank), group.timeout);
      if (!address.ok()) {
        return absl::Status(
            address.status().code(),
            absl::StrCat(who, ": ", address.status().message()));
      }
      peer_addresses.emplace_back(*address, p);
    }
    return std::unique_ptr<Backend>(
        new GlooBackend(group, options, std::move(store), std::move(context),
                        std::move(peer_addresses)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        who, ": connecting the full mesh of ", group.world_size, " ranks on ",
        where, " through ", group.store->Describe(), " failed after ",
        internal::FormatElapsed(absl::Now() - start), ": ", e.what(),
        loopback_only && group.world_size > 1
            ? absl::StrCat(" (this host's name '", attr.hostname,
                           "' resolves only to loopback: on several machines, "
                           "name the network "
                           "interface with GLOO_SOCKET_IFNAME)")
            : ""));
  }
}

}  // namespace dtrain::backend
