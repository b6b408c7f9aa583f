// The IDX file format of MNIST and Fashion-MNIST
// (http://yann.lecun.com/exdb/mnist/): a 4-byte magic number 00 00 <type>
// <rank>, then <rank> big-endian uint32 dimensions, then the elements in
// row-major order, big-endian. Files may be gzip-compressed (as distributed)
// or raw; compression is recognised by content, not by name.
// What is accepted and what is rejected: docs/FORMATS.md.
//
// Readers return an error and nothing else on bad input: never a partly
// filled tensor. All functions are thread-safe.
#ifndef DTRAIN_DATA_IDX_H_
#define DTRAIN_DATA_IDX_H_

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace dtrain::data {

// IDX element types (the third byte of the magic number).
enum class IdxType : uint8_t {
  kUint8 = 0x08,
  kInt8 = 0x09,
  kInt16 = 0x0B,
  kInt32 = 0x0C,
  kFloat32 = 0x0D,
  kFloat64 = 0x0E,
};

// The magic numbers of MNIST's files: uint8 images [N, H, W] and uint8 labels
// [N].
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

// Reads one IDX file into a CPU tensor with the file's dimensions and element
// type (uint8, int8, int16, int32, float32, float64), in host byte order.
// kNotFound when the file does not exist. kInvalidArgument naming the path
// for: a magic number that is not IDX (the message shows it), an unknown
// element type, rank 0, dimensions whose product the file cannot hold, a
// truncated file, bytes after the data, corrupt or truncated gzip data.
absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path);

// Reads an MNIST-style pair of files: images (magic 0x00000803, uint8
// [N, H, W]) and labels (magic 0x00000801, uint8 [N]) into a Dataset named
// `name` with images [N, 1, H, W] uint8 and labels in [0, num_classes).
// Errors as ReadIdxFile, plus kInvalidArgument for a file with the wrong
// magic number (e.g. the two files swapped), a count mismatch between the
// files, or a label outside [0, num_classes) (naming the example).
absl::StatusOr<Dataset> ReadIdxDataset(const std::string& images_path,
                                       const std::string& labels_path,
                                       int64_t num_classes, std::string name);

}  // namespace dtrain::data

#endif  // DTRAIN_DATA_IDX_H_
