#include "data/mnist.h"

#include <sys/stat.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "data/idx.h"

namespace dtrain::data {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDirectory(absl::string_view path) {
  struct stat st;
  return stat(std::string(path).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

// The candidate paths for one file, in the order they are tried.
std::vector<std::string> Candidates(absl::string_view dir,
                                    const std::string& name) {
  std::string dotted = name;
  dotted[dotted.rfind("-idx")] = '.';
  return {JoinPath(dir, name + ".gz"), JoinPath(dir, name),
          JoinPath(dir, dotted), JoinPath(dir, dotted + ".gz")};
}

absl::StatusOr<std::string> FindFile(absl::string_view dir,
                                     const std::string& name, Split split) {
  const std::vector<std::string> tried = Candidates(dir, name);
  for (const std::string& path : tried) {
    if (IsFile(path)) return path;
  }
  return absl::NotFoundError(absl::StrCat(
      "MNIST-format ", SplitName(split), " data: ",
      IsDirectory(dir) ? "" : absl::StrCat("directory ", dir, " is missing; "),
      "no file ", absl::StrJoin(tried, ", "),
      ". Fashion-MNIST: install Debian's package dataset-fashion-mnist "
      "(apt-get install dataset-fashion-mnist, or tools/setup.sh), which puts "
      "it in ",
      kFashionMnistDir,
      ", the default directory. MNIST: download train-images-idx3-ubyte.gz, "
      "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and "
      "t10k-labels-idx1-ubyte.gz (http://yann.lecun.com/exdb/mnist/ or a "
      "mirror) into one directory and pass it as --data_dir."));
}

}  // namespace

MnistFileNames MnistFiles(Split split) {
  const char* prefix = split == Split::kTrain ? "train" : "t10k";
  return {absl::StrCat(prefix, "-images-idx3-ubyte"),
          absl::StrCat(prefix, "-labels-idx1-ubyte")};
}

absl::StatusOr<Dataset> LoadMnist(absl::string_view dir, Split split) {
  const MnistFileNames names = MnistFiles(split);
  DTRAIN_ASSIGN_OR_RETURN(std::string images,
                          FindFile(dir, names.images, split));
  DTRAIN_ASSIGN_OR_RETURN(std::string labels,
                          FindFile(dir, names.labels, split));
  return ReadIdxDataset(images, labels, kMnistNumClasses,
                        absl::StrCat(dir, " ", SplitName(split)));
}

}  // namespace dtrain::data
