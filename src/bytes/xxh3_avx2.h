// The AVX2 build of XXH3 (xxh3_avx2.c): C, so that compiling it for AVX2
// cannot leave AVX2 copies of C++ inline functions for the linker to pick
// for the rest of the program. Call only where cpu_has_avx2().
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// `state` is an XXH3_state_t of the library, reset by it (void: inside
/// xxh3_avx2.c the inlined header names the same layout another type).
void ckptfix_xxh3_update_avx2(void* state, const void* data, size_t size);
uint64_t ckptfix_xxh3_64_avx2(const void* data, size_t size);

#ifdef __cplusplus
}
#endif
