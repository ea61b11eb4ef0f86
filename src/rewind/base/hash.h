// Fast non-cryptographic hashes (XXH3 from xxHash, Debian's libxxhash-dev): the content keys and
// file checksums of the prefix cache's tiers, and model fingerprints. Not for security: they
// detect accidents (torn writes, flipped bits, a file of another model), not an attacker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace rw {

struct Hash128 {
  uint64_t lo = 0, hi = 0;
  bool operator==(const Hash128&) const = default;
  // 32 lowercase hex digits, hi then lo (the canonical big-endian order of XXH128).
  std::string hex() const;
  // Parses exactly 32 hex digits (either case); false otherwise.
  static bool from_hex(std::string_view s, Hash128* out);
  // The 16 bytes lo then hi, each little-endian (as the cache's key chain hashes them).
  void to_bytes(uint8_t out[16]) const {
    for (int i = 0; i < 8; ++i) {
      out[i] = static_cast<uint8_t>(lo >> (8 * i));
      out[8 + i] = static_cast<uint8_t>(hi >> (8 * i));
    }
  }
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 31)); }
};

Hash128 xxh3_128(const void* data, size_t n);
uint64_t xxh3_64(const void* data, size_t n);

// Streaming XXH3-128 (or 64): update() any number of times, digest() any time (it does not end
// the stream). Move-only.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(Hasher&&) noexcept;
  Hasher& operator=(Hasher&&) noexcept;
  void update(const void* data, size_t n);
  Hash128 digest128() const;
  uint64_t digest64() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace rw
