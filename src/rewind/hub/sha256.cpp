#include "rewind/hub/sha256.h"

#include <openssl/evp.h>

#include "rewind/base/check.h"

namespace rw::hub {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  REWIND_CHECK_MSG(ctx_->md != nullptr, "sha256: EVP_MD_CTX_new failed");
  reset();
}

Sha256::~Sha256() = default;

void Sha256::reset() {
  REWIND_CHECK(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1);
}

void Sha256::update(const void* data, size_t n) {
  REWIND_CHECK(EVP_DigestUpdate(ctx_->md, data, n) == 1);
}

std::string Sha256::hex_digest() {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REWIND_CHECK(EVP_DigestFinal_ex(ctx_->md, d, &len) == 1 && len == 32);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[d[i] >> 4];
    out += kHex[d[i] & 15];
  }
  return out;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex_digest();
}

}  // namespace rw::hub
