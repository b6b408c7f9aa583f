// ImageFolder: your own images, one folder per class, read as
// torchvision.datasets.ImageFolder reads them:
//
//   root/cat/0001.jpg
//   root/cat/more/0002.png
//   root/dog/a.JPEG
//
// - The classes are the names of root's subfolders (symbolic links followed),
//   sorted; a class's index is its position in that order.
// - A class's images are the files with the extensions .jpg, .jpeg or .png
//   (any case) anywhere below its folder, in the order of torchvision's
//   sorted(os.walk(...)): folders by path, files by name within a folder.
//   Other files are ignored (and counted).
// - No class folder, or a class folder without images, is an error naming
//   the folder.
//
// Lazy: Open only lists the files. Each Gather reads and decodes the files of
// the batch (image_decoder.h: JPEG or PNG by content, 8-bit RGB, damaged
// files are errors naming the file) and brings every image to one size with
// the ImageTransform of the options (RandomResizedCrop for training, Resize +
// CenterCrop for validation), so batches are uint8 [B, 3, H, W]. A random
// transform draws from the loader's example seed (combined with a constant of
// its own), so a batch is the same whichever worker thread decodes it.
//
// Immutable after Open; Gather may be called by any number of threads at
// once. Thread-compatible reading of the files only: changing the folder
// while training changes what Gather sees, or makes it fail.
#ifndef DTRAIN_DATA_IMAGE_FOLDER_H_
#define DTRAIN_DATA_IMAGE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/example_source.h"
#include "data/image_decoder.h"
#include "data/image_transforms.h"

namespace dtrain::data {

struct ImageFolderOptions {
  // Brings each decoded image to the size of every example; required.
  std::shared_ptr<const ImageTransform> transform;
  DecodeLimits limits;
  // Files larger than this are refused before reading them.
  int64_t max_file_bytes = int64_t{256} << 20;
  // For messages; empty: "imagefolder <root>".
  std::string name;
};

class ImageFolder final : public ExampleSource {
 public:
  // Lists the classes and images below `root`. kNotFound when root is not a
  // readable folder; kInvalidArgument for a missing transform, no class
  // folder, or a class folder without images (each naming the path).
  static absl::StatusOr<std::shared_ptr<const ImageFolder>> Open(
      const std::string& root, ImageFolderOptions options);

  const std::string& root() const { return root_; }
  // Sorted class names; label i is classes()[i].
  const std::vector<std::string>& classes() const { return classes_; }
  // The path and label of example i, 0 <= i < size().
  const std::string& path(int64_t i) const { return files_.at(i).path; }
  int64_t label(int64_t i) const { return files_.at(i).label; }
  // Files below the class folders that are not images by their extension.
  int64_t ignored_files() const { return ignored_files_; }
  const ImageFolderOptions& options() const { return options_; }

  // The examples at `indices`, in that order, as a folder of their own
  // (quick runs on part of a folder; the files are sorted by class, so a
  // prefix would hold the first classes only); the classes stay all of
  // them. kInvalidArgument for an index outside [0, size()).
  absl::StatusOr<std::shared_ptr<const ImageFolder>> Subset(
      absl::Span<const int64_t> indices) const;

  // Reads and decodes example i, without the transform.
  absl::StatusOr<RgbImage> Decode(int64_t i) const;

  // ExampleSource.
  const std::string& name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override {
    return static_cast<int64_t>(classes_.size());
  }
  // {3, transform height, transform width}.
  std::vector<int64_t> example_shape() const override;
  // uint8 images. Errors name the batch's first failing file.
  absl::StatusOr<Examples> Gather(
      absl::Span<const int64_t> indices,
      absl::Span<const uint64_t> seeds) const override;
  std::string DebugString() const override;

 private:
  struct File {
    std::string path;
    int64_t label;
  };

  ImageFolder(std::string root, std::string name, ImageFolderOptions options,
              std::vector<std::string> classes, std::vector<File> files,
              int64_t ignored_files);

  std::string root_;
  std::string name_;
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<File> files_;
  int64_t ignored_files_;
};

// Whether `name` ends in .jpg, .jpeg or .png, in any case.
bool HasImageExtension(const std::string& name);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_IMAGE_FOLDER_H_
