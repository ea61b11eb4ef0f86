#include "rewind/cache/cache_tier.h"

#include <cstring>

namespace rw {

const char* tier_kind_name(TierKind k) {
  switch (k) {
    case TierKind::Page:
      return "page";
    case TierKind::Checkpoint:
      return "ckpt";
  }
  return "?";
}

ContentKey chain_root(std::span<const uint8_t> fingerprint) {
  static const char kTag[] = "rewind-chain-1";
  std::vector<uint8_t> b(fingerprint.begin(), fingerprint.end());
  b.insert(b.end(), kTag, kTag + sizeof(kTag) - 1);
  return xxh3_128(b.data(), b.size());
}

ContentKey chain_next(const ContentKey& k, int32_t token) {
  uint8_t b[20];
  for (int i = 0; i < 8; ++i) {
    b[i] = static_cast<uint8_t>(k.lo >> (8 * i));
    b[8 + i] = static_cast<uint8_t>(k.hi >> (8 * i));
  }
  const uint32_t t = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) b[16 + i] = static_cast<uint8_t>(t >> (8 * i));
  return xxh3_128(b, sizeof b);
}

}  // namespace rw
