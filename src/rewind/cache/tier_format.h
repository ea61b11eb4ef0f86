// The file format of a tier object (cache/cache_tier.h), one object a file:
//
//   offset size
//    0      4   magic "RWKT"
//    4      4   format version (kTierFormatVersion)
//    8      1   kind (1 page, 2 checkpoint)
//    9      1   KV element type (the engine's code: 0 = f32)
//   10      2   zero
//   12      4   header bytes (88)
//   16     16   model fingerprint (XXH3-128, lo then hi)
//   32     16   content key (lo then hi)
//   48      8   position (tokens of the prefix), signed
//   56      8   recurrent snapshot bytes
//   64      8   KV page bytes
//   72      8   XXH3-64 of the payload
//   80      8   XXH3-64 of bytes [0, 80)
//   88          payload: snapshot bytes then page bytes
//
// All integers little-endian. Parsing is a pure function of the bytes (fuzzed:
// tests/fuzz/fuzz_tier_file.cpp); every malformed input is an error with one line, never a crash.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "rewind/cache/cache_tier.h"

namespace rw {

constexpr uint32_t kTierFormatVersion = 1;
constexpr size_t kTierHeaderBytes = 88;

struct TierFileHeader {
  uint32_t version = kTierFormatVersion;
  TierKind kind = TierKind::Page;
  uint8_t kv_dtype = 0;
  Hash128 fingerprint;
  ContentKey key;
  int64_t pos = 0;
  TierLayout layout;
  uint64_t payload_hash = 0;
};

// What a parse found wrong. Foreign: another format version or model (fingerprint or KV type):
// such a file is skipped and left alone. Every other error means a damaged file.
enum class TierFileError {
  None,
  Truncated,  // shorter than its header says
  TooLong,    // longer than its header says
  BadMagic,
  HeaderChecksum,
  BadKind,
  BadHeader,    // reserved bytes, header size, negative position, sizes that overflow
  Version,      // foreign
  Fingerprint,  // foreign
  KvType,       // foreign
  WrongObject,  // a valid file of this model, but not the object asked for (key, kind, layout)
  PayloadChecksum,
};
const char* tier_file_error_name(TierFileError e);
bool tier_file_error_foreign(TierFileError e);

// What the reader expects.
struct TierExpect {
  Hash128 fingerprint;
  uint8_t kv_dtype = 0;
  // When set, the object asked for; else any object of this model is accepted.
  const ContentKey* key = nullptr;
  TierKind kind = TierKind::Page;
  const TierLayout* layout = nullptr;
};

// What a tier bound to `fingerprint` and `kv_dtype` expects of the object it reads (`key` and
// `layout` are referenced, not copied).
TierExpect expect_object(const Hash128& fingerprint, uint8_t kv_dtype, const ContentKey& key,
                         TierKind kind, const TierLayout& layout);

struct TierParse {
  TierFileError error = TierFileError::None;
  std::string message;  // one line; empty when ok
  TierFileHeader header;
  bool ok() const { return error == TierFileError::None; }
};

std::array<std::byte, kTierHeaderBytes> encode_tier_header(const TierFileHeader& h);
// The header that stores `obj` in a tier bound to `fingerprint` and `kv_dtype` (its payload
// hashed here).
std::array<std::byte, kTierHeaderBytes> tier_header_of(const TierPut& obj,
                                                       const Hash128& fingerprint,
                                                       uint8_t kv_dtype);

// Checks a header (the first kTierHeaderBytes of `bytes`, or Truncated) against `want`, and that
// `file_size` is exactly the header plus the payload it announces. Does not read the payload.
TierParse parse_tier_header(std::span<const std::byte> bytes, uint64_t file_size,
                            const TierExpect& want);
// A whole file: the header as above, then the payload's checksum.
TierParse parse_tier_file(std::span<const std::byte> file, const TierExpect& want);

}  // namespace rw
