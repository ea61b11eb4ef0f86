// libFuzzer target for the safetensors reader: any byte string must parse or fail with an
// Error, never crash, hang or read outside the buffer (built with ASan + UBSan).
// Seed corpus: any .safetensors file, e.g. tests/data/qwen35-tiny/*/model.safetensors.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "rewind/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exactly-sized heap copy, so that ASan flags a read one byte past the end.
  std::unique_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(buf.get(), data, size);
  auto r = rw::SafetensorsFile::parse(size == 0 ? nullptr : buf.get(), size, "fuzz.safetensors");
  if (r.ok()) {
    // Touch every byte of every tensor: offsets must lie inside the buffer.
    unsigned sum = 0;
    for (const auto& t : r->tensors()) {
      for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<unsigned>(t.data[i]);
      if (t.numel() * static_cast<int64_t>(rw::dtype_size(t.dtype)) !=
          static_cast<int64_t>(t.nbytes))
        __builtin_trap();
      if (r->find(t.name) != &t) __builtin_trap();
    }
    volatile unsigned sink = sum;
    (void)sink;
  } else if (r.error_message().rfind("fuzz.safetensors: ", 0) != 0 ||
             r.error_message().find('\n') != std::string::npos) {
    __builtin_trap();  // every error names the file and is one line
  }
  return 0;
}
