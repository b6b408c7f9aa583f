#include "dist/backend/shm/shm_backend.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "base/process_liveness.h"
#include "base/status_macros.h"
#include "dist/backend/collective.h"
#include "dist/backend/ordered_worker.h"
#include "dist/backend/shm/group_barrier.h"
#include "dist/backend/shm/reduce.h"
#include "dist/backend/shm/segment.h"
#include "dist/backend/shm/shared_buffers.h"
#include "dist/backend/work.h"
#include "dist/store/store.h"

namespace dtrain::backend {
namespace {

using internal::CompletionWork;
using shm::AlignUp;
using shm::Control;
using shm::FindInBuffer;
using shm::GroupBarrier;
using shm::InPlaceKind;
using shm::InPlaceName;
using shm::InPlaceRequest;
using shm::Segment;
using shm::SharedBuffer;

// The store namespace; messages use the name the options give.
constexpr char kName[] = "shm";

// "1 host: ranks 0, 1, 2" (Backend::layout()).
std::string OneHost(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return absl::StrCat("1 host: ", size == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

constexpr int64_t kControlBytes = AlignUp(sizeof(Control), 64);

// What each rank publishes when a buffer is allocated: "<numel> <dtype>
// <locator>", NUL-padded.
constexpr int64_t kBufferRecordBytes = 128;
class ShmBackend : public Backend {
 public:
  ShmBackend(const Membership& group, const ShmBackendOptions& options,
             std::unique_ptr<Segment> segment)
      : rank_(group.rank),
        size_(group.world_size),
        name_(options.name),
        layout_(options.layout.empty() ? OneHost(size_) : options.layout),
        timeout_(group.timeout),
        slot_bytes_(options.slot_bytes),
        segment_(std::move(segment)),
        base_(static_cast<char*>(segment_->data()) + kControlBytes),
        barrier_(static_cast<Control*>(segment_->data()), rank_, size_,
                 base::ProcessRunning, GroupBarrier::DefaultSpin(size_)),
        slots_(Slots()),
        worker_(name_, rank_) {}

  absl::string_view name() const override { return name_; }
  std::string layout() const override { return layout_; }
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
        internal::PrepareAllReduce(name_, check_, tensor, op, {label});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, op](absl::Time deadline) {
      if (std::optional<InPlaceRequest> in_buffer =
              FindInBuffer(buffers_, rank_, InPlaceKind::kAllReduce, {tensor},
                           static_cast<int32_t>(op))) {
        return InBuffers(*in_buffer, deadline, [&](const SharedBuffer& b) {
          return shm::ReduceShare(b, *in_buffer, rank_, size_,
                                  /*to_all=*/true);
        });
      }
      return Reduce(tensor, op, deadline, /*destination=*/-1, tensor);
    });
  }

  absl::StatusOr<at::Tensor> AllocateBuffer(int64_t numel,
                                            at::ScalarType dtype) override {
    const internal::Description what{
        "buffer allocation", absl::StrCat(numel, " x ", c10::toString(dtype))};
    const auto& dtypes = internal::kCollectiveDtypes;
    // 2^40 elements: far beyond any host's memory, and no overflow in bytes.
    if (numel < 0 || numel > (int64_t{1} << 40) ||
        std::find(std::begin(dtypes), std::end(dtypes), dtype) ==
            std::end(dtypes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("[rank ", rank_, "] ", name_,
                       ": cannot allocate a buffer of ", what.details));
    }
    auto tensor = std::make_shared<at::Tensor>();
    DTRAIN_RETURN_IF_ERROR(
        Enqueue(what, [this, numel, dtype, tensor](absl::Time deadline) {
          return CreateBuffer(numel, dtype, deadline, tensor.get());
        })->Wait());
    return *tensor;
  }

  // ShmReduceToRankZero (shm_backend.h).
  std::shared_ptr<Work> ReduceToRankZero(at::Tensor tensor, ReduceOp op) {
    absl::StatusOr<internal::Description> what =
        internal::PrepareAllReduce(name_, check_, tensor, op, {});
    if (!what.ok()) return CompletionWork::Failed(what.status());
    what->op = "reduce";
    return Enqueue(*what, [this, tensor, op](absl::Time deadline) {
      if (tensor.numel() == 0) return absl::OkStatus();
      std::optional<InPlaceRequest> in_buffer =
          FindInBuffer(buffers_, rank_, InPlaceKind::kReduce, {tensor},
                       static_cast<int32_t>(op));
      if (!in_buffer) {
        return absl::InvalidArgumentError(
            "the tensor does not lie in a buffer from AllocateBuffer");
      }
      return InBuffers(*in_buffer, deadline, [&](const SharedBuffer& b) {
        return shm::ReduceShare(b, *in_buffer, rank_, size_, /*to_all=*/false);
      });
    });
  }

  int64_t zero_copy_collectives() const {
    return zero_copy_collectives_.load(std::memory_order_relaxed);
  }

  std::shared_ptr<Work> Broadcast(at::Tensor tensor, int root) override {
    absl::StatusOr<internal::Description> what =
        internal::PrepareBroadcast(name_, check_, size_, tensor, root);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, tensor, root](absl::Time deadline) {
      if (std::optional<InPlaceRequest> in_buffer =
              FindInBuffer(buffers_, rank_, InPlaceKind::kBroadcast, {tensor},
                           static_cast<int32_t>(root))) {
        return InBuffers(*in_buffer, deadline, [&](const SharedBuffer& b) {
          shm::CopyFromRoot(b, *in_buffer, rank_);
          return absl::OkStatus();
        });
      }
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
        internal::PrepareAllGather(name_, check_, size_, outputs, input);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, outputs, input](absl::Time deadline) {
      if (std::optional<InPlaceRequest> in_buffer = FindInBuffer(
              buffers_, rank_, InPlaceKind::kAllGather, outputs, 0)) {
        return InBuffers(*in_buffer, deadline, [&](const SharedBuffer& b) {
          shm::CopyShareToAll(b, *in_buffer, rank_, size_,
                              static_cast<const char*>(input.data_ptr()));
          return absl::OkStatus();
        });
      }
      std::vector<char*> out;
      for (const at::Tensor& t : outputs) {
        out.push_back(static_cast<char*>(t.data_ptr()));
      }
      return GatherBytes(static_cast<const char*>(input.data_ptr()),
                         input.numel() * input.element_size(), out, deadline);
    });
  }

  std::shared_ptr<Work> ReduceScatter(at::Tensor output,
                                      std::vector<at::Tensor> inputs,
                                      ReduceOp op) override {
    absl::StatusOr<internal::Description> what = internal::PrepareReduceScatter(
        name_, check_, size_, output, inputs, op);
    if (!what.ok()) return CompletionWork::Failed(what.status());
    return Enqueue(*what, [this, output, inputs, op](absl::Time deadline) {
      if (std::optional<InPlaceRequest> in_buffer =
              FindInBuffer(buffers_, rank_, InPlaceKind::kReduceScatter, inputs,
                           static_cast<int32_t>(op))) {
        return InBuffers(*in_buffer, deadline, [&](const SharedBuffer& b) {
          return shm::ReduceScatterShare(b, *in_buffer, rank_, size_,
                                         static_cast<char*>(output.data_ptr()));
        });
      }
      return ReduceScatterThroughSlots(output, inputs, op, deadline);
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
    return internal::CheckTensor(name_, op, t, /*want_cuda=*/false,
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

  // Rank r's `n` bytes at `in` land at `out[r]` on every rank, through the
  // slots in chunks.
  absl::Status GatherBytes(const char* in, int64_t n,
                           const std::vector<char*>& out, absl::Time deadline) {
    for (int64_t off = 0; off < n; off += slot_bytes_) {
      const int64_t k = std::min(slot_bytes_, n - off);
      std::memcpy(slot(rank_), in + off, k);
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      for (int r = 0; r < size_; ++r) std::memcpy(out[r] + off, slot(r), k);
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
    }
    return absl::OkStatus();
  }

  // AllocateBuffer's collective: each rank creates its own segment, the ranks
  // swap locators through the slots (no store after creation, and failures
  // are collectives' failures), map every peer's, and meet once more so that
  // the creator's file can go.
  absl::Status CreateBuffer(int64_t numel, at::ScalarType dtype,
                            absl::Time deadline, at::Tensor* tensor) {
    const int64_t bytes =
        std::max<int64_t>(64, AlignUp(numel * c10::elementSize(dtype), 64));
    absl::StatusOr<std::unique_ptr<Segment>> created = Segment::Create(bytes);
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat("creating ", bytes,
                       " B of shared memory: ", created.status().message()));
    }
    std::shared_ptr<Segment> own = *std::move(created);
    std::string mine =
        absl::StrCat(numel, " ", static_cast<int>(dtype), " ", own->locator());
    if (mine.size() >= static_cast<size_t>(kBufferRecordBytes)) {
      return absl::InternalError(absl::StrCat("locator too long: ", mine));
    }
    mine.resize(kBufferRecordBytes, '\0');
    std::vector<std::string> records(size_,
                                     std::string(kBufferRecordBytes, '\0'));
    std::vector<char*> out;
    for (std::string& r : records) out.push_back(r.data());
    DTRAIN_RETURN_IF_ERROR(
        GatherBytes(mine.data(), kBufferRecordBytes, out, deadline));

    SharedBuffer buffer;
    buffer.bytes = bytes;
    bool differ = false;
    std::vector<std::string> asked;  // What each rank asked for, for errors.
    std::vector<std::string> locators;
    for (int r = 0; r < size_; ++r) {
      const std::vector<std::string> parts =
          absl::StrSplit(records[r].c_str(), absl::MaxSplits(' ', 2));
      int64_t their_numel = -1;
      int their_dtype = -1;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &their_numel) ||
          !absl::SimpleAtoi(parts[1], &their_dtype) || their_dtype < 0 ||
          their_dtype >= static_cast<int>(at::ScalarType::NumOptions)) {
        differ = true;
        asked.push_back(absl::StrCat("rank ", r, " is not allocating"));
        locators.emplace_back();
        continue;
      }
      differ |= their_numel != numel || their_dtype != static_cast<int>(dtype);
      asked.push_back(absl::StrCat(
          "rank ", r, " asked for ", their_numel, " x ",
          c10::toString(static_cast<at::ScalarType>(their_dtype))));
      locators.push_back(parts[2]);
    }
    if (differ) {
      // Every rank sees the same records, so all fail alike.
      return absl::InvalidArgumentError(absl::StrCat(
          "the ranks do not allocate the same buffer (",
          absl::StrJoin(asked, ", "),
          "): every rank must allocate the same buffers in the same order"));
    }
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) {
        buffer.mappings.push_back(own);
        continue;
      }
      absl::StatusOr<std::unique_ptr<Segment>> peer =
          Segment::Attach(locators[r]);
      if (!peer.ok()) {
        return absl::Status(peer.status().code(),
                            absl::StrCat("mapping rank ", r, "'s buffer: ",
                                         peer.status().message()));
      }
      buffer.mappings.push_back(*std::move(peer));
    }
    // Every rank has mapped every buffer: only the mappings keep them alive.
    DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
    own->CloseFile();
    for (const auto& m : buffer.mappings) {
      buffer.data.push_back(static_cast<char*>(m->data()));
    }
    // The tensor holds this rank's mapping, so it outlives the backend if
    // need be; the peers' mappings go with the backend.
    *tensor = at::from_blob(
        own->data(), {numel}, [own](void*) {},
        at::TensorOptions().dtype(dtype));
    buffers_.push_back(std::move(buffer));
    return absl::OkStatus();
  }

  // The zero-copy collectives' first step: each rank publishes its request
  // and, once all have, checks that every rank asked for the same.
  absl::Status AgreeOn(const InPlaceRequest& request, absl::Time deadline) {
    std::memcpy(slot(rank_), &request, sizeof(request));
    DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
    std::vector<int> differ;
    for (int r = 0; r < size_; ++r) {
      if (std::memcmp(slot(r), &request, sizeof(request)) != 0) {
        differ.push_back(r);
      }
    }
    if (differ.empty()) return absl::OkStatus();
    const bool per_rank = request.kind == InPlaceKind::kReduceScatter ||
                          request.kind == InPlaceKind::kAllGather;
    const int64_t parts = per_rank ? int64_t{size_} : 1;
    return absl::InvalidArgumentError(absl::StrCat(
        "rank(s) ", absl::StrJoin(differ, ", "), " did not ",
        InPlaceName(request.kind), " the same part of shared buffer #",
        request.buffer, " (", parts * request.numel, " elements at byte ",
        request.offset, "): every rank must pass the same part of its buffer"));
  }

  // A zero-copy collective (shared_buffers.h): once every rank has agreed
  // on the request, each does its `step` on the buffer before the second
  // barrier. It writes the slots only before the first barrier and reads
  // them only before the second (Reduce's rule), and never touches the
  // result area, so it is safe beside the copying collectives.
  absl::Status InBuffers(
      const InPlaceRequest& request, absl::Time deadline,
      const std::function<absl::Status(const SharedBuffer&)>& step) {
    DTRAIN_RETURN_IF_ERROR(AgreeOn(request, deadline));
    DTRAIN_RETURN_IF_ERROR(step(buffers_[request.buffer]));
    zero_copy_collectives_.fetch_add(1, std::memory_order_relaxed);
    return barrier_.Arrive(deadline);
  }

  // The copying reduce_scatter: rounds of a piece of every rank's share,
  // copied side by side into each rank's slot; between two barriers each
  // rank reduces its own share's piece across the slots in rank order (the
  // bits of an allreduce) straight into `output`. Each rank copies its whole
  // input once and reduces only its share: half an allreduce's work.
  absl::Status ReduceScatterThroughSlots(const at::Tensor& output,
                                         const std::vector<at::Tensor>& inputs,
                                         ReduceOp op, absl::Time deadline) {
    const int64_t element = output.element_size();
    const int64_t piece = slot_bytes_ / (size_ * element);
    if (piece == 0) {
      // Slots too small to hold an element of every share: rank j's share
      // is reduced like an allreduce that only j keeps.
      for (int j = 0; j < size_; ++j) {
        DTRAIN_RETURN_IF_ERROR(Reduce(inputs[j], op, deadline, j, output));
      }
      return absl::OkStatus();
    }
    const int64_t total = output.numel();
    char* out = static_cast<char*>(output.data_ptr());
    std::vector<const void*> mine;
    for (int r = 0; r < size_; ++r) {
      mine.push_back(slot(r) + rank_ * piece * element);
    }
    for (int64_t first = 0; first < total; first += piece) {
      const int64_t n = std::min(piece, total - first);
      for (int j = 0; j < size_; ++j) {
        std::memcpy(
            slot(rank_) + j * piece * element,
            static_cast<const char*>(inputs[j].data_ptr()) + first * element,
            n * element);
      }
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
      DTRAIN_RETURN_IF_ERROR(shm::ReduceInOrder(output.scalar_type(), op, mine,
                                                0, n, out + first * element));
      DTRAIN_RETURN_IF_ERROR(barrier_.Arrive(deadline));
    }
    return absl::OkStatus();
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
  const std::string name_;
  const std::string layout_;
  const absl::Duration timeout_;
  const int64_t slot_bytes_;
  const std::unique_ptr<Segment> segment_;
  char* const base_;
  GroupBarrier barrier_;  // Used on the worker thread only, after Join.
  const std::vector<const void*> slots_;  // slot(r) for every rank
  std::vector<SharedBuffer> buffers_;     // Worker thread only.
  std::atomic<int64_t> zero_copy_collectives_{0};
  internal::OrderedWorker worker_;  // Last: drains before the rest goes.
};

}  // namespace

std::shared_ptr<Work> ShmReduceToRankZero(Backend& shm, at::Tensor tensor,
                                          ReduceOp op) {
  auto* b = dynamic_cast<ShmBackend*>(&shm);
  if (b == nullptr) {
    return CompletionWork::Failed(absl::InvalidArgumentError(
        absl::StrCat("[rank ", shm.rank(), "] ", shm.name(),
                     ": a reduce to rank 0 needs the shm backend")));
  }
  return b->ReduceToRankZero(std::move(tensor), op);
}

int64_t ShmZeroCopyCollectivesForTesting(const Backend& backend) {
  const auto* shm = dynamic_cast<const ShmBackend*>(&backend);
  return shm == nullptr ? -1 : shm->zero_copy_collectives();
}

absl::StatusOr<std::unique_ptr<Backend>> CreateShmBackend(
    const Membership& group, const ShmBackendOptions& o) {
  const std::string who = absl::StrCat("[rank ", group.rank, "] ", o.name);
  DTRAIN_RETURN_IF_ERROR(group.Check(who));
  if (group.world_size > shm::kMaxLocalRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", group.world_size, " ranks, more than the ",
                     shm::kMaxLocalRanks, " one host's segment holds"));
  }
  if (o.slot_bytes < 64 || o.slot_bytes > (int64_t{1} << 30) ||
      o.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": slot_bytes ", o.slot_bytes,
                     " is not a multiple of 64 between 64 B and 1 GiB"));
  }
  DTRAIN_ASSIGN_OR_RETURN(
      std::shared_ptr<store::Store> store,
      internal::BackendNamespace(group.store, kName, group.rank));
  const absl::Time deadline = absl::Now() + group.timeout;
  const int64_t bytes = kControlBytes + (group.world_size + 1) * o.slot_bytes;

  // Rank 0 creates the segment; the others prove they can map it.
  absl::StatusOr<std::unique_ptr<Segment>> segment;
  if (group.rank == 0) {
    segment = Segment::Create(static_cast<size_t>(bytes));
    if (!segment.ok()) {
      return absl::Status(segment.status().code(),
                          absl::StrCat(who, ": creating ", bytes,
                                       " B: ", segment.status().message()));
    }
    Control::Init((*segment)->data());
    DTRAIN_RETURN_IF_ERROR(store->Set("segment", (*segment)->locator()));
  } else {
    absl::StatusOr<std::string> locator = store->Get("segment", group.timeout);
    if (!locator.ok()) {
      return absl::Status(locator.status().code(),
                          absl::StrCat(who, ": waiting for rank 0's segment: ",
                                       locator.status().message()));
    }
    segment = Segment::Attach(*locator);
  }
  DTRAIN_RETURN_IF_ERROR(
      store->Set(absl::StrCat("attached/", group.rank),
                 segment.ok() ? "" : std::string(segment.status().message())));
  std::vector<std::string> refused;
  for (int r = 0; r < group.world_size; ++r) {
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
  auto backend = std::make_unique<ShmBackend>(group, o, *std::move(segment));
  if (absl::Status s = backend->Join(deadline); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(who, ": meeting the other ",
                               group.world_size - 1, " ranks: ", s.message()));
  }
  // Every rank has mapped it: from now on only the mappings keep it alive.
  backend->CloseFile();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace dtrain::backend
