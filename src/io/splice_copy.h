// Copying a range of one file into another through a pipe with splice(2):
// the input's page-cache pages go into the pipe by reference and are
// copied once, into the output's page cache, where a read/write buffer
// copies every byte twice. With a 1 MiB pipe each write into the output is
// large enough for large folios; with the default 64 KiB pipe (what the
// kernel's own copy_file_range fallback uses) it is slower than the buffer
// (measured: docs/performance.md, "Copy speed on four file systems").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace ckptfix {

class SpliceCopy {
 public:
  /// A pipe of at least 1 MiB, or nullptr when none can be had (the
  /// process's or the user's pipe limits): the caller copies otherwise.
  static std::unique_ptr<SpliceCopy> open();
  ~SpliceCopy();
  SpliceCopy(const SpliceCopy&) = delete;
  SpliceCopy& operator=(const SpliceCopy&) = delete;

  /// Copies [offset, offset + length) of `in` to `out` at its file
  /// position. Returns the bytes copied: less than `length` only when one
  /// of the two files does not splice (the rest is the caller's to copy
  /// another way; whatever had entered the pipe has been written). Throws
  /// Error(kIo) naming `output` on a write error; on a read error, or when the
  /// input ends before the range does, one naming no file (the caller knows
  /// the input's name).
  uint64_t copy(int in, uint64_t offset, uint64_t length, int out, const std::string& output);

 private:
  SpliceCopy(int read_end, int write_end, size_t capacity);
  void drain(int out, size_t pending, const std::string& output);

  int read_end_;
  int write_end_;
  size_t capacity_;
};

}  // namespace ckptfix
