#include "trainer/options/optimizer_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/machine_limits.h"
#include "base/status_macros.h"
#include "trainer/options/common.h"

namespace dtrain::trainer {

using options_internal::Invalid;

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  if (!o.epochs || *o.epochs < 1) return Invalid("epochs", "must be >= 1");
  if (o.max_steps < 0)
    return Invalid("max_steps", absl::StrCat(o.max_steps, " is not >= 0"));
  if (!o.optimizer || (*o.optimizer != "sgd" && *o.optimizer != "adadelta" &&
                       *o.optimizer != "adam" && *o.optimizer != "adamw")) {
    return Invalid("optimizer",
                   absl::StrCat("unknown optimizer '", o.optimizer.value_or(""),
                                "'; known: adadelta, adam, adamw, sgd"));
  }
  if (!o.lr || !(*o.lr > 0) || !std::isfinite(*o.lr))
    return Invalid("lr", "must be a finite number > 0");
  if (!o.momentum || !(*o.momentum >= 0) || !(*o.momentum < 1))
    return Invalid("momentum", "must be in [0, 1)");
  if (*o.optimizer == "adadelta" && *o.momentum != 0)
    return Invalid("momentum", "Adadelta has no momentum; leave it unset");
  if ((*o.optimizer == "adam" || *o.optimizer == "adamw") && *o.momentum != 0) {
    return Invalid("momentum",
                   absl::StrCat(*o.optimizer == "adam" ? "Adam" : "AdamW",
                                " keeps its own moments (betas 0.9, "
                                "0.999); leave it unset"));
  }
  if (!o.weight_decay || !(*o.weight_decay >= 0) ||
      !std::isfinite(*o.weight_decay))
    return Invalid("weight_decay", "must be a finite number >= 0");
  if (o.lr_step_epochs < 1) return Invalid("lr_step_epochs", "must be >= 1");
  if (!(o.lr_gamma > 0) || !std::isfinite(o.lr_gamma))
    return Invalid("lr_gamma", "must be a finite number > 0");
  if (o.lr_schedule != "step" && o.lr_schedule != "cosine") {
    return Invalid("lr_schedule",
                   absl::StrCat("unknown schedule '", o.lr_schedule,
                                "'; known: step, cosine"));
  }
  if (!(o.warmup_epochs >= 0) || !std::isfinite(o.warmup_epochs))
    return Invalid("warmup_epochs", "must be a finite number >= 0");
  if (o.lr_schedule == "cosine" &&
      o.warmup_epochs >= static_cast<double>(*o.epochs)) {
    return Invalid("warmup_epochs",
                   absl::StrCat(o.warmup_epochs, " leaves none of the ",
                                *o.epochs, " epoch(s) for the cosine decay"));
  }
  if (o.accumulate_steps < 1)
    return Invalid("accumulate_steps", "must be >= 1");
  // Keeps the effective global batch (batch x steps x world size) an int64.
  DTRAIN_RETURN_IF_ERROR(base::CheckAtMost(
      "--accumulate_steps", o.accumulate_steps,
      {base::kMaxBatchSize, "a fixed cap on the micro-batches of one step"}));
  if (o.amp != "off" && o.amp != "bf16" && o.amp != "fp16") {
    return Invalid("amp", absl::StrCat("unknown precision '", o.amp,
                                       "'; known: off, bf16, fp16"));
  }
  if (!(o.clip_grad_norm >= 0) || !std::isfinite(o.clip_grad_norm))
    return Invalid("clip_grad_norm", "must be a finite number >= 0 (0: off)");
  return absl::OkStatus();
}

}  // namespace dtrain::trainer
