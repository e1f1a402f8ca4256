// float32 -> bfloat16 / float16: scalar loops, and AVX2 (+F16C) versions
// chosen at run time. Both produce exactly the scalar reference's bits:
//  * bfloat16: the same integer rounding (u + 0x7FFF + ((u >> 16) & 1)) >> 16
//    on 8 lanes, NaN lanes replaced by 0xFFFF (ATen's vectorized rule);
//  * float16: F16C's VCVTPS2PH with round-to-nearest-even, which is what
//    torch 2.14's AVX2/AVX512 kernels use too: IEEE's conversion, and a NaN
//    keeps its sign and the top 9 bits of its payload, quieted. The scalar
//    reference computes the same bits without F16C.
// The statistics (finite -> inf, non-zero -> zero) are counted from masks.
#include "dtype_kernels/convert_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace ckptfix {
namespace {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Counts for the report: finite -> inf, and non-zero -> zero.
inline void tally(ConvertStats& s, uint32_t in_abs, uint32_t out_abs16, uint32_t inf16) {
  if (in_abs < 0x7F800000u && out_abs16 == inf16) ++s.overflowed;
  if (in_abs != 0 && out_abs16 == 0) ++s.flushed;
}

ConvertStats f32_to_bf16_scalar(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    const uint16_t b = float_to_bfloat16_bits_vectorized(f);
    std::memcpy(dst + 2 * i, &b, 2);
    tally(stats, bits_of(f) & 0x7FFFFFFFu, b & 0x7FFFu, 0x7F80u);
  }
  return stats;
}

ConvertStats f32_to_f16_scalar(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    const uint16_t h = float_to_half_bits(f);
    std::memcpy(dst + 2 * i, &h, 2);
    tally(stats, bits_of(f) & 0x7FFFFFFFu, h & 0x7FFFu, 0x7C00u);
  }
  return stats;
}

#if CKPTFIX_AVX2_KERNELS
// 8 lanes of 16-bit results in the low halves of 32-bit lanes -> 8 uint16.
__attribute__((target("avx2"))) inline __m128i pack_low16(__m256i v) {
  const __m256i packed = _mm256_packus_epi32(v, v);  // per 128-bit half: lo4 lo4
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// Per-lane statistics from 32-bit |input| and 32-bit |output| (16-bit values).
__attribute__((target("avx2"))) inline void tally8(ConvertStats& s, __m256i in_abs, __m256i out_abs, __m256i inf16) {
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), in_abs);
  const __m256i became_inf = _mm256_and_si256(finite, _mm256_cmpeq_epi32(out_abs, inf16));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i became_zero = _mm256_andnot_si256(_mm256_cmpeq_epi32(in_abs, zero), _mm256_cmpeq_epi32(out_abs, zero));
  s.overflowed += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(became_inf))));
  s.flushed += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(became_zero))));
}

__attribute__((target("avx2"))) ConvertStats f32_to_bf16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i bias = _mm256_set1_epi32(0x7FFF);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i nan_bits = _mm256_set1_epi32(0xFFFF);
  const __m256i inf16 = _mm256_set1_epi32(0x7F80);
  const __m256i abs16 = _mm256_set1_epi32(0x7FFF);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
    const __m256i in_abs = _mm256_and_si256(u, abs_mask);
    const __m256i nan = _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(0x7F800000));
    r = _mm256_blendv_epi8(r, nan_bits, nan);
    tally8(stats, in_abs, _mm256_and_si256(r, abs16), inf16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), pack_low16(r));
  }
  stats += f32_to_bf16_scalar(src + 4 * i, dst + 2 * i, count - i);
  return stats;
}

__attribute__((target("avx2,f16c"))) ConvertStats f32_to_f16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf16 = _mm256_set1_epi32(0x7C00);
  const __m256i abs16 = _mm256_set1_epi32(0x7FFF);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 f = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    const __m256i u = _mm256_castps_si256(f);
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i in_abs = _mm256_and_si256(u, abs_mask);
    tally8(stats, in_abs, _mm256_and_si256(h, abs16), inf16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i), pack_low16(h));
  }
  stats += f32_to_f16_scalar(src + 4 * i, dst + 2 * i, count - i);
  return stats;
}
#endif

}  // namespace

ConvertStats convert_f32_to_bf16(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return f32_to_bf16_avx2(src, dst, count);
#endif
  return f32_to_bf16_scalar(src, dst, count);
}

ConvertStats convert_f32_to_f16(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2_f16c()) return f32_to_f16_avx2(src, dst, count);
#endif
  return f32_to_f16_scalar(src, dst, count);
}

ConvertStats convert_f32_to_bf16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f32_to_bf16_scalar(src, dst, count);
}

ConvertStats convert_f32_to_f16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f32_to_f16_scalar(src, dst, count);
}

}  // namespace ckptfix
