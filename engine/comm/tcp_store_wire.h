// Wire format of the rendezvous store (internal to tcp_store_server.cpp / tcp_store_client.cpp).
//
// Frame: u32 length of the rest (little endian), then the body. Request body: u8 opcode, fields.
// Reply body: u8 status, fields. Fields: u32/i64 little endian, strings as u32 length + bytes.
// Non-obvious decision: integers are encoded byte by byte (not memcpy of host order) so that a
// store spanning machines of different endianness still agrees; the cost is irrelevant here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace flotilla::comm::wire {

constexpr uint32_t kMaxFrame = 64u << 20;         // a larger frame is garbage: drop the client
constexpr const char* kMagic = "flotilla-store";  // first request of every connection
constexpr uint32_t kVersion = 1;

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5, kWait = 6 };
enum Status : uint8_t { kOk = 0, kNotFound = 1, kTimedOut = 2, kBadRequest = 3 };

class Writer {
 public:
  explicit Writer(uint8_t first) {
    bytes_.resize(4);
    bytes_.push_back(static_cast<char>(first));
  }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void i64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void str(const char* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    bytes_.insert(bytes_.end(), p, p + n);
  }
  void str(const std::string& s) { str(s.data(), s.size()); }
  void str(const std::vector<char>& s) { str(s.data(), s.size()); }
  // The finished frame (length prefix filled in).
  const std::string& frame() {
    const auto n = static_cast<uint32_t>(bytes_.size() - 4);
    for (int i = 0; i < 4; ++i) bytes_[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return bytes_;
  }

 private:
  std::string bytes_;
};

// Reads fields from a frame body; throws std::out_of_range on a short or malformed body.
class Reader {
 public:
  Reader(const char* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(p_[pos_++]);
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p_[pos_++])) << (8 * i);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p_[pos_++])) << (8 * i);
    return static_cast<int64_t>(v);
  }
  std::string str() {
    const uint32_t n = u32();
    need(n);
    std::string s(p_ + pos_, n);
    pos_ += n;
    return s;
  }
  bool at_end() const { return pos_ == n_; }

 private:
  void need(size_t k) const {
    if (n_ - pos_ < k) throw std::out_of_range("short frame");
  }
  const char* p_;
  size_t n_;
  size_t pos_ = 0;
};

inline uint32_t read_u32_le(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

}  // namespace flotilla::comm::wire
