// Test helpers for data/: files written by the tests themselves (IDX, STL-10,
// gzip, broken variants), and a watchdog for tests that use threads.
#ifndef DTRAIN_DATA_TEST_UTIL_H_
#define DTRAIN_DATA_TEST_UTIL_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dtrain::data::testing {

// A fresh empty directory under the test's temporary directory.
std::string MakeTempDir();

// Writes `bytes` to `path`, failing the test (ADD_FAILURE) on error.
void WriteFile(const std::string& path, absl::string_view bytes);

// A test fixture with a fresh directory per test to write input files into.
class TempDirTest : public ::testing::Test {
 protected:
  // Writes `bytes` to <dir>/<name> and returns the path.
  std::string Write(const std::string& name, const std::string& bytes);

  const std::string dir_ = MakeTempDir();
};

// gzip-compressed `bytes` (a single member).
std::string Gzip(absl::string_view bytes);

// An IDX file: magic 00 00 <type> <dims.size()>, big-endian dims, then
// `payload` as given (already big-endian for multi-byte types).
std::string IdxFile(uint8_t type, const std::vector<uint32_t>& dims,
                    absl::string_view payload);

// MNIST-style uint8 IDX files of n images of h x w: pixel j of image i is
// (i * 7 + j) % 256; labels as given.
std::string IdxImages(int n, int h, int w);
std::string IdxLabels(const std::vector<uint8_t>& labels);

// Aborts the whole test binary, naming the test, when it is not destroyed
// within `timeout`: a test with threads fails instead of hanging.
class Watchdog {
 public:
  explicit Watchdog(absl::Duration timeout);
  ~Watchdog();

 private:
  // std::mutex, not absl::Notification: usable under ThreadSanitizer, which
  // Debian's Abseil is not built for.
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace dtrain::data::testing

#endif  // DTRAIN_DATA_TEST_UTIL_H_
