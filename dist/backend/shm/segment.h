// Memory that the ranks of one host share: an anonymous memory file
// (memfd_create) that one process creates and the others open through
// /proc/<pid>/fd/<fd>, checking a random token written into it. Opening it
// proves that two processes share memory (same kernel, a PID namespace that
// shows the creator), rather than trusting host names or LOCAL_WORLD_SIZE.
// Nothing is named in /dev/shm: the kernel frees the memory when the last
// process mapping it exits, however it exits (SIGKILL included), and another
// job cannot reach it without this job's locator and token.
//
// Thread safety: the object is immutable after creation; what the memory
// holds is the user's business.
#ifndef DTRAIN_DIST_BACKEND_SHM_SEGMENT_H_
#define DTRAIN_DIST_BACKEND_SHM_SEGMENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::backend::shm {

class Segment {
 public:
  // Creates a zero-filled segment of `bytes` usable bytes.
  static absl::StatusOr<std::unique_ptr<Segment>> Create(size_t bytes);
  // Maps the segment `locator` (from the creator's locator()) names.
  // kUnavailable when it cannot be opened from this process (another host,
  // another PID namespace, the creator gone), kFailedPrecondition when what
  // opens is not that segment (wrong token or size).
  static absl::StatusOr<std::unique_ptr<Segment>> Attach(
      absl::string_view locator);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // The usable bytes, 64-byte aligned, after a private header.
  void* data() const { return data_; }
  size_t size() const { return size_; }

  // "<pid> <fd> <bytes> <token>": what Attach needs.
  const std::string& locator() const { return locator_; }

  // Drops this process's file descriptor; the mapping stays. The creator
  // calls it once every peer has attached, so that only mappings keep the
  // memory alive.
  void CloseFile();

 private:
  Segment(int fd, void* base, size_t mapped, std::string locator);

  int fd_;
  void* const base_;
  const size_t mapped_;
  void* const data_;
  const size_t size_;
  const std::string locator_;
};

}  // namespace dtrain::backend::shm

#endif  // DTRAIN_DIST_BACKEND_SHM_SEGMENT_H_
