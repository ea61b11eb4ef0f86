// Kernel options for tests that compare SIMD paths: every path must give the same bits.
#pragma once

#include <string>

#include "rewind/kernels/matmul.h"

namespace rw::test {

// The SIMD caps tests iterate over, widest first.
inline const char* const kIsas[] = {"amx", "avx512", "avxvnni", "avx2", "scalar"};

// Options capped at `isa` ("amx", "avx512", "avxvnni", "avx2", "scalar"; "auto": everything); false
// when this machine lacks that path ("amx": AMX-INT8 usable), so the test skips it.
inline bool isa_options(const std::string& isa, KernelOptions* o) {
  IsaCap cap;
  if (!parse_isa_cap(isa, &cap) || !isa_cap_supported(cap)) return false;
  if (isa == "amx" && !matmul_amx_enabled(IsaCap::Amx)) return false;
  o->isa = cap;
  return true;
}

}  // namespace rw::test
