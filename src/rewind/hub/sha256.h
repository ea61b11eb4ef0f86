// SHA-256, streamed, by OpenSSL's EVP digests: `rewind pull` hashes each file as its bytes arrive
// and checks the digest against the Hub's LFS oid. Known-answer tests: tests/unit/hub_test.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace rw::hub {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void reset();
  void update(const void* data, size_t n);
  // The digest as 64 lowercase hex digits; the object must be reset() before reuse.
  std::string hex_digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The SHA-256 of a whole string, as hex.
std::string sha256_hex(const std::string& bytes);

}  // namespace rw::hub
