// libFuzzer target for the GGUF reader: any byte string must parse or fail with an Error of one
// line naming the file, never crash, hang or read outside the buffer (ASan + UBSan).
// Seed corpus: tests/fuzz/seeds/gguf (small files from the writer).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "rewind/io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy, so that ASan flags a read one byte past the end.
  std::unique_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(buf.get(), data, size);
  auto r = rw::GgufFile::parse(size == 0 ? nullptr : buf.get(), size, "fuzz.gguf");
  if (r.ok()) {
    // Touch every byte of every tensor: ranges must lie inside the buffer.
    unsigned sum = 0;
    for (const auto& t : r->tensors()) {
      for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<unsigned>(t.data[i]);
      if (r->find(t.name) != &t) __builtin_trap();
      const auto* ti = rw::ggml_type_info(static_cast<uint32_t>(t.type));
      if (!ti || t.ne[0] % ti->block_elems != 0) __builtin_trap();
      if (static_cast<size_t>(t.numel() / ti->block_elems * ti->block_bytes) != t.nbytes)
        __builtin_trap();
    }
    // Typed lookups on every key must not crash either.
    for (const auto& [k, v] : r->metadata()) {
      (void)r->get_int(k);
      (void)r->get_float(k);
      (void)r->get_string(k);
      (void)r->get_strings(k);
      (void)r->get_ints(k);
    }
    volatile unsigned sink = sum;
    (void)sink;
  } else if (r.error_message().rfind("fuzz.gguf: ", 0) != 0 ||
             r.error_message().find('\n') != std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
