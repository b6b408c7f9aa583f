#include "data/test_util.h"

#include <stdlib.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dtrain::data::testing {

std::string MakeTempDir() {
  std::string base = ::testing::TempDir();
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string templ = absl::StrCat(base, "/dtrain_data_test_XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << templ << ") failed";
  }
  return templ;
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

std::string Gzip(absl::string_view bytes) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    ADD_FAILURE() << "deflateInit2 failed";
    return "";
  }
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) ADD_FAILURE() << "deflate failed";
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string IdxFile(uint8_t type, const std::vector<uint32_t>& dims,
                    absl::string_view payload) {
  std::string out = {0, 0, static_cast<char>(type),
                     static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<char>(d >> 24));
    out.push_back(static_cast<char>(d >> 16));
    out.push_back(static_cast<char>(d >> 8));
    out.push_back(static_cast<char>(d));
  }
  out.append(payload.data(), payload.size());
  return out;
}

std::string IdxImages(int n, int h, int w) {
  std::string pixels(static_cast<size_t>(n) * h * w, '\0');
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < h * w; ++j) {
      pixels[static_cast<size_t>(i) * h * w + j] =
          static_cast<char>((i * 7 + j) % 256);
    }
  }
  return IdxFile(0x08,
                 {static_cast<uint32_t>(n), static_cast<uint32_t>(h),
                  static_cast<uint32_t>(w)},
                 pixels);
}

std::string IdxLabels(const std::vector<uint8_t>& labels) {
  return IdxFile(0x08, {static_cast<uint32_t>(labels.size())},
                 std::string(labels.begin(), labels.end()));
}

Watchdog::Watchdog(absl::Duration timeout) {
  const ::testing::TestInfo* info =
      ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      info == nullptr
          ? "(outside a test)"
          : absl::StrCat(info->test_suite_name(), ".", info->name());
  thread_ = std::thread([this, timeout, name] {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                      [this] { return done_; })) {
      std::fprintf(stderr, "Watchdog: %s did not finish within %s; aborting\n",
                   name.c_str(), absl::FormatDuration(timeout).c_str());
      std::fflush(stderr);
      std::abort();
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string TempDirTest::Write(const std::string& name,
                               const std::string& bytes) {
  const std::string path = absl::StrCat(dir_, "/", name);
  WriteFile(path, bytes);
  return path;
}

}  // namespace dtrain::data::testing
