#include "io/latin1_text_reader.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ckptfix/error.h"

namespace ckptfix {
namespace {

constexpr size_t kBuffer = size_t{256} << 10;
constexpr size_t kBlock = 4096;  // bytes out per fast block

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

// Byte by byte, up to `stop` bytes out: names the first thing that is wrong.
size_t Latin1TextReader::decode_carefully(std::span<std::byte> out, size_t n, size_t stop) {
  while (n < stop) {
    if (at_ == end_ && !refill()) break;
    const unsigned lead = buffer_[at_];
    if (lead < 0x80) {
      out[n++] = std::byte{static_cast<unsigned char>(lead)};
      ++at_;
      continue;
    }
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

uint64_t Latin1TextReader::read(std::span<std::byte> out) {
  size_t n = 0;
  while (n < out.size()) {
    if (end_ - at_ < 2) refill();
    if (at_ == end_) break;
    // A block decoded without a branch on the data (half of an array's bytes
    // are >= 0x80, at random), byte by byte through the text so that no load
    // waits for the one before: a lead byte emits nothing, a continuation
    // byte emits itself, plus 0x40 after 0xC3. Then checked in one pass the
    // compiler vectorizes.
    const size_t block_at = at_, block_n = n;
    const size_t stop = std::min(out.size(), n + kBlock);
    const unsigned char* text = buffer_.data();
    auto* bytes = reinterpret_cast<unsigned char*>(out.data());
    size_t at = at_;
    unsigned after_c3 = 0;
    while (n < stop && at < end_) {
      const unsigned c = text[at++];
      bytes[n] = static_cast<unsigned char>(c | (after_c3 << 6));
      n += (c & 0xFE) != 0xC2;
      after_c3 = c == 0xC3;
    }
    if (at > block_at && (text[at - 1] & 0xFE) == 0xC2) --at;  // its continuation is beyond: it starts the next block
    // Every byte is ASCII, a lead 0xC2/0xC3, or a continuation right after a lead.
    unsigned bad = (text[block_at] & 0xC0) == 0x80;
    for (size_t i = block_at; i < at; ++i) {
      const unsigned c = text[i];
      bad |= static_cast<unsigned>(c >= 0xC0 && (c & 0xFE) != 0xC2);
    }
    for (size_t i = block_at + 1; i < at; ++i) {
      const unsigned lead_before = (text[i - 1] & 0xFE) == 0xC2, continuation = (text[i] & 0xC0) == 0x80;
      bad |= lead_before ^ continuation;
    }
    at_ = at;
    if (bad == 0 && at_ > block_at) continue;
    // A fault, or a lead at the end of the buffer: again, carefully.
    at_ = block_at;
    n = decode_carefully(out, block_n, stop);
  }
  return n;
}

}  // namespace ckptfix
