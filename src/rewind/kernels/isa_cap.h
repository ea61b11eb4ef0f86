// Internal to the kernels: the widest SIMD path any kernel may take. matmul_force_isa lowers it
// so that tests can compare paths (3 AMX, 2 AVX-512, 1 AVX2, 0 scalar); each kernel still checks
// that the CPU has what it uses.
#pragma once

namespace rw::detail {

extern int g_isa_cap;

// The AMX tile configuration this thread has loaded (0: none or unknown). Whoever loads one sets
// its own id; kernels reload theirs when the id differs.
extern thread_local int t_amx_config;

}  // namespace rw::detail
