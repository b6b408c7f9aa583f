// The shared-memory backend: collectives among ranks that share one host's
// memory, on CPU tensors, without the kernel's network stack. Every rank maps
// one segment (segment.h) holding a control block, one slot per rank and a
// result area. Messages go through in chunks of the slot size: each rank
// copies its chunk into its slot, every rank reduces its own share of the
// chunk across all slots in rank order into the result area, and each copies
// the result out, with a barrier (group_barrier.h) between the steps. Every
// element is reduced once, in rank order, so all ranks get bit-identical
// results, the same for any chunk size.
//
// AllocateBuffer (backend.h) gives each rank a segment of its own that every
// rank maps. An AllReduce of a tensor that lies entirely inside such a buffer
// (at the same offset on every rank, which the ranks check) copies nothing in
// or out: between two barriers each rank reduces its own share straight from
// all ranks' buffers and writes it into all of them; the bits are those of
// the copying path. Other tensors, including ones only partly inside a
// buffer, take the copying path.
//
// A Broadcast of a part of such a buffer copies straight from the root's
// buffer into each rank's, between two barriers.
//
// ReduceScatter and AllGather, the collectives of a sharded optimizer, copy
// nothing either when their per-rank tensors lie back to back, in rank order,
// inside one buffer (at the same offset on every rank): a reduce_scatter
// reduces each rank's share straight from all ranks' buffers into rank 0's
// (whose inputs then hold every share's result, as after an allreduce; the
// other ranks' inputs stay as they were) and copies it to the rank's output
// (which may be that share itself); an allgather copies each rank's input
// into its share of every rank's buffer. Otherwise a reduce_scatter copies
// its inputs once through the slots and each rank reduces only its own share:
// half an allreduce's work. Either way, each share has an allreduce's bits.
//
// Creation is the proof that the ranks share memory: rank 0 creates the
// segment and publishes its locator through the store; every other rank maps
// it and checks its token; all ranks then learn who could not (through the
// store, so all of them fail alike, naming those ranks). Ranks on several
// hosts are refused (kFailedPrecondition); use the gloo backend there.
//
// Same contract as backend.h: asynchronous, collectives run in issue order on
// one worker thread, errors name the rank, the collective, how long it ran and
// the peer ("rank 1 (pid 4242) has exited", "ranks 1, 3 have not arrived");
// after a failure every later call fails at once. A rank that fails tells
// the others through the segment, so they fail at once too.
#ifndef DTRAIN_DIST_BACKEND_SHM_SHM_BACKEND_H_
#define DTRAIN_DIST_BACKEND_SHM_SHM_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dist/backend/backend.h"
#include "dist/backend/membership.h"

namespace dtrain::backend {

// The shm backend's own knobs; who the ranks are, their store and the timeout
// come in a Membership (membership.h).
struct ShmBackendOptions {
  // Bytes per rank's slot: messages larger than this go in several chunks.
  int64_t slot_bytes = int64_t{4} << 20;
  // What name() returns and messages say: the backend the user chose, which
  // is "gloo+shm" where the hierarchical backend (hierarchical_backend.h)
  // runs this one because every rank is on one host.
  std::string name = "shm";
  // What layout() returns; empty: "1 host: ranks 0, 1, ...".
  std::string layout;
};

// kInvalidArgument for a bad membership (Membership::Check), more ranks than
// one segment holds or a bad slot size; kFailedPrecondition when some rank
// cannot map rank 0's segment (naming them); kDeadlineExceeded when a rank
// does not arrive within the timeout.
absl::StatusOr<std::unique_ptr<Backend>> CreateShmBackend(
    const Membership& group, const ShmBackendOptions& options = {});

// For the hierarchical backend (hierarchical_backend.h), where only a host's
// leader needs the host's sum: reduces `tensor` over the ranks of `shm` into
// rank 0's, in place, with the bits shm's AllReduce gives; the other ranks'
// tensors stay as they were. Every rank must pass the same part of a buffer
// from shm.AllocateBuffer: kInvalidArgument otherwise (on every rank, as any
// collective's failure), and when `shm` is not an shm backend. Issued and
// ordered as shm's collectives are.
std::shared_ptr<Work> ShmReduceToRankZero(Backend& shm, at::Tensor tensor,
                                          ReduceOp op);

// For tests only: how many of `backend`'s collectives (allreduce,
// reduce_scatter, allgather) took a zero-copy path so far, or -1 when it is
// not an shm backend. Any thread.
int64_t ShmZeroCopyCollectivesForTesting(const Backend& backend);

}  // namespace dtrain::backend

#endif  // DTRAIN_DIST_BACKEND_SHM_SHM_BACKEND_H_
