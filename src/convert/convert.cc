#include "convert/convert.h"

#include <cmath>
#include <cstring>

#include "ckptfix/error.h"
#include "convert/convert_kernels.h"

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

template <typename T>
inline T load(const std::byte* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
inline void store(std::byte* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Reads element i of a castable float type as float32 (torch's intermediate).
inline float load_as_float(DType t, const std::byte* p, size_t i) {
  switch (t) {
    case DType::kFloat16: return half_bits_to_float(load<uint16_t>(p, i));
    case DType::kBFloat16: return bfloat16_bits_to_float(load<uint16_t>(p, i));
    case DType::kFloat32: return load<float>(p, i);
    default: return static_cast<float>(load<double>(p, i));
  }
}

// The input element as float64 (exact for every castable type), for the
// statistics only: finite inputs that become infinite, non-zero that become 0.
inline double load_exact(DType t, const std::byte* p, size_t i) {
  return t == DType::kFloat64 ? load<double>(p, i) : static_cast<double>(load_as_float(t, p, i));
}

inline void tally(ConvertStats& s, double in, bool out_inf, bool out_zero) {
  if (out_inf && std::isfinite(in)) ++s.overflowed;
  if (out_zero && in != 0 && !std::isnan(in)) ++s.flushed;
}

}  // namespace

uint16_t float_to_half_bits(float f) {
  // c10::detail::fp16_ieee_from_fp32_value (from the FP16 library): the
  // float additions do the rounding to nearest even.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  const float scaled = std::fabs(f) * scale_to_inf;
  float base = scaled * scale_to_zero;
  const uint32_t w = to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

uint16_t float_to_bfloat16_bits_vectorized(float f) {
  if (std::isnan(f)) return 0xFFFF;
  const uint32_t u = to_bits(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1) + 0x7FFFu) >> 16);
}

uint16_t float_to_bfloat16_bits_scalar(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = to_bits(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1) + 0x7FFFu) >> 16);
}

float half_bits_to_float(uint16_t h) {
  // c10::detail::fp16_ieee_to_fp32_value.
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

ConvertStats convert_elements(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                              ChunkPosition position) {
  if (!is_castable_float(from) || !is_castable_float(to)) {
    throw Error(ErrorKind::kInvalidArgument, "cannot convert " + std::string(dtype_name(from)) + " to " +
                                                 std::string(dtype_name(to)));
  }
  if (from == to) {
    std::memcpy(dst, src, count * element_size(from));
    return {};
  }
  if (from == DType::kFloat32 && to == DType::kBFloat16) return convert_f32_to_bf16(src, dst, count);
  if (from == DType::kFloat32 && to == DType::kFloat16) return convert_f32_to_f16(src, dst, count);

  // Widening never overflows or flushes: no statistics to keep.
  ConvertStats stats;
  switch (to) {
    case DType::kFloat64:
      for (size_t i = 0; i < count; ++i) store<double>(dst, i, static_cast<double>(load_as_float(from, src, i)));
      return stats;
    case DType::kFloat32:
      for (size_t i = 0; i < count; ++i) {
        const float f = load_as_float(from, src, i);  // float64 -> float32 rounds here
        store<float>(dst, i, f);
        if (from == DType::kFloat64) tally(stats, load<double>(src, i), std::isinf(f), f == 0);
      }
      return stats;
    case DType::kFloat16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_half_bits(load_as_float(from, src, i));
        store<uint16_t>(dst, i, h);
        tally(stats, load_exact(from, src, i), (h & 0x7FFF) == 0x7C00, (h & 0x7FFF) == 0);
      }
      return stats;
    case DType::kBFloat16: {
      // float64: ATen's vectorized blocks of 16 end where the scalar tail starts.
      const uint64_t vector_end = from == DType::kFloat64 ? position.total - position.total % 16 : 0;
      for (size_t i = 0; i < count; ++i) {
        const float f = load_as_float(from, src, i);
        const uint16_t b = position.first + i < vector_end ? float_to_bfloat16_bits_vectorized(f)
                                                           : float_to_bfloat16_bits_scalar(f);
        store<uint16_t>(dst, i, b);
        tally(stats, load_exact(from, src, i), (b & 0x7FFF) == 0x7F80, (b & 0x7FFF) == 0);
      }
      return stats;
    }
    default: break;
  }
  return {};
}

}  // namespace ckptfix
