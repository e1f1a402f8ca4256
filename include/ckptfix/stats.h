// Tensor health: NaN and Inf counts and value ranges of every tensor, read
// from the file without loading anything (`ckptfix inspect --stats`,
// `ckptfix check --finite`). A diverged run, a bad cast or a damaged upload
// shows up here before anyone trains on it.
//
// Every number is defined so that it does not depend on how it is computed
// (threads, SIMD width): counts, min, max and absmax are exact; the mean is
// the float64 sum of the finite values in a fixed order (the tensor's
// elements in row-major order, in blocks of kStatsBlock elements; within a
// block, element j goes to lane j % 8 and the lanes are added as
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); the block sums are added in order),
// divided by their count.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Elements per block of the mean's fixed order.
constexpr uint64_t kStatsBlock = 16384;

/// A statistic's value: a float, or an integer kept exact (int64 and uint64
/// tensors hold values a double cannot).
struct StatValue {
  enum class Kind : uint8_t { kNone, kFloat, kSigned, kUnsigned };
  Kind kind = Kind::kNone;  ///< kNone: no finite value to take it from
  double f = 0;
  int64_t i = 0;
  uint64_t u = 0;
  bool has_value() const { return kind != Kind::kNone; }
  /// The value as a double (rounded for integers beyond 2^53).
  double as_double() const;
};

/// The health of one tensor (as the tensor is: a view counts its own
/// elements, in its own order).
struct TensorStats {
  /// False for dtypes these statistics are not defined for (complex,
  /// quantized, bits, float4_e2m1fn_x2, untyped): every field is empty.
  bool computed = false;
  uint64_t elements = 0;
  uint64_t nan = 0;
  uint64_t posinf = 0;
  uint64_t neginf = 0;
  uint64_t finite = 0;  ///< elements that are neither NaN nor infinite
  StatValue min;        ///< over the finite values
  StatValue max;
  StatValue absmax;
  std::optional<double> mean;  ///< over the finite values (fixed order, above)
  /// True when the tensor holds no NaN and no infinity.
  bool all_finite() const { return nan == 0 && posinf == 0 && neginf == 0; }
};

struct StatsOptions {
  /// Threads (0: the machine's cores, at most 8).
  unsigned threads = 0;
  /// Progress: phase "statistics", bytes done, bytes total.
  ProgressCallback progress;
};

struct StatsReport {
  /// One per tensor of the checkpoint, in the order of Checkpoint::tensors().
  std::vector<TensorStats> tensors;
  uint64_t bytes = 0;   ///< tensor bytes read
  double seconds = 0;   ///< time taken
};

/// Reads every tensor's bytes once and computes its statistics. Throws
/// Error (kCorrupt for a damaged or truncated storage, naming it).
StatsReport tensor_stats(const Checkpoint& checkpoint, const StatsOptions& options = {});

}  // namespace ckptfix
