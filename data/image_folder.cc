#include "data/image_folder.h"

#include <ATen/ops/empty.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/atomic_file.h"
#include "base/posix_io.h"
#include "base/status_macros.h"
#include "base/torch_guard.h"
#include "data/random.h"

namespace dtrain::data {
namespace {

// Combined with the loader's example seed for the per-example transform, so
// that its draws are independent of the batch transforms' (which combine
// the seed with their position in the pipeline).
constexpr uint64_t kTransformStream = ~uint64_t{0};

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

struct Entry {
  std::string name;
  bool is_dir;
};

// The entries of `dir` except . and .., symbolic links resolved (a dangling
// link counts as a file). errno's Status when the folder cannot be read.
absl::StatusOr<std::vector<Entry>> ListDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return base::ErrnoStatus(errno, absl::StrCat("cannot open folder ", dir));
  }
  std::vector<Entry> entries;
  errno = 0;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      struct stat st;
      is_dir =
          stat(JoinPath(dir, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    entries.push_back({name, is_dir});
  }
  const int error = errno;
  closedir(d);
  if (error != 0) {
    return base::ErrnoStatus(error, absl::StrCat("cannot read folder ", dir));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return entries;
}

// The image files below `dir` in torchvision's order: sorted(os.walk(dir))
// visits folders sorted by path, files sorted by name within each. Folders
// reached twice through links (a cycle) are skipped.
absl::Status Walk(const std::string& class_dir, int64_t label,
                  std::vector<std::pair<std::string, int64_t>>* files,
                  int64_t* ignored) {
  // (path, its sorted file names), collected then sorted by path.
  std::vector<std::pair<std::string, std::vector<std::string>>> folders;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::vector<std::string> pending = {class_dir};
  while (!pending.empty()) {
    std::string dir = std::move(pending.back());
    pending.pop_back();
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) {
      return base::ErrnoStatus(errno, absl::StrCat("cannot open folder ", dir));
    }
    if (!seen.emplace(st.st_dev, st.st_ino).second) continue;
    DTRAIN_ASSIGN_OR_RETURN(std::vector<Entry> entries, ListDir(dir));
    std::vector<std::string> names;
    for (Entry& e : entries) {
      if (e.is_dir) {
        pending.push_back(JoinPath(dir, e.name));
      } else if (HasImageExtension(e.name)) {
        names.push_back(std::move(e.name));
      } else {
        ++*ignored;
      }
    }
    folders.emplace_back(std::move(dir), std::move(names));
  }
  std::sort(folders.begin(), folders.end());
  for (const auto& [dir, names] : folders) {
    for (const std::string& name : names) {
      files->emplace_back(JoinPath(dir, name), label);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadImageFile(const std::string& path,
                                          int64_t max_bytes) {
  return base::ReadFile(path, base::FileLimit{"an image file", max_bytes});
}

}  // namespace

bool HasImageExtension(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

ImageFolder::ImageFolder(std::string root, std::string name,
                         ImageFolderOptions options,
                         std::vector<std::string> classes,
                         std::vector<File> files, int64_t ignored_files)
    : root_(std::move(root)),
      name_(std::move(name)),
      options_(std::move(options)),
      classes_(std::move(classes)),
      files_(std::move(files)),
      ignored_files_(ignored_files) {}

absl::StatusOr<std::shared_ptr<const ImageFolder>> ImageFolder::Open(
    const std::string& root, ImageFolderOptions options) {
  if (options.transform == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("imagefolder ", root,
                     ": no transform to bring the images to one size (set "
                     "ImageFolderOptions::transform)"));
  }
  struct stat st;
  if (stat(root.c_str(), &st) != 0) {
    return base::ErrnoStatus(
        errno, absl::StrCat("imagefolder: cannot open folder ", root));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(
        absl::StrCat("imagefolder: ", root, " is not a folder"));
  }
  DTRAIN_ASSIGN_OR_RETURN(std::vector<Entry> entries, ListDir(root));
  std::vector<std::string> classes;
  for (Entry& e : entries) {
    if (e.is_dir) classes.push_back(std::move(e.name));
  }
  if (classes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "imagefolder: ", root,
        " has no class folders; expected one folder per class with the "
        "images inside (",
        root, "/<class>/<image>.jpg)"));
  }
  std::vector<File> files;
  int64_t ignored = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    const std::string dir = JoinPath(root, classes[c]);
    std::vector<std::pair<std::string, int64_t>> found;
    DTRAIN_RETURN_IF_ERROR(
        Walk(dir, static_cast<int64_t>(c), &found, &ignored));
    if (found.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "imagefolder: class folder ", dir,
          " holds no images (supported: .jpg, .jpeg, .png in any case)"));
    }
    for (auto& [path, label] : found) files.push_back({std::move(path), label});
  }
  std::string name =
      options.name.empty() ? absl::StrCat("imagefolder ", root) : options.name;
  return std::shared_ptr<const ImageFolder>(
      new ImageFolder(root, std::move(name), std::move(options),
                      std::move(classes), std::move(files), ignored));
}

absl::StatusOr<std::shared_ptr<const ImageFolder>> ImageFolder::Subset(
    absl::Span<const int64_t> indices) const {
  std::vector<File> files;
  files.reserve(indices.size());
  for (const int64_t i : indices) {
    if (i < 0 || i >= size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": subset index ", i, " is outside [0, ", size(), ")"));
    }
    files.push_back(files_[i]);
  }
  return std::shared_ptr<const ImageFolder>(new ImageFolder(
      root_, absl::StrCat(name_, " (", files.size(), " of ", size(), ")"),
      options_, classes_, std::move(files), ignored_files_));
}

std::vector<int64_t> ImageFolder::example_shape() const {
  return {3, options_.transform->height(), options_.transform->width()};
}

absl::StatusOr<RgbImage> ImageFolder::Decode(int64_t i) const {
  if (i < 0 || i >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": index ", i, " is outside [0, ", size(), ")"));
  }
  const std::string& file = files_[i].path;
  DTRAIN_ASSIGN_OR_RETURN(std::string bytes,
                          ReadImageFile(file, options_.max_file_bytes));
  return DecodeImage(bytes, file, options_.limits);
}

absl::StatusOr<Examples> ImageFolder::Gather(
    absl::Span<const int64_t> indices, absl::Span<const uint64_t> seeds) const {
  if (seeds.size() != indices.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": ", seeds.size(), " seeds for ", indices.size(), " examples"));
  }
  const auto count = static_cast<int64_t>(indices.size());
  const ImageTransform& transform = *options_.transform;
  const int64_t example_bytes = 3 * transform.height() * transform.width();
  return base::GuardTorch(
      absl::StatusCode::kResourceExhausted,
      absl::StrCat(name_, ": cannot allocate a batch: "),
      [&]() -> absl::StatusOr<Examples> {
        Examples out;
        out.images =
            at::empty({count, 3, transform.height(), transform.width()},
                      at::TensorOptions().dtype(at::kByte));
        out.labels = at::empty({count}, at::TensorOptions().dtype(at::kLong));
        uint8_t* pixels = out.images.data_ptr<uint8_t>();
        int64_t* labels = out.labels.data_ptr<int64_t>();
        // Every damaged file of the batch is named, not only the first: one
        // run then finds them all.
        std::vector<absl::Status> damaged;
        for (int64_t i = 0; i < count; ++i) {
          absl::StatusOr<RgbImage> image = Decode(indices[i]);
          if (!image.ok()) {
            damaged.push_back(image.status());
            continue;
          }
          const uint64_t seed = internal::Combine(seeds[i], kTransformStream);
          if (absl::Status s =
                  transform.Apply(*image, seed, pixels + i * example_bytes);
              !s.ok()) {
            damaged.push_back(absl::Status(
                s.code(),
                absl::StrCat(files_[indices[i]].path, ": ", s.message())));
            continue;
          }
          labels[i] = files_[indices[i]].label;
        }
        if (damaged.size() == 1) return damaged[0];
        if (!damaged.empty()) {
          constexpr size_t kNamed = 10;
          std::vector<std::string> lines;
          for (size_t k = 0; k < damaged.size() && k < kNamed; ++k)
            lines.emplace_back(damaged[k].message());
          if (damaged.size() > kNamed)
            lines.push_back(
                absl::StrCat("and ", damaged.size() - kNamed, " more"));
          return absl::Status(damaged[0].code(),
                              absl::StrCat(damaged.size(), " of the batch's ",
                                           count, " images cannot be used: ",
                                           absl::StrJoin(lines, "; ")));
        }
        return out;
      });
}

std::string ImageFolder::DebugString() const {
  return absl::StrCat(
      name_, ": ", size(), " images in ", num_classes(), " classes (",
      ignored_files_, " other files ignored), each ",
      options_.transform->ToString(), " -> [3, ", options_.transform->height(),
      ", ", options_.transform->width(), "] Byte");
}

}  // namespace dtrain::data
