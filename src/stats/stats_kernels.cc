#include "stats/stats_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ckptfix/stats.h"
#include "dtype_kernels/convert.h"
#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace ckptfix {
namespace {

template <typename T>
T load(const std::byte* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

// The fixed combination of the 8 lanes.
double combine(const double lanes[8]) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// One value of a float block into the counts, the range and its lane.
inline void add_float(BlockStats& s, double lanes[8], size_t j, double v) {
  if (std::isnan(v)) {
    ++s.nan;
  } else if (std::isinf(v)) {
    ++(v > 0 ? s.posinf : s.neginf);
  } else {
    ++s.finite;
    lanes[j % 8] += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    s.absmax = std::max(s.absmax, std::fabs(v));
  }
}

BlockStats f32_scalar(const float* x, size_t n) {
  BlockStats s;
  double lanes[8] = {};
  for (size_t j = 0; j < n; ++j) add_float(s, lanes, j, static_cast<double>(x[j]));
  s.sum = combine(lanes);
  return s;
}

#if CKPTFIX_AVX2_KERNELS
// 8 floats a step: lanes 0-3 in `lo`, 4-7 in `hi` (element j goes to lane
// j % 8, as in the scalar loop, and each lane adds in the same order).
__attribute__((target("avx2"))) BlockStats f32_avx2(const float* x, size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf_bits = _mm256_set1_epi32(0x7F800000);
  const __m256 pos_inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  __m256 vmin = pos_inf, vmax = neg_inf, vabs = _mm256_setzero_ps();
  uint64_t nan = 0, posinf = 0, neginf = 0, finite = 0;
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i abs = _mm256_and_si256(bits, abs_mask);
    const __m256i is_finite = _mm256_cmpgt_epi32(inf_bits, abs);  // abs < inf bits (abs is non-negative)
    const __m256i is_inf = _mm256_cmpeq_epi32(abs, inf_bits);
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, inf_bits);
    const int fin = _mm256_movemask_ps(_mm256_castsi256_ps(is_finite));
    const int inf = _mm256_movemask_ps(_mm256_castsi256_ps(is_inf));
    const int neg = _mm256_movemask_ps(v);
    nan += static_cast<uint64_t>(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(is_nan))));
    finite += static_cast<uint64_t>(__builtin_popcount(fin));
    posinf += static_cast<uint64_t>(__builtin_popcount(inf & ~neg & 0xFF));
    neginf += static_cast<uint64_t>(__builtin_popcount(inf & neg));
    const __m256 fmask = _mm256_castsi256_ps(is_finite);
    const __m256 vf = _mm256_and_ps(v, fmask);  // non-finite lanes add 0
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(vf)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(vf, 1)));
    vmin = _mm256_min_ps(vmin, _mm256_blendv_ps(pos_inf, v, fmask));
    vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, v, fmask));
    vabs = _mm256_max_ps(vabs, _mm256_and_ps(_mm256_castsi256_ps(abs), fmask));
  }
  double lanes[8];
  _mm256_storeu_pd(lanes, lo);
  _mm256_storeu_pd(lanes + 4, hi);
  float mins[8], maxs[8], absmaxs[8];
  _mm256_storeu_ps(mins, vmin);
  _mm256_storeu_ps(maxs, vmax);
  _mm256_storeu_ps(absmaxs, vabs);
  BlockStats s;
  s.nan = nan, s.posinf = posinf, s.neginf = neginf, s.finite = finite;
  for (int k = 0; k < 8; ++k) {
    if (mins[k] <= maxs[k]) {  // the lane saw a finite value
      s.min = std::min(s.min, static_cast<double>(mins[k]));
      s.max = std::max(s.max, static_cast<double>(maxs[k]));
    }
    s.absmax = std::max(s.absmax, static_cast<double>(absmaxs[k]));
  }
  for (; j < n; ++j) add_float(s, lanes, j, static_cast<double>(x[j]));
  s.sum = combine(lanes);
  return s;
}
#endif

BlockStats f32_block(const float* x, size_t n) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2()) return f32_avx2(x, n);
#endif
  return f32_scalar(x, n);
}

BlockStats f64_block(const std::byte* p, size_t n) {
  BlockStats s;
  double lanes[8] = {};
  for (size_t j = 0; j < n; ++j) add_float(s, lanes, j, load<double>(p, j));
  s.sum = combine(lanes);
  return s;
}

// The fnuz float8 types: no infinity, 0x80 is NaN, exponent bias one more.
float fnuz_to_float(uint8_t b, int exponent_bits, int bias) {
  if (b == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const int mantissa_bits = 7 - exponent_bits;
  const int e = (b >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int m = b & ((1 << mantissa_bits) - 1);
  const float scale = static_cast<float>(1 << mantissa_bits);
  const float magnitude = e == 0 ? std::ldexp(static_cast<float>(m) / scale, 1 - bias)
                                 : std::ldexp(1.0f + static_cast<float>(m) / scale, e - bias);
  return (b & 0x80) ? -magnitude : magnitude;
}

float float8_e4m3fnuz_to_float(uint8_t b) { return fnuz_to_float(b, 4, 8); }
float float8_e5m2fnuz_to_float(uint8_t b) { return fnuz_to_float(b, 5, 16); }

float e8m0_to_float(uint8_t b) {
  if (b == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

// A narrow float block widened (exactly) to float32, then the float32
// kernel: the same floats whichever way they were widened, so the same
// numbers. The common narrow types widen without a call per element
// (a call per element made bf16 and fp16 8x slower than float32).
template <typename F>
BlockStats widened(const std::byte* p, size_t n, size_t size, F decode) {
  float x[kStatsBlock];
  for (size_t j = 0; j < n; ++j) x[j] = decode(p + j * size);
  return f32_block(x, n);
}

// bfloat16 is the top half of a float32: a shift the compiler vectorizes.
BlockStats bf16_block(const std::byte* p, size_t n) {
  float x[kStatsBlock];
  for (size_t j = 0; j < n; ++j) {
    const uint32_t bits = static_cast<uint32_t>(load<uint16_t>(p, j)) << 16;
    std::memcpy(&x[j], &bits, 4);
  }
  return f32_block(x, n);
}

#if CKPTFIX_AVX2_KERNELS
// float16 by F16C's VCVTPH2PS, 8 at a time: the same floats as
// half_bits_to_float (c10's conversion, written to equal it).
__attribute__((target("avx2,f16c"))) BlockStats f16_block_f16c(const std::byte* p, size_t n) {
  float x[kStatsBlock];
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(x + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * j))));
  }
  for (; j < n; ++j) x[j] = half_bits_to_float(load<uint16_t>(p, j));
  return f32_block(x, n);
}
#endif

BlockStats f16_block(const std::byte* p, size_t n) {
#if CKPTFIX_AVX2_KERNELS
  if (cpu_has_avx2_f16c()) return f16_block_f16c(p, n);
#endif
  return widened(p, n, 2, [](const std::byte* q) { return half_bits_to_float(load<uint16_t>(q, 0)); });
}

// The 8-bit floats through a table of their 256 values, made once by the
// exact decoder.
template <typename F>
BlockStats byte_table_block(const std::byte* p, size_t n, F decode) {
  static const std::array<float, 256> table = [&] {
    std::array<float, 256> t{};
    for (unsigned b = 0; b < 256; ++b) t[b] = decode(static_cast<uint8_t>(b));
    return t;
  }();
  float x[kStatsBlock];
  for (size_t j = 0; j < n; ++j) x[j] = table[static_cast<uint8_t>(p[j])];
  return f32_block(x, n);
}

template <typename T>
BlockStats signed_block(const std::byte* p, size_t n) {
  BlockStats s;
  double lanes[8] = {};
  for (size_t j = 0; j < n; ++j) {
    const int64_t v = load<T>(p, j);
    s.imin = std::min(s.imin, v);
    s.imax = std::max(s.imax, v);
    s.uabsmax = std::max(s.uabsmax, v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
    lanes[j % 8] += static_cast<double>(v);
  }
  s.finite = n;
  s.sum = combine(lanes);
  return s;
}

template <typename T>
BlockStats unsigned_block(const std::byte* p, size_t n) {
  BlockStats s;
  double lanes[8] = {};
  for (size_t j = 0; j < n; ++j) {
    const uint64_t v = load<T>(p, j);
    s.umin = std::min(s.umin, v);
    s.umax = std::max(s.umax, v);
    s.uabsmax = std::max(s.uabsmax, v);
    lanes[j % 8] += static_cast<double>(v);
  }
  s.finite = n;
  s.sum = combine(lanes);
  return s;
}


// Integers narrower than 64 bits. Each lane adds at most kStatsBlock / 8
// values below 2^32 in magnitude, so every partial float64 sum of the lane
// order is an integer below 2^53: exact. Summing the lanes as integers
// (which vectorizes) therefore gives the same doubles as the reference's
// float64 additions; min and max do not depend on the order.
template <typename T>
BlockStats narrow_int_block(const std::byte* p, size_t n) {
  static_assert(sizeof(T) <= 4 && kStatsBlock / 8 <= (uint64_t{1} << 21), "lane sums must stay below 2^53");
  BlockStats s;
  s.finite = n;
  if (n == 0) return s;
  int64_t lanes[8] = {};
  T lo = load<T>(p, 0), hi = lo;
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (size_t k = 0; k < 8; ++k) {
      const T v = load<T>(p, j + k);
      lanes[k] += v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  for (; j < n; ++j) {
    const T v = load<T>(p, j);
    lanes[j % 8] += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  double sums[8];
  for (size_t k = 0; k < 8; ++k) sums[k] = static_cast<double>(lanes[k]);
  s.sum = combine(sums);
  const auto magnitude = [](int64_t v) { return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); };
  if constexpr (std::is_signed_v<T>) {
    s.imin = lo, s.imax = hi;
    s.uabsmax = std::max(magnitude(lo), magnitude(hi));
  } else {
    s.umin = lo, s.umax = hi, s.uabsmax = hi;
  }
  return s;
}

}  // namespace

StatsClass stats_class(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2:
    case DType::kFloat8E4M3Fnuz:
    case DType::kFloat8E5M2Fnuz:
    case DType::kFloat8E8M0Fnu: return StatsClass::kFloat;
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: return StatsClass::kSigned;
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kBool: return StatsClass::kUnsigned;
    default: return StatsClass::kNone;
  }
}

BlockStats block_stats(DType dtype, const std::byte* p, size_t n) {
  switch (dtype) {
    case DType::kFloat32: {
      if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) return f32_block(reinterpret_cast<const float*>(p), n);
      return widened(p, n, 4, [](const std::byte* q) { return load<float>(q, 0); });
    }
    case DType::kFloat64: return f64_block(p, n);
    case DType::kFloat16: return f16_block(p, n);
    case DType::kBFloat16: return bf16_block(p, n);
    // Each call site's lambda is its own type, so each dtype its own table.
    case DType::kFloat8E4M3Fn: return byte_table_block(p, n, [](uint8_t b) { return float8_e4m3fn_bits_to_float(b); });
    case DType::kFloat8E5M2: return byte_table_block(p, n, [](uint8_t b) { return float8_e5m2_bits_to_float(b); });
    case DType::kFloat8E4M3Fnuz: return byte_table_block(p, n, [](uint8_t b) { return float8_e4m3fnuz_to_float(b); });
    case DType::kFloat8E5M2Fnuz: return byte_table_block(p, n, [](uint8_t b) { return float8_e5m2fnuz_to_float(b); });
    case DType::kFloat8E8M0Fnu: return byte_table_block(p, n, [](uint8_t b) { return e8m0_to_float(b); });
    case DType::kInt8: return narrow_int_block<int8_t>(p, n);
    case DType::kInt16: return narrow_int_block<int16_t>(p, n);
    case DType::kInt32: return narrow_int_block<int32_t>(p, n);
    case DType::kInt64: return signed_block<int64_t>(p, n);
    case DType::kUInt8:
    case DType::kBool: return narrow_int_block<uint8_t>(p, n);
    case DType::kUInt16: return narrow_int_block<uint16_t>(p, n);
    case DType::kUInt32: return narrow_int_block<uint32_t>(p, n);
    case DType::kUInt64: return unsigned_block<uint64_t>(p, n);
    default: return {};
  }
}

BlockStats f32_block_reference(const float* data, size_t count) { return f32_scalar(data, count); }

BlockStats integer_block_reference(DType dtype, const std::byte* data, size_t count) {
  switch (dtype) {
    case DType::kInt8: return signed_block<int8_t>(data, count);
    case DType::kInt16: return signed_block<int16_t>(data, count);
    case DType::kInt32: return signed_block<int32_t>(data, count);
    case DType::kInt64: return signed_block<int64_t>(data, count);
    case DType::kUInt8:
    case DType::kBool: return unsigned_block<uint8_t>(data, count);
    case DType::kUInt16: return unsigned_block<uint16_t>(data, count);
    case DType::kUInt32: return unsigned_block<uint32_t>(data, count);
    case DType::kUInt64: return unsigned_block<uint64_t>(data, count);
    default: return {};
  }
}

BlockStats narrow_block_reference(DType dtype, const std::byte* data, size_t count) {
  float x[kStatsBlock];
  for (size_t j = 0; j < count; ++j) {
    switch (dtype) {
      case DType::kFloat16: x[j] = half_bits_to_float(load<uint16_t>(data, j)); break;
      case DType::kBFloat16: x[j] = bfloat16_bits_to_float(load<uint16_t>(data, j)); break;
      case DType::kFloat8E4M3Fn: x[j] = float8_e4m3fn_bits_to_float(load<uint8_t>(data, j)); break;
      case DType::kFloat8E5M2: x[j] = float8_e5m2_bits_to_float(load<uint8_t>(data, j)); break;
      case DType::kFloat8E4M3Fnuz: x[j] = float8_e4m3fnuz_to_float(load<uint8_t>(data, j)); break;
      case DType::kFloat8E5M2Fnuz: x[j] = float8_e5m2fnuz_to_float(load<uint8_t>(data, j)); break;
      case DType::kFloat8E8M0Fnu: x[j] = e8m0_to_float(load<uint8_t>(data, j)); break;
      default: return {};
    }
  }
  return f32_scalar(x, count);
}

void merge_block(BlockStats& t, const BlockStats& b) {
  t.nan += b.nan, t.posinf += b.posinf, t.neginf += b.neginf, t.finite += b.finite;
  t.sum += b.sum;
  t.min = std::min(t.min, b.min), t.max = std::max(t.max, b.max), t.absmax = std::max(t.absmax, b.absmax);
  t.imin = std::min(t.imin, b.imin), t.imax = std::max(t.imax, b.imax);
  t.umin = std::min(t.umin, b.umin), t.umax = std::max(t.umax, b.umax), t.uabsmax = std::max(t.uabsmax, b.uabsmax);
}

}  // namespace ckptfix
