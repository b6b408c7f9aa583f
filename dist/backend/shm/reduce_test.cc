// The shared-memory collectives' arithmetic: every dtype and op against
// values computed here, rank order, float32 accumulation of 16-bit floats,
// and results that do not depend on how the range is cut.

#include "dist/backend/shm/reduce.h"

#include <ATen/ATen.h>

#include <vector>

#include "gtest/gtest.h"

namespace dtrain::backend::shm {
namespace {

std::vector<const void*> Pointers(const std::vector<at::Tensor>& ts) {
  std::vector<const void*> out;
  for (const at::Tensor& t : ts) out.push_back(t.data_ptr());
  return out;
}

// Three ranks' values: rank r holds (i % 7) - 3 + r.
std::vector<at::Tensor> Inputs(at::ScalarType dtype, int64_t n) {
  std::vector<at::Tensor> out;
  for (int r = 0; r < 3; ++r) {
    out.push_back((at::arange(n, at::kLong).remainder(7) - 3 + r).to(dtype));
  }
  return out;
}

TEST(ReduceInOrderTest, EveryDtypeAndOp) {
  const int64_t n = 1000;
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf,
                               at::kBFloat16, at::kInt, at::kLong, at::kChar}) {
    const std::vector<at::Tensor> in = Inputs(dtype, n);
    const at::Tensor wide = at::stack(in).to(at::kDouble);
    struct Case {
      ReduceOp op;
      at::Tensor want;
    };
    std::vector<Case> cases = {{ReduceOp::kSum, wide.sum(0)},
                               {ReduceOp::kMin, std::get<0>(wide.min(0))},
                               {ReduceOp::kMax, std::get<0>(wide.max(0))},
                               {ReduceOp::kProduct, wide.prod(0)}};
    if (at::isFloatingType(dtype)) {
      cases.push_back({ReduceOp::kAverage, wide.mean(0)});
    }
    for (const Case& c : cases) {
      at::Tensor out = at::empty({n}, dtype);
      ASSERT_TRUE(
          ReduceInOrder(dtype, c.op, Pointers(in), 0, n, out.data_ptr()).ok());
      EXPECT_TRUE(at::allclose(out.to(at::kDouble), c.want, 1e-3, 1e-3))
          << c10::toString(dtype) << " op " << ReduceOpName(c.op);
    }
  }
}

TEST(ReduceInOrderTest, AverageOfIntegersIsRefused) {
  const std::vector<at::Tensor> in = Inputs(at::kInt, 4);
  at::Tensor out = at::empty({4}, at::kInt);
  EXPECT_EQ(ReduceInOrder(at::kInt, ReduceOp::kAverage, Pointers(in), 0, 4,
                          out.data_ptr())
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReduceInOrderTest, HalfIsAccumulatedInFloat32) {
  // 2048 + 1 + 1 in float16 steps would round 2049 back to 2048 twice; in
  // float32 the sum is 2050, which float16 holds exactly.
  std::vector<at::Tensor> in = {at::full({8}, 2048, at::kHalf),
                                at::full({8}, 1, at::kHalf),
                                at::full({8}, 1, at::kHalf)};
  at::Tensor out = at::empty({8}, at::kHalf);
  ASSERT_TRUE(ReduceInOrder(at::kHalf, ReduceOp::kSum, Pointers(in), 0, 8,
                            out.data_ptr())
                  .ok());
  EXPECT_TRUE(at::equal(out, at::full({8}, 2050, at::kHalf)));
}

TEST(ReduceInOrderTest, CombinesInRankOrder) {
  // Float addition is not associative: (1e8 + 1) - 1e8 is 0 in float32, but
  // 1e8 + (1 - 1e8) is 1 (rounded): left to right gives exactly the former.
  std::vector<at::Tensor> in = {at::full({4}, 1e8f), at::full({4}, 1.0f),
                                at::full({4}, -1e8f)};
  at::Tensor out = at::empty({4}, at::kFloat);
  ASSERT_TRUE(ReduceInOrder(at::kFloat, ReduceOp::kSum, Pointers(in), 0, 4,
                            out.data_ptr())
                  .ok());
  EXPECT_TRUE(at::equal(out, (in[0] + in[1]) + in[2]));
}

TEST(ReduceInOrderTest, PiecesEqualTheWhole) {
  const int64_t n = 10007;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const std::vector<at::Tensor> in = {at::randn({n}).to(dtype),
                                        at::randn({n}).to(dtype),
                                        at::randn({n}).to(dtype)};
    at::Tensor whole = at::empty({n}, dtype);
    at::Tensor pieces = at::empty({n}, dtype);
    ASSERT_TRUE(ReduceInOrder(dtype, ReduceOp::kAverage, Pointers(in), 0, n,
                              whole.data_ptr())
                    .ok());
    for (int64_t lo = 0; lo < n; lo += 333) {
      ASSERT_TRUE(ReduceInOrder(dtype, ReduceOp::kAverage, Pointers(in), lo,
                                std::min(n, lo + 333), pieces.data_ptr())
                      .ok());
    }
    EXPECT_TRUE(at::equal(whole, pieces));
  }
}

}  // namespace
}  // namespace dtrain::backend::shm
