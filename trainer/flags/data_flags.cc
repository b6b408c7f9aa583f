// The data section's flags (trainer/options/data_options.h).
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, dataset, "fashion-mnist",
          "fashion-mnist (embedded default), mnist, stl10, synthetic, or "
          "imagefolder (your own images: --data_dir with train/ and val/, "
          "one folder of .jpg/.png per class).");
ABSL_FLAG(std::string, data_dir, "",
          "Folder with the dataset's files (default for fashion-mnist: "
          "/usr/share/datasets/fashion-mnist).");
ABSL_FLAG(int64_t, image_size, 0,
          "Resize images to this size (0: stl10 with resnet18 at 224, the "
          "rest as stored); for imagefolder the crop size (0: 224).");
ABSL_FLAG(int64_t, train_limit, 0,
          "Train on the first N examples only (0: all; imagefolder: N "
          "spread evenly over its classes).");
ABSL_FLAG(int64_t, val_limit, 0,
          "Validate on the first N test examples only (0: all).");
ABSL_FLAG(std::string, synthetic_shape, "1,28,28",
          "--dataset=synthetic: channels,height,width.");
ABSL_FLAG(int64_t, synthetic_train_size, 2048,
          "--dataset=synthetic: training examples.");
ABSL_FLAG(int64_t, synthetic_val_size, 512,
          "--dataset=synthetic: validation examples.");
ABSL_FLAG(int64_t, batch_size, 0,
          "Batch size per process (0: 128 for convnet, 32 for resnet18).");
ABSL_FLAG(int, workers, 0, "Loader threads per process.");
ABSL_FLAG(bool, even_batches, true,
          "true: pad the training split so every rank gets as many batches, "
          "repeating a few examples (PyTorch's DistributedSampler). false: "
          "uneven inputs, every example once per epoch; ranks that run out "
          "of batches shadow the others until all are done (PyTorch's "
          "torch.distributed.algorithms.Join / DDP join(), Accelerate's "
          "even_batches=False). Needs --accumulate_steps=1.");
ABSL_FLAG(bool, divide_by_initial_world_size, true,
          "With --even_batches=false: average gradients over the world size, "
          "ranks without a batch contributing zeros (PyTorch's Join default); "
          "false: over the ranks that still have a batch.");

namespace dtrain::trainer {

absl::Status ReadDataFlags(DataOptions* o) {
  o->dataset = absl::GetFlag(FLAGS_dataset);
  o->data_dir = absl::GetFlag(FLAGS_data_dir);
  if (Specified("image_size")) o->image_size = absl::GetFlag(FLAGS_image_size);
  if (Specified("train_limit"))
    o->train_limit = absl::GetFlag(FLAGS_train_limit);
  if (Specified("val_limit")) o->val_limit = absl::GetFlag(FLAGS_val_limit);
  o->synthetic_shape.clear();
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_synthetic_shape), ',')) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(part, &d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--synthetic_shape: '", part, "' is not a number"));
    }
    o->synthetic_shape.push_back(d);
  }
  o->synthetic_train_size = absl::GetFlag(FLAGS_synthetic_train_size);
  o->synthetic_val_size = absl::GetFlag(FLAGS_synthetic_val_size);
  if (Specified("batch_size")) o->batch_size = absl::GetFlag(FLAGS_batch_size);
  o->workers = absl::GetFlag(FLAGS_workers);
  o->even_batches = absl::GetFlag(FLAGS_even_batches);
  o->divide_by_initial_world_size =
      absl::GetFlag(FLAGS_divide_by_initial_world_size);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
