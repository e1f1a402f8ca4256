// Streaming inflate of one raw-deflate zip record held in memory (a view
// of the mapped input). Used for checkpoints re-zipped with compression:
// torch never compresses, but plain torch.load reads such files, so do we.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ckptfix {

class Inflater {
 public:
  explicit Inflater(std::span<const std::byte> compressed);
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
