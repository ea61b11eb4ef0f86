// Internal to the kernels: the AMX tile state they share.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace rw::detail {

// The 64-byte operand of LDTILECFG (palette 1): bytes per row and rows of each tile register.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The AMX tile configuration this thread has loaded (0: none or unknown). Whoever loads one sets
// its own id; kernels reload theirs when the id differs.
extern thread_local int t_amx_config;

// Loads c as this thread's tile configuration and records id in t_amx_config.
__attribute__((target("amx-tile"))) inline void amx_load_config(const AmxTileConfig& c, int id) {
  // GCC's _tile_loadconfig tells the compiler it reads 8 of the 64 bytes: without this barrier
  // the stores of the shapes are dropped as dead.
  __asm__ __volatile__("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
  t_amx_config = id;
}

}  // namespace rw::detail
