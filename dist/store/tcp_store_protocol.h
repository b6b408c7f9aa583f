// The TcpStore wire protocol: framing, request and reply types, and the
// encoding of their fields (base/byte_codec.h's little-endian coding).
// docs/FORMATS.md describes it for people; this file is the single source for
// the code. Both the server and the client use these helpers, so they cannot
// disagree on the format. Functions are stateless and thread-safe; a Reader
// views bytes its caller keeps alive, and what it returns views them too.
#ifndef DTRAIN_DIST_STORE_TCP_STORE_PROTOCOL_H_
#define DTRAIN_DIST_STORE_TCP_STORE_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/byte_codec.h"

namespace dtrain::store::protocol {

// Every frame starts with this 12-byte header, integers little-endian:
//   u32 magic | u8 version | u8 type | u16 reserved (0) | u32 payload length
inline constexpr uint32_t kMagic = 0x5653544B;  // "KTSV" on the wire.
// 2: the hello (PING) carries the job's token.
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kHeaderSize = 12;
// Default cap on a payload; the server rejects larger frames before reading
// them.
inline constexpr uint32_t kDefaultMaxPayload = 64u << 20;
// Cap on a frame from a connection whose hello the server has not accepted
// yet: a hello is a token and a few bytes, so a stranger cannot make the
// server buffer megabytes before it checks the token.
inline constexpr uint32_t kMaxHelloPayload = 4096;
// Longest token a hello may carry (kMaxHelloPayload less its framing, with
// room to spare).
inline constexpr size_t kMaxTokenBytes = 1024;
// The hello: every connection starts with a kPing from the client, which a
// dtrain server answers at once with a kOk frame of its magic and version.
// The client waits this long; silence, a closed connection, another magic or
// another version end the connection attempt with a message saying which,
// without retrying (docs/FORMATS.md).
inline constexpr absl::Duration kHelloTimeout = absl::Seconds(1);

enum class Request : uint8_t {
  kPing = 1,        // bytes token -> reply kOk, payload: bytes server_name
  kSet = 2,         // bytes key, bytes value -> kOk
  kGet = 3,         // i64 timeout_ms, bytes key -> kOk bytes value | kDeadline
  kAdd = 4,         // bytes key, i64 delta -> kOk i64 value | kInvalid
  kCompareSet = 5,  // bytes key, bytes expected, bytes desired -> kOk bytes
  kCheck = 6,       // u32 n, n x bytes key -> kOk u8 all_present
  kWait = 7,        // i64 timeout_ms, u32 n, n x bytes key -> kOk | kDeadline
  kDelete = 8,      // bytes key -> kOk u8 existed
  kNumKeys = 9,     // -> kOk i64 count
};

enum class Reply : uint8_t {
  kOk = 0,
  kInvalid = 1,   // bytes message; the connection stays usable
  kDeadline = 2,  // bytes message
  kProtocol = 3,  // bytes message; the server closes the connection after it
  // bytes message; answers a hello when the server is too busy to take the
  // connection now (it closes it after this): the client connects again.
  kRetry = 4,
};

struct Header {
  uint32_t magic = kMagic;
  uint8_t version = kVersion;
  uint8_t type = 0;
  uint16_t reserved = 0;
  uint32_t length = 0;
};

// Appends a header for `type` and `payload` to `out`.
void AppendFrame(uint8_t type, absl::string_view payload, std::string* out);
// Decodes the first kHeaderSize bytes of `data` (which must hold at least that
// many).
Header DecodeHeader(const char* data);

// Builds a payload field by field.
class Writer {
 public:
  Writer& U8(uint8_t v);
  Writer& U32(uint32_t v);
  Writer& I64(int64_t v);
  Writer& Bytes(absl::string_view v);  // u32 length, then the bytes
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

// Reads a payload field by field. Every read checks bounds; after the first
// failure all reads fail (returning 0 or empty), so a caller may read every
// field and check ok() once.
class Reader {
 public:
  explicit Reader(absl::string_view data) : reader_(data) {}
  uint8_t U8();
  uint32_t U32();
  int64_t I64();
  absl::string_view Bytes();
  bool ok() const { return ok_; }
  // True when every byte was consumed and no read failed.
  bool Done() const { return ok_ && reader_.remaining() == 0; }

 private:
  // Records the outcome of one read; false once any read failed.
  bool Read(const absl::Status& status);

  base::ByteReader reader_;
  bool ok_ = true;
};

}  // namespace dtrain::store::protocol

#endif  // DTRAIN_DIST_STORE_TCP_STORE_PROTOCOL_H_
