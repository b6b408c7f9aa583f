#include "trainer/options/data_options.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;
using options_internal::Known;

const std::vector<std::string>& KnownDatasets() {
  static const auto* const kNames = new std::vector<std::string>{
      "fashion-mnist", "mnist", "stl10", "synthetic", "imagefolder"};
  return *kNames;
}

absl::Status ValidateDataOptions(const DataOptions& o) {
  if (!Known(KnownDatasets(), o.dataset)) {
    return Invalid("dataset",
                   absl::StrCat("unknown dataset '", o.dataset, "'; known: ",
                                absl::StrJoin(KnownDatasets(), ", ")));
  }
  if (o.dataset == "stl10" && o.data_dir.empty()) {
    return Invalid("data_dir",
                   "stl10 needs the folder with train_X.bin, train_y.bin, "
                   "test_X.bin and test_y.bin");
  }
  if (o.dataset == "imagefolder" && o.data_dir.empty()) {
    return Invalid("data_dir",
                   "imagefolder needs the folder with train/ and val/, each "
                   "holding one folder of images per class");
  }
  if (o.image_size && *o.image_size < 1)
    return Invalid("image_size", absl::StrCat(*o.image_size, " is not >= 1"));
  // Bounds the validation resize (size * 256 / 224) and the batch memory.
  if (o.image_size && *o.image_size > 4096)
    return Invalid("image_size",
                   absl::StrCat(*o.image_size, " is not <= 4096"));
  if (o.train_limit && *o.train_limit < 1)
    return Invalid("train_limit", absl::StrCat(*o.train_limit, " is not >= 1"));
  if (o.val_limit && *o.val_limit < 1)
    return Invalid("val_limit", absl::StrCat(*o.val_limit, " is not >= 1"));
  if (o.dataset == "synthetic") {
    if (o.synthetic_shape.size() != 3 ||
        std::any_of(o.synthetic_shape.begin(), o.synthetic_shape.end(),
                    [](int64_t d) { return d < 1; })) {
      return Invalid("synthetic_shape",
                     "needs three positive sizes: channels,height,width");
    }
    if (o.synthetic_train_size < 1 || o.synthetic_val_size < 1)
      return Invalid("synthetic_train_size", "both splits need >= 1 example");
    if (o.synthetic_classes < 1)
      return Invalid("synthetic_classes", "needs >= 1 class");
    // Both splits are made in memory as float32, up front.
    double bytes = static_cast<double>(o.synthetic_train_size) +
                   static_cast<double>(o.synthetic_val_size);
    for (int64_t d : o.synthetic_shape) bytes *= static_cast<double>(d);
    bytes *= sizeof(float);
    const base::Limit memory = base::MemoryLimit();
    if (bytes > static_cast<double>(memory.max)) {
      return Invalid(
          "synthetic_train_size",
          absl::StrCat(o.synthetic_train_size, " + ", o.synthetic_val_size,
                       " examples of ", absl::StrJoin(o.synthetic_shape, "x"),
                       " floats need ", bytes / (1 << 20), " MiB, more than ",
                       memory.why));
    }
  }
  if (!o.batch_size || *o.batch_size < 1)
    return Invalid("batch_size", "must be >= 1 (per process)");
  DTRAIN_RETURN_IF_ERROR(
      base::CheckAtMost("--batch_size", *o.batch_size, base::BatchSizeLimit()));
  if (o.workers < 0)
    return Invalid("workers", absl::StrCat(o.workers, " is not >= 0"));
  // Each worker is a thread: beyond the bound thread creation fails.
  DTRAIN_RETURN_IF_ERROR(
      base::CheckAtMost("--workers", o.workers, base::ThreadLimit()));
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
