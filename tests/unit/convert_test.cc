// The SIMD conversion kernels against the scalar reference (which the
// interop tests check against torch): tens of millions of float32 bit
// patterns covering every exponent, sign, NaN payload and rounding boundary,
// in buffers whose lengths leave every possible SIMD tail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "convert/convert.h"
#include "convert/convert_kernels.h"

namespace ckptfix {
namespace {

using Kernel = ConvertStats (*)(const std::byte*, std::byte*, size_t);

void compare_kernels(Kernel fast, Kernel reference) {
  constexpr size_t kChunk = (1 << 20) + 7;  // not a multiple of any vector width
  std::vector<uint32_t> in(kChunk);
  std::vector<uint16_t> a(kChunk), b(kChunk);
  uint64_t checked = 0;
  // Every 61st bit pattern: all exponents, both signs, NaN payloads.
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kChunk * 61) {
    size_t n = 0;
    for (uint64_t u = start; n < kChunk && u < (uint64_t{1} << 32); u += 61) in[n++] = static_cast<uint32_t>(u);
    for (size_t offset : {size_t{0}, size_t{1}, size_t{3}}) {  // unaligned starts and odd tails
      const auto* src = reinterpret_cast<const std::byte*>(in.data() + offset);
      const ConvertStats sa = fast(src, reinterpret_cast<std::byte*>(a.data()), n - offset);
      const ConvertStats sb = reference(src, reinterpret_cast<std::byte*>(b.data()), n - offset);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), (n - offset) * 2), 0) << "chunk at 0x" << std::hex << start;
      ASSERT_EQ(sa.overflowed, sb.overflowed);
      ASSERT_EQ(sa.flushed, sb.flushed);
    }
    checked += n;
  }
  // Every value around the rounding boundaries of the 16-bit types.
  std::vector<uint32_t> edges;
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0FFFu, 0x1000u, 0x1001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) edges.push_back(hi << 16 | lo);
  }
  std::vector<uint16_t> ea(edges.size()), eb(edges.size());
  fast(reinterpret_cast<const std::byte*>(edges.data()), reinterpret_cast<std::byte*>(ea.data()), edges.size());
  reference(reinterpret_cast<const std::byte*>(edges.data()), reinterpret_cast<std::byte*>(eb.data()), edges.size());
  EXPECT_EQ(ea, eb);
  EXPECT_EQ(checked, ((uint64_t{1} << 32) + 60) / 61);
}

TEST(ConvertKernels, Float32ToBFloat16MatchesReference) { compare_kernels(convert_f32_to_bf16, convert_f32_to_bf16_reference); }

TEST(ConvertKernels, Float32ToFloat16MatchesReference) { compare_kernels(convert_f32_to_f16, convert_f32_to_f16_reference); }

TEST(ConvertKernels, TorchRulesForSpecialValues) {
  EXPECT_EQ(float_to_bfloat16_bits_vectorized(std::nanf("")), 0xFFFF);
  EXPECT_EQ(float_to_bfloat16_bits_scalar(std::nanf("")), 0x7FC0);
  EXPECT_EQ(float_to_half_bits(-std::nanf("")), 0xFE00);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7C00);   // rounds up to inf
  EXPECT_EQ(float_to_half_bits(65519.996f), 0x7BFF); // rounds down to 65504
  EXPECT_EQ(float_to_bfloat16_bits_scalar(1.0f + 0x1p-8f), 0x3F80);  // tie to even
  EXPECT_EQ(float_to_bfloat16_bits_scalar(1.0f + 3 * 0x1p-8f), 0x3F82);
}

}  // namespace
}  // namespace ckptfix
