// libFuzzer target for the shared tier's pure Redis parsers (cache/resp.h): the first byte picks
// RESP replies (and, for an array, the CLUSTER SLOTS reader), a MOVED / ASK error, a
// redis:// address list or a key's cluster slot. Any bytes must parse or fail with a message,
// never crash (ASan + UBSan). Seeds: tests/fuzz/seeds/resp.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rewind/cache/resp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto r = rw::resp_parse(in);
      if (r.ok() && r.value().type == rw::RespValue::Type::Array) {
        auto slots = rw::parse_cluster_slots(r.value(), rw::RedisEndpoint{"127.0.0.1", 6379});
        if (slots.ok())
          for (const auto& s : slots.value())
            if (s.lo < 0 || s.hi >= rw::kClusterSlots || s.lo > s.hi) __builtin_trap();
      }
      break;
    }
    case 1: {
      auto r = rw::parse_redirect(in);
      if (r.ok() && r.value().kind != rw::RedisRedirect::Kind::None &&
          (r.value().slot < 0 || r.value().slot >= rw::kClusterSlots))
        __builtin_trap();
      break;
    }
    case 2:
      (void)rw::parse_redis_url(in);
      break;
    default: {
      const int slot = rw::key_slot(in);
      if (slot < 0 || slot >= rw::kClusterSlots) __builtin_trap();
    }
  }
  return 0;
}
