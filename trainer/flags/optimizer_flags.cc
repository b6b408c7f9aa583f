// The optimizer-and-schedule section's flags
// (trainer/options/optimizer_options.h).
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "trainer/flags/train_flags.h"

ABSL_FLAG(std::string, optimizer, "",
          "sgd, adadelta, adam or adamw (Adam's betas 0.9, 0.999, eps "
          "1e-8; default: adadelta for convnet, sgd for resnet18).");
ABSL_FLAG(double, lr, 0,
          "Learning rate (0: 0.5 for adadelta, 0.1 for sgd, 0.001 for adam "
          "and adamw).");
ABSL_FLAG(double, momentum, -1, "SGD momentum (default 0.9).");
ABSL_FLAG(double, weight_decay, -1,
          "Weight decay (default 1e-4 for sgd, 0.01 for adamw, 0 for "
          "adadelta and adam).");
ABSL_FLAG(std::string, lr_schedule, "step",
          "step (x --lr_gamma every --lr_step_epochs) or cosine (to 0 over "
          "--epochs, per step).");
ABSL_FLAG(int64_t, lr_step_epochs, 30,
          "Multiply the learning rate by --lr_gamma every N epochs.");
ABSL_FLAG(double, lr_gamma, 0.1, "See --lr_step_epochs.");
ABSL_FLAG(double, warmup_epochs, 0,
          "Linear learning-rate warmup over this many epochs (fractions "
          "allowed), per step.");
ABSL_FLAG(int64_t, epochs, 0, "Epochs (0: 1 for convnet, 2 for resnet18).");
ABSL_FLAG(int64_t, max_steps, 0, "Stop after this many steps (0: no limit).");
ABSL_FLAG(int64_t, accumulate_steps, 1,
          "Average gradients over N batches per optimizer step (effective "
          "global batch: --batch_size x N x world size).");
ABSL_FLAG(std::string, amp, "off",
          "Mixed precision: off, bf16 (CPU or CUDA) or fp16 (CUDA, with loss "
          "scaling).");
ABSL_FLAG(double, clip_grad_norm, 0,
          "Clip the gradients' total 2-norm to this before each step (0: "
          "off).");

namespace dtrain::trainer {

absl::Status ReadOptimizerFlags(OptimizerOptions* o) {
  if (Specified("optimizer")) o->optimizer = absl::GetFlag(FLAGS_optimizer);
  if (Specified("lr")) o->lr = absl::GetFlag(FLAGS_lr);
  if (Specified("momentum")) o->momentum = absl::GetFlag(FLAGS_momentum);
  if (Specified("weight_decay"))
    o->weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o->lr_step_epochs = absl::GetFlag(FLAGS_lr_step_epochs);
  o->lr_gamma = absl::GetFlag(FLAGS_lr_gamma);
  o->lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  o->warmup_epochs = absl::GetFlag(FLAGS_warmup_epochs);
  if (Specified("epochs")) o->epochs = absl::GetFlag(FLAGS_epochs);
  o->max_steps = absl::GetFlag(FLAGS_max_steps);
  o->accumulate_steps = absl::GetFlag(FLAGS_accumulate_steps);
  o->amp = absl::GetFlag(FLAGS_amp);
  o->clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
