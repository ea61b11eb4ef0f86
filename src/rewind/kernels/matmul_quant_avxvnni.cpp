// The AVX-VNNI int8 tiles of the quantised matmul: matmul_quant_avx2_tiles.h with vpdpbusd and
// vpdpwssd on ymm (VEX-encoded: Intel cores without AVX-512 have them). The AVX2 path's
// expansions and activation quantiser serve it (matmul_quant_avx2.cpp).
#define REWIND_AVX2_TILE __attribute__((target("avx2,fma,f16c,avxvnni")))
#define REWIND_AVX2_VNNI 1
#include "rewind/kernels/matmul_quant_avx2_tiles.h"

namespace rw::detail {

const Int8TileFn kInt8TilesAvxVnni[kInt8MaxR][kInt8MaxP] = REWIND_INT8_AVX2_TILES;

}  // namespace rw::detail
