#include "data/stl10.h"

#include <ATen/ops/empty.h>
#include <sys/stat.h>

#include <cstring>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "data/input_file.h"

namespace dtrain::data {
namespace {

constexpr int64_t kImageBytes =
    kStl10Channels * kStl10ImageSize * kStl10ImageSize;

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// The whole content of a file as a uint8 tensor: read straight into the
// tensor for raw files, through a buffer for gzip.
absl::StatusOr<at::Tensor> ReadBytes(internal::InputFile& file) {
  return base::GuardTorch(
      absl::StatusCode::kResourceExhausted,
      absl::StrCat(file.path(), ": cannot allocate memory: "),
      [&]() -> absl::StatusOr<at::Tensor> {
        if (!file.compressed()) {
          at::Tensor out = at::empty({static_cast<int64_t>(file.file_size())},
                                     at::TensorOptions().dtype(at::kByte));
          DTRAIN_RETURN_IF_ERROR(
              file.ReadExactly(out.data_ptr(), file.file_size(), "the data"));
          DTRAIN_RETURN_IF_ERROR(file.ExpectEnd("the data"));
          return out;
        }
        DTRAIN_ASSIGN_OR_RETURN(std::string bytes, file.ReadRest());
        at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())},
                                   at::TensorOptions().dtype(at::kByte));
        std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
        return out;
      });
}

absl::StatusOr<at::Tensor> ReadFile(const std::string& path) {
  DTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<internal::InputFile> file,
                          internal::InputFile::Open(path));
  return ReadBytes(*file);
}

}  // namespace

absl::StatusOr<Dataset> ReadStl10Files(const std::string& images_path,
                                       const std::string& labels_path,
                                       std::string name) {
  DTRAIN_ASSIGN_OR_RETURN(at::Tensor labels, ReadFile(labels_path));
  DTRAIN_ASSIGN_OR_RETURN(at::Tensor bytes, ReadFile(images_path));

  const int64_t size = bytes.numel();
  if (size % kImageBytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, ": ", size,
        " bytes is not a whole number of STL-10 images (", kImageBytes,
        " bytes each, 3 x 96 x 96): truncated or not STL-10"));
  }
  const int64_t count = size / kImageBytes;
  if (labels.numel() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image and label counts differ: ", images_path, " holds ", count,
        " images, ", labels_path, " holds ", labels.numel(), " labels"));
  }
  const uint8_t* label = labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < count; ++i) {
    if (label[i] < 1 || label[i] > kStl10NumClasses) {
      return absl::InvalidArgumentError(
          absl::StrCat(labels_path, ": label ", int{label[i]}, " of example ",
                       i, " is outside 1..", kStl10NumClasses));
    }
  }
  return base::GuardTorch(
      absl::StatusCode::kResourceExhausted,
      absl::StrCat(images_path, ": cannot decode: "),
      [&]() -> absl::StatusOr<Dataset> {
        // Each channel is column-major: the file is [N, C, W, H].
        at::Tensor images =
            bytes
                .view({count, kStl10Channels, kStl10ImageSize, kStl10ImageSize})
                .transpose(2, 3)
                .contiguous();
        at::Tensor zero_based = labels.to(at::kLong).sub(1);
        return Dataset::Create(std::move(name), std::move(images),
                               std::move(zero_based), kStl10NumClasses);
      });
}

absl::StatusOr<Dataset> LoadStl10(absl::string_view dir, Split split) {
  const std::string prefix(SplitName(split));
  const std::string images_name = prefix + "_X.bin";
  const std::string labels_name = prefix + "_y.bin";
  std::vector<std::string> tried;
  for (const std::string& base :
       {std::string(dir), JoinPath(dir, "stl10_binary")}) {
    for (const char* suffix : {"", ".gz"}) {
      const std::string images = JoinPath(base, images_name + suffix);
      const std::string labels = JoinPath(base, labels_name + suffix);
      if (IsFile(images) && IsFile(labels)) {
        return ReadStl10Files(images, labels,
                              absl::StrCat("stl10 ", SplitName(split)));
      }
      tried.push_back(images);
      tried.push_back(labels);
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "STL-10 ", SplitName(split), " data: no pair of files among ",
      absl::StrJoin(tried, ", "),
      ". Download http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz "
      "(2.6 GB), extract it with tar -xzf, and pass the directory that holds "
      "stl10_binary/ (or stl10_binary/ itself) as --data_dir."));
}

}  // namespace dtrain::data
