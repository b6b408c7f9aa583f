// A Store kept in one file, for `file:///path` init methods: ranks on one
// machine, or on several machines that share a filesystem (NFS included), meet
// through an append-only log of records that every handle replays. Modelled on
// PyTorch's c10d FileStore; the log format is this project's own.
//
// How it works: every operation takes an exclusive fcntl() lock on the file,
// reads the records appended since this handle last looked into an in-memory
// copy, answers from that copy and appends its own record (Add and CompareSet
// append the resulting value as a Set). Get and Wait poll, sleeping 1 ms
// growing to 10 ms between looks, until the keys exist or the timeout passes.
// There is no compaction: the log grows with every write, which suits
// rendezvous traffic (a few records per rank).
//
// Lifetime of the file (c10d's contract, slightly stricter): Open appends an
// "open" record and Close (or the destructor) a "close" record. The handle
// whose close leaves no handle open deletes the file, provided at least
// `num_ranks` handles have closed (`num_ranks` = 0: as soon as none is open).
// Give `num_ranks` (the world size, one handle per rank) whenever it is known:
// without it, a rank that finishes before a slow peer has opened the file
// deletes it and the peer starts a fresh, empty store. A process that dies
// without closing never decrements the count, so the file stays: start each job
// on a fresh path (a leftover file would hand the new job the old job's keys),
// and delete leftovers from the launcher.
//
// Robustness: records are length-prefixed and checksummed. A record cut short
// at the end of the log (its writer was killed mid-write, or the disk filled)
// is removed by the next handle that takes the lock, so it never reaches
// readers; a damaged record elsewhere gives kDataLoss naming the file and the
// offset. Lengths are checked against limits and the file size before anything
// is allocated. A file that does not start with the store's header is refused
// with kInvalidArgument and left untouched.
//
// Thread safety: every method may be called from any number of threads. The
// FileStore handles of one process take turns on one process-wide mutex while
// they hold a file lock (fcntl locks belong to the process, not the handle, and
// closing any descriptor of the file drops them), so their operations are
// serialized; waiting (Get, Wait) happens outside it.
// A forked child must neither use nor destroy its parent's handles (its
// destructor would count a close twice): it opens its own and leaves with
// _exit().
//
// The on-disk format (a header line, then length-prefixed records with a
// CRC-32 of their header and of the whole record) is in docs/FORMATS.md.
#ifndef DTRAIN_DIST_STORE_FILE_STORE_H_
#define DTRAIN_DIST_STORE_FILE_STORE_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "base/posix_io.h"
#include "dist/store/store.h"

namespace dtrain::store {

class FileStore : public Store {
 public:
  // Limits on what one record may hold; Set/Add/CompareSet beyond them give
  // kInvalidArgument, and a log claiming more is corrupt.
  static constexpr int64_t kMaxKeyBytes = int64_t{64} << 10;
  static constexpr int64_t kMaxValueBytes = int64_t{256} << 20;

  // Opens the store at `path` (made absolute against the current directory),
  // creating the file if it does not exist. `num_ranks`: how many handles will
  // open this path over the job (normally the world size), or 0 when unknown;
  // see the lifetime contract above. `timeout` is the default for Get/Wait.
  // Errors: kInvalidArgument when the directory does not exist or the file is
  // not a store log; kPermissionDenied (with the system's reason) when the file
  // cannot be opened for reading and writing; kDataLoss for a damaged log.
  static absl::StatusOr<std::shared_ptr<FileStore>> Open(
      const std::string& path, int num_ranks,
      absl::Duration timeout = kDefaultStoreTimeout);

  // Closes the handle; see the lifetime contract above. Idempotent. Later calls
  // on this handle give kFailedPrecondition.
  ~FileStore() override;
  absl::Status Close();

  using Store::Get;
  using Store::Wait;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) override;
  absl::StatusOr<bool> Delete(absl::string_view key) override;
  // Counts the keys set through the Store interface, not the open/close
  // bookkeeping.
  absl::StatusOr<int64_t> NumKeys() override;
  // "file:///abs/path".
  std::string Describe() const override;

  // The absolute path of the log file.
  const std::string& path() const { return path_; }

 private:
  enum class Op : uint8_t { kSet = 1, kDelete = 2, kOpen = 3, kClose = 4 };

  FileStore(std::string path, int num_ranks, base::UniqueFd fd,
            absl::Duration timeout);

  // Under the file lock: checks that the path still names this handle's file,
  // writes or checks the header, catches up and appends the "open" record.
  // kAborted when the file was deleted between open() and the lock: retry.
  // Requires mu_ held.
  absl::Status JoinLocked();
  // Takes the process-wide mutex and the fcntl lock, checks that the file is
  // still at `path_`, reads new records, runs `fn`, and unlocks. Requires mu_
  // held.
  absl::Status WithLog(absl::FunctionRef<absl::Status()> fn);
  // Runs `probe` through WithLog until it returns true (then true), sleeping
  // between tries; false once `timeout` has passed. Takes mu_ itself (must not
  // be held), and releases it while sleeping.
  absl::StatusOr<bool> Poll(absl::Duration timeout,
                            absl::FunctionRef<bool()> probe);
  // The *Locked methods below require mu_ held.
  absl::Status CheckStillAtPathLocked();
  // Reads the records between `pos_` and the end of the file, truncating a
  // record cut short at the end.
  absl::Status RefreshLocked();
  absl::Status ReadAtLocked(int64_t offset, char* buf, int64_t size);
  absl::Status AppendLocked(Op op, absl::string_view key,
                            absl::string_view value);
  void ApplyLocked(Op op, absl::string_view key, absl::string_view value);
  // Errors naming this store: "file store file:///p: <what>[: <errno text>]".
  absl::Status IoError(absl::string_view what, int error_number) const;
  absl::Status DataLoss(int64_t offset, absl::string_view what) const;

  const std::string path_;
  const int num_ranks_;

  // std::mutex rather than Abseil's, so that ThreadSanitizer builds see the
  // synchronisation (Debian's Abseil is not instrumented). Guards every member
  // below.
  std::mutex mu_;
  base::UniqueFd fd_;  // invalid once closed
  // Offset of the first record this handle has not read; always at a record
  // boundary, so it equals the end of the log right after a refresh.
  int64_t pos_ = 0;
  absl::flat_hash_map<std::string, std::string> data_;
  int64_t opened_ = 0;  // "open" records seen
  int64_t closed_ = 0;  // "close" records seen
};

}  // namespace dtrain::store

#endif  // DTRAIN_DIST_STORE_FILE_STORE_H_
