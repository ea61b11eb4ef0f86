#include "rewind/base/hash.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "rewind/base/check.h"

namespace rw {

std::string Hash128::hex() const {
  static const char* d = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[static_cast<size_t>(15 - i)] = d[(hi >> (4 * i)) & 15];
    s[static_cast<size_t>(31 - i)] = d[(lo >> (4 * i)) & 15];
  }
  return s;
}

bool Hash128::from_hex(std::string_view s, Hash128* out) {
  if (s.size() != 32) return false;
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    int x;
    if (c >= '0' && c <= '9')
      x = c - '0';
    else if (c >= 'a' && c <= 'f')
      x = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      x = c - 'A' + 10;
    else
      return false;
    v[i / 16] = (v[i / 16] << 4) | static_cast<uint64_t>(x);
  }
  out->hi = v[0];
  out->lo = v[1];
  return true;
}

Hash128 xxh3_128(const void* data, size_t n) {
  const XXH128_hash_t h = XXH3_128bits(data, n);
  return Hash128{h.low64, h.high64};
}

uint64_t xxh3_64(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

struct Hasher::State {
  XXH3_state_t st128;
  XXH3_state_t st64;
};

Hasher::Hasher() : s_(std::make_unique<State>()) {
  REWIND_CHECK(XXH3_128bits_reset(&s_->st128) == XXH_OK);
  REWIND_CHECK(XXH3_64bits_reset(&s_->st64) == XXH_OK);
}
Hasher::~Hasher() = default;
Hasher::Hasher(Hasher&&) noexcept = default;
Hasher& Hasher::operator=(Hasher&&) noexcept = default;

void Hasher::update(const void* data, size_t n) {
  XXH3_128bits_update(&s_->st128, data, n);
  XXH3_64bits_update(&s_->st64, data, n);
}

Hash128 Hasher::digest128() const {
  const XXH128_hash_t h = XXH3_128bits_digest(&s_->st128);
  return Hash128{h.low64, h.high64};
}

uint64_t Hasher::digest64() const {
  return XXH3_64bits_digest(&s_->st64);
}

}  // namespace rw
