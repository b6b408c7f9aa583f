// How messages across the project write a tensor's shape and dtype, so that
// an error from the loader, a checkpoint and a collective read alike:
// "[64, 1, 28, 28]" and "float32" (PyTorch's names, not LibTorch's "Float").
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
