#include "bytes/element_transform.h"

#include <algorithm>
#include <cstring>

#include "zip/crc32.h"

namespace ckptfix {
namespace {

// The input's CRC-32 and the conversion go over cache-sized pieces, so the
// conversion reads the input from the cache rather than from memory again.
constexpr size_t kPiece = size_t{256} << 10;

}  // namespace

void byteswap_in_place(std::span<std::byte> data, uint32_t unit) {
  if (unit <= 1) return;
  for (size_t i = 0; i + unit <= data.size(); i += unit) std::reverse(data.begin() + i, data.begin() + i + unit);
}

ElementTransform::ElementTransform(const Storage& storage, uint64_t first_element)
    : from_(storage.dtype),
      to_(storage.output_dtype()),
      rules_(storage.cast_rules),
      swap_(storage.big_endian),
      in_size_(element_size(from_)),
      out_size_(element_size(to_)),
      total_elements_(storage.nbytes / in_size_),
      next_element_(first_element) {}

size_t ElementTransform::apply(std::span<const std::byte> in, std::byte* out) {
  if (identity()) {
    std::memcpy(out, in.data(), in.size());
    return in.size();
  }
  for (size_t at = 0; at < in.size(); at += kPiece) {
    const auto piece = in.subspan(at, std::min(kPiece, in.size() - at));
    const size_t count = piece.size() / in_size_;
    std::byte* dst = out + at / in_size_ * out_size_;
    input_crc_ = crc32_update(input_crc_, piece);
    if (from_ == to_) {  // byte swap only
      std::memcpy(dst, piece.data(), piece.size());
      byteswap_in_place(std::span(dst, piece.size()), swap_unit(from_));
    } else if (swap_) {  // swap a copy, then convert it into the output
      swapped_.assign(piece.begin(), piece.end());
      byteswap_in_place(swapped_, swap_unit(from_));
      stats_ += convert_elements(from_, to_, swapped_.data(), dst, count, {next_element_, total_elements_}, rules_);
    } else {
      stats_ += convert_elements(from_, to_, piece.data(), dst, count, {next_element_, total_elements_}, rules_);
    }
    next_element_ += count;
  }
  return output_size(in.size());
}

}  // namespace ckptfix
