// Hostile weight files for the tests of the readers' memory bounds: names
// aliasing one storage, and pickles of megabytes of one-byte opcodes; and a
// limit on the address space for a test's child process to run a reader in.
#ifndef DTRAIN_MODELS_STATE_DICT_HOSTILE_WEIGHTS_H_
#define DTRAIN_MODELS_STATE_DICT_HOSTILE_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtrain::models::state_dict {

// A torch.save archive whose `names` names ("w0", "w1", ...) are each a view
// of all of one float32 storage of `storage_bytes` (a multiple of 4), each
// its own _rebuild_tensor_v2 call; `memoized`: one tensor object, memoized
// and named `names` times. Element i of the storage holds float(i % 1000).
std::string SharedStorageArchive(int names, size_t storage_bytes,
                                 bool memoized);

// A torch.save archive whose data.pkl is PROTO 2, `count` copies of
// `opcodes`, then STOP.
std::string RepeatedOpcodeArchive(const std::string& opcodes, size_t count);

// Whether LimitAddressSpace can work: not under AddressSanitizer, whose
// shadow memory needs terabytes of address space.
bool CanLimitAddressSpace();

// Caps this process's address space at what it maps now plus `extra` bytes
// (setrlimit RLIMIT_AS): for a child process (a death test) that then runs
// a reader, whose allocations past it fail. False when it cannot.
bool LimitAddressSpace(uint64_t extra);

}  // namespace dtrain::models::state_dict

#endif  // DTRAIN_MODELS_STATE_DICT_HOSTILE_WEIGHTS_H_
