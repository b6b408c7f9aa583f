// Running statistics of a training loop: the tutorials' AverageMeter, top-k
// correct counts, and percentiles of step times.
//
// Thread-compatible: each object is used by one thread.
#ifndef DTRAIN_TRAINER_REPORT_METERS_H_
#define DTRAIN_TRAINER_REPORT_METERS_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace dtrain::trainer {

// The last value and the weighted running average (the AWS tutorial's
// AverageMeter).
class AverageMeter {
 public:
  void Update(double value, int64_t n = 1) {
    last_ = value;
    sum_ += value * n;
    count_ += n;
  }
  void Reset() { *this = AverageMeter(); }
  double last() const { return last_; }
  double sum() const { return sum_; }
  int64_t count() const { return count_; }
  double average() const { return count_ > 0 ? sum_ / count_ : 0.0; }

 private:
  double last_ = 0;
  double sum_ = 0;
  int64_t count_ = 0;
};

// For each k in `ks`: how many rows of `logits` [B, C] have their label
// ([B] int64) among the k highest scores. Counts rather than percentages, so
// that ranks can sum them into exact totals. A k above C counts as C (every
// row is correct). Ties are broken as torch::topk breaks them.
std::vector<int64_t> TopKCorrect(const at::Tensor& logits,
                                 const at::Tensor& labels,
                                 const std::vector<int64_t>& ks);

// Percentile p (0..100) of `values` by linear interpolation between closest
// ranks (numpy's default); 0 for an empty list.
double Percentile(std::vector<double> values, double p);

}  // namespace dtrain::trainer

#endif  // DTRAIN_TRAINER_REPORT_METERS_H_
