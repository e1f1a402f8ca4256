// The conversions that need speed: scalar loops (the reference, and every
// kernel's tail) and AVX2 (+F16C) versions chosen at run time, which give
// exactly the scalar loops' bits and statistics:
//  * float32 -> bfloat16: the same integer rounding (u + 0x7FFF +
//    ((u >> 16) & 1)) >> 16 on 8 lanes, NaN lanes replaced by 0xFFFF (ATen's
//    vectorized rule);
//  * float32 -> float16: F16C's VCVTPS2PH with round-to-nearest-even, which
//    is what torch 2.14's AVX2/AVX512 kernels use too: IEEE's conversion, and
//    a NaN keeps its sign and the top 9 bits of its payload, quieted. The
//    scalar reference computes the same bits without F16C;
//  * float32 -> float8_e4m3fn / float8_e5m2: c10's integer rounding and
//    float-addition subnormals on 8 lanes;
//  * bfloat16 <-> float16, through float32 as torch does, and both to float32
//    (a shift; F16C's VCVTPH2PS, c10's bits for every pattern).
// The float32 -> 16-bit loops count their statistics (finite -> inf,
// non-zero -> zero) only for calls whose inputs come near a limit (see
// Limits); the others count them lane by lane.
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

// float32 -> float8 with the statistics convert_elements' scalar rules
// count: a finite input overflowed when it became the type's overflow
// value (e4m3fn saturating: from 464, where rounding reaches past 448;
// before torch 2.13: NaN; e5m2: inf), flushed when non-zero and not NaN it
// became ±0.
ConvertStats f32_to_e4m3fn_scalar(const std::byte* src, std::byte* dst, size_t count, bool saturate) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    const uint8_t b = float_to_float8_e4m3fn_bits(f, saturate);
    std::memcpy(dst + i, &b, 1);
    const uint32_t in_abs = bits_of(f) & 0x7FFFFFFFu;
    const bool overflowed = saturate ? in_abs >= 0x43E80000u : (b & 0x7F) == 0x7F;
    if (overflowed && in_abs < 0x7F800000u) ++stats.overflowed;
    if ((b & 0x7F) == 0 && in_abs != 0 && in_abs <= 0x7F800000u) ++stats.flushed;
  }
  return stats;
}

ConvertStats f32_to_e5m2_scalar(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    float f;
    std::memcpy(&f, src + 4 * i, 4);
    const uint8_t b = float_to_float8_e5m2_bits(f);
    std::memcpy(dst + i, &b, 1);
    const uint32_t in_abs = bits_of(f) & 0x7FFFFFFFu;
    if ((b & 0x7F) == 0x7C && in_abs < 0x7F800000u) ++stats.overflowed;
    if ((b & 0x7F) == 0 && in_abs != 0 && in_abs <= 0x7F800000u) ++stats.flushed;
  }
  return stats;
}

// Between the 16-bit types, through float32 as torch does: bfloat16 ->
// float16 by float32's rule (F16C's bits), float16 -> bfloat16 rounded to
// nearest even with every NaN 0x7FC0 (c10's scalar rule).
ConvertStats bf16_to_f16_scalar(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    const uint16_t h = float_to_half_bits(bfloat16_bits_to_float(b));
    std::memcpy(dst + 2 * i, &h, 2);
    tally(stats, (uint32_t{b} << 16) & 0x7FFFFFFFu, h & 0x7FFFu, 0x7C00u);
  }
  return stats;
}

ConvertStats f16_to_bf16_scalar(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const float f = half_bits_to_float(h);
    const uint16_t b = float_to_bfloat16_bits_scalar(f);
    std::memcpy(dst + 2 * i, &b, 2);
    tally(stats, bits_of(f) & 0x7FFFFFFFu, b & 0x7FFFu, 0x7F80u);
  }
  return stats;
}

// Widening never overflows or flushes: no statistics.
void bf16_to_f32_scalar(const std::byte* src, std::byte* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    const float f = bfloat16_bits_to_float(b);
    std::memcpy(dst + 4 * i, &f, 4);
  }
}

void f16_to_f32_scalar(const std::byte* src, std::byte* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    const float f = half_bits_to_float(h);
    std::memcpy(dst + 4 * i, &f, 4);
  }
}

#if CKPTFIX_AVX2_KERNELS
// The statistics are rare events, so the loops do not count them lane by
// lane (which cost a third of the conversion's time): they keep the largest
// |input| and the smallest non-zero one, and a call whose inputs come near
// a limit is counted again, exactly, by recount(). The limits are
// conservative (a little inside the values that round to ±inf or to ±0):
// a needless recount costs time, never a wrong count.
struct Limits {
  uint32_t overflow_from;  // a finite |input| >= this may become ±inf
  uint32_t flush_to;       // a non-zero |input| <= this may become ±0
  uint32_t inf16;          // the output's |±inf|
};
// bfloat16 rounds |x| >= 0x7F7F8000 up to inf, and 0 < |x| <= 0x8000 to 0.
constexpr Limits kBFloat16Limits{0x7F7F0000u, 0x0000FFFFu, 0x7F80u};
// float16 rounds |x| >= 65520 (0x477FF000) up to inf, and 0 < |x| <= 2^-25
// (0x33000000) to 0.
constexpr Limits kFloat16Limits{0x477FE000u, 0x33800000u, 0x7C00u};

// Per-lane statistics from 32-bit |input| and 32-bit |output| (16-bit values).
__attribute__((target("avx2"))) inline void tally8(ConvertStats& s, __m256i in_abs, __m256i out_abs, __m256i inf16) {
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), in_abs);
  const __m256i became_inf = _mm256_and_si256(finite, _mm256_cmpeq_epi32(out_abs, inf16));
  const __m256i zero = _mm256_setzero_si256();
  const __m256i became_zero = _mm256_andnot_si256(_mm256_cmpeq_epi32(in_abs, zero), _mm256_cmpeq_epi32(out_abs, zero));
  s.overflowed += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(became_inf))));
  s.flushed += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(became_zero))));
}

// The exact statistics of `count` (a multiple of 8) converted elements, from
// their inputs and outputs.
__attribute__((target("avx2"))) ConvertStats recount(const std::byte* src, const std::byte* dst, size_t count,
                                                     uint32_t inf16) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i abs16 = _mm256_set1_epi32(0x7FFF);
  for (size_t i = 0; i < count; i += 8) {
    const __m256i in_abs = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i)), abs_mask);
    const __m256i out = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + 2 * i)));
    tally8(stats, in_abs, _mm256_and_si256(out, abs16), _mm256_set1_epi32(static_cast<int>(inf16)));
  }
  return stats;
}

// The largest |input| and the smallest |input| - 1 (unsigned: 0 is the
// largest, so zeros, which cannot be flushed, never count) seen so far.
struct Extremes {
  __m256i largest, smallest_less_one;
};

__attribute__((target("avx2"))) inline Extremes no_extremes() {
  return {_mm256_setzero_si256(), _mm256_set1_epi32(-1)};
}

__attribute__((target("avx2"))) inline void see(Extremes& e, __m256i in_abs) {
  e.largest = _mm256_max_epu32(e.largest, in_abs);
  e.smallest_less_one = _mm256_min_epu32(e.smallest_less_one, _mm256_sub_epi32(in_abs, _mm256_set1_epi32(1)));
}

// True when some lane came near a limit: the statistics must be counted.
__attribute__((target("avx2"))) inline bool near_a_limit(const Extremes& e, const Limits& limits) {
  const __m256i overflow_from = _mm256_set1_epi32(static_cast<int>(limits.overflow_from));
  const __m256i flush_to = _mm256_set1_epi32(static_cast<int>(limits.flush_to - 1));
  const __m256i high = _mm256_cmpeq_epi32(_mm256_max_epu32(e.largest, overflow_from), e.largest);
  const __m256i low = _mm256_cmpeq_epi32(_mm256_min_epu32(e.smallest_less_one, flush_to), e.smallest_less_one);
  const __m256i either = _mm256_or_si256(high, low);
  return !_mm256_testz_si256(either, either);
}

// 8 bfloat16 bits (in the low halves of 32-bit lanes) from 8 float32s.
__attribute__((target("avx2"))) inline __m256i bf16_of(__m256i u, __m256i in_abs) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0xFFFF), nan);
}

__attribute__((target("avx2"))) ConvertStats f32_to_bf16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  Extremes extremes = no_extremes();
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i));
    const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i + 32));
    const __m256i abs0 = _mm256_and_si256(u0, abs_mask);
    const __m256i abs1 = _mm256_and_si256(u1, abs_mask);
    see(extremes, abs0);
    see(extremes, abs1);
    // packus interleaves the 128-bit halves (0 lo, 1 lo, 0 hi, 1 hi): put them back in order.
    const __m256i packed = _mm256_packus_epi32(bf16_of(u0, abs0), bf16_of(u1, abs1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  ConvertStats stats = near_a_limit(extremes, kBFloat16Limits) ? recount(src, dst, i, kBFloat16Limits.inf16) : ConvertStats{};
  stats += f32_to_bf16_scalar(src + 4 * i, dst + 2 * i, count - i);
  return stats;
}

__attribute__((target("avx2,f16c"))) ConvertStats f32_to_f16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  Extremes extremes = no_extremes();
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256 f0 = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i));
    const __m256 f1 = _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i + 32));
    see(extremes, _mm256_and_si256(_mm256_castps_si256(f0), abs_mask));
    see(extremes, _mm256_and_si256(_mm256_castps_si256(f1), abs_mask));
    const __m128i h0 = _mm256_cvtps_ph(f0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i h1 = _mm256_cvtps_ph(f1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_set_m128i(h1, h0));
  }
  ConvertStats stats = near_a_limit(extremes, kFloat16Limits) ? recount(src, dst, i, kFloat16Limits.inf16) : ConvertStats{};
  stats += f32_to_f16_scalar(src + 4 * i, dst + 2 * i, count - i);
  return stats;
}

// float32 -> float8: c10's fp8e4m3fn_from_fp32_value and
// fp8e5m2_from_fp32_value (float_to_float8_*_bits) on 8 lanes, 32 values a
// step. The statistics are counted lane by lane: values that become ±0 are
// common in a float8 cast.
struct Float8Format {
  uint32_t max_bits;         // |x| from here overflows (or is inf or NaN)
  uint32_t min_normal_bits;  // |x| below: a subnormal, made by a float addition
  uint32_t denorm_mask;
  uint32_t exponent_adjust;  // (bias - 127) << 23, wrapped
  uint32_t round_bias;       // half an output unit less one
  uint32_t overflow_result;  // what overflow becomes (e4m3fn: 0x7E saturating, 0x7F before torch 2.13; e5m2: inf)
  bool rounded_nan_saturates;  // e4m3fn saturating: a rounding into 0x7F becomes 0x7E
  uint32_t counted_from;     // a finite |x| from here counts as overflowed; 0: when it became overflow_result
};

template <int Shift>
__attribute__((target("avx2"))) inline __m256i float8_of(__m256i in_abs, const Float8Format& f) {
  const __m256i big = _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(static_cast<int>(f.max_bits - 1)));
  const __m256i nan = _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(0x7F800000));
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(f.min_normal_bits)), in_abs);
  const __m256i denorm_mask = _mm256_set1_epi32(static_cast<int>(f.denorm_mask));
  const __m256i subnormal = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(in_abs), _mm256_castsi256_ps(denorm_mask))), denorm_mask);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(in_abs, Shift), _mm256_set1_epi32(1));
  __m256i normal = _mm256_add_epi32(in_abs, _mm256_set1_epi32(static_cast<int>(f.exponent_adjust + f.round_bias)));
  normal = _mm256_srli_epi32(_mm256_add_epi32(normal, odd), Shift);
  const __m256i nan_pattern = _mm256_set1_epi32(0x7F);
  if (f.rounded_nan_saturates) {
    normal = _mm256_sub_epi32(normal, _mm256_and_si256(_mm256_cmpeq_epi32(normal, nan_pattern), _mm256_set1_epi32(1)));
  }
  const __m256i overflow = _mm256_blendv_epi8(_mm256_set1_epi32(static_cast<int>(f.overflow_result)), nan_pattern, nan);
  return _mm256_blendv_epi8(_mm256_blendv_epi8(normal, subnormal, small), overflow, big);
}

// The first count / 32 * 32 values; the caller converts the rest.
template <int Shift>
__attribute__((target("avx2"))) ConvertStats f32_to_float8_avx2(const std::byte* src, std::byte* dst, size_t count,
                                                                 const Float8Format& f) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i infinity = _mm256_set1_epi32(0x7F800000);
  const __m256i zero = _mm256_setzero_si256();
  // The packs leave groups of 4 bytes as out[0..3]'s first halves, then
  // their second halves: this puts the groups back in storage order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    __m256i out[4];
    for (int k = 0; k < 4; ++k) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 4 * i + 32 * k));
      const __m256i in_abs = _mm256_and_si256(u, abs_mask);
      const __m256i r = float8_of<Shift>(in_abs, f);
      const __m256i finite = _mm256_cmpgt_epi32(infinity, in_abs);
      const __m256i overflowed =
          f.counted_from != 0
              ? _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(static_cast<int>(f.counted_from - 1)))
              : _mm256_cmpeq_epi32(r, _mm256_set1_epi32(static_cast<int>(f.overflow_result)));
      const __m256i flushed = _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpeq_epi32(in_abs, zero),
                                                                  _mm256_cmpgt_epi32(in_abs, infinity)),
                                                  _mm256_cmpeq_epi32(r, zero));
      stats.overflowed += static_cast<uint64_t>(
          __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(finite, overflowed)))));
      stats.flushed += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(flushed))));
      out[k] = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_srli_epi32(u, 31), 7));  // the sign
    }
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(out[0], out[1]), _mm256_packus_epi32(out[2], out[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_permutevar8x32_epi32(bytes, order));
  }
  return stats;
}

// e4m3fn: 480.0f overflows (464 up rounds past 448), 2^-6 is the smallest normal.
constexpr Float8Format e4m3fn_format(bool saturate) {
  return {1087u << 20, 121u << 23, 141u << 23, static_cast<uint32_t>((7 - 127) * (1 << 23)), 0x7FFFFu,
          saturate ? 0x7Eu : 0x7Fu, saturate, saturate ? 0x43E80000u : 0u};
}
// e5m2: 65536.0f overflows to inf, 2^-14 is the smallest normal.
constexpr Float8Format kE5M2Format{143u << 23, 113u << 23, 134u << 23, static_cast<uint32_t>((15 - 127) * (1 << 23)),
                                   0xFFFFFu, 0x7Cu, false, 0u};

// bfloat16 -> float16, 16 values a step; the statistics lane by lane.
__attribute__((target("avx2,f16c"))) ConvertStats bf16_to_f16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i abs16 = _mm256_set1_epi32(0x7FFF);
  const __m256i inf16 = _mm256_set1_epi32(0x7C00);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    __m128i h[2];
    for (int k = 0; k < 2; ++k) {
      const __m128i half_of_b = k == 0 ? _mm256_castsi256_si128(b) : _mm256_extracti128_si256(b, 1);
      const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(half_of_b), 16);
      h[k] = _mm256_cvtps_ph(_mm256_castsi256_ps(u), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      tally8(stats, _mm256_and_si256(u, abs_mask), _mm256_and_si256(_mm256_cvtepu16_epi32(h[k]), abs16), inf16);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_set_m128i(h[1], h[0]));
  }
  return stats + bf16_to_f16_scalar(src + 2 * i, dst + 2 * i, count - i);
}

// float16 -> bfloat16, 16 values a step; the statistics lane by lane.
__attribute__((target("avx2,f16c"))) ConvertStats f16_to_bf16_avx2(const std::byte* src, std::byte* dst, size_t count) {
  ConvertStats stats;
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i abs16 = _mm256_set1_epi32(0x7FFF);
  const __m256i inf16 = _mm256_set1_epi32(0x7F80);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16 * k));
      const __m256i u = _mm256_castps_si256(_mm256_cvtph_ps(h));
      const __m256i in_abs = _mm256_and_si256(u, abs_mask);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(in_abs, _mm256_set1_epi32(0x7F800000));
      r[k] = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
      tally8(stats, in_abs, _mm256_and_si256(r[k], abs16), inf16);
    }
    const __m256i packed = _mm256_packus_epi32(r[0], r[1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 2 * i), _mm256_permute4x64_epi64(packed, 0xD8));
  }
  return stats + f16_to_bf16_scalar(src + 2 * i, dst + 2 * i, count - i);
}

// bfloat16 -> float32: the bits shifted up 16, 16 values a step.
__attribute__((target("avx2"))) void bf16_to_f32_avx2(const std::byte* src, std::byte* dst, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * i));
    const __m256i first = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(b)), 16);
    const __m256i second = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(b, 1)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * i), first);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 4 * i + 32), second);
  }
  bf16_to_f32_scalar(src + 2 * i, dst + 4 * i, count - i);
}

// float16 -> float32: F16C's VCVTPH2PS, which gives c10's bits for every
// pattern (NaNs quieted, payloads kept), 16 values a step.
__attribute__((target("avx2,f16c"))) void f16_to_f32_avx2(const std::byte* src, std::byte* dst, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i + 16));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + 4 * i), _mm256_cvtph_ps(h0));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + 4 * i + 32), _mm256_cvtph_ps(h1));
  }
  f16_to_f32_scalar(src + 2 * i, dst + 4 * i, count - i);
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

ConvertStats convert_f32_to_e4m3fn(const std::byte* src, std::byte* dst, size_t count, bool saturate) {
  size_t done = 0;
  ConvertStats stats;
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) {
    stats = f32_to_float8_avx2<20>(src, dst, count, e4m3fn_format(saturate));
    done = count / 32 * 32;
  }
#endif
  stats += f32_to_e4m3fn_scalar(src + 4 * done, dst + done, count - done, saturate);
  return stats;
}

ConvertStats convert_f32_to_e5m2(const std::byte* src, std::byte* dst, size_t count) {
  size_t done = 0;
  ConvertStats stats;
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) {
    stats = f32_to_float8_avx2<21>(src, dst, count, kE5M2Format);
    done = count / 32 * 32;
  }
#endif
  stats += f32_to_e5m2_scalar(src + 4 * done, dst + done, count - done);
  return stats;
}

ConvertStats convert_f32_to_e4m3fn_reference(const std::byte* src, std::byte* dst, size_t count, bool saturate) {
  return f32_to_e4m3fn_scalar(src, dst, count, saturate);
}

ConvertStats convert_f32_to_e5m2_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f32_to_e5m2_scalar(src, dst, count);
}

ConvertStats convert_bf16_to_f16(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2_f16c()) return bf16_to_f16_avx2(src, dst, count);
#endif
  return bf16_to_f16_scalar(src, dst, count);
}

ConvertStats convert_f16_to_bf16(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2_f16c()) return f16_to_bf16_avx2(src, dst, count);
#endif
  return f16_to_bf16_scalar(src, dst, count);
}

ConvertStats convert_bf16_to_f16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return bf16_to_f16_scalar(src, dst, count);
}

ConvertStats convert_f16_to_bf16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f16_to_bf16_scalar(src, dst, count);
}

ConvertStats convert_bf16_to_f32(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return bf16_to_f32_avx2(src, dst, count), ConvertStats{};
#endif
  return bf16_to_f32_scalar(src, dst, count), ConvertStats{};
}

ConvertStats convert_f16_to_f32(const std::byte* src, std::byte* dst, size_t count) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2_f16c()) return f16_to_f32_avx2(src, dst, count), ConvertStats{};
#endif
  return f16_to_f32_scalar(src, dst, count), ConvertStats{};
}

ConvertStats convert_bf16_to_f32_reference(const std::byte* src, std::byte* dst, size_t count) {
  return bf16_to_f32_scalar(src, dst, count), ConvertStats{};
}

ConvertStats convert_f16_to_f32_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f16_to_f32_scalar(src, dst, count), ConvertStats{};
}

ConvertStats convert_f32_to_bf16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f32_to_bf16_scalar(src, dst, count);
}

ConvertStats convert_f32_to_f16_reference(const std::byte* src, std::byte* dst, size_t count) {
  return f32_to_f16_scalar(src, dst, count);
}

}  // namespace ckptfix
