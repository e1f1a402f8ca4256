// The statistics of one block of elements (at most kStatsBlock), by dtype:
// counts, exact min/max/absmax, and the block's float64 sum in the fixed
// lane order of include/ckptfix/stats.h. float32 has an AVX2 kernel chosen
// at run time; both give the scalar reference's numbers exactly (the lanes
// are the same additions in the same order). Narrower floats are widened to
// float32 exactly (bfloat16 by a shift, float16 by F16C where the CPU has
// it, 8-bit floats by a table) and go through the float32 kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "ckptfix/dtype.h"

namespace ckptfix {

struct BlockStats {
  uint64_t nan = 0, posinf = 0, neginf = 0, finite = 0;
  double sum = 0;  // of the finite values, lanes combined
  // Floats: over the finite values (+inf/-inf/0 when none).
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double absmax = 0;
  // Integers (and bool).
  int64_t imin = std::numeric_limits<int64_t>::max(), imax = std::numeric_limits<int64_t>::min();
  uint64_t umin = std::numeric_limits<uint64_t>::max(), umax = 0, uabsmax = 0;
};

/// How a dtype's statistics are kept.
enum class StatsClass : uint8_t { kNone, kFloat, kSigned, kUnsigned };
StatsClass stats_class(DType dtype);

/// Statistics of `count` little-endian elements of `dtype` at `data`
/// (count <= kStatsBlock; one block of the fixed order).
BlockStats block_stats(DType dtype, const std::byte* data, size_t count);

/// The scalar reference of float32 blocks (what the AVX2 kernel must equal, sum bits included).
BlockStats f32_block_reference(const float* data, size_t count);

/// The reference of the narrow float dtypes (float16, bfloat16, the float8
/// types): each element widened by the exact scalar decoder, then the
/// scalar float32 reference (what their faster widening must equal).
BlockStats narrow_block_reference(DType dtype, const std::byte* data, size_t count);

/// The reference of integer blocks: every element added into its float64
/// lane in order (what the integer sums of 8-32-bit integers must equal).
BlockStats integer_block_reference(DType dtype, const std::byte* data, size_t count);

/// Adds `b` (the next block, in order) into `total`.
void merge_block(BlockStats& total, const BlockStats& b);

}  // namespace ckptfix
