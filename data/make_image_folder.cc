// make_image_folder: writes a small ImageFolder tree of generated JPEG and
// PNG images, for the tests that train on one (and for trying
// --dataset=imagefolder without data of one's own).
//
//   make_image_folder DIR CLASSES TRAIN_PER_CLASS VAL_PER_CLASS
//
// writes DIR/train/class_<k>/<i>.jpg|png and DIR/val/... : every image has a
// size of its own (between 24 and 60 pixels a side), alternates between
// JPEG and PNG, and is tinted by its class so that a model can learn
// something; each class folder also holds a README.txt, which readers
// ignore. DIR, when relative, is taken from the directory `bazel run` was
// started in (BUILD_WORKING_DIRECTORY), else the current one. Exit status 0
// with one line saying what it wrote and where, or 1 with a message.

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/user_path.h"
#include "data/image_encoder.h"

namespace {

using dtrain::data::testing::EncodeJpeg;
using dtrain::data::testing::EncodePng;
using dtrain::data::testing::Pixels;
using dtrain::data::testing::TestPattern;

bool MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
  std::fprintf(stderr, "make_image_folder: cannot create %s: %s\n",
               path.c_str(), std::strerror(errno));
  return false;
}

// As mkdir -p.
bool MakeDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (!MakeDir(path.substr(0, slash))) return false;
  }
  return MakeDir(path);
}

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    std::fprintf(stderr, "make_image_folder: cannot write %s\n", path.c_str());
  return static_cast<bool>(out);
}

bool WriteSplit(const std::string& dir, int classes, int per_class,
                uint64_t seed) {
  if (!MakeDir(dir)) return false;
  for (int k = 0; k < classes; ++k) {
    const std::string class_dir = absl::StrCat(dir, "/class_", k);
    if (!MakeDir(class_dir) ||
        !Write(class_dir + "/README.txt", "not an image\n")) {
      return false;
    }
    for (int i = 0; i < per_class; ++i) {
      const uint64_t n = seed + k * 1000 + i;
      Pixels p = TestPattern(24 + n % 37, 24 + n * 7 % 37, n);
      // Class k brightens channel k % 3 and darkens the others.
      for (size_t j = 0; j < p.samples.size(); ++j) {
        const int v =
            p.samples[j] + (static_cast<int>(j % 3) == k % 3 ? 90 : -40);
        p.samples[j] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
      const bool jpeg = i % 2 == 0;
      absl::StatusOr<std::string> bytes =
          jpeg ? EncodeJpeg(p, 90) : EncodePng(p);
      if (!bytes.ok()) {
        std::fprintf(stderr, "make_image_folder: %s\n",
                     std::string(bytes.status().message()).c_str());
        return false;
      }
      if (!Write(absl::StrCat(class_dir, "/", i, jpeg ? ".jpg" : ".png"),
                 *bytes)) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int classes = 0, train = 0, val = 0;
  if (argc != 5 || !absl::SimpleAtoi(argv[2], &classes) ||
      !absl::SimpleAtoi(argv[3], &train) || !absl::SimpleAtoi(argv[4], &val) ||
      classes < 1 || train < 1 || val < 1) {
    std::fprintf(stderr,
                 "usage: make_image_folder DIR CLASSES TRAIN_PER_CLASS "
                 "VAL_PER_CLASS (all counts >= 1)\n");
    return 1;
  }
  const std::string dir = dtrain::base::ResolveUserPath(
      argv[1], dtrain::base::UserWorkingDirectory(
                   std::getenv("BUILD_WORKING_DIRECTORY")));
  if (absl::Status s = dtrain::base::CheckWritableDir("DIR", dir); !s.ok()) {
    std::fprintf(stderr, "make_image_folder: %s\n",
                 std::string(s.message()).c_str());
    return 1;
  }
  if (!MakeDirs(dir) || !WriteSplit(dir + "/train", classes, train, 0) ||
      !WriteSplit(dir + "/val", classes, val, 500)) {
    return 1;
  }
  std::printf(
      "make_image_folder: wrote %d class%s x %d train + %d val images to %s\n",
      classes, classes == 1 ? "" : "es", train, val, dir.c_str());
  return 0;
}
