#include "rewind/cache/tier_format.h"

#include <cstring>
#include <limits>

namespace rw {

namespace {
constexpr char kMagic[4] = {'R', 'W', 'K', 'T'};

void put_u32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
void put_u64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
uint32_t get_u32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint32_t>(p[i]);
  return v;
}
uint64_t get_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

TierParse fail(TierParse r, TierFileError e, std::string msg) {
  r.error = e;
  r.message = std::move(msg);
  return r;
}
}  // namespace

const char* tier_file_error_name(TierFileError e) {
  switch (e) {
    case TierFileError::None:
      return "ok";
    case TierFileError::Truncated:
      return "truncated";
    case TierFileError::TooLong:
      return "longer than its header says";
    case TierFileError::BadMagic:
      return "not a tier file (bad magic)";
    case TierFileError::HeaderChecksum:
      return "header checksum mismatch";
    case TierFileError::BadKind:
      return "unknown object kind";
    case TierFileError::BadHeader:
      return "malformed header";
    case TierFileError::Version:
      return "another format version";
    case TierFileError::Fingerprint:
      return "another model (fingerprint)";
    case TierFileError::KvType:
      return "another KV element type";
    case TierFileError::WrongObject:
      return "not the object asked for";
    case TierFileError::PayloadChecksum:
      return "payload checksum mismatch";
  }
  return "?";
}

bool tier_file_error_foreign(TierFileError e) {
  return e == TierFileError::Version || e == TierFileError::Fingerprint ||
         e == TierFileError::KvType;
}

std::array<std::byte, kTierHeaderBytes> encode_tier_header(const TierFileHeader& h) {
  std::array<std::byte, kTierHeaderBytes> b{};
  std::memcpy(b.data(), kMagic, 4);
  put_u32(&b[4], h.version);
  b[8] = static_cast<std::byte>(h.kind);
  b[9] = static_cast<std::byte>(h.kv_dtype);
  put_u32(&b[12], static_cast<uint32_t>(kTierHeaderBytes));
  put_u64(&b[16], h.fingerprint.lo);
  put_u64(&b[24], h.fingerprint.hi);
  put_u64(&b[32], h.key.lo);
  put_u64(&b[40], h.key.hi);
  put_u64(&b[48], static_cast<uint64_t>(h.pos));
  put_u64(&b[56], h.layout.rec_bytes);
  put_u64(&b[64], h.layout.kv_bytes);
  put_u64(&b[72], h.payload_hash);
  put_u64(&b[80], xxh3_64(b.data(), 80));
  return b;
}

TierExpect expect_object(const Hash128& fingerprint, uint8_t kv_dtype, const ContentKey& key,
                         TierKind kind, const TierLayout& layout) {
  TierExpect want;
  want.fingerprint = fingerprint;
  want.kv_dtype = kv_dtype;
  want.key = &key;
  want.kind = kind;
  want.layout = &layout;
  return want;
}

std::array<std::byte, kTierHeaderBytes> tier_header_of(const TierPut& obj,
                                                       const Hash128& fingerprint,
                                                       uint8_t kv_dtype) {
  TierFileHeader h;
  h.kind = obj.kind;
  h.kv_dtype = kv_dtype;
  h.fingerprint = fingerprint;
  h.key = obj.key;
  h.pos = obj.pos;
  h.layout = obj.layout;
  Hasher ph;
  for (const auto& part : obj.parts) ph.update(part.data(), part.size());
  h.payload_hash = ph.digest64();
  return encode_tier_header(h);
}

TierParse parse_tier_header(std::span<const std::byte> bytes, uint64_t file_size,
                            const TierExpect& want) {
  TierParse r;
  if (bytes.size() < kTierHeaderBytes || file_size < kTierHeaderBytes)
    return fail(r, TierFileError::Truncated,
                "truncated header: " + std::to_string(std::min<uint64_t>(bytes.size(), file_size)) +
                    " of " + std::to_string(kTierHeaderBytes) + " bytes");
  const std::byte* b = bytes.data();
  if (std::memcmp(b, kMagic, 4) != 0) return fail(r, TierFileError::BadMagic, "bad magic");
  // The version first: another version may lay its header out differently.
  r.header.version = get_u32(b + 4);
  if (r.header.version != kTierFormatVersion)
    return fail(r, TierFileError::Version,
                "format version " + std::to_string(r.header.version) + ", this build reads " +
                    std::to_string(kTierFormatVersion));
  if (get_u64(b + 80) != xxh3_64(b, 80))
    return fail(r, TierFileError::HeaderChecksum, "header checksum mismatch");
  const uint8_t kind = static_cast<uint8_t>(b[8]);
  if (kind != static_cast<uint8_t>(TierKind::Page) &&
      kind != static_cast<uint8_t>(TierKind::Checkpoint))
    return fail(r, TierFileError::BadKind, "unknown object kind " + std::to_string(kind));
  r.header.kind = static_cast<TierKind>(kind);
  r.header.kv_dtype = static_cast<uint8_t>(b[9]);
  if (b[10] != std::byte{0} || b[11] != std::byte{0} || get_u32(b + 12) != kTierHeaderBytes)
    return fail(r, TierFileError::BadHeader, "reserved bytes or header size not as written");
  r.header.fingerprint = Hash128{get_u64(b + 16), get_u64(b + 24)};
  r.header.key = Hash128{get_u64(b + 32), get_u64(b + 40)};
  r.header.pos = static_cast<int64_t>(get_u64(b + 48));
  r.header.layout.rec_bytes = get_u64(b + 56);
  r.header.layout.kv_bytes = get_u64(b + 64);
  r.header.payload_hash = get_u64(b + 72);
  if (r.header.pos < 0) return fail(r, TierFileError::BadHeader, "negative position");
  const uint64_t lim = std::numeric_limits<uint64_t>::max() / 4;
  if (r.header.layout.rec_bytes > lim || r.header.layout.kv_bytes > lim)
    return fail(r, TierFileError::BadHeader, "payload sizes out of range");
  if (r.header.fingerprint != want.fingerprint)
    return fail(r, TierFileError::Fingerprint,
                "written by another model (fingerprint " + r.header.fingerprint.hex() + ")");
  if (r.header.kv_dtype != want.kv_dtype)
    return fail(r, TierFileError::KvType,
                "KV element type " + std::to_string(r.header.kv_dtype) + ", expected " +
                    std::to_string(want.kv_dtype));
  const uint64_t expect_size = kTierHeaderBytes + r.header.layout.total();
  if (file_size < expect_size)
    return fail(r, TierFileError::Truncated,
                "truncated: " + std::to_string(file_size) + " of " + std::to_string(expect_size) +
                    " bytes");
  if (file_size > expect_size)
    return fail(
        r, TierFileError::TooLong,
        std::to_string(file_size) + " bytes, the header says " + std::to_string(expect_size));
  if (want.key && (r.header.key != *want.key || r.header.kind != want.kind))
    return fail(r, TierFileError::WrongObject, "holds another object than its name says");
  if (want.layout && !(r.header.layout == *want.layout))
    return fail(r, TierFileError::WrongObject,
                "payload layout " + std::to_string(r.header.layout.rec_bytes) + "+" +
                    std::to_string(r.header.layout.kv_bytes) + " bytes, expected " +
                    std::to_string(want.layout->rec_bytes) + "+" +
                    std::to_string(want.layout->kv_bytes));
  return r;
}

TierParse parse_tier_file(std::span<const std::byte> file, const TierExpect& want) {
  TierParse r = parse_tier_header(file, file.size(), want);
  if (!r.ok()) return r;
  const std::span<const std::byte> payload = file.subspan(kTierHeaderBytes);
  if (xxh3_64(payload.data(), payload.size()) != r.header.payload_hash)
    return fail(r, TierFileError::PayloadChecksum, "payload checksum mismatch");
  return r;
}

}  // namespace rw
