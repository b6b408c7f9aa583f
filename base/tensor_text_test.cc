#include "base/tensor_text.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace dtrain::base {
namespace {

TEST(TensorTextTest, WritesShapesAsPythonLists) {
  EXPECT_EQ(ShapeString(std::vector<int64_t>{64, 1, 28, 28}),
            "[64, 1, 28, 28]");
  EXPECT_EQ(ShapeString(std::vector<int64_t>{0}), "[0]");
  EXPECT_EQ(ShapeString(std::vector<int64_t>{}), "[]");
}

TEST(TensorTextTest, NamesDtypesAsPyTorchDoes) {
  EXPECT_EQ(DtypeName(c10::ScalarType::Float), "float32");
  EXPECT_EQ(DtypeName(c10::ScalarType::BFloat16), "bfloat16");
  EXPECT_EQ(DtypeName(c10::ScalarType::Long), "int64");
  EXPECT_EQ(DtypeName(c10::ScalarType::Byte), "uint8");
  EXPECT_EQ(DtypeName(c10::ScalarType::Bool), "bool");
  EXPECT_EQ(DtypeName(c10::ScalarType::ComplexFloat), "ComplexFloat");
}

}  // namespace
}  // namespace dtrain::base
