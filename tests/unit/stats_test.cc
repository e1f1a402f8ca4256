// The statistics kernels: the AVX2 float32 kernel gives the scalar
// reference's numbers exactly (the mean's sum bit for bit: the same lanes,
// the same additions), on random blocks with NaN, infinities, signed zeros
// and subnormals, at every length around the 8-lane step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ckptfix/stats.h"
#include "stats/stats_kernels.h"

namespace ckptfix {
namespace {

uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

TEST(StatsKernels, Float32KernelEqualsTheScalarReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f, 0.0f, 1e-40f, -1e-40f,
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 100, 1000, static_cast<int>(kStatsBlock)}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = rng() % 10 == 0 ? specials[rng() % std::size(specials)] : normal(rng);
    const BlockStats ref = f32_block_reference(x.data(), n);
    const BlockStats got = block_stats(DType::kFloat32, reinterpret_cast<const std::byte*>(x.data()), n);
    EXPECT_EQ(got.nan, ref.nan) << n;
    EXPECT_EQ(got.posinf, ref.posinf) << n;
    EXPECT_EQ(got.neginf, ref.neginf) << n;
    EXPECT_EQ(got.finite, ref.finite) << n;
    EXPECT_EQ(bits(got.sum), bits(ref.sum)) << n;
    EXPECT_EQ(got.min, ref.min) << n;
    EXPECT_EQ(got.max, ref.max) << n;
    EXPECT_EQ(got.absmax, ref.absmax) << n;
  }
}

TEST(StatsKernels, NarrowFloatsEqualTheirExactReference) {
  // Every bit pattern of the 16-bit floats (in blocks, with the tails of
  // the 8-element steps), every byte of the 8-bit ones, and random blocks:
  // the fast widening (shift, F16C, tables) gives the exact decoder's floats.
  std::mt19937 rng(11);
  const DType narrow[] = {DType::kFloat16,        DType::kBFloat16,       DType::kFloat8E4M3Fn,
                          DType::kFloat8E5M2,     DType::kFloat8E4M3Fnuz, DType::kFloat8E5M2Fnuz,
                          DType::kFloat8E8M0Fnu};
  for (DType dtype : narrow) {
    const size_t size = element_size(dtype);
    const size_t all = size_t{1} << (8 * size);
    std::vector<std::byte> every(all * size);
    for (size_t v = 0; v < all; ++v) std::memcpy(every.data() + v * size, &v, size);
    for (size_t at = 0; at < all; at += kStatsBlock) {
      for (size_t n : {std::min<size_t>(kStatsBlock, all - at), size_t{13}}) {
        if (at + n > all) continue;
        const BlockStats ref = narrow_block_reference(dtype, every.data() + at * size, n);
        const BlockStats got = block_stats(dtype, every.data() + at * size, n);
        EXPECT_EQ(got.nan, ref.nan) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.posinf, ref.posinf) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.neginf, ref.neginf) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.finite, ref.finite) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(bits(got.sum), bits(ref.sum)) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.min, ref.min) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.max, ref.max) << dtype_name(dtype) << " at " << at;
        EXPECT_EQ(got.absmax, ref.absmax) << dtype_name(dtype) << " at " << at;
      }
    }
    for (size_t n : {1, 7, 9, 1000}) {
      std::vector<std::byte> random(n * size);
      for (std::byte& b : random) b = static_cast<std::byte>(rng());
      const BlockStats ref = narrow_block_reference(dtype, random.data(), n);
      const BlockStats got = block_stats(dtype, random.data(), n);
      EXPECT_EQ(bits(got.sum), bits(ref.sum)) << dtype_name(dtype) << " n " << n;
      EXPECT_EQ(got.nan, ref.nan) << dtype_name(dtype) << " n " << n;
    }
  }
}

TEST(StatsKernels, IntegersEqualTheirFloat64LaneReference) {
  // Extremes and random values at every length around the 8-lane step and a
  // whole block: the integer lane sums give the reference's doubles.
  std::mt19937_64 rng(13);
  const DType ints[] = {DType::kInt8,  DType::kInt16,  DType::kInt32,  DType::kInt64, DType::kUInt8,
                        DType::kUInt16, DType::kUInt32, DType::kUInt64, DType::kBool};
  for (DType dtype : ints) {
    const size_t size = element_size(dtype);
    for (size_t n : {0, 1, 7, 8, 9, 17, 1000, static_cast<int>(kStatsBlock)}) {
      for (int extreme = 0; extreme < 2; ++extreme) {
        std::vector<std::byte> data(n * size);
        for (size_t i = 0; i < n; ++i) {
          // All bits set or the sign bit alone (the largest magnitudes), or random.
          uint64_t v = extreme ? (rng() % 2 ? ~uint64_t{0} : uint64_t{1} << (8 * size - 1)) : rng();
          if (dtype == DType::kBool) v &= 1;
          std::memcpy(data.data() + i * size, &v, size);
        }
        const BlockStats ref = integer_block_reference(dtype, data.data(), n);
        const BlockStats got = block_stats(dtype, data.data(), n);
        const std::string what = std::string(dtype_name(dtype)) + " n " + std::to_string(n);
        EXPECT_EQ(bits(got.sum), bits(ref.sum)) << what;
        EXPECT_EQ(got.finite, ref.finite) << what;
        EXPECT_EQ(got.imin, ref.imin) << what;
        EXPECT_EQ(got.imax, ref.imax) << what;
        EXPECT_EQ(got.umin, ref.umin) << what;
        EXPECT_EQ(got.umax, ref.umax) << what;
        EXPECT_EQ(got.uabsmax, ref.uabsmax) << what;
      }
    }
  }
}

TEST(StatsKernels, IntegersAreExact) {
  const int64_t v[] = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -3, 0};
  const BlockStats s = block_stats(DType::kInt64, reinterpret_cast<const std::byte*>(v), 4);
  EXPECT_EQ(s.imin, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(s.imax, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.uabsmax, uint64_t{1} << 63);  // |int64 min|, which torch's abs() wraps
  EXPECT_EQ(s.finite, 4u);
  const uint64_t u[] = {std::numeric_limits<uint64_t>::max(), 1};
  const BlockStats us = block_stats(DType::kUInt64, reinterpret_cast<const std::byte*>(u), 2);
  EXPECT_EQ(us.umax, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(us.umin, 1u);
}

TEST(StatsKernels, Float8TypesDecodeAsTorchDoes) {
  // e4m3fnuz: 0x80 is NaN, no infinity, bias 8; e8m0fnu: 0xFF is NaN, 2^(b-127).
  const uint8_t fnuz[] = {0x80, 0x40, 0x7F, 0xFF, 0x00};
  const BlockStats a = block_stats(DType::kFloat8E4M3Fnuz, reinterpret_cast<const std::byte*>(fnuz), 5);
  EXPECT_EQ(a.nan, 1u);
  EXPECT_EQ(a.max, 240.0);   // 0x7F
  EXPECT_EQ(a.min, -240.0);  // 0xFF
  const uint8_t e8m0[] = {0x7F, 0xFF, 0x80};
  const BlockStats b = block_stats(DType::kFloat8E8M0Fnu, reinterpret_cast<const std::byte*>(e8m0), 3);
  EXPECT_EQ(b.nan, 1u);
  EXPECT_EQ(b.min, 1.0);
  EXPECT_EQ(b.max, 2.0);
}

}  // namespace
}  // namespace ckptfix
