// Where written bytes go: a file (through AtomicFile), memory (tests), or a
// sink that fails on purpose (fault-injection tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

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
};

/// Collects everything in memory.
class MemorySink final : public ByteSink {
 public:
  void write(std::span<const std::byte> data) override {
    bytes_.append(reinterpret_cast<const char*>(data.data()), data.size());
  }
  uint64_t position() const override { return bytes_.size(); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace ckptfix
