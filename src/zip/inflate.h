// Streaming inflate of one raw-deflate zip record, held in memory or read
// from the file a buffer at a time. Used for checkpoints re-zipped with
// compression: torch never compresses, but plain torch.load reads such
// files, so do we.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace ckptfix {

class InputFile;

class Inflater {
 public:
  explicit Inflater(std::span<const std::byte> compressed);
  /// The record's compressed bytes [offset, offset+length) of `file`, read
  /// 1 MiB at a time as inflating needs them (memory stays flat however
  /// large the record). `file` must outlive the Inflater.
  Inflater(const InputFile& file, uint64_t offset, uint64_t length, std::string what);
  ~Inflater();
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;

  /// Fills `out` with the next inflated bytes; returns how many (fewer only
  /// at the end of the stream). Throws Error(kCorrupt) on bad data.
  uint64_t read(std::span<std::byte> out);
  /// True once the deflate stream's end marker was reached.
  bool done() const { return done_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  bool done_ = false;
};

}  // namespace ckptfix
