// SHA-256 (FIPS 180-4), streamed: `rewind pull` hashes each file as its bytes arrive and checks
// the digest against the Hub's LFS oid. Known-answer tests: tests/unit/hub_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rw::hub {

class Sha256 {
 public:
  Sha256() { reset(); }
  void reset();
  void update(const void* data, size_t n);
  // The digest as 64 lowercase hex digits; the object must be reset() before reuse.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  // bytes
};

// The SHA-256 of a whole string, as hex.
std::string sha256_hex(const std::string& bytes);

}  // namespace rw::hub
