// Element type conversion, bit-identical to torch 2.14's CPU Tensor.to(dtype)
// on x86-64 CPUs with AVX2 or AVX512, NaN payloads included.
//
// torch picks its kernels by CPU capability (torch.backends.cpu.
// get_cpu_capability()); its AVX2 and AVX512 kernels give the same bits for
// every pair below, its DEFAULT kernels (no AVX2) differ for NaNs only
// (docs/format.md has the table per torch version and capability). The rules
// were read off torch 2.14's sources (c10/util/Half.h, BFloat16.h,
// Float8_e4m3fn.h, Float8_e5m2.h, ATen's vec512/vec256 headers and
// CopyKernel.cpp) and checked against torch 2.14 on every 8- and 16-bit
// pattern and all 2^32 float32 patterns (tests/interop/test_casts.py,
// bench/exhaustive_casts.py):
//  * float32 -> float16: F16C's conversion (round to nearest even; a NaN
//    keeps its sign and the top 9 bits of its payload, and is quieted);
//  * float32 -> bfloat16: round to nearest even; every NaN becomes 0xFFFF
//    (ATen's vectorized kernel, which with masked loads also covers the tail);
//  * float64 -> bfloat16: through float32, then round to nearest even, but
//    NaNs depend on where they are: ATen converts blocks of 16 elements with
//    its vectorized kernel (NaN -> 0xFFFF) and the last n % 16 elements of
//    the call with the scalar code (NaN -> 0x7FC0). ckptfix converts a whole
//    storage as one call, as torch.set_num_threads(1) does; with more
//    threads torch splits storages of more than 32768 elements into pieces,
//    each with its own scalar tail, so only NaN payloads can differ there;
//  * every other pair goes through float32 with c10's scalar conversions:
//    to float16 as above; to bfloat16 round to nearest even with NaN ->
//    0x7FC0; to float8_e4m3fn round to nearest even, saturating: finite
//    values beyond ±448 and ±inf become ±448 (NaN before torch 2.13: see
//    CastRules), NaN becomes 0x7F with its sign; to float8_e5m2 round to nearest even, overflow -> ±inf (0x7C),
//    NaN -> 0x7F with its sign; to float64 and float32 the hardware
//    conversion (NaNs quieted, payloads kept);
//  * from float16: exact (NaNs quieted); from bfloat16: the bits shifted up
//    16 (a signalling NaN stays signalling until a later step quiets it);
//    from float8_e4m3fn: c10's fp8e4m3fn_to_fp32_value (NaN -> 0x7FF00000
//    with its sign); from float8_e5m2: as the float16 with these top bits.
// float64 to a narrower type therefore rounds twice, exactly as torch does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ckptfix/dtype.h"
#include "ckptfix/torch_version.h"
#include "cast_rules.h"

namespace ckptfix {

/// What a conversion did to the values, for the cast report.
struct ConvertStats {
  /// Finite inputs too large for the target: they became ±inf (or ±448 in
  /// float8_e4m3fn, which has no infinity and saturates).
  uint64_t overflowed = 0;
  uint64_t flushed = 0;  ///< non-zero inputs that became ±0
  ConvertStats& operator+=(const ConvertStats& o) {
    overflowed += o.overflowed;
    flushed += o.flushed;
    return *this;
  }
  friend ConvertStats operator+(ConvertStats a, const ConvertStats& b) { return a += b; }
};

/// Where a chunk lies in the storage being converted (see float64 to bfloat16).
struct ChunkPosition {
  uint64_t first = 0;  ///< index of the chunk's first element in the storage
  uint64_t total = 0;  ///< elements in the whole storage
};

/// Converts `count` elements between two types `cast` handles (is_cast_type),
/// or widens an unsigned integer type into a signed one that holds every
/// value (is_widening). src and dst may not overlap.
ConvertStats convert_elements(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                              ChunkPosition position, const CastRules& rules = {});

/// Whether `from` to `to` is a widening convert_elements does: uint16 to
/// int32, uint32 to int64 (for a torch release without the unsigned type).
bool is_widening(DType from, DType to);

/// Scalar reference conversions (exposed for tests and the SIMD kernels' tails).
uint16_t float_to_half_bits(float f);                  ///< as F16C: NaN keeps sign and top payload bits
uint16_t float_to_bfloat16_bits_vectorized(float f);  ///< NaN -> 0xFFFF
uint16_t float_to_bfloat16_bits_scalar(float f);      ///< NaN -> 0x7FC0
/// Saturates to ±448 (or, `saturate` false as before torch 2.13, overflow -> NaN); NaN -> 0x7F with its sign.
uint8_t float_to_float8_e4m3fn_bits(float f, bool saturate = true);
uint8_t float_to_float8_e5m2_bits(float f);            ///< overflow -> ±inf; NaN -> 0x7F with its sign
float half_bits_to_float(uint16_t h);
float bfloat16_bits_to_float(uint16_t b);
float float8_e4m3fn_bits_to_float(uint8_t b);
float float8_e5m2_bits_to_float(uint8_t b);

}  // namespace ckptfix
