#include "write/fault_injection.h"

#include <cstdio>
#include <memory>

#include "ckptfix/error.h"

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

 private:
  ByteSink& inner_;
  uint64_t limit_;
};

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
  if (fault.compare(0, after.size(), after) == 0) {
    uint64_t limit = 0;
    try {
      limit = std::stoull(fault.substr(after.size()));
    } catch (const std::exception&) {
      throw Error(ErrorKind::kInvalidArgument, "fault '" + fault + "': expected a byte count after the colon");
    }
    seams.wrap_sink = [limit](ByteSink& file) { return std::make_unique<FailingSink>(file, limit); };
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
