#include "write/fault_injection.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <utility>

#include "ckptfix/error.h"
#include "ckptfix/interrupt.h"

namespace ckptfix {
namespace {

// A sink that fails after a given number of bytes.
class FailingSink final : public ByteSink {
 public:
  FailingSink(ByteSink& inner, uint64_t limit) : inner_(inner), limit_(limit) {}
  void write(std::span<const std::byte> data) override {
    if (inner_.position() + data.size() > limit_) {
      throw Error(ErrorKind::kIo, "write failed: injected fault after " + std::to_string(limit_) + " bytes");
    }
    inner_.write(data);
  }
  uint64_t position() const override { return inner_.position(); }
  void flush() override { inner_.flush(); }
  void expect(uint64_t length) override { inner_.expect(length); }
  bool can_write_at() const override { return inner_.can_write_at(); }
  uint64_t reserve(uint64_t length) override { return inner_.reserve(length); }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    if (offset + data.size() > limit_) {
      throw Error(ErrorKind::kIo, "write failed: injected fault after " + std::to_string(limit_) + " bytes");
    }
    inner_.write_at(offset, data);
  }

 private:
  ByteSink& inner_;
  uint64_t limit_;
};

// A sink that cuts another file (the input) to 4 KiB once more than `after`
// bytes are written, or when a copy from a file begins.
class InputCuttingSink final : public ByteSink {
 public:
  InputCuttingSink(ByteSink& inner, std::filesystem::path input, uint64_t after)
      : inner_(inner), input_(std::move(input)), after_(after) {}
  void write(std::span<const std::byte> data) override {
    inner_.write(data);
    if (inner_.position() > after_) cut();
  }
  uint64_t position() const override { return inner_.position(); }
  void flush() override { inner_.flush(); }
  bool can_copy_from() const override { return inner_.can_copy_from(); }
  bool copy_from(int fd, uint64_t offset, uint64_t length) override {
    cut();
    return inner_.copy_from(fd, offset, length);
  }
  void expect(uint64_t length) override { inner_.expect(length); }
  bool can_write_at() const override { return inner_.can_write_at(); }
  uint64_t reserve(uint64_t length) override { return inner_.reserve(length); }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    inner_.write_at(offset, data);
    if (offset + data.size() > after_) cut();
  }

 private:
  void cut() {
    if (cut_.exchange(true)) return;  // write_at() may come from two threads
    std::error_code ec;
    std::filesystem::resize_file(input_, 4096, ec);
    if (ec) throw Error(ErrorKind::kInvalidArgument, "input-shrinks-after: cannot cut " + input_.string());
  }
  ByteSink& inner_;
  std::filesystem::path input_;
  uint64_t after_;
  std::atomic<bool> cut_ = false;
};

// A sink that asks every write to stop (interrupt.h), as a stop signal
// does, once more than `after` bytes are written.
class InterruptingSink final : public ByteSink {
 public:
  InterruptingSink(ByteSink& inner, uint64_t after) : inner_(inner), after_(after) {}
  void write(std::span<const std::byte> data) override {
    if (inner_.position() + data.size() > after_) interrupt_writes();
    inner_.write(data);
  }
  uint64_t position() const override { return inner_.position(); }
  void flush() override { inner_.flush(); }
  void expect(uint64_t length) override { inner_.expect(length); }
  bool can_write_at() const override { return inner_.can_write_at(); }
  uint64_t reserve(uint64_t length) override { return inner_.reserve(length); }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    if (offset + data.size() > after_) interrupt_writes();
    inner_.write_at(offset, data);
  }

 private:
  ByteSink& inner_;
  uint64_t after_;
};

// N from "N" or "N:rest" after `prefix` in `fault` (`rest` set to what follows the colon).
uint64_t fault_count(const std::string& fault, size_t prefix, std::string* rest = nullptr) {
  const std::string text = fault.substr(prefix);
  const size_t colon = rest != nullptr ? text.find(':') : std::string::npos;
  if (rest != nullptr && (colon == std::string::npos || colon + 1 == text.size())) {
    throw Error(ErrorKind::kInvalidArgument, "fault '" + fault + "': expected a byte count, a colon and a path");
  }
  try {
    size_t used = 0;
    const uint64_t n = std::stoull(text.substr(0, colon), &used);
    if (used != text.substr(0, colon).size()) throw std::invalid_argument("trailing characters");
    if (rest != nullptr) *rest = text.substr(colon + 1);
    return n;
  } catch (const std::exception&) {
    throw Error(ErrorKind::kInvalidArgument, "fault '" + fault + "': expected a byte count after the colon");
  }
}

void corrupt_first_storage(const std::filesystem::path& file, const SaveResult& result) {
  for (const SaveResult::Record& r : result.records) {
    if (r.name.find("/data/") == std::string::npos || r.size == 0) continue;
    std::FILE* f = std::fopen(file.c_str(), "r+b");
    if (f == nullptr) return;
    const long at = static_cast<long>(r.data_offset + r.size / 2);
    std::fseek(f, at, SEEK_SET);
    const int c = std::fgetc(f);
    std::fseek(f, at, SEEK_SET);
    std::fputc(c ^ 0x01, f);
    std::fclose(f);
    return;
  }
}

// Flips a byte in the middle of the first tensor of a safetensors file
// (once), after it is written and before it is read back.
void corrupt_first_tensor(const std::filesystem::path& file, uint64_t offset, uint64_t size, bool& done) {
  if (done || size == 0) return;
  done = true;
  std::FILE* f = std::fopen(file.c_str(), "r+b");
  if (f == nullptr) return;
  const long at = static_cast<long>(offset + size / 2);
  std::fseek(f, at, SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, at, SEEK_SET);
  std::fputc(c ^ 0x01, f);
  std::fclose(f);
}

}  // namespace

SaveSeams fault_seams(const std::string& fault) {
  SaveSeams seams;
  const std::string after = "write-fails-after:";
  const std::string shrinks = "input-shrinks-after:";
  const std::string interrupted = "interrupted-after:";
  if (fault.compare(0, after.size(), after) == 0) {
    const uint64_t limit = fault_count(fault, after.size());
    seams.wrap_sink = [limit](ByteSink& file) { return std::make_unique<FailingSink>(file, limit); };
  } else if (fault.compare(0, shrinks.size(), shrinks) == 0) {
    std::string input;
    const uint64_t limit = fault_count(fault, shrinks.size(), &input);
    seams.wrap_sink = [limit, input](ByteSink& file) { return std::make_unique<InputCuttingSink>(file, input, limit); };
  } else if (fault.compare(0, interrupted.size(), interrupted) == 0) {
    const uint64_t limit = fault_count(fault, interrupted.size());
    seams.wrap_sink = [limit](ByteSink& file) { return std::make_unique<InterruptingSink>(file, limit); };
  } else if (fault == "corrupt-before-verify") {
    seams.before_verify = corrupt_first_storage;
    auto done = std::make_shared<bool>(false);
    seams.after_tensor = [done](const std::filesystem::path& file, uint64_t offset, uint64_t size) {
      corrupt_first_tensor(file, offset, size, *done);
    };
  } else if (fault == "corrupt-on-device") {
    seams.corrupt_on_device = true;
  } else {
    throw Error(ErrorKind::kInvalidArgument, "fault '" + fault + "' is not a known fault");
  }
  return seams;
}

}  // namespace ckptfix
