#include "dist/store/tcp_store_protocol.h"

namespace dtrain::store::protocol {
namespace {

template <typename T>
void PutLittleEndian(T v, std::string* out) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(
        static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff));
  }
}

template <typename T>
T GetLittleEndian(const char* p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return static_cast<T>(v);
}

}  // namespace

void AppendFrame(uint8_t type, absl::string_view payload, std::string* out) {
  PutLittleEndian<uint32_t>(kMagic, out);
  out->push_back(static_cast<char>(kVersion));
  out->push_back(static_cast<char>(type));
  PutLittleEndian<uint16_t>(0, out);
  PutLittleEndian<uint32_t>(static_cast<uint32_t>(payload.size()), out);
  out->append(payload.data(), payload.size());
}

Header DecodeHeader(const char* data) {
  Header h;
  h.magic = GetLittleEndian<uint32_t>(data);
  h.version = static_cast<uint8_t>(data[4]);
  h.type = static_cast<uint8_t>(data[5]);
  h.reserved = GetLittleEndian<uint16_t>(data + 6);
  h.length = GetLittleEndian<uint32_t>(data + 8);
  return h;
}

Writer& Writer::U8(uint8_t v) {
  data_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::U32(uint32_t v) {
  PutLittleEndian(v, &data_);
  return *this;
}

Writer& Writer::I64(int64_t v) {
  PutLittleEndian(static_cast<uint64_t>(v), &data_);
  return *this;
}

Writer& Writer::Bytes(absl::string_view v) {
  U32(static_cast<uint32_t>(v.size()));
  data_.append(v.data(), v.size());
  return *this;
}

bool Reader::Take(size_t n, const char** p) {
  if (!ok_ || data_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  *p = data_.data() + pos_;
  pos_ += n;
  return true;
}

uint8_t Reader::U8() {
  const char* p;
  return Take(1, &p) ? static_cast<uint8_t>(*p) : 0;
}

uint32_t Reader::U32() {
  const char* p;
  return Take(4, &p) ? GetLittleEndian<uint32_t>(p) : 0;
}

int64_t Reader::I64() {
  const char* p;
  return Take(8, &p) ? static_cast<int64_t>(GetLittleEndian<uint64_t>(p)) : 0;
}

absl::string_view Reader::Bytes() {
  const uint32_t n = U32();
  const char* p;
  if (!Take(n, &p)) return {};
  return absl::string_view(p, n);
}

}  // namespace dtrain::store::protocol
