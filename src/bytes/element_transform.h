// The middle stages of the byte pipeline (storage_pipeline.h): input bytes
// put in little-endian order (big-endian inputs), then converted to the
// element type a cast asked for. Works on whole elements, in storage order,
// and keeps the CRC-32 of the input bytes it changes (the damaged-input check
// needs it; bytes it leaves alone have the output's CRC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/checkpoint_impl.h"
#include "dtype_kernels/convert.h"

namespace ckptfix {

class ElementTransform {
 public:
  /// `first_element`: where in the storage the first apply() starts (a
  /// part of it transformed on its own; some casts depend on the position).
  explicit ElementTransform(const Storage& storage, uint64_t first_element = 0);

  /// True when the output bytes are the input bytes.
  bool identity() const { return !swap_ && from_ == to_; }
  /// Output bytes for `input_bytes` bytes of input (whole elements).
  size_t output_size(size_t input_bytes) const { return input_bytes / in_size_ * out_size_; }
  /// Input bytes for `output_bytes` bytes of output (whole elements).
  size_t input_size(size_t output_bytes) const { return output_bytes / out_size_ * in_size_; }

  /// Transforms `in` (whole elements, following the previous call's) into
  /// `out` (room for output_size(in.size()) bytes); returns the bytes written.
  size_t apply(std::span<const std::byte> in, std::byte* out);

  /// CRC-32 of every input byte given to apply() (0 when identity()).
  uint32_t input_crc() const { return input_crc_; }
  const ConvertStats& stats() const { return stats_; }

 private:
  DType from_, to_;
  CastRules rules_;
  bool swap_;
  size_t in_size_, out_size_;
  uint64_t total_elements_;
  uint64_t next_element_ = 0;
  uint32_t input_crc_ = 0;
  ConvertStats stats_;
  std::vector<std::byte> swapped_;  // a swapped copy of one piece, when swapping and converting
};

/// Reverses the bytes of each `unit`-byte word in place.
void byteswap_in_place(std::span<std::byte> data, uint32_t unit);

}  // namespace ckptfix
