#include "io/latin1_text_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ckptfix/error.h"

namespace ckptfix {
namespace {

constexpr size_t kBuffer = size_t{256} << 10;

}  // namespace

Latin1TextReader::Latin1TextReader(const InputFile& file, uint64_t offset, uint64_t length, std::string what)
    : file_(file), offset_(offset), length_(length), what_(std::move(what)) {}

bool Latin1TextReader::refill() {
  if (taken_ == length_) return false;
  if (buffer_.empty()) buffer_.resize(kBuffer);
  const size_t kept = end_ - at_;
  std::memmove(buffer_.data(), buffer_.data() + at_, kept);
  const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer_.size() - kept, length_ - taken_));
  file_.read(offset_ + taken_, std::as_writable_bytes(std::span(buffer_).subspan(kept, n)), what_);
  taken_ += n;
  at_ = 0;
  end_ = kept + n;
  return true;
}

void Latin1TextReader::fail(const char* what, unsigned byte) const {
  const uint64_t position = taken_ - (end_ - at_);  // of the offending byte, in the text
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", byte);
  throw Error(ErrorKind::kCorrupt, std::string("the latin-1 text of these bytes is damaged: byte ") + hex +
                                       " at text offset " + hex_offset(position) + " " + what);
}

uint64_t Latin1TextReader::read(std::span<std::byte> out) {
  size_t n = 0;
  while (n < out.size()) {
    if (at_ == end_ && !refill()) break;
    // ASCII runs, the common case, without the checks below.
    while (n < out.size() && at_ < end_ && buffer_[at_] < 0x80) out[n++] = std::byte{buffer_[at_++]};
    if (n == out.size() || at_ == end_) continue;
    const unsigned lead = buffer_[at_];
    if (lead >= 0xC4 && lead <= 0xF4) fail("starts a code point above 255, which is not a byte", lead);
    if (lead != 0xC2 && lead != 0xC3) fail("is not UTF-8 here", lead);
    if (at_ + 1 == end_ && !refill()) fail("starts a UTF-8 sequence that the text ends in", lead);
    const unsigned next = buffer_[at_ + 1];
    if ((next & 0xC0) != 0x80) {
      ++at_;
      fail("should continue a UTF-8 sequence", next);
    }
    out[n++] = std::byte{static_cast<unsigned char>(((lead & 0x03) << 6) | (next & 0x3F))};
    at_ += 2;
  }
  return n;
}

}  // namespace ckptfix
