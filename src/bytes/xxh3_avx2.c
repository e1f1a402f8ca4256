// xxhash.h's XXH3, inlined into this file and compiled with -mavx2 (CMake
// sets it for this file alone), so that its accumulation loop uses 256-bit
// vectors. The state is the library's own XXH3_state_t, made, reset and
// finished by the library: the same header (one Debian package) describes
// it to both, and tests/unit/xxh3_test.cc compares results with the library's.
#include "bytes/xxh3_avx2.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if !defined(__AVX2__)
#error "xxh3_avx2.c must be compiled with -mavx2"
#endif

void ckptfix_xxh3_update_avx2(void* state, const void* data, size_t size) {
  XXH3_64bits_update((XXH3_state_t*)state, data, size);
}

uint64_t ckptfix_xxh3_64_avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }
