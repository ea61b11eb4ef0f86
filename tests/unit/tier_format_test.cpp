// The tier file format (cache/tier_format.h) and the content keys (cache/cache_tier.h): a round
// trip, then every malformed input: each truncation, each flipped byte, another version, model,
// KV type, object or layout, a longer file, a bad kind or header field with a valid checksum.
#include "rewind/cache/tier_format.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace rw {
namespace {

const Hash128 kFp{0x1122334455667788ull, 0x99aabbccddeeff00ull};

std::vector<std::byte> make_file(const TierFileHeader& h0, size_t payload) {
  std::vector<std::byte> p(payload);
  for (size_t i = 0; i < payload; ++i) p[i] = static_cast<std::byte>(i * 7 + 3);
  TierFileHeader h = h0;
  h.payload_hash = xxh3_64(p.data(), p.size());
  const auto hd = encode_tier_header(h);
  std::vector<std::byte> f(hd.size() + p.size());
  std::memcpy(f.data(), hd.data(), hd.size());
  if (!p.empty()) std::memcpy(f.data() + hd.size(), p.data(), p.size());
  return f;
}

TierFileHeader header(TierLayout lay) {
  TierFileHeader h;
  h.kind = TierKind::Checkpoint;
  h.fingerprint = kFp;
  h.key = Hash128{42, 43};
  h.pos = 77;
  h.layout = lay;
  return h;
}

TierExpect expect(const ContentKey* key = nullptr, const TierLayout* lay = nullptr) {
  TierExpect w;
  w.fingerprint = kFp;
  w.key = key;
  w.kind = TierKind::Checkpoint;
  w.layout = lay;
  return w;
}

// Rewrites the header checksum after a change, so the check behind it is reached.
void reseal(std::vector<std::byte>& f) {
  const uint64_t h = xxh3_64(f.data(), 80);
  for (int i = 0; i < 8; ++i) f[80 + static_cast<size_t>(i)] = static_cast<std::byte>(h >> (8 * i));
}

TEST(TierFormat, RoundTrip) {
  const TierLayout lay{40, 24};
  const auto f = make_file(header(lay), 64);
  const ContentKey key{42, 43};
  const TierParse p = parse_tier_file(f, expect(&key, &lay));
  ASSERT_TRUE(p.ok()) << p.message;
  EXPECT_EQ(p.header.pos, 77);
  EXPECT_EQ(p.header.kind, TierKind::Checkpoint);
  EXPECT_EQ(p.header.key, key);
  EXPECT_EQ(p.header.layout, lay);
  EXPECT_EQ(p.header.fingerprint, kFp);
}

TEST(TierFormat, EveryTruncationIsAnError) {
  const auto f = make_file(header({40, 24}), 64);
  for (size_t n = 0; n < f.size(); ++n) {
    const TierParse p = parse_tier_file(std::span<const std::byte>(f.data(), n), expect());
    EXPECT_EQ(p.error, TierFileError::Truncated) << n << ": " << p.message;
    EXPECT_FALSE(p.message.empty());
  }
}

TEST(TierFormat, EveryFlippedByteIsAnError) {
  const auto f = make_file(header({40, 24}), 64);
  for (size_t i = 0; i < f.size(); ++i)
    for (int bit : {0, 7}) {
      auto g = f;
      g[i] ^= static_cast<std::byte>(1 << bit);
      const TierParse p = parse_tier_file(g, expect());
      EXPECT_FALSE(p.ok()) << "byte " << i << " bit " << bit;
    }
}

TEST(TierFormat, LongerFileIsAnError) {
  auto f = make_file(header({40, 24}), 64);
  f.push_back(std::byte{0});
  EXPECT_EQ(parse_tier_file(f, expect()).error, TierFileError::TooLong);
}

TEST(TierFormat, ForeignFilesAreRecognised) {
  auto h = header({0, 64});
  h.version = kTierFormatVersion + 1;
  auto p = parse_tier_file(make_file(h, 64), expect());
  EXPECT_EQ(p.error, TierFileError::Version);
  EXPECT_TRUE(tier_file_error_foreign(p.error));
  h = header({0, 64});
  h.fingerprint.lo ^= 1;
  p = parse_tier_file(make_file(h, 64), expect());
  EXPECT_EQ(p.error, TierFileError::Fingerprint);
  EXPECT_TRUE(tier_file_error_foreign(p.error));
  h = header({0, 64});
  h.kv_dtype = 3;
  p = parse_tier_file(make_file(h, 64), expect());
  EXPECT_EQ(p.error, TierFileError::KvType);
  EXPECT_TRUE(tier_file_error_foreign(p.error));
  EXPECT_FALSE(tier_file_error_foreign(TierFileError::PayloadChecksum));
  EXPECT_FALSE(tier_file_error_foreign(TierFileError::Truncated));
}

TEST(TierFormat, WrongObjectOrLayout) {
  const TierLayout lay{0, 64};
  const auto f = make_file(header(lay), 64);
  const ContentKey other{42, 44};
  EXPECT_EQ(parse_tier_file(f, expect(&other)).error, TierFileError::WrongObject);
  const ContentKey key{42, 43};
  TierExpect w = expect(&key);
  w.kind = TierKind::Page;
  EXPECT_EQ(parse_tier_file(f, w).error, TierFileError::WrongObject);
  const TierLayout lay2{64, 0};
  EXPECT_EQ(parse_tier_file(f, expect(&key, &lay2)).error, TierFileError::WrongObject);
}

TEST(TierFormat, BadFieldsBehindAValidChecksum) {
  const auto f = make_file(header({0, 64}), 64);
  auto g = f;
  g[8] = std::byte{9};  // kind
  reseal(g);
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::BadKind);
  g = f;
  g[10] = std::byte{1};  // reserved
  reseal(g);
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::BadHeader);
  g = f;
  g[55] = std::byte{0x80};  // negative position
  reseal(g);
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::BadHeader);
  g = f;
  g[63] = std::byte{0xff};  // a snapshot size no file can have
  reseal(g);
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::BadHeader);
  g = f;
  g[56] = std::byte{1};  // one more snapshot byte than the file holds
  reseal(g);
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::Truncated);
  g = f;
  g[0] = std::byte{'X'};
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::BadMagic);
  g = f;
  g[100] ^= std::byte{1};
  EXPECT_EQ(parse_tier_file(g, expect()).error, TierFileError::PayloadChecksum);
}

TEST(TierFormat, HeaderAloneDoesNotReadThePayload) {
  const auto f = make_file(header({0, 64}), 64);
  auto g = f;
  g[100] ^= std::byte{1};
  EXPECT_TRUE(parse_tier_header(g, g.size(), expect()).ok());
  EXPECT_EQ(parse_tier_header(g, g.size() - 1, expect()).error, TierFileError::Truncated);
}

TEST(ContentKeys, ChainHashDependsOnEveryTokenAndTheFingerprint) {
  const uint8_t fa[16] = {1};
  const uint8_t fb[16] = {2};
  const ContentKey ra = chain_root(fa), rb = chain_root(fb);
  EXPECT_NE(ra, rb);
  EXPECT_EQ(ra, chain_root(fa));
  EXPECT_NE(chain_next(ra, 5), chain_next(ra, 6));
  EXPECT_NE(chain_next(chain_next(ra, 5), 6), chain_next(chain_next(ra, 6), 5));
  EXPECT_NE(chain_next(ra, 5), chain_next(rb, 5));
  EXPECT_EQ(chain_next(ra, -1), chain_next(ra, -1));
  Hash128 back;
  ASSERT_TRUE(Hash128::from_hex(ra.hex(), &back));
  EXPECT_EQ(back, ra);
  EXPECT_FALSE(Hash128::from_hex("xyz", &back));
  EXPECT_FALSE(Hash128::from_hex(std::string(32, 'g'), &back));
}

}  // namespace
}  // namespace rw
