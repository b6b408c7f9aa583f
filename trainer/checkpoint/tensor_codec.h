// Internal to the checkpoint package: how a tensor is encoded in a
// checkpoint (dtype code, ndim, sizes, contiguous data; docs/FORMATS.md),
// and the wording every part of the codec shares. Stateless; thread-safe for
// distinct writers and readers.
#ifndef DTRAIN_TRAINER_CHECKPOINT_TENSOR_CODEC_H_
#define DTRAIN_TRAINER_CHECKPOINT_TENSOR_CODEC_H_

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/byte_codec.h"

namespace dtrain::trainer::internal {

// The prefixes of encoding errors (kInvalidArgument) and of decoding errors
// (kDataLoss): ByteWriter and ByteReader take them.
inline constexpr absl::string_view kEncodeError = "cannot encode checkpoint: ";
inline constexpr absl::string_view kMalformed =
    "malformed checkpoint payload: ";

// The smallest encoded tensor: its dtype and ndim bytes. Counts of items
// that hold tensors are capped by the bytes left with it.
inline constexpr size_t kMinTensorSize = 1 + 1;

// kDataLoss "malformed checkpoint payload: <what>".
absl::Status Malformed(absl::string_view what);

// Text from a checkpoint, quoted and escaped, for a message.
std::string Quoted(absl::string_view text);

// Appends dtype, ndim, sizes and data. kInvalidArgument naming `what` for a
// dtype outside the format's list, a tensor that is not dense or has more
// than 8 dimensions. Throws when LibTorch cannot copy the tensor to the CPU.
absl::Status WriteTensor(const at::Tensor& tensor, absl::string_view what,
                         base::ByteWriter& w);

// What WriteTensor wrote, as a fresh contiguous CPU tensor; kDataLoss naming
// `what` and its offset for anything else. Throws only when memory runs out.
absl::Status ReadTensor(base::ByteReader& r, absl::string_view what,
                        at::Tensor* tensor);

}  // namespace dtrain::trainer::internal

#endif  // DTRAIN_TRAINER_CHECKPOINT_TENSOR_CODEC_H_
