#include "dist/backend/shm/shm_backend.h"

#include <ATen/core/Tensor.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/process_liveness.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "dist/backend/ordered_worker.h"
#include "dist/backend/shm/group_barrier.h"
#include "dist/backend/shm/reduce.h"
#include "dist/backend/shm/segment.h"
#include "dist/backend/work.h"

namespace dtrain::backend {
namespace {

using internal::CompletionWork;
using shm::Control;
using shm::GroupBarrier;
using shm::Segment;

constexpr char kName[] = "shm";

constexpr int64_t AlignUp(int64_t n, int64_t to) {
  return (n + to - 1) / to * to;
}
constexpr int64_t kControlBytes = AlignUp(sizeof(Control), 64);

class ShmBackend : public Backend {
 public:
  ShmBackend(const ShmBackendOptions& options, std::unique_ptr<Segment> segment)
      : rank_(options.rank),
        size_(options.world_size),
        timeout_(options.timeout),
        slot_bytes_(options.slot_bytes),
        segment_(std::move(segment)),
        base_(static_cast<char*>(segment_->data()) + kControlBytes),
        barrier_(static_cast<Control*>(segment_->data()), rank_, size_,
                 base::ProcessRunning, GroupBarrier::DefaultSpin(size_)),
        slots_(Slots()),
        worker_(kName, rank_) {}

  absl::string_view name() const override { return kName; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // The barrier's abort is atomics in the segment, safe from any thread: the
  // collective running here and the peers' fail at once.
  void Abort(const absl::Status& reason) override {
    worker_.Break(reason);
    barrier_.Abort();
  }

  // Creation's last step: every rank registers and meets the others once.
  absl::Status Join(absl::Time deadline) {
    barrier_.Register(::getpid());
    return barrier_.Arrive(deadline);
  }
  void CloseFile() { segment_->CloseFile(); }

  std::shared_ptr<Work> AllReduce(at::Tensor tensor, ReduceOp op,
                                  absl::string_view label) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllReduce(kName, check_, tensor, op, {label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, op](absl::Time deadline) {
      return Reduce(tensor, op, deadline, /*destination=*/-1, tensor);
    });
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(kName, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, root](absl::Time deadline) {
      char* data = static_cast<char*>(tensor.data_ptr());
      const int64_t total = tensor.numel() * tensor.element_size();
      for (int64_t off = 0; off < total; off += slot_bytes_) {
        const int64_t n = std::min(slot_bytes_, total - off);
        // Through the root's slot, never the result area: see Reduce.
        if (rank_ == root) std::memcpy(slot(root), data + off, n);
        DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
        if (rank_ != root) std::memcpy(data + off, slot(root), n);
        DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      }
      return absl::OkStatus();
    });
  }

  std::shared_ptr<Work> AllGather(std::vector<at::Tensor> outputs,
                                  at::Tensor input) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllGather(kName, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, outputs, input](absl::Time deadline) {
      const char* in = static_cast<const char*>(input.data_ptr());
      const int64_t total = input.numel() * input.element_size();
      for (int64_t off = 0; off < total; off += slot_bytes_) {
        const int64_t n = std::min(slot_bytes_, total - off);
        std::memcpy(slot(rank_), in + off, n);
        DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
        for (int r = 0; r < size_; ++r) {
          std::memcpy(static_cast<char*>(outputs[r].data_ptr()) + off, slot(r),
                      n);
        }
        DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      }
      return absl::OkStatus();
    });
  }

  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    absl::StatusOr<internal::Description> what = internal::PrepareReduceScatter(
        kName, check_, size_, output, inputs, op);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, output, inputs, op](absl::Time deadline) {
      // Rank j's share is reduced like an allreduce that only j keeps.
      for (int j = 0; j < size_; ++j) {
        DTRAIN_RETURN_IF_ERROR(Reduce(inputs[j], op, deadline, j, output));
      }
      return absl::OkStatus();
    });
  }

  std::shared_ptr<Work> Barrier() override {
    return Enqueue(
        internal::Description{"barrier", ""},
        [this](absl::Time deadline) { return barrier_.Arrive(deadline); });
  }

 private:
  using Body = std::function<absl::Status(absl::Time deadline)>;

  char* slot(int r) const { return base_ + r * slot_bytes_; }
  std::vector<const void*> Slots() const {
    std::vector<const void*> out;
    for (int r = 0; r < size_; ++r) out.push_back(slot(r));
    return out;
  }
  char* result() const { return base_ + size_ * slot_bytes_; }

  absl::Status Check(absl::string_view op, const at::Tensor& t) const {
    return internal::CheckTensor(kName, op, t, /*want_cuda=*/false,
                                 internal::kCollectiveDtypes);
  }
  const internal::TensorCheck check_ = [this](absl::string_view op,
                                              const at::Tensor& t) {
    return Check(op, t);
  };

  // Runs `body` on the worker within the timeout; a failure tells the peers,
  // so that they stop waiting for this rank.
  std::shared_ptr<Work> Enqueue(const internal::Description& description,
                                Body body) {
    return worker_.Enqueue(description,
                           [this, body = std::move(body)](const std::string&) {
                             absl::Status s = body(absl::Now() + timeout_);
                             if (!s.ok()) barrier_.Abort();
                             return s;
                           });
  }

  // Reduces `input` over the ranks, chunk by chunk, into `output` on rank
  // `destination` (every rank when -1). Each rank reduces its own share of
  // each chunk, in rank order.
  //
  // Two barriers per chunk are enough. A rank writes its slot (the next
  // chunk's copy-in) only after the barrier that follows every rank's
  // reduction, the last read of the slots; and the result area is written
  // only after the barrier that follows the copy-in, which every rank reaches
  // after copying the previous chunk's result out. The other collectives
  // keep to the same rule: they write only slots, each before a barrier, and
  // read them only before the next one.
  absl::Status Reduce(const at::Tensor& input, ReduceOp op, absl::Time deadline,
                      int destination, const at::Tensor& output) {
    const int64_t element = input.element_size();
    const int64_t chunk = slot_bytes_ / element;
    const int64_t total = input.numel();
    const char* in = static_cast<const char*>(input.data_ptr());
    char* out = static_cast<char*>(output.data_ptr());
    for (int64_t first = 0; first < total; first += chunk) {
      const int64_t n = std::min(chunk, total - first);
      std::memcpy(slot(rank_), in + first * element, n * element);
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      // Shares aligned to 64 elements, so no two ranks write one cache line.
      const int64_t share = AlignUp((n + size_ - 1) / size_, 64);
      const int64_t begin = std::min(n, rank_ * share);
      const int64_t end = std::min(n, begin + share);
      DTRAIN_RETURN_IF_ERROR(shm::ReduceInOrder(input.scalar_type(), op, slots_,
                                                begin, end, result()));
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      if (destination < 0 || destination == rank_) {
        std::memcpy(out + first * element, result(), n * element);
      }
    }
    return absl::OkStatus();
  }

  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const int64_t slot_bytes_;
  const std::unique_ptr<Segment> segment_;
  char* const base_;
  GroupBarrier barrier_;  // Used on the worker thread only, after Join.
  const std::vector<const void*> slots_;  // slot(r) for every rank
  internal::OrderedWorker worker_;        // Last: drains before the rest goes.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateShmBackend(
    const ShmBackendOptions& o) {
  const std::string who = absl::StrCat("[rank ", o.rank, "] shm");
  DTRAIN_RETURN_IF_ERROR(
      internal::CheckMembership(who, o.store.get(), o.rank, o.world_size));
  if (o.world_size > shm::kMaxLocalRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", o.world_size, " ranks, more than the ",
                     shm::kMaxLocalRanks, " one host's segment holds"));
  }
  if (o.slot_bytes < 64 || o.slot_bytes > (int64_t{1} << 30) ||
      o.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": slot_bytes ", o.slot_bytes,
                     " is not a multiple of 64 between 64 B and 1 GiB"));
  }
  DTRAIN_ASSIGN_OR_RETURN(std::shared_ptr<store::Store> store,
                          internal::BackendNamespace(o.store, kName, o.rank));
  const absl::Time deadline = absl::Now() + o.timeout;
  const int64_t bytes = kControlBytes + (o.world_size + 1) * o.slot_bytes;

  // Rank 0 creates the segment; the others prove they can map it.
  absl::StatusOr<std::unique_ptr<Segment>> segment;
  if (o.rank == 0) {
    segment = Segment::Create(static_cast<size_t>(bytes));
    if (!segment.ok()) {
      return absl::Status(segment.status().code(),
                          absl::StrCat(who, ": creating ", bytes,
                                       " B: ", segment.status().message()));
    }
    Control::Init((*segment)->data());
    DTRAIN_RETURN_IF_ERROR(store->Set("segment", (*segment)->locator()));
  } else {
    absl::StatusOr<std::string> locator = store->Get("segment", o.timeout);
    if (!locator.ok()) {
      return absl::Status(locator.status().code(),
                          absl::StrCat(who, ": waiting for rank 0's segment: ",
                                       locator.status().message()));
    }
    segment = Segment::Attach(*locator);
  }
  DTRAIN_RETURN_IF_ERROR(
      store->Set(absl::StrCat("attached/", o.rank),
                 segment.ok() ? "" : std::string(segment.status().message())));
  std::vector<std::string> refused;
  for (int r = 0; r < o.world_size; ++r) {
    absl::StatusOr<std::string> v =
        store->Get(absl::StrCat("attached/", r),
                   std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!v.ok()) {
      return absl::Status(
          v.status().code(),
          absl::StrCat(who, ": waiting for rank ", r,
                       " to map the segment: ", v.status().message()));
    }
    if (!v->empty()) refused.push_back(absl::StrCat("rank ", r, ": ", *v));
  }
  if (!refused.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": not every rank can map rank 0's shared memory (",
        absl::StrJoin(refused, "; "),
        "); the shm backend needs every rank on one host: use gloo"));
  }
  auto backend = std::make_unique<ShmBackend>(o, *std::move(segment));
  if (absl::Status s = backend->Join(deadline); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(who, ": meeting the other ", o.world_size - 1,
                               " ranks: ", s.message()));
  }
  // Every rank has mapped it: from now on only the mappings keep it alive.
  backend->CloseFile();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dtrain::backend
