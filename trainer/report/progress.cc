#include "trainer/report/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dtrain::trainer {
namespace {

constexpr int kBarWidth = 24;
// Redrawing more often only costs terminal bandwidth.
constexpr absl::Duration kRedrawInterval = absl::Milliseconds(100);

// "12,345" for throughput that reads at a glance.
std::string Thousands(double value) {
  const int64_t n = std::llround(value);
  const std::string digits = absl::StrCat(n < 0 ? -n : n);
  // Built forwards, not with insert(): GCC 12's C++20 string trips -Wrestrict
  // on insert (PR 105651).
  std::string out = n < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string FormatClock(absl::Duration d) {
  int64_t seconds = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  const int64_t hours = seconds / 3600;
  seconds %= 3600;
  if (hours > 0)
    return absl::StrFormat("%d:%02d:%02d", hours, seconds / 60, seconds % 60);
  return absl::StrFormat("%d:%02d", seconds / 60, seconds % 60);
}

ProgressPrinter::ProgressPrinter(ProgressStyle style, bool is_terminal,
                                 int print_freq, std::ostream& out)
    : style_(style != ProgressStyle::kAuto ? style
             : is_terminal                 ? ProgressStyle::kBar
                                           : ProgressStyle::kLines),
      print_freq_(std::max(1, print_freq)),
      out_(out) {}

void ProgressPrinter::StartEpoch(int64_t epoch, int64_t epochs,
                                 int64_t batches) {
  epoch_ = epoch;
  epochs_ = epochs;
  batches_ = batches;
  epoch_start_ = absl::Now();
  last_draw_ = absl::InfinitePast();
}

void ProgressPrinter::Batch(const BatchReport& r) {
  if (style_ == ProgressStyle::kNone) return;
  if (style_ == ProgressStyle::kLines) {
    if (r.batch % print_freq_ != 0 && r.batch + 1 != batches_) return;
    out_ << absl::StrFormat(
        "Epoch: [%d][%d/%d]  Time %.3f (%.3f)  Data %.3f (%.3f)  Loss %.4f "
        "(%.4f)  Prec@1 %.3f (%.3f)  Prec@5 %.3f (%.3f)  %s samples/s\n",
        epoch_, r.batch, batches_, r.batch_time->last(),
        r.batch_time->average(), r.data_time->last(), r.data_time->average(),
        r.loss->last(), r.loss->average(), r.top1->last(), r.top1->average(),
        r.top5->last(), r.top5->average(), Thousands(r.samples_per_second));
    out_.flush();
    return;
  }
  const absl::Time now = absl::Now();
  const bool last = r.batch + 1 >= batches_;
  if (!last && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  const int64_t done = r.batch + 1;
  const double fraction =
      batches_ > 0 ? std::min(1.0, static_cast<double>(done) / batches_) : 1.0;
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(filled, '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  const absl::Duration elapsed = now - epoch_start_;
  const absl::Duration left =
      done > 0 ? elapsed * (static_cast<double>(batches_ - done) / done)
               : absl::ZeroDuration();
  out_ << absl::StrFormat(
      "\repoch %d/%d [%s] %d/%d  loss %.4f  top1 %.1f%%  %s samples/s  %s %s "
      "\x1b[K",
      epoch_ + 1, epochs_, bar, done, batches_, r.loss->average(),
      r.top1->average(), Thousands(r.samples_per_second), last ? "took" : "ETA",
      FormatClock(last ? elapsed : left));
  out_.flush();
  bar_drawn_ = true;
}

void ProgressPrinter::ClearBar() {
  if (!bar_drawn_) return;
  out_ << "\r\x1b[K";
  bar_drawn_ = false;
}

void ProgressPrinter::EndEpoch() {
  if (!bar_drawn_) return;
  out_ << "\n";
  out_.flush();
  bar_drawn_ = false;
}

void ProgressPrinter::Message(const std::string& line) {
  ClearBar();
  out_ << line << "\n";
  out_.flush();
  last_draw_ = absl::InfinitePast();
}

}  // namespace dtrain::trainer
