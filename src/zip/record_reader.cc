#include "zip/record_reader.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ckptfix/error.h"

namespace ckptfix {

RecordReader::RecordReader(const InputFile& file, uint64_t offset, uint64_t length, RecordEncoding encoding,
                           uint64_t size, std::string what)
    : file_(file), offset_(offset), size_(size), what_(std::move(what)) {
  if (encoding == RecordEncoding::kDeflated) inflater_ = std::make_unique<Inflater>(file, offset, length, what_);
  if (encoding == RecordEncoding::kLatin1Text) latin1_ = std::make_unique<Latin1TextReader>(file, offset, length, what_);
}

RecordReader::RecordReader(const InputFile& file, std::span<const std::byte> memory, std::string what)
    : file_(file), offset_(0), size_(memory.size()), what_(std::move(what)), memory_(memory.data()) {}

RecordReader::RecordReader(const InputFile& file, std::shared_ptr<const GatherPlan> plan, std::string what)
    : file_(file), offset_(0), size_(0), what_(std::move(what)), gather_(std::make_unique<GatherReader>(std::move(plan))) {
  size_ = gather_->remaining();
}

uint64_t RecordReader::read(std::span<std::byte> out) {
  const uint64_t n = std::min<uint64_t>(out.size(), remaining());
  if (n == 0) return 0;
  auto dst = out.first(n);
  if (memory_ != nullptr) {
    std::memcpy(dst.data(), memory_ + position_, n);
    position_ += n;
    return n;
  }
  if (gather_) {  // its errors name the chunk's file
    if (gather_->read(dst) != n) throw Error(ErrorKind::kInternal, "an assembled tensor ended early").at(what_);
    position_ += n;
    return n;
  }
  try {
    if (inflater_) {
      if (inflater_->read(dst) != n) {
        throw Error(ErrorKind::kCorrupt, "deflated data is shorter than the record's " + std::to_string(size_) + " bytes");
      }
    } else if (latin1_) {
      if (latin1_->read(dst) != n) {
        throw Error(ErrorKind::kCorrupt, "the latin-1 text gives fewer than the " + std::to_string(size_) +
                                             " bytes it should hold");
      }
      if (position_ + n == size_ && !latin1_->done()) {
        throw Error(ErrorKind::kCorrupt, "the latin-1 text gives more than the " + std::to_string(size_) +
                                             " bytes it should hold");
      }
    } else {
      file_.read(offset_ + position_, dst, what_);
    }
  } catch (Error& e) {
    e.in_file(file_.name()).at(what_);
    throw;
  }
  position_ += n;
  return n;
}

}  // namespace ckptfix

namespace ckptfix {

void RecordReader::skip(uint64_t n) {
  n = std::min(n, remaining());
  if (!inflater_ && !latin1_ && !gather_) {
    position_ += n;
    return;
  }
  std::vector<std::byte> scratch(std::min<uint64_t>(n, 1 << 20));
  while (n > 0) {
    const uint64_t got = read(std::span(scratch).first(std::min<uint64_t>(n, scratch.size())));
    if (got == 0) break;
    n -= got;
  }
}

}  // namespace ckptfix
