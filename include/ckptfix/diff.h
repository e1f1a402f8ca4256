// Comparing two checkpoints tensor by tensor: which keys each has, and for
// the keys both have, dtype, shape and device differences and how far the
// values are apart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// What counts as a difference, and how keys are matched.
struct DiffOptions {
  /// Values are equal when |a - b| <= atol + rtol * |b| (torch.allclose's
  /// rule, with NaN equal to NaN); both 0 means exact.
  double atol = 0;
  double rtol = 0;  ///< relative tolerance (see atol)
  /// Match keys ignoring these prefixes at the start of every path element
  /// (each removed once, in order, as the passes' strip_prefixes).
  std::vector<std::string> strip_prefixes;
  /// Match keys ignoring any chain of known wrapper prefixes (module., _orig_mod., ...).
  bool strip_wrappers = false;
  /// Compare only the tensors inside the dicts at these '/'-separated paths
  /// ("state_dict", "model/ema"), in both files, as the passes' `keys`
  /// choose dicts; empty: every tensor of both files. A path that names
  /// nothing, or not a dict, in either file is Error(kInvalidArgument).
  std::vector<std::string> keys;
  /// Do not count dtype (or device) differences as differences; values are
  /// still compared, in float64.
  bool ignore_dtype = false;
  bool ignore_device = false;  ///< see ignore_dtype
  /// Elements the comparison may read, in all: each tensor's elements, the
  /// span a strided view reads, and what inflating a deflated storage up to
  /// a view's offset costs. It bounds files whose views repeat or overlap
  /// (a stride-0 tensor of 2^40 elements over one float, 10^5 views at the
  /// end of one deflated storage); Error(kLimit) beyond it. 0: 2^26, plus 4
  /// per element of both files' storages.
  uint64_t max_compared_elements = 0;
};

/// How one tensor present in both files compares.
struct TensorDiff {
  std::string key;  ///< the matched key ('/'-separated path, prefixes removed)
  std::string dtype_a, dtype_b;  ///< element types (dtype_name) in A and B
  std::vector<int64_t> shape_a, shape_b;
  std::string device_a, device_b;  ///< saved locations in A and B
  uint64_t numel = 0;
  uint64_t mismatched = 0;  ///< elements outside the tolerance
  double max_abs_diff = 0;  ///< over elements where both are numbers
  double max_rel_diff = 0;  ///< |a - b| / |b|, over elements where b != 0
  bool equal = true;        ///< no difference that counts under the DiffOptions
  /// Whether the element types differ.
  bool dtype_differs() const { return dtype_a != dtype_b; }
  /// Whether the shapes differ.
  bool shape_differs() const { return shape_a != shape_b; }
  /// Whether the saved locations differ.
  bool device_differs() const { return device_a != device_b; }
};

/// How two checkpoints compare.
struct DiffReport {
  std::vector<std::string> only_in_a;  ///< keys only A has, in its order
  std::vector<std::string> only_in_b;  ///< keys only B has, in its order
  std::vector<TensorDiff> tensors;  ///< every key both have, in A's order
  bool equal = true;                ///< no difference that counts under the options
};

/// Compares every tensor position of `a` and `b`. Reads tensor bytes in
/// chunks (a non-contiguous view reads the part of its storage it spans).
/// Two contiguous tensors of one dtype are compared by their bytes first,
/// and element by element only in the chunks whose bytes differ: equal
/// bytes are equal values under any tolerance (NaN equals NaN here).
DiffReport diff_checkpoints(const Checkpoint& a, const Checkpoint& b, const DiffOptions& options = {});

}  // namespace ckptfix
