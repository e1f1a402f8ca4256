// Streams the uncompressed bytes of one zip record (or of any stored byte
// range) front to back: pread for stored data, zlib for deflated data, a
// latin-1 decoder for a pickle's latin-1 text (io/latin1_text_reader.h),
// and for a tensor assembled from the chunks of a distributed checkpoint,
// the chunks' records in the order of the tensor's elements (gather_reader.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "io/input_file.h"
#include "io/latin1_text_reader.h"
#include "zip/gather_reader.h"
#include "zip/inflate.h"

namespace ckptfix {

/// How a byte range of the file holds a record's bytes.
enum class RecordEncoding {
  kStored,      ///< as they are
  kDeflated,    ///< raw deflate
  kLatin1Text,  ///< UTF-8 text of code points 0..255, one per byte
};

class RecordReader {
 public:
  /// `offset`/`length`: the (encoded) bytes in the file; `size`: the
  /// decoded size, which the encoded bytes must give exactly; `what`: the
  /// record name for messages.
  RecordReader(const InputFile& file, uint64_t offset, uint64_t length, RecordEncoding encoding, uint64_t size,
               std::string what);
  /// Bytes already in memory (kept alive by the caller).
  RecordReader(const InputFile& file, std::span<const std::byte> memory, std::string what);
  /// A tensor assembled from chunks.
  RecordReader(const InputFile& file, std::shared_ptr<const GatherPlan> plan, std::string what);

  /// Fills `out` with the next bytes; returns how many (fewer only at the end).
  uint64_t read(std::span<std::byte> out);
  /// Skips n bytes (a seek for stored data, else read and dropped).
  void skip(uint64_t n);
  uint64_t remaining() const { return size_ - position_; }

 private:
  const InputFile& file_;
  uint64_t offset_;
  uint64_t size_;
  uint64_t position_ = 0;
  std::string what_;
  std::unique_ptr<Inflater> inflater_;
  std::unique_ptr<Latin1TextReader> latin1_;
  std::unique_ptr<GatherReader> gather_;
  const std::byte* memory_ = nullptr;
};

}  // namespace ckptfix
