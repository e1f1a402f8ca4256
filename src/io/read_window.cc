#include "io/read_window.h"

#include <algorithm>

namespace ckptfix {

std::span<const std::byte> ReadWindow::bytes(const void* file, uint64_t offset, uint64_t size, uint64_t file_size,
                                             const std::function<void(uint64_t, std::span<std::byte>)>& read) {
  if (file == file_ && offset >= start_ && offset + size <= start_ + length_) {
    ++served_;
    return std::span<const std::byte>(buffer_).subspan(static_cast<size_t>(offset - start_), static_cast<size_t>(size));
  }
  // A window that served few reads was too large for how they jump: the
  // next is smaller; one that served many may grow again.
  if (file_ != nullptr) {
    if (served_ < 4) fill_ = std::max<size_t>(fill_ / 2, 1);
    if (served_ >= 32) fill_ = std::min(fill_ * 2, kMostBytes);
  }
  file_ = nullptr;  // until the read succeeds
  const uint64_t available = file_size > offset ? file_size - offset : 0;
  length_ = static_cast<size_t>(std::max<uint64_t>(size, std::min<uint64_t>(fill_, available)));
  if (buffer_.size() < length_) buffer_.resize(std::max(length_, std::min(kMostBytes, 2 * buffer_.size())));
  read(offset, std::span(buffer_).first(length_));
  file_ = file;
  start_ = offset;
  served_ = 1;
  return std::span<const std::byte>(buffer_).first(static_cast<size_t>(size));
}

}  // namespace ckptfix
