// libFuzzer target for the tier file parser (cache/tier_format.h): any byte string must parse
// or fail with one line, never crash or read outside the buffer (ASan + UBSan). The expected
// fingerprint, key and layout are taken from the input's own header bytes as well as fixed, so
// the fuzzer reaches the checks behind the fingerprint. Seeds: tests/fuzz/seeds/tier.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "rewind/cache/tier_format.h"

namespace {
uint64_t le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(buf.get(), data, size);
  const std::span<const std::byte> file(buf.get(), size);
  rw::TierExpect fixed;
  fixed.fingerprint = rw::Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull};
  auto r = rw::parse_tier_file(file, fixed);
  if (r.ok() != r.message.empty()) __builtin_trap();
  if (size >= rw::kTierHeaderBytes) {
    rw::TierExpect own;
    own.fingerprint = rw::Hash128{le64(buf.get() + 16), le64(buf.get() + 24)};
    const rw::ContentKey key{le64(buf.get() + 32), le64(buf.get() + 40)};
    const rw::TierLayout lay{le64(buf.get() + 56), le64(buf.get() + 64)};
    own.key = &key;
    own.kind = static_cast<uint8_t>(buf[8]) == 2 ? rw::TierKind::Checkpoint : rw::TierKind::Page;
    own.layout = &lay;
    own.kv_dtype = static_cast<uint8_t>(buf[9]);
    r = rw::parse_tier_file(file, own);
    if (r.ok() && (r.header.layout.total() + rw::kTierHeaderBytes != size || r.header.pos < 0))
      __builtin_trap();
    if (r.ok() != r.message.empty()) __builtin_trap();
    (void)rw::parse_tier_header(file, size / 2, own);
  }
  return 0;
}
