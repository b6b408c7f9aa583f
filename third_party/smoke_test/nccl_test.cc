// CUDA/NCCL smoke test: when the build found NCCL, the library links and
// reports the version its header promised. Device checks skip with the reason
// when no GPU is visible.

#include "gtest/gtest.h"
#include "third_party/cuda_config.h"

#if DTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace {

#if DTRAIN_HAVE_NCCL

TEST(NcclSmokeTest, LinkedLibraryMatchesHeaderVersion) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
}

TEST(NcclSmokeTest, SingleRankCommunicatorOnDevice) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device visible (" << cudaGetErrorString(err)
                 << ")";
  }
  ncclComm_t comm;
  int device = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &device), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

#else

TEST(NcclSmokeTest, BuiltWithoutNccl) {
  GTEST_SKIP() << "built without NCCL: " << DTRAIN_NCCL_MISSING_REASON;
}

#endif

}  // namespace
