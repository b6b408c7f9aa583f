// The subset of the ZIP format that PyTorch's torch.save writes (since 1.6):
// uncompressed ("stored") entries, each with a CRC-32, behind a central
// directory, with the ZIP64 extensions for archives or entries over 4 GiB.
// Compressed entries, encryption and multi-disk archives are refused: PyTorch
// writes none of them.
//
// Reading checks before it trusts: the end-of-central-directory record is
// looked for only where the format puts it, every offset and size against
// the archive, each entry's local header against its central one, names
// unique, entries disjoint (no byte is two entries'), and every entry's
// CRC-32. Faults are kDataLoss naming the entry;
// nothing reads out of bounds. Entries are views into the caller's bytes.
//
// Thread safety: pure functions.
#ifndef DTRAIN_MODELS_STATE_DICT_ZIP_ARCHIVE_H_
#define DTRAIN_MODELS_STATE_DICT_ZIP_ARCHIVE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrain::models::state_dict {

struct ZipEntry {
  std::string name;
  absl::string_view data;  // Views the archive passed to ReadZip.
};

// The entries in central-directory order.
absl::StatusOr<std::vector<ZipEntry>> ReadZip(absl::string_view archive);

// An archive of stored entries in the given order, each entry's data aligned
// to 64 bytes from the start of the archive (as PyTorch's writer does, so a
// reader may map tensors in place), ZIP64 records where sizes or offsets need
// them. kInvalidArgument for an empty or duplicate name or one over 65535
// bytes.
absl::StatusOr<std::string> WriteZip(
    const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_ZIP_ARCHIVE_H_
