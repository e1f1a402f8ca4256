// One element's conversions between float32 and the narrow float types, bit
// for bit as torch's (dtype_kernels/convert.h): the scalar definitions that
// the element loops of convert.cc and the vector kernels of
// convert_kernels.cc both use, so that neither calls into the other.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "dtype_kernels/convert.h"

namespace ckptfix {
namespace {

inline float from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline uint32_t to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

// Round to nearest even of a non-NaN float32 to bfloat16 bits.
inline uint16_t bfloat16_round(uint32_t u) { return static_cast<uint16_t>((u + ((u >> 16) & 1) + 0x7FFFu) >> 16); }


}  // namespace

uint16_t float_to_half_bits(float f) {
  // The arithmetic of c10's software fp16_ieee_from_fp32_value (from the FP16
  // library; the float additions round to nearest even), which equals F16C's
  // VCVTPS2PH for every non-NaN. torch 2.14's AVX2/AVX512 kernels use F16C,
  // whose NaN keeps its sign and payload bits 22..13, quieted.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  const float scaled = std::fabs(f) * scale_to_inf;
  float base = scaled * scale_to_zero;
  const uint32_t w = to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  if (shl1_w > 0xFF000000u) return static_cast<uint16_t>((sign >> 16) | 0x7E00u | ((w >> 13) & 0x3FFu));
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  return static_cast<uint16_t>((sign >> 16) | (exp_bits + mantissa_bits));
}

uint16_t float_to_bfloat16_bits_vectorized(float f) { return std::isnan(f) ? 0xFFFF : bfloat16_round(to_bits(f)); }

uint16_t float_to_bfloat16_bits_scalar(float f) { return std::isnan(f) ? 0x7FC0 : bfloat16_round(to_bits(f)); }

uint8_t float_to_float8_e4m3fn_bits(float f, bool saturate) {
  // c10::detail::fp8e4m3fn_from_fp32_value of torch 2.14; before 2.13
  // (saturate false) overflow, ±inf included, became NaN instead.
  constexpr uint32_t fp8_max = 1087u << 20;      // 480.0f: the first value that rounds past 0x7E
  constexpr uint32_t denorm_mask = 141u << 23;  // adding 2^14 leaves the subnormal's bits at the bottom
  uint32_t f_bits = to_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = f_bits > 0x7F800000u || !saturate ? 0x7F : 0x7E;  // NaN stays NaN; overflow and inf saturate
  } else if (f_bits < (121u << 23)) {                         // below 2^-6, the smallest normal
    result = static_cast<uint8_t>(to_bits(from_bits(f_bits) + from_bits(denorm_mask)) - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 20) & 1;
    f_bits += ((uint32_t{7} - 127) << 23) + 0x7FFFF + mant_odd;
    result = static_cast<uint8_t>(f_bits >> 20);
    if (result == 0x7F && saturate) result = 0x7E;  // rounded into the NaN pattern: saturate
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

uint8_t float_to_float8_e5m2_bits(float f) {
  // c10::detail::fp8e5m2_from_fp32_value.
  constexpr uint32_t fp8_max = 143u << 23;      // 65536.0f: rounds to inf
  constexpr uint32_t denorm_mask = 134u << 23;
  uint32_t f_bits = to_bits(f);
  const uint32_t sign = f_bits & 0x80000000u;
  f_bits ^= sign;
  uint8_t result;
  if (f_bits >= fp8_max) {
    result = f_bits > 0x7F800000u ? 0x7F : 0x7C;
  } else if (f_bits < (113u << 23)) {  // below 2^-14, the smallest normal
    result = static_cast<uint8_t>(to_bits(from_bits(f_bits) + from_bits(denorm_mask)) - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 21) & 1;
    f_bits += ((uint32_t{15} - 127) << 23) + 0xFFFFF + mant_odd;
    result = static_cast<uint8_t>(f_bits >> 21);
  }
  return static_cast<uint8_t>(result | (sign >> 24));
}

float half_bits_to_float(uint16_t h) {
  // c10::detail::fp16_ieee_to_fp32_value (the same bits as F16C's VCVTPH2PS).
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized_input = from_bits((two_w >> 4) + exp_offset);
  const float normalized_value = normalized_input * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized_input = from_bits((two_w >> 17) | magic_mask);
  const float denormalized_value = denormalized_input - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result = sign | (two_w < denormalized_cutoff ? to_bits(denormalized_value) : to_bits(normalized_value));
  return from_bits(result);
}

float bfloat16_bits_to_float(uint16_t b) { return from_bits(static_cast<uint32_t>(b) << 16); }

float float8_e4m3fn_bits_to_float(uint8_t b) {
  // c10::detail::fp8e4m3fn_to_fp32_value: NaN (S.1111.111) becomes
  // 0x7FF00000 with its sign, not the canonical 0x7FC00000.
  const uint32_t w = static_cast<uint32_t>(b) << 24;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t nonsign = w & 0x7FFFFFFFu;
  uint32_t renorm_shift = nonsign != 0 ? static_cast<uint32_t>(__builtin_clz(nonsign)) : 32;
  renorm_shift = renorm_shift > 4 ? renorm_shift - 4 : 0;
  const uint32_t inf_nan_mask = static_cast<uint32_t>(static_cast<int32_t>(nonsign + 0x01000000u) >> 8) & 0x7F800000u;
  const uint32_t zero_mask = static_cast<uint32_t>(static_cast<int32_t>(nonsign - 1) >> 31);
  return from_bits(sign | ((((nonsign << renorm_shift >> 4) + ((0x78 - renorm_shift) << 23)) | inf_nan_mask) & ~zero_mask));
}

float float8_e5m2_bits_to_float(uint8_t b) { return half_bits_to_float(static_cast<uint16_t>(b << 8)); }

}  // namespace ckptfix
