// Streams the bytes a latin-1 str stands for, out of its UTF-8 text in a
// file: how pickle protocol 2 holds bytes (_codecs.encode(str, 'latin1')),
// and so how torch.save's default protocol holds a numpy array's bytes.
// Code points 0..127 are one UTF-8 byte, 128..255 are 0xC2 or 0xC3 and a
// continuation byte; anything else is not a byte and is refused.
//
// The text is read with pread through a small buffer, never mapped, so
// decoding a gigabyte leaves no gigabyte resident.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/input_file.h"

namespace ckptfix {

class Latin1TextReader {
 public:
  /// The text is the `length` bytes at `offset` of `file`; `what` names
  /// them in read errors.
  Latin1TextReader(const InputFile& file, uint64_t offset, uint64_t length, std::string what);

  /// Fills `out` with the next decoded bytes; returns how many (fewer only
  /// when the text ends). Throws Error(kCorrupt), naming the position in the
  /// text, at a code point above 255 or a broken UTF-8 sequence (the caller
  /// adds file and record).
  uint64_t read(std::span<std::byte> out);
  /// True once every byte of the text has been decoded.
  bool done() const { return at_ == end_ && taken_ == length_; }

 private:
  bool refill();  // keeps the bytes not yet decoded; false when no more text came
  size_t decode_carefully(std::span<std::byte> out, size_t n, size_t stop);
  [[noreturn]] void fail(const char* what, unsigned byte) const;

  const InputFile& file_;
  uint64_t offset_;
  uint64_t length_;
  std::string what_;
  uint64_t taken_ = 0;  // bytes of text moved into the buffer so far
  std::vector<unsigned char> buffer_;
  size_t at_ = 0;   // next byte to decode in buffer_
  size_t end_ = 0;  // end of the bytes in buffer_
};

}  // namespace ckptfix
