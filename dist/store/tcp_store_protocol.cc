#include "dist/store/tcp_store_protocol.h"

namespace dtrain::store::protocol {

void AppendFrame(uint8_t type, absl::string_view payload, std::string* out) {
  base::ByteWriter(out)
      .U32(kMagic)
      .U8(kVersion)
      .U8(type)
      .U16(0)
      .U32(static_cast<uint32_t>(payload.size()))
      .Raw(payload);
}

Header DecodeHeader(const char* data) {
  Header h;
  h.magic = static_cast<uint32_t>(base::GetLittleEndian(data, 4));
  h.version = static_cast<uint8_t>(data[4]);
  h.type = static_cast<uint8_t>(data[5]);
  h.reserved = static_cast<uint16_t>(base::GetLittleEndian(data + 6, 2));
  h.length = static_cast<uint32_t>(base::GetLittleEndian(data + 8, 4));
  return h;
}

Writer& Writer::U8(uint8_t v) {
  base::ByteWriter(&data_).U8(v);
  return *this;
}

Writer& Writer::U32(uint32_t v) {
  base::ByteWriter(&data_).U32(v);
  return *this;
}

Writer& Writer::I64(int64_t v) {
  base::ByteWriter(&data_).I64(v);
  return *this;
}

Writer& Writer::Bytes(absl::string_view v) {
  base::ByteWriter(&data_).U32(static_cast<uint32_t>(v.size())).Raw(v);
  return *this;
}

bool Reader::Read(const absl::Status& status) {
  ok_ = ok_ && status.ok();
  return ok_;
}

uint8_t Reader::U8() {
  uint8_t v = 0;
  return ok_ && Read(reader_.U8("u8", &v)) ? v : 0;
}

uint32_t Reader::U32() {
  uint32_t v = 0;
  return ok_ && Read(reader_.U32("u32", &v)) ? v : 0;
}

int64_t Reader::I64() {
  int64_t v = 0;
  return ok_ && Read(reader_.I64("i64", &v)) ? v : 0;
}

absl::string_view Reader::Bytes() {
  absl::string_view v;
  return ok_ && Read(reader_.String("bytes", &v)) ? v : absl::string_view();
}

}  // namespace dtrain::store::protocol
