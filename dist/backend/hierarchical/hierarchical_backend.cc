#include "dist/backend/hierarchical/hierarchical_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "dist/backend/hierarchical/host_layout.h"
#include "dist/backend/ordered_worker.h"
#include "dist/backend/shm/shm_backend.h"
#include "dist/backend/work.h"
#include "dist/store/prefix_store.h"

namespace dtrain::backend {
namespace {

using hierarchical::HostLayout;
using internal::CompletionWork;

constexpr char kName[] = "gloo+shm";

// "2 hosts: ranks 0, 1 | 2, 3" (Backend::layout()).
std::string Describe(const HostLayout& layout) {
  return absl::StrCat(
      layout.hosts.size(),
      layout.hosts.size() == 1 ? " host: " : " hosts: ", layout.ToString());
}

// The sum for kAverage: the division happens once, on the leader, at the end.
ReduceOp Partial(ReduceOp op) {
  return op == ReduceOp::kAverage ? ReduceOp::kSum : op;
}

class HierarchicalBackend : public Backend {
 public:
  // `local` is null on a host with one rank, `leaders` null on non-leaders.
  HierarchicalBackend(int rank, HostLayout layout,
                      std::unique_ptr<Backend> local,
                      std::unique_ptr<Backend> leaders)
      : rank_(rank),
        size_(RankCount(layout)),
        layout_(std::move(layout)),
        widest_(Widest(layout_)),
        in_rank_order_(InRankOrder(layout_)),
        local_(std::move(local)),
        leaders_(std::move(leaders)),
        local_step_(LocalStepName()),
        leaders_step_(LeadersStepName()),
        worker_(kName, rank_) {}

  absl::string_view name() const override { return kName; }
  std::string layout() const override { return Describe(layout_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void Abort(const absl::Status& reason) override {
    worker_.Break(reason);
    AbortInner(reason);
  }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllReduce(kName, check_, tensor, op, {label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, op, label = std::string(label)] {
      return Reduce(tensor, op, label);
    });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(kName, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, root] {
      const int root_host = layout_.HostOf(root);
      const bool root_here = root_host == layout_.host;
      // The root's host first, so that its leader holds the data.
      if (root_here && local_ != nullptr) {
        DTRAIN_RETURN_IF_ERROR(
            Local(local_->Broadcast(tensor, layout_.LocalRankOf(root))));
      }
      if (leaders_ != nullptr)
        DTRAIN_RETURN_IF_ERROR(Leaders(leaders_->Broadcast(tensor, root_host)));
      if (!root_here && local_ != nullptr)
        DTRAIN_RETURN_IF_ERROR(Local(local_->Broadcast(tensor, 0)));
      return absl::OkStatus();
    });
  }

  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllGather(kName, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what,
                   [this, outputs, input] { return Gather(outputs, input); });
  }

  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    absl::StatusOr<internal::Description> what = internal::PrepareReduceScatter(
        kName, check_, size_, output, inputs, op);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, output, inputs, op] {
      return Scatter(output, inputs, op);
    });
  }

  // The host's shared memory, so that the host's step of an allreduce
  // copies nothing (the leaders' Gloo step reads and writes it like any
  // tensor). Through the worker, so that it keeps its place among the
  // collectives this backend issues to the host's shm backend.
  absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                            at::ScalarType dtype) override {
    if (local_ == nullptr) return Backend::AllocateBuffer(numel, dtype);
    at::Tensor buffer;
    DTRAIN_RETURN_IF_ERROR(
        Enqueue(internal::Description{"allocate buffer",
                                      absl::StrCat(numel, " x ",
                                                   c10::toString(dtype))},
                [&] {
                  absl::StatusOr<at::Tensor> t =
                      local_->AllocateBuffer(numel, dtype);
                  if (!t.ok()) return Local(t.status());
                  buffer = *std::move(t);
                  RecordBuffer(buffer);
                  return absl::OkStatus();
                })
            ->Wait());
    return buffer;
  }

  std::shared_ptr<Work> Barrier() override {
    return Enqueue(internal::Description{"barrier", ""}, [this] {
      if (local_ != nullptr) DTRAIN_RETURN_IF_ERROR(Local(local_->Barrier()));
      if (leaders_ != nullptr)
        DTRAIN_RETURN_IF_ERROR(Leaders(leaders_->Barrier()));
      if (local_ != nullptr) DTRAIN_RETURN_IF_ERROR(Local(local_->Barrier()));
      return absl::OkStatus();
    });
  }

 private:
  // Runs a collective on the worker. A failure aborts both inner backends:
  // the host's ranks stop waiting at once (through the segment), and the
  // leaders' Gloo backend does not wait for its peers when destroyed, so
  // that this process's exit reaches the other hosts.
  std::shared_ptr<Work> Enqueue(const internal::Description& description,
                                std::function<absl::Status()> body) {
    return worker_.Enqueue(description,
                           [this, body = std::move(body)](const std::string&) {
                             absl::Status s = body();
                             if (!s.ok()) AbortInner(s);
                             return s;
                           });
  }
  void AbortInner(const absl::Status& reason) {
    if (local_ != nullptr) local_->Abort(reason);
    if (leaders_ != nullptr) leaders_->Abort(reason);
  }

  // Within the host, among the leaders, back within the host. The leader
  // divides for kAverage, so that the broadcast carries the final values.
  // A tensor in a buffer from AllocateBuffer is reduced to the leader only
  // and broadcast from its buffer, copying nothing through the slots.
  absl::Status Reduce(const at::Tensor& t, ReduceOp op,
                      const std::string& label) {
    if (local_ != nullptr && InBuffer({t})) {
      DTRAIN_RETURN_IF_ERROR(
          Local(ShmReduceToRankZero(*local_, t.view({-1}), Partial(op))));
    } else if (local_ != nullptr) {
      DTRAIN_RETURN_IF_ERROR(Local(local_->AllReduce(t, Partial(op), label)));
    }
    if (leaders_ != nullptr) {
      DTRAIN_RETURN_IF_ERROR(
          Leaders(leaders_->AllReduce(t, Partial(op), label)));
    }
    if (op == ReduceOp::kAverage && layout_.leader()) t.div_(size_);
    if (local_ != nullptr)
      DTRAIN_RETURN_IF_ERROR(Local(local_->Broadcast(t, 0)));
    return absl::OkStatus();
  }

  // Both work on every host's ranks' shares side by side in a block of
  // `widest_` shares (padded where hosts differ in size), the blocks in host
  // order, in shared memory: the caller's own tensors when they lie back to
  // back in a buffer from AllocateBuffer and the hosts hold consecutive ranks
  // (then the blocks are the tensors as they lie), a scratch buffer
  // otherwise.
  //
  // Reduce-scatter: summed to each leader, reduce-scattered among the
  // leaders by block, so that the network carries (hosts - 1) / hosts of the
  // data once where an allreduce carries it twice, then each rank copies its
  // host's block from its leader's buffer and keeps its share. No rank but
  // the leader writes more than its host's block.
  absl::Status Scatter(const at::Tensor& output,
                       const std::vector<at::Tensor>& inputs, ReduceOp op) {
    const int64_t n = output.numel();
    if (n == 0) return absl::OkStatus();
    const bool direct = in_rank_order_ && InBuffer(inputs);
    at::Tensor work;
    if (direct) {
      work =
          at::from_blob(inputs[0].data_ptr(), {size_ * n}, inputs[0].options());
    } else {
      DTRAIN_ASSIGN_OR_RETURN(work, WorkArea(n, output.scalar_type()));
      for (int r = 0; r < size_; ++r)
        Share(work, r, n).copy_(inputs[r].reshape({-1}));
    }
    const int64_t block = widest_ * n;
    const int hosts = static_cast<int>(layout_.hosts.size());
    if (local_ != nullptr) {
      DTRAIN_RETURN_IF_ERROR(Local(ShmReduceToRankZero(
          *local_, work.narrow(0, 0, hosts * block), Partial(op))));
    }
    at::Tensor mine = work.narrow(0, layout_.host * block, block);
    if (leaders_ != nullptr) {
      std::vector<at::Tensor> blocks;
      for (int g = 0; g < hosts; ++g)
        blocks.push_back(work.narrow(0, g * block, block));
      DTRAIN_RETURN_IF_ERROR(
          Leaders(leaders_->ReduceScatter(mine, blocks, Partial(op))));
      if (op == ReduceOp::kAverage) mine.div_(size_);
    }
    if (local_ != nullptr)
      DTRAIN_RETURN_IF_ERROR(Local(local_->Broadcast(mine, 0)));
    const at::Tensor share = Share(work, rank_, n);
    if (share.data_ptr() != output.data_ptr()) output.view({-1}).copy_(share);
    return absl::OkStatus();
  }

  // Allgather: each rank's input into its share of its leader's buffer,
  // gathered among the leaders by block, then each rank copies the other
  // hosts' blocks from its leader's buffer.
  absl::Status Gather(const std::vector<at::Tensor>& outputs,
                      const at::Tensor& input) {
    const int64_t n = input.numel();
    if (n == 0) return absl::OkStatus();
    const bool direct = in_rank_order_ && InBuffer(outputs);
    at::Tensor work;
    if (direct) {
      work = at::from_blob(outputs[0].data_ptr(), {size_ * n},
                           outputs[0].options());
    } else {
      DTRAIN_ASSIGN_OR_RETURN(work, WorkArea(n, input.scalar_type()));
    }
    const int64_t block = widest_ * n;
    const int hosts = static_cast<int>(layout_.hosts.size());
    if (local_ != nullptr) {
      std::vector<at::Tensor> here;
      for (int r : layout_.hosts[layout_.host])
        here.push_back(Share(work, r, n));
      DTRAIN_RETURN_IF_ERROR(Local(local_->AllGather(here, input.view({-1}))));
    } else {
      Share(work, rank_, n).copy_(input.reshape({-1}));
    }
    if (leaders_ != nullptr) {
      std::vector<at::Tensor> blocks;
      for (int g = 0; g < hosts; ++g)
        blocks.push_back(work.narrow(0, g * block, block));
      DTRAIN_RETURN_IF_ERROR(
          Leaders(leaders_->AllGather(blocks, blocks[layout_.host])));
    }
    if (local_ != nullptr) {
      // The blocks before this host's and those after it.
      const int64_t before = layout_.host * block;
      const int64_t after = (layout_.host + 1) * block;
      if (before > 0) {
        DTRAIN_RETURN_IF_ERROR(
            Local(local_->Broadcast(work.narrow(0, 0, before), 0)));
      }
      if (after < hosts * block) {
        DTRAIN_RETURN_IF_ERROR(Local(local_->Broadcast(
            work.narrow(0, after, hosts * block - after), 0)));
      }
    }
    if (!direct) {
      for (int r = 0; r < size_; ++r)
        outputs[r].view({-1}).copy_(Share(work, r, n));
    }
    return absl::OkStatus();
  }

  // Rank r's share of `n` elements in a work area: its host's block, its
  // place among the host's ranks.
  at::Tensor Share(const at::Tensor& work, int r, int64_t n) const {
    const int host = layout_.HostOf(r);
    const std::vector<int>& ranks = layout_.hosts[host];
    const int64_t j = std::find(ranks.begin(), ranks.end(), r) - ranks.begin();
    return work.narrow(0, (host * widest_ + j) * n, n);
  }

  // A scratch work area for shares of `n` elements: in shared memory where
  // the host has other ranks (every rank of the host asks for the same, in
  // the same collective, so the allocation is a collective of the host's
  // ranks like any other), grown to the next power of two and kept, since
  // the shm backend keeps every buffer's mappings until it goes.
  absl::StatusOr<at::Tensor> WorkArea(int64_t n, at::ScalarType dtype) {
    const int64_t numel =
        static_cast<int64_t>(layout_.hosts.size()) * widest_ * n;
    if (local_ == nullptr) return at::empty({numel}, at::TensorOptions(dtype));
    at::Tensor& scratch = scratch_[dtype];
    if (!scratch.defined() || scratch.numel() < numel) {
      int64_t grown = 1;
      while (grown < numel) grown *= 2;
      absl::StatusOr<at::Tensor> t = local_->AllocateBuffer(grown, dtype);
      if (!t.ok()) return Local(t.status());
      scratch = *std::move(t);
      RecordBuffer(scratch);
    }
    return scratch.narrow(0, 0, numel);
  }

  // Whether `parts` lie back to back inside one buffer from AllocateBuffer.
  bool InBuffer(absl::Span<const at::Tensor> parts) const {
    if (!internal::BackToBack(parts)) return false;
    const auto begin = reinterpret_cast<uintptr_t>(parts[0].data_ptr());
    const auto end =
        begin + parts.size() * parts[0].numel() * parts[0].element_size();
    for (const auto& [base, bytes] : buffers_) {
      if (begin >= base && end <= base + bytes) return true;
    }
    return false;
  }
  void RecordBuffer(const at::Tensor& t) {
    buffers_.emplace_back(reinterpret_cast<uintptr_t>(t.data_ptr()),
                          t.numel() * t.element_size());
  }

  // Waits for a step of the inner backends and says which step failed.
  static absl::Status Step(const absl::Status& s, const std::string& step) {
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(step, ": ", s.message()));
  }
  absl::Status Local(const std::shared_ptr<Work>& work) const {
    return Step(work->Wait(), local_step_);
  }
  absl::Status Local(const absl::Status& s) const {
    return Step(s, local_step_);
  }
  absl::Status Leaders(const std::shared_ptr<Work>& work) const {
    return Step(work->Wait(), leaders_step_);
  }

  std::string LocalStepName() const {
    return absl::StrCat("shared-memory step on host ", layout_.host,
                        " (local ranks 0..", layout_.local_size() - 1,
                        " are ranks ",
                        absl::StrJoin(layout_.hosts[layout_.host], ", "), ")");
  }
  std::string LeadersStepName() const {
    std::vector<int> leaders;
    for (const std::vector<int>& h : layout_.hosts) leaders.push_back(h[0]);
    return absl::StrCat("Gloo step among the host leaders (leaders 0..",
                        leaders.size() - 1, " are ranks ",
                        absl::StrJoin(leaders, ", "), ")");
  }

  const internal::TensorCheck check_ = [](absl::string_view op,
                                          const at::Tensor& t) {
    return internal::CheckTensor(kName, op, t, /*want_cuda=*/false,
                                 internal::kCollectiveDtypes);
  };

  static int64_t Widest(const HostLayout& layout) {
    int64_t widest = 0;
    for (const std::vector<int>& h : layout.hosts)
      widest = std::max<int64_t>(widest, h.size());
    return widest;
  }
  // Hosts of one size holding consecutive ranks, as launchers start them:
  // the shares in host order are then the shares in rank order.
  static bool InRankOrder(const HostLayout& layout) {
    int next = 0;
    for (const std::vector<int>& h : layout.hosts) {
      if (h.size() != layout.hosts[0].size()) return false;
      for (int r : h) {
        if (r != next++) return false;
      }
    }
    return true;
  }

  static int RankCount(const HostLayout& layout) {
    int n = 0;
    for (const std::vector<int>& h : layout.hosts)
      n += static_cast<int>(h.size());
    return n;
  }

  const int rank_;
  const int size_;
  const HostLayout layout_;
  const int64_t widest_;      // The most ranks on one host.
  const bool in_rank_order_;  // InRankOrder(layout_).
  const std::unique_ptr<Backend> local_;
  const std::unique_ptr<Backend> leaders_;
  const std::string local_step_;
  const std::string leaders_step_;
  // The worker's only: where AllocateBuffer's buffers lie (address, bytes),
  // and the scratch work areas by dtype.
  std::vector<std::pair<uintptr_t, int64_t>> buffers_;
  std::map<at::ScalarType, at::Tensor> scratch_;
  internal::OrderedWorker worker_;  // Last: drains before the rest goes.
};

absl::Status Prefixed(const std::string& who, absl::string_view doing,
                      const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(who, ": ", doing, s.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateHierarchicalBackend(
    const Membership& group, const HierarchicalBackendOptions& o) {
  const int rank = group.rank;
  const int world_size = group.world_size;
  const std::string who = absl::StrCat("[rank ", rank, "] ", kName);
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  const absl::Time deadline = absl::Now() + group.timeout;
  std::string key = o.host_key;
  if (key.empty()) {
    absl::StatusOr<std::string> local = hierarchical::LocalHostKey();
    if (!local.ok()) return Prefixed(who, "", local.status());
    key = *std::move(local);
  }
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<store::Store> store,
      internal::BackendNamespace(group.store, "hierarchical", rank));
  absl::StatusOr<std::vector<std::string>> keys =
      hierarchical::ExchangeHostKeys(*store, rank, world_size, key, deadline);
  if (!keys.ok()) return Prefixed(who, "", keys.status());
  absl::StatusOr<HostLayout> layout = hierarchical::LayoutFromKeys(*keys, rank);
  if (!layout.ok()) return Prefixed(who, "", layout.status());
  if (layout->hosts.size() > 1 && !GlooBuilt()) {
    // Every rank, not only the host leaders that would connect through Gloo:
    // the others would wait on their leader until the timeout.
    GlooBackendOptions g = o.gloo;
    g.name = kName;
    return CreateGlooBackend(group, g).status();
  }

  // Where the layout needs no more than one of the inner backends, it runs
  // alone, under this backend's name: the name says what the caller chose,
  // layout() how it runs.
  auto shm = [&](int shm_rank, int shm_size,
                 std::shared_ptr<store::Store> shm_store,
                 bool alone) -> absl::StatusOr<std::unique_ptr<Backend>> {
    Membership m;
    m.rank = shm_rank;
    m.world_size = shm_size;
    m.store = std::move(shm_store);
    m.timeout = group.timeout;
    ShmBackendOptions s;
    if (alone) {
      s.name = kName;
      s.layout = Describe(*layout);
    }
    s.slot_bytes = o.shm_slot_bytes;
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateShmBackend(m, s);
    if (!b.ok() && b.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Prefixed(
          who,
          absl::StrCat("ranks ",
                       absl::StrJoin(layout->hosts[layout->host], ", "),
                       " run on one kernel in one PID namespace but cannot "
                       "share memory (turn shared memory off to use TCP "
                       "between them): "),
          b.status());
    }
    return b;
  };
  if (layout->hosts.size() == 1)
    return shm(rank, world_size, store, /*alone=*/true);
  if (static_cast<int>(layout->hosts.size()) == world_size) {
    Membership m = group;
    m.store = store;
    GlooBackendOptions g = o.gloo;
    g.name = kName;
    g.layout = Describe(*layout);
    return CreateGlooBackend(m, g);
  }

  std::unique_ptr<Backend> local;
  if (layout->local_size() > 1) {
    DTRAIN_ASSIGN_OR_RETURN(
        local,
        shm(layout->local_rank, layout->local_size(),
            std::make_shared<store::PrefixStore>(
                absl::StrCat("host", layout->hosts[layout->host][0]), store),
            /*alone=*/false));
  }
  std::unique_ptr<Backend> leaders;
  if (layout->leader()) {
    Membership m;
    m.rank = layout->host;
    m.world_size = static_cast<int>(layout->hosts.size());
    m.store = std::make_shared<store::PrefixStore>("leaders", store);
    m.timeout = group.timeout;
    absl::StatusOr<std::unique_ptr<Backend>> b = CreateGlooBackend(m, o.gloo);
    if (!b.ok()) {
      return Prefixed(
          who,
          absl::StrCat("connecting the leaders of the ", layout->hosts.size(),
                       " hosts (this rank is leader ", layout->host, "): "),
          b.status());
    }
    leaders = *std::move(b);
  }
  return std::unique_ptr<Backend>(std::make_unique<HierarchicalBackend>(
      rank, *std::move(layout), std::move(local), std::move(leaders)));
}

}  // namespace dtrain::backend
