// How messages write a tensor's shape, "[64, 1, 28, 28]", everywhere, and its
// dtype as PyTorch names it, "float32", in the distributed layers' messages
// (some older messages, e.g. the checkpoint's fit checks, still print
// LibTorch's "Float"). Stateless and thread-safe.
#ifndef DTRAIN_BASE_TENSOR_TEXT_H_
#define DTRAIN_BASE_TENSOR_TEXT_H_

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <string>

namespace dtrain::base {

// "[2, 3]"; "[]" for a scalar.
std::string ShapeString(c10::IntArrayRef shape);

// PyTorch's name of a dtype: "float32", "bfloat16", "int64", "uint8", "bool";
// LibTorch's own name for the rest.
std::string DtypeName(c10::ScalarType type);

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_TENSOR_TEXT_H_
