#include "dist/backend/shm/reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::backend::shm {
namespace {

template <typename A>
void Combine(ReduceOp op, const A* in, A* acc, int64_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + in[i];
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] * in[i];
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], in[i]);
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], in[i]);
      break;
  }
}

// Types the CPU adds natively: accumulate in the result itself.
template <typename T>
void ReduceNative(ReduceOp op, absl::Span<const void* const> inputs,
                  int64_t begin, int64_t end, void* result) {
  const int64_t n = end - begin;
  T* out = static_cast<T*>(result) + begin;
  const T* first = static_cast<const T*>(inputs[0]) + begin;
  if (out != first) std::copy(first, first + n, out);
  for (size_t r = 1; r < inputs.size(); ++r) {
    Combine<T>(op, static_cast<const T*>(inputs[r]) + begin, out, n);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::kAverage) {
      const T k = static_cast<T>(inputs.size());
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] / k;
    }
  }
}

// float16 and bfloat16: widen to float32, combine, narrow once.
template <typename T>
void ReduceWidened(ReduceOp op, absl::Span<const void* const> inputs,
                   int64_t begin, int64_t end, void* result) {
  constexpr int64_t kBlock = 4096;
  float acc[kBlock];
  float in[kBlock];
  for (int64_t lo = begin; lo < end; lo += kBlock) {
    const int64_t n = std::min(kBlock, end - lo);
    const T* first = static_cast<const T*>(inputs[0]) + lo;
    for (int64_t i = 0; i < n; ++i) acc[i] = static_cast<float>(first[i]);
    for (size_t r = 1; r < inputs.size(); ++r) {
      const T* x = static_cast<const T*>(inputs[r]) + lo;
      for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(x[i]);
      Combine<float>(op, in, acc, n);
    }
    if (op == ReduceOp::kAverage) {
      const float k = static_cast<float>(inputs.size());
      for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] / k;
    }
    T* out = static_cast<T*>(result) + lo;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

absl::Status ReduceInOrder(at::ScalarType dtype, ReduceOp op,
                           absl::Span<const void* const> inputs, int64_t begin,
                           int64_t end, void* result) {
  if (inputs.empty() || end <= begin) return absl::OkStatus();
  const bool floating = dtype == at::kFloat || dtype == at::kDouble ||
                        dtype == at::kHalf || dtype == at::kBFloat16;
  if (op == ReduceOp::kAverage && !floating) {
    return absl::InvalidArgumentError(
        absl::StrCat("average of ", c10::toString(dtype),
                     " (average needs a floating dtype)"));
  }
  switch (dtype) {
    case at::kFloat:
      ReduceNative<float>(op, inputs, begin, end, result);
      break;
    case at::kDouble:
      ReduceNative<double>(op, inputs, begin, end, result);
      break;
    case at::kInt:
      ReduceNative<int32_t>(op, inputs, begin, end, result);
      break;
    case at::kLong:
      ReduceNative<int64_t>(op, inputs, begin, end, result);
      break;
    case at::kByte:
      ReduceNative<uint8_t>(op, inputs, begin, end, result);
      break;
    case at::kChar:
      ReduceNative<int8_t>(op, inputs, begin, end, result);
      break;
    case at::kHalf:
      ReduceWidened<c10::Half>(op, inputs, begin, end, result);
      break;
    case at::kBFloat16:
      ReduceWidened<c10::BFloat16>(op, inputs, begin, end, result);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("cannot reduce ", c10::toString(dtype)));
  }
  return absl::OkStatus();
}

}  // namespace dtrain::backend::shm
