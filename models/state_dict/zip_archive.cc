#include "models/state_dict/zip_archive.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/byte_codec.h"
#include "base/crc32.h"
#include "base/status_macros.h"

namespace dtrain::models::state_dict {
namespace {

// Record signatures and sizes (PKWARE's APPNOTE.TXT, sections 4.3.7-4.3.16).
constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr size_t kLocalSize = 30;
constexpr size_t kCentralSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64Size = 56;
constexpr size_t kEnd64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
// The padding field PyTorch's writer (miniz) uses to align data: "FB".
constexpr uint16_t kPaddingExtraId = 0x4246;
constexpr size_t kAlignment = 64;
constexpr uint32_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kMax16 = 0xFFFF;
// Version 4.5 is the first with ZIP64; 2.0 reads stored entries.
constexpr uint16_t kVersionZip64 = 45;
constexpr uint16_t kVersionPlain = 20;

absl::Status Fault(absl::string_view message) {
  return absl::DataLossError(absl::StrCat("malformed zip archive: ", message));
}

struct Central {
  std::string name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t size = 0;
  uint64_t local_offset = 0;
};

// Replaces the 32-bit fields that say "see ZIP64" with the values of the
// ZIP64 extra field, which lists only those, in this order.
absl::Status ApplyZip64(absl::string_view extra, Central& c) {
  base::ByteReader r(extra, 0, "malformed zip archive: ");
  while (r.remaining() > 0) {
    uint16_t id = 0, length = 0;
    DTRAIN_RETURN_IF_ERROR(r.U16("extra field id", &id));
    DTRAIN_RETURN_IF_ERROR(r.U16("extra field length", &length));
    absl::string_view body;
    DTRAIN_RETURN_IF_ERROR(r.Raw(length, "extra field", &body));
    if (id != kZip64ExtraId) continue;
    base::ByteReader z(body, 0,
                       absl::StrCat("malformed zip archive: ", c.name, ": "));
    if (c.size == kMax32) DTRAIN_RETURN_IF_ERROR(z.U64("zip64 size", &c.size));
    if (c.compressed == kMax32)
      DTRAIN_RETURN_IF_ERROR(z.U64("zip64 compressed size", &c.compressed));
    if (c.local_offset == kMax32)
      DTRAIN_RETURN_IF_ERROR(z.U64("zip64 offset", &c.local_offset));
    return absl::OkStatus();
  }
  if (c.size == kMax32 || c.compressed == kMax32 || c.local_offset == kMax32)
    return Fault(absl::StrCat(c.name, ": ZIP64 sizes announced but missing"));
  return absl::OkStatus();
}

struct Directory {
  uint64_t entries = 0;
  uint64_t size = 0;
  uint64_t offset = 0;
  uint64_t end = 0;  // Where the directory must end: the next record.
};

absl::StatusOr<Directory> FindDirectory(absl::string_view archive) {
  if (archive.size() < kEndSize)
    return Fault(absl::StrCat(archive.size(), " bytes are too few for a zip"));
  // The end record is the last thing in the file but for a comment of at
  // most 65535 bytes; look for it only there, last position first.
  const size_t last = archive.size() - kEndSize;
  const size_t first = last > kMax16 ? last - kMax16 : 0;
  for (size_t at = last + 1; at-- > first;) {
    if (base::GetLittleEndian(archive.data() + at, 4) != kEndSig) continue;
    base::ByteReader r(archive.substr(at + 4, kEndSize - 4), at + 4,
                       "malformed zip archive: ");
    uint16_t disk = 0, directory_disk = 0, on_disk = 0, total = 0, comment = 0;
    uint32_t size = 0, offset = 0;
    DTRAIN_RETURN_IF_ERROR(r.U16("disk number", &disk));
    DTRAIN_RETURN_IF_ERROR(r.U16("directory disk", &directory_disk));
    DTRAIN_RETURN_IF_ERROR(r.U16("entries on disk", &on_disk));
    DTRAIN_RETURN_IF_ERROR(r.U16("entries", &total));
    DTRAIN_RETURN_IF_ERROR(r.U32("directory size", &size));
    DTRAIN_RETURN_IF_ERROR(r.U32("directory offset", &offset));
    DTRAIN_RETURN_IF_ERROR(r.U16("comment length", &comment));
    if (at + kEndSize + comment != archive.size()) continue;  // Data, not it.
    Directory d{total, size, offset, at};
    if (total == kMax16 || size == kMax32 || offset == kMax32) {
      // ZIP64: a locator right before the end record points at the ZIP64
      // end record, which holds the full-width values.
      if (at < kEnd64LocatorSize ||
          base::GetLittleEndian(archive.data() + at - kEnd64LocatorSize, 4) !=
              kEnd64LocatorSig) {
        return Fault("ZIP64 values announced but the ZIP64 locator is missing");
      }
      const uint64_t end64 =
          base::GetLittleEndian(archive.data() + at - kEnd64LocatorSize + 8, 8);
      if (end64 > at - kEnd64LocatorSize ||
          at - kEnd64LocatorSize - end64 < kEnd64Size ||
          base::GetLittleEndian(archive.data() + end64, 4) != kEnd64Sig) {
        return Fault("the ZIP64 end record is not where its locator says");
      }
      const char* p = archive.data() + end64;
      d.entries = base::GetLittleEndian(p + 32, 8);
      d.size = base::GetLittleEndian(p + 40, 8);
      d.offset = base::GetLittleEndian(p + 48, 8);
      d.end = end64;
    } else if (disk != 0 || directory_disk != 0 || on_disk != total) {
      return Fault("multi-disk archives are not supported");
    }
    if (d.offset > d.end || d.end - d.offset < d.size)
      return Fault(absl::StrCat("the central directory (", d.size,
                                " bytes at offset ", d.offset,
                                ") runs past its end record at ", d.end));
    if (d.entries > d.size / kCentralSize)
      return Fault(absl::StrCat(d.entries, " entries cannot fit in a ", d.size,
                                "-byte central directory"));
    return d;
  }
  return Fault("no end-of-central-directory record (not a zip file)");
}

}  // namespace

absl::StatusOr<std::vector<ZipEntry>> ReadZip(absl::string_view archive) {
  DTRAIN_ASSIGN_OR_RETURN(Directory d, FindDirectory(archive));
  base::ByteReader r(archive.substr(d.offset, d.size), d.offset,
                     "malformed zip archive: ");
  std::vector<ZipEntry> out;
  out.reserve(d.entries);
  absl::flat_hash_set<std::string> names;
  // Each entry's [local header, end of data), to check they are disjoint.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<uint32_t> crcs;
  spans.reserve(d.entries);
  crcs.reserve(d.entries);
  for (uint64_t i = 0; i < d.entries; ++i) {
    uint32_t sig = 0, crc = 0, compressed = 0, size = 0, external = 0,
             offset = 0;
    uint16_t made_by = 0, needed = 0, flags = 0, method = 0, time = 0, date = 0,
             name_length = 0, extra_length = 0, comment_length = 0, disk = 0,
             internal = 0;
    DTRAIN_RETURN_IF_ERROR(r.U32("central header", &sig));
    if (sig != kCentralSig)
      return Fault(absl::StrCat("entry ", i, " of the central directory has ",
                                "no central header signature"));
    DTRAIN_RETURN_IF_ERROR(r.U16("version made by", &made_by));
    DTRAIN_RETURN_IF_ERROR(r.U16("version needed", &needed));
    DTRAIN_RETURN_IF_ERROR(r.U16("flags", &flags));
    DTRAIN_RETURN_IF_ERROR(r.U16("method", &method));
    DTRAIN_RETURN_IF_ERROR(r.U16("time", &time));
    DTRAIN_RETURN_IF_ERROR(r.U16("date", &date));
    DTRAIN_RETURN_IF_ERROR(r.U32("crc", &crc));
    DTRAIN_RETURN_IF_ERROR(r.U32("compressed size", &compressed));
    DTRAIN_RETURN_IF_ERROR(r.U32("size", &size));
    DTRAIN_RETURN_IF_ERROR(r.U16("name length", &name_length));
    DTRAIN_RETURN_IF_ERROR(r.U16("extra length", &extra_length));
    DTRAIN_RETURN_IF_ERROR(r.U16("comment length", &comment_length));
    DTRAIN_RETURN_IF_ERROR(r.U16("disk", &disk));
    DTRAIN_RETURN_IF_ERROR(r.U16("internal attributes", &internal));
    DTRAIN_RETURN_IF_ERROR(r.U32("external attributes", &external));
    DTRAIN_RETURN_IF_ERROR(r.U32("local header offset", &offset));
    absl::string_view name, extra, comment;
    DTRAIN_RETURN_IF_ERROR(r.Raw(name_length, "name", &name));
    DTRAIN_RETURN_IF_ERROR(r.Raw(extra_length, "extra field", &extra));
    DTRAIN_RETURN_IF_ERROR(r.Raw(comment_length, "comment", &comment));
    Central c{std::string(name), flags, method, crc, compressed, size, offset};
    DTRAIN_RETURN_IF_ERROR(ApplyZip64(extra, c));
    if (c.name.empty()) return Fault(absl::StrCat("entry ", i, " has no name"));
    if (!names.insert(c.name).second)
      return Fault(absl::StrCat(c.name, ": named twice"));
    if (c.flags & 1) return Fault(absl::StrCat(c.name, ": encrypted"));
    if (c.method != 0 || c.compressed != c.size)
      return Fault(absl::StrCat(c.name, ": compressed (method ", c.method,
                                "); torch.save stores entries uncompressed"));
    // The local header repeats the name; its own extra field (padding, in
    // PyTorch's files) decides where the data starts.
    if (c.local_offset > d.offset || d.offset - c.local_offset < kLocalSize)
      return Fault(absl::StrCat(c.name, ": local header offset ",
                                c.local_offset, " is outside the entries"));
    const char* local = archive.data() + c.local_offset;
    if (base::GetLittleEndian(local, 4) != kLocalSig)
      return Fault(
          absl::StrCat(c.name, ": no local header at offset ", c.local_offset));
    const uint64_t local_name = base::GetLittleEndian(local + 26, 2);
    const uint64_t local_extra = base::GetLittleEndian(local + 28, 2);
    const uint64_t start =
        c.local_offset + kLocalSize + local_name + local_extra;
    if (start > d.offset || d.offset - start < c.size)
      return Fault(absl::StrCat(c.name, ": ", c.size, " bytes at offset ",
                                start, " run into the central directory"));
    if (archive.substr(c.local_offset + kLocalSize, local_name) != c.name)
      return Fault(absl::StrCat(c.name,
                                ": the local header names another "
                                "entry"));
    spans.emplace_back(c.local_offset, start + c.size);
    crcs.push_back(c.crc);
    out.push_back({std::move(c.name), archive.substr(start, c.size)});
  }
  // Entries that overlap would let one file's bytes count many times (each
  // entry's CRC, each storage a loader copies); no zip writer makes them.
  std::vector<size_t> order(out.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (spans[order[i]].first < spans[order[i - 1]].second)
      return Fault(absl::StrCat(
          out[order[i]].name, " (at offset ", spans[order[i]].first,
          ") overlaps ", out[order[i - 1]].name, " (bytes ",
          spans[order[i - 1]].first, " to ", spans[order[i - 1]].second, ")"));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (base::Crc32(out[i].data) != crcs[i])
      return Fault(
          absl::StrCat(out[i].name, ": CRC-32 mismatch (damaged data)"));
  }
  return out;
}

absl::StatusOr<std::string> WriteZip(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  std::string directory;
  base::ByteWriter w(&out), cw(&directory);
  absl::flat_hash_set<absl::string_view> names;
  for (const auto& [name, data] : entries) {
    if (name.empty() || name.size() > kMax16)
      return absl::InvalidArgumentError(absl::StrCat(
          "zip entry name of ", name.size(), " bytes (1 to 65535 allowed)"));
    if (!names.insert(name).second)
      return absl::InvalidArgumentError(
          absl::StrCat("zip entry ", name, " given twice"));
    const uint32_t crc = base::Crc32(data);
    const uint64_t offset = out.size();
    const bool big = data.size() >= kMax32;
    const bool far = offset >= kMax32;
    // Local header: ZIP64 sizes in its extra field when they need 64 bits,
    // then padding so the data starts on a 64-byte boundary.
    const size_t local_zip64 = big ? 4 + 16 : 0;
    const size_t unpadded = offset + kLocalSize + name.size() + local_zip64;
    size_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
    if (padding != 0 && padding < 4) padding += kAlignment;  // Field header.
    w.U32(kLocalSig)
        .U16(big ? kVersionZip64 : kVersionPlain)
        .U16(0)
        .U16(0)
        .U16(0)
        .U16(0x21)  // 1980-01-01: reproducible bytes.
        .U32(crc)
        .U32(big ? kMax32 : data.size())
        .U32(big ? kMax32 : data.size())
        .U16(name.size())
        .U16(local_zip64 + padding)
        .Raw(name);
    if (big) w.U16(kZip64ExtraId).U16(16).U64(data.size()).U64(data.size());
    if (padding != 0)
      w.U16(kPaddingExtraId).U16(padding - 4).Raw(std::string(padding - 4, 0));
    w.Raw(data);
    // Central header: ZIP64 values for whichever fields overflow.
    std::string zip64;
    base::ByteWriter zw(&zip64);
    if (big) zw.U64(data.size()).U64(data.size());
    if (far) zw.U64(offset);
    cw.U32(kCentralSig)
        .U16(zip64.empty() ? kVersionPlain : kVersionZip64)
        .U16(zip64.empty() ? kVersionPlain : kVersionZip64)
        .U16(0)
        .U16(0)
        .U16(0)
        .U16(0x21)
        .U32(crc)
        .U32(big ? kMax32 : data.size())
        .U32(big ? kMax32 : data.size())
        .U16(name.size())
        .U16(zip64.empty() ? 0 : 4 + zip64.size())
        .U16(0)
        .U16(0)
        .U16(0)
        .U32(0)
        .U32(far ? kMax32 : offset)
        .Raw(name);
    if (!zip64.empty()) cw.U16(kZip64ExtraId).U16(zip64.size()).Raw(zip64);
  }
  const uint64_t directory_offset = out.size();
  w.Raw(directory);
  const bool zip64 = entries.size() >= kMax16 || directory.size() >= kMax32 ||
                     directory_offset >= kMax32;
  if (zip64) {
    const uint64_t end64 = out.size();
    w.U32(kEnd64Sig)
        .U64(kEnd64Size - 12)
        .U16(kVersionZip64)
        .U16(kVersionZip64)
        .U32(0)
        .U32(0)
        .U64(entries.size())
        .U64(entries.size())
        .U64(directory.size())
        .U64(directory_offset);
    w.U32(kEnd64LocatorSig).U32(0).U64(end64).U32(1);
  }
  w.U32(kEndSig)
      .U16(0)
      .U16(0)
      .U16(zip64 ? kMax16 : entries.size())
      .U16(zip64 ? kMax16 : entries.size())
      .U32(zip64 ? kMax32 : directory.size())
      .U32(zip64 ? kMax32 : directory_offset)
      .U16(0);
  return out;
}

}  // namespace dtrain::models::state_dict
