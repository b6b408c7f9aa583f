// glibc malloc settings for a training process. A training step frees and
// allocates the same large tensors (activations, gradients) over and over.
// With glibc's defaults, blocks above the mmap threshold are mapped and
// unmapped each time, and free memory at the top of the heap is given back
// to the kernel, so every step faults its pages in again: on the ConvNet
// that made steps 10-50% slower, erratically. Keeping freed memory in the
// process avoids it, at the cost of a resident size that stays at its peak.
#ifndef DTRAIN_BASE_MALLOC_TUNING_H_
#define DTRAIN_BASE_MALLOC_TUNING_H_

namespace dtrain::base {

// Raises glibc's mmap threshold to 256 MiB and its trim threshold to 1 GiB
// (what GLIBC_TUNABLES=glibc.malloc.mmap_threshold=...:trim_threshold=...
// does), unless GLIBC_TUNABLES is set, which then wins. Process-wide; call at
// the start of main, before large allocations. Returns false when glibc
// refused a setting (or the C library is not glibc).
bool TuneMallocForTraining();

// Gives the heap's free memory back to the kernel now (glibc's malloc_trim),
// for a process that has just freed a large structure for good, which the
// trim threshold above would otherwise keep resident. Thread-safe. Does
// nothing without glibc, and under AddressSanitizer or ThreadSanitizer, whose
// allocators replace glibc's: there glibc's heap is never set up, and
// trimming it from several threads at once (ranks as threads) crashed inside
// glibc.
void ReleaseFreedMemory();

}  // namespace dtrain::base

#endif  // DTRAIN_BASE_MALLOC_TUNING_H_
