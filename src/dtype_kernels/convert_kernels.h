// The conversions that matter for speed (float32 to bfloat16 and float16,
// and back), with a scalar fallback and SIMD versions chosen at run time.
#pragma once

#include <cstddef>

#include "dtype_kernels/convert.h"

namespace ckptfix {

/// The fastest version this CPU runs (AVX2/F16C when present). `src` and
/// `dst` must not overlap (the statistics may be counted from both after the
/// conversion).
ConvertStats convert_f32_to_bf16(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f32_to_f16(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_bf16_to_f16(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f16_to_bf16(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_bf16_to_f32(const std::byte* src, std::byte* dst, size_t count);  ///< no statistics: widening
ConvertStats convert_f32_to_e4m3fn(const std::byte* src, std::byte* dst, size_t count, bool saturate);
ConvertStats convert_f32_to_e5m2(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f16_to_f32(const std::byte* src, std::byte* dst, size_t count);   ///< no statistics: widening
/// The scalar versions, which the SIMD ones must match bit for bit (tests).
ConvertStats convert_f32_to_bf16_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f32_to_f16_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_bf16_to_f16_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f16_to_bf16_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_bf16_to_f32_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f32_to_e4m3fn_reference(const std::byte* src, std::byte* dst, size_t count, bool saturate);
ConvertStats convert_f32_to_e5m2_reference(const std::byte* src, std::byte* dst, size_t count);
ConvertStats convert_f16_to_f32_reference(const std::byte* src, std::byte* dst, size_t count);

}  // namespace ckptfix
