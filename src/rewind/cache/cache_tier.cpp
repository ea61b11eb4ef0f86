#include "rewind/cache/cache_tier.h"

#include <cstring>

#include "rewind/base/check.h"

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
  k.to_bytes(b);
  const uint32_t t = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) b[16 + i] = static_cast<uint8_t>(t >> (8 * i));
  return xxh3_128(b, sizeof b);
}

bool copy_payload(const TierPut& obj, const TierLayout& layout, std::span<std::byte> out) {
  if (!(obj.layout == layout)) return false;
  REWIND_CHECK(out.size() == layout.total());
  size_t off = 0;
  for (const auto& p : obj.parts) {
    std::memcpy(out.data() + off, p.data(), p.size());
    off += p.size();
  }
  return true;
}

TierStats tier_named(const std::vector<TierStats>& tiers, std::string_view name) {
  for (const TierStats& t : tiers)
    if (t.name == name) return t;
  return TierStats{};
}

TierStack::TierStack(std::vector<std::shared_ptr<CacheTier>> tiers) : tiers_(std::move(tiers)) {
  REWIND_CHECK(!tiers_.empty());
  for (const auto& t : tiers_) {
    const auto a = t->fingerprint(), b = tiers_[0]->fingerprint();
    REWIND_CHECK(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0);
  }
}

bool TierStack::contains(const ContentKey& key, TierKind kind) const {
  for (const auto& t : tiers_)
    if (t->contains(key, kind)) return true;
  return false;
}

void TierStack::put(TierPut obj) {
  for (const auto& t : tiers_)
    if (!t->contains(obj.key, obj.kind)) t->put(obj);
}

void TierStack::touch(const ContentKey& key, TierKind kind) {
  for (const auto& t : tiers_) t->touch(key, kind);
}

bool TierStack::get(const ContentKey& key, TierKind kind, const TierLayout& layout,
                    std::span<std::byte> out) {
  for (size_t i = 0; i < tiers_.size(); ++i) {
    if (!tiers_[i]->contains(key, kind) || !tiers_[i]->get(key, kind, layout, out)) continue;
    if (i > 0) {
      // Copied up: the bytes are checked already (the tier's get verified them).
      auto copy = std::make_shared<std::vector<std::byte>>(out.begin(), out.end());
      TierPut p;
      p.key = key;
      p.kind = kind;
      p.layout = layout;
      p.parts.push_back(std::span<const std::byte>(copy->data(), copy->size()));
      p.owner = copy;
      for (size_t j = 0; j < i; ++j)
        if (!tiers_[j]->contains(key, kind)) tiers_[j]->put(p);
    }
    return true;
  }
  return false;
}

void TierStack::evict(const ContentKey& key, TierKind kind) {
  for (const auto& t : tiers_) t->evict(key, kind);
}

void TierStack::flush() {
  for (const auto& t : tiers_) t->flush();
}

void TierStack::probe(std::span<const ContentKey> prefix_keys, int64_t page_tokens, int64_t from) {
  for (const auto& t : tiers_) t->probe(prefix_keys, page_tokens, from);
}

std::vector<TierStats> TierStack::all_stats() const {
  std::vector<TierStats> v;
  for (const auto& t : tiers_)
    for (TierStats& s : t->all_stats()) v.push_back(std::move(s));
  return v;
}

}  // namespace rw
