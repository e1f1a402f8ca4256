// Many small reads at nearly increasing offsets of one file, served from
// one larger read.
//
// A rewrite of 100,000 small tensors read each storage record with a pread
// of its own, and its verification each written record again: 200,000
// system calls, a tenth of the work. Records written one after another are
// read back in order, and a file's records are mostly read near where the
// last one was, so one read of a window serves the next records. Where the
// reads jump about instead, the window shrinks (to one record's bytes), so
// no order costs much more than a read per record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace ckptfix {

class ReadWindow {
 public:
  /// Records larger than this are read without the window.
  static constexpr uint64_t kLargestRecord = uint64_t{16} << 10;
  static bool takes(uint64_t size) { return size <= kLargestRecord; }

  /// The bytes [offset, offset + size) (size <= kLargestRecord) of the file
  /// `file` (any token that tells files apart) of `file_size` bytes: from
  /// the window, or after `read(at, out)` has filled the window from the
  /// file. Valid until the next call.
  std::span<const std::byte> bytes(const void* file, uint64_t offset, uint64_t size, uint64_t file_size,
                                   const std::function<void(uint64_t at, std::span<std::byte> out)>& read);

 private:
  static constexpr size_t kMostBytes = size_t{256} << 10;
  std::vector<std::byte> buffer_;
  const void* file_ = nullptr;
  uint64_t start_ = 0;
  size_t length_ = 0;
  size_t fill_ = kMostBytes;  // bytes the next read takes, where the file has them
  size_t served_ = 0;         // reads the present window has served
};

}  // namespace ckptfix
