// Reads a tensor's elements in row-major order as float64 (real and
// imaginary parts), whatever its dtype, strides and storage offset.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "bytes/storage_reader.h"

namespace ckptfix {

/// The value of the element at `p` of type `dtype` (its real or imaginary
/// part) as float64; packed types give their raw bits.
double element_value(DType dtype, const std::byte* p, bool imaginary);

/// Whether elements of `dtype` have an imaginary part.
bool is_complex_dtype(DType dtype);

class ElementReader {
 public:
  ElementReader(const Checkpoint& checkpoint, const Tensor& tensor);

  /// Appends up to `max` next elements; returns how many. `re`/`im` receive
  /// their values, `raw` their first 8 bytes (integers compare exactly).
  size_t next(size_t max, std::vector<double>& re, std::vector<double>& im, std::vector<uint64_t>& raw);

 private:
  const Checkpoint& checkpoint_;
  const Tensor& tensor_;
  uint32_t element_size_;
  uint64_t numel_;
  uint64_t first_;                  // storage element of the first element (contiguous reads)
  uint64_t done_ = 0;
  bool contiguous_;
  std::vector<std::byte> buffer_;   // contiguous: the current chunk; otherwise the spanned range
  uint64_t buffer_first_ = 0;       // element index (in the storage) of buffer_[0]
  std::vector<int64_t> index_;      // current multi-index for strided reads
  // Contiguous: one reader front to back, so that a deflated storage is
  // inflated once, not from its start for every chunk.
  std::unique_ptr<StorageReader> reader_;
};

}  // namespace ckptfix
