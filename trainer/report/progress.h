// Rank 0's view of a training epoch as it runs: on a terminal an in-place bar
// with throughput and time left, in a log the AWS tutorial's lines every
// print_freq batches:
//
//   epoch 1/3 [=========>          ] 234/469  loss 0.4312  top1 85.2%
//       1,234 samples/s  ETA 0:12
//   Epoch: [0][230/469]  Time 0.052 (0.055)  Data 0.001 (0.002)
//       Loss 0.4312 (0.5123)  Prec@1 85.156 (80.101)  Prec@5 99.219 (98.877)
//
// Thread-compatible: one thread (the training loop) calls it.
#ifndef DTRAIN_TRAINER_REPORT_PROGRESS_H_
#define DTRAIN_TRAINER_REPORT_PROGRESS_H_

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "trainer/report/meters.h"
#include "trainer/report/report_options.h"

namespace dtrain::trainer {

// What the loop knows after a batch: the tutorial's meters (times in
// seconds, accuracies in percent) and the global throughput.
struct BatchReport {
  int64_t batch = 0;  // 0-based, in this epoch
  const AverageMeter* batch_time = nullptr;
  const AverageMeter* data_time = nullptr;
  const AverageMeter* loss = nullptr;
  const AverageMeter* top1 = nullptr;
  const AverageMeter* top5 = nullptr;
  // Examples per second over all ranks since the epoch started.
  double samples_per_second = 0;
};

class ProgressPrinter {
 public:
  // kAuto becomes kBar when `is_terminal`, kLines otherwise.
  ProgressPrinter(ProgressStyle style, bool is_terminal, int print_freq,
                  std::ostream& out);

  // `batches`: how many batches this epoch runs (its remainder when resumed
  // mid-epoch; fewer with max_steps).
  void StartEpoch(int64_t epoch, int64_t epochs, int64_t batches);
  void Batch(const BatchReport& report);
  // Ends the bar's line, if one is drawn.
  void EndEpoch();
  // A line of its own, not torn by the bar (which is redrawn by the next
  // Batch).
  void Message(const std::string& line);

  ProgressStyle style() const { return style_; }

 private:
  void ClearBar();

  const ProgressStyle style_;
  const int print_freq_;
  std::ostream& out_;
  int64_t epoch_ = 0;
  int64_t epochs_ = 0;
  int64_t batches_ = 0;
  absl::Time epoch_start_;
  absl::Time last_draw_ = absl::InfinitePast();
  bool bar_drawn_ = false;
};

// "1:02:03" or "2:05" (minutes:seconds under an hour).
std::string FormatClock(absl::Duration d);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_PROGRESS_H_
