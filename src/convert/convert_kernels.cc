#include "convert/convert_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace

ConvertStats convert_f32_to_bf16(const std::byte* src, std::byte* dst, size_t count) {
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

ConvertStats convert_f32_to_f16(const std::byte* src, std::byte* dst, size_t count) {
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

}  // namespace ckptfix
