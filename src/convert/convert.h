// Element type conversion, bit-identical to torch's CPU Tensor.to(dtype).
//
// The rules were read off torch's c10 sources and confirmed against torch
// 1.13 on this machine, NaN payloads included (tests/interop checks them):
//  * to float16: through float32, then c10's fp16_ieee_from_fp32_value
//    (round to nearest even; every NaN becomes 0x7E00 with its sign);
//  * float32 to bfloat16: round to nearest even; every NaN becomes 0xFFFF
//    (ATen's vectorized conversion, which torch uses for this pair);
//  * float16 to bfloat16: through float32, then c10's scalar
//    round_to_nearest_even (every NaN becomes 0x7FC0);
//  * float64 to bfloat16: through float32 and round to nearest even, but
//    NaNs depend on where they are: ATen converts blocks of 16 elements with
//    its vectorized kernel (NaN -> 0xFFFF) and the last n % 16 elements of
//    the call with the scalar code (NaN -> 0x7FC0). ckptfix converts a whole
//    storage as one call, as torch.set_num_threads(1) does; with more
//    threads torch splits storages of more than 32768 elements into pieces,
//    each with its own scalar tail, so only NaN payloads can differ there;
//  * float64 to float32 and float32 to float64: the hardware conversion
//    (NaNs are quieted, payloads kept);
//  * float16 to float32: c10's fp16_ieee_to_fp32_value; bfloat16 to float32:
//    the bits shifted up 16 (a signalling NaN stays signalling);
//  * float16/bfloat16 to float64: through float32.
// float64 to a 16-bit type therefore rounds twice, exactly as torch does.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ckptfix/dtype.h"

namespace ckptfix {

/// What a conversion did to the values, for the cast report.
struct ConvertStats {
  uint64_t overflowed = 0;  ///< finite inputs that became ±inf
  uint64_t flushed = 0;     ///< non-zero inputs that became ±0
  ConvertStats& operator+=(const ConvertStats& o) {
    overflowed += o.overflowed;
    flushed += o.flushed;
    return *this;
  }
};

/// Where a chunk lies in the storage being converted (see float64 to bfloat16).
struct ChunkPosition {
  uint64_t first = 0;  ///< index of the chunk's first element in the storage
  uint64_t total = 0;  ///< elements in the whole storage
};

/// Converts `count` elements between two castable float types
/// (is_castable_float). src and dst may not overlap.
ConvertStats convert_elements(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                              ChunkPosition position);

/// Scalar reference conversions (exposed for tests and the SIMD kernels' tails).
uint16_t float_to_half_bits(float f);
uint16_t float_to_bfloat16_bits_vectorized(float f);  ///< NaN -> 0xFFFF
uint16_t float_to_bfloat16_bits_scalar(float f);      ///< NaN -> 0x7FC0
float half_bits_to_float(uint16_t h);
float bfloat16_bits_to_float(uint16_t b);

}  // namespace ckptfix
