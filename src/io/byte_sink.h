// Where written bytes go: a file (through AtomicFile), memory (tests), or a
// sink that fails on purpose (fault-injection tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  /// Appends all of `data` or throws ckptfix::Error.
  virtual void write(std::span<const std::byte> data) = 0;
  /// Bytes written so far.
  virtual uint64_t position() const = 0;
  /// Makes everything written so far visible to other readers of the file.
  virtual void flush() {}
  /// Whether copy_from() can be used.
  virtual bool can_copy_from() const { return false; }
  /// Appends `length` bytes of the file `fd` at `offset` without looking at
  /// them (a file sink shares the input's blocks, has a server copy them,
  /// or splices them through a pipe; else reads and writes through its buffer).
  /// Returns false, having written nothing, when it cannot copy between
  /// these files. An error reading `fd` (it ends early: changed meanwhile)
  /// names no file: the caller knows which input that is.
  virtual bool copy_from(int fd, uint64_t offset, uint64_t length) {
    (void)fd, (void)offset, (void)length;
    return false;
  }
  /// Says that the next `length` bytes written (by write(), by write_at()
  /// into the range reserve() gives, or by copy_from()) are one bulk range:
  /// a record's data, a file's tensors. A sink may make room for them first.
  virtual void expect(uint64_t length) { (void)length; }
  /// Whether reserve() and write_at() can be used.
  virtual bool can_write_at() const { return false; }
  /// Appends a range of `length` bytes to be filled by write_at(), and
  /// returns its offset. The next write() goes after it.
  virtual uint64_t reserve(uint64_t length) {
    (void)length;
    throw Error(ErrorKind::kInternal, "this output cannot be written at an offset");
  }
  /// Writes `data` at `offset`, inside a range reserve() gave. Threads may
  /// call it at once for different parts of the range.
  virtual void write_at(uint64_t offset, std::span<const std::byte> data) {
    (void)offset, (void)data;
    throw Error(ErrorKind::kInternal, "this output cannot be written at an offset");
  }
};

/// Collects everything in memory; `positional`: it takes write_at() too
/// (tests: the writer's two-thread path without a file).
class MemorySink final : public ByteSink {
 public:
  explicit MemorySink(bool positional = false) : positional_(positional) {}
  void write(std::span<const std::byte> data) override {
    bytes_.append(reinterpret_cast<const char*>(data.data()), data.size());
  }
  uint64_t position() const override { return bytes_.size(); }
  bool can_write_at() const override { return positional_; }
  uint64_t reserve(uint64_t length) override {
    const uint64_t offset = bytes_.size();
    bytes_.resize(offset + length);
    return offset;
  }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    std::memcpy(bytes_.data() + offset, data.data(), data.size());  // no reallocation meanwhile: disjoint writes are safe
  }
  const std::string& bytes() const { return bytes_; }

 private:
  bool positional_;
  std::string bytes_;
};

}  // namespace ckptfix
