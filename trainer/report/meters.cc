#include "trainer/report/meters.h"

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace dtrain::trainer {

std::vector<int64_t> TopKCorrect(const at::Tensor& logits,
                                 const at::Tensor& labels,
                                 const std::vector<int64_t>& ks) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> correct(ks.size(), 0);
  if (logits.size(0) == 0) return correct;
  const int64_t classes = logits.size(1);
  int64_t max_k = 1;
  for (int64_t k : ks) max_k = std::max(max_k, std::min(k, classes));
  // [B, max_k] indices of the highest scores, best first.
  const at::Tensor top = std::get<1>(logits.topk(max_k, 1, true, true));
  const at::Tensor hits = top.eq(labels.view({-1, 1}).to(top.device()));
  for (size_t i = 0; i < ks.size(); ++i) {
    const int64_t k = std::max<int64_t>(1, std::min(ks[i], classes));
    correct[i] = hits.narrow(1, 0, k).sum().item<int64_t>();
  }
  return correct;
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - lo);
}

}  // namespace dtrain::trainer
