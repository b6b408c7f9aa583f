#include "data/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"
#include "base/status_macros.h"

namespace dtrain::data::internal {
namespace {

constexpr size_t kInputBufferSize = size_t{1} << 20;
// Deflate's best case: 1032 output bytes per input byte, plus room for the
// gzip header and trailer of a tiny file.
constexpr uint64_t kMaxDeflateRatio = 1032;
constexpr uint64_t kSmallFileSlack = 1024;

}  // namespace

struct InputFile::Inflater {
  z_stream stream{};
  std::vector<unsigned char> in = std::vector<unsigned char>(kInputBufferSize);
  bool initialized = false;
  // The current gzip member ended; more input must be a new member.
  bool member_done = false;
  // Compressed bytes read from the file so far.
  uint64_t file_bytes = 0;

  ~Inflater() {
    if (initialized) inflateEnd(&stream);
  }
};

absl::StatusOr<std::unique_ptr<InputFile>> InputFile::Open(
    std::string path, int64_t max_file_bytes) {
  // Regular files only, within the limit: not a FIFO, /dev/zero or a stray
  // file of many gigabytes.
  DTRAIN_ASSIGN_OR_RETURN(
      base::OpenedFile opened,
      base::OpenForReading(path,
                           base::FileLimit{"a data file", max_file_bytes}));
  std::FILE* file = fdopen(opened.fd.get(), "rb");
  if (file == nullptr) {
    return base::ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  }
  opened.fd.Release();
  const uint64_t file_size = static_cast<uint64_t>(opened.size);
  unsigned char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, file);
  const bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (std::ferror(file) || std::fseek(file, 0, SEEK_SET) != 0) {
    const int err = errno;
    std::fclose(file);
    return base::ErrnoStatus(err, absl::StrCat("cannot read ", path));
  }
  return std::unique_ptr<InputFile>(
      new InputFile(std::move(path), file, file_size, gzip));
}

InputFile::InputFile(std::string path, std::FILE* file, uint64_t file_size,
                     bool compressed)
    : path_(std::move(path)),
      file_(file),
      file_size_(file_size),
      compressed_(compressed) {
  if (compressed_) inflater_ = std::make_unique<Inflater>();
}

InputFile::~InputFile() { std::fclose(file_); }

uint64_t InputFile::max_data_size() const {
  if (!compressed_) return file_size_;
  if (file_size_ > (std::numeric_limits<uint64_t>::max() - kSmallFileSlack) /
                       kMaxDeflateRatio) {
    return std::numeric_limits<uint64_t>::max();
  }
  return file_size_ * kMaxDeflateRatio + kSmallFileSlack;
}

absl::Status InputFile::Error(absl::string_view what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": ", what, " (at byte ", offset_,
                   compressed_ ? " of the uncompressed data)" : ")"));
}

absl::StatusOr<size_t> InputFile::Read(void* dst, size_t n) {
  return compressed_ ? ReadInflated(static_cast<char*>(dst), n)
                     : ReadRaw(static_cast<char*>(dst), n);
}

absl::StatusOr<size_t> InputFile::ReadRaw(char* dst, size_t n) {
  // A file that grows while it is read is read no further than one byte past
  // its size at Open: enough to report it, never unbounded.
  if (offset_ > file_size_) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, file_size_ + 1 - offset_));
  const size_t got = std::fread(dst, 1, n, file_);
  offset_ += got;
  if (got < n && std::ferror(file_)) {
    return Error(absl::StrCat("read failed: ", base::ErrnoText(errno)));
  }
  return got;
}

absl::StatusOr<bool> InputFile::FillInput() {
  Inflater& z = *inflater_;
  // As ReadRaw: no further than one byte past the size at Open.
  if (z.file_bytes > file_size_) return false;
  const size_t want = static_cast<size_t>(
      std::min<uint64_t>(z.in.size(), file_size_ + 1 - z.file_bytes));
  const size_t got = std::fread(z.in.data(), 1, want, file_);
  if (got == 0 && std::ferror(file_)) {
    return Error(absl::StrCat("read failed: ", base::ErrnoText(errno)));
  }
  z.file_bytes += got;
  z.stream.next_in = z.in.data();
  z.stream.avail_in = static_cast<uInt>(got);
  return got > 0;
}

absl::StatusOr<size_t> InputFile::ReadInflated(char* dst, size_t n) {
  Inflater& z = *inflater_;
  if (!z.initialized) {
    // 16 + MAX_WBITS: gzip wrapper only; a zlib or raw deflate stream is
    // not what the datasets ship.
    if (inflateInit2(&z.stream, 16 + MAX_WBITS) != Z_OK) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path_, ": cannot initialise zlib"));
    }
    z.initialized = true;
  }
  size_t done = 0;
  while (done < n) {
    if (z.stream.avail_in == 0) {
      DTRAIN_ASSIGN_OR_RETURN(bool more, FillInput());
      if (!more) {
        if (z.member_done) break;  // The clean end of the last member.
        return Error(absl::StrCat("the gzip data is truncated: it ends after ",
                                  z.file_bytes,
                                  " compressed bytes, inside a gzip member"));
      }
    }
    if (z.member_done) {
      // More input after a complete member: a concatenated member must
      // follow (inflate rejects anything else as a bad header).
      inflateReset(&z.stream);
      z.member_done = false;
    }
    // zlib counts in uInt: feed at most 1 GiB per call.
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    z.stream.next_out = reinterpret_cast<Bytef*>(dst + done);
    z.stream.avail_out = static_cast<uInt>(chunk);
    const int rc = inflate(&z.stream, Z_NO_FLUSH);
    done += chunk - z.stream.avail_out;
    offset_ += chunk - z.stream.avail_out;
    if (rc == Z_STREAM_END) {
      z.member_done = true;
    } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && z.stream.avail_in == 0)) {
      return Error(
          absl::StrCat("corrupt gzip data near compressed byte ",
                       z.file_bytes - z.stream.avail_in, ": ",
                       z.stream.msg != nullptr ? z.stream.msg : zError(rc)));
    }
  }
  return done;
}

absl::Status InputFile::ReadExactly(void* dst, size_t n,
                                    absl::string_view what) {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    DTRAIN_ASSIGN_OR_RETURN(size_t got, Read(out + done, n - done));
    if (got == 0) {
      return Error(absl::StrCat("the file is truncated: ", what, " needs ", n,
                                " bytes, only ", done, " are left"));
    }
    done += got;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> InputFile::ReadRest() {
  std::string out;
  if (!compressed_ && file_size_ > offset_) out.reserve(file_size_ - offset_);
  char buffer[1 << 16];
  for (;;) {
    DTRAIN_ASSIGN_OR_RETURN(size_t got, Read(buffer, sizeof(buffer)));
    if (got == 0) return out;
    out.append(buffer, got);
  }
}

absl::Status InputFile::ExpectEnd(absl::string_view what) {
  const uint64_t at = offset_;
  uint64_t extra = 0;
  char buffer[1 << 16];
  for (;;) {
    DTRAIN_ASSIGN_OR_RETURN(size_t got, Read(buffer, sizeof(buffer)));
    if (got == 0) break;
    extra += got;
  }
  if (extra == 0) return absl::OkStatus();
  offset_ = at;
  return Error(absl::StrCat(extra, " unexpected bytes follow ", what));
}

}  // namespace dtrain::data::internal
