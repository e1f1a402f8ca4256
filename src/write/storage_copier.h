// Moves one storage's bytes from the input to the writer in fixed-size
// chunks, converting element types on the way when the cast pass asked for
// it, and hashing what it emits (the expected hash the verifier checks).
// Memory use is the two chunk buffers, whatever the storage's size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "model/checkpoint_impl.h"
#include "dtype_kernels/convert.h"
#include "io/input_file.h"

namespace ckptfix {

class StorageCopier {
 public:
  static constexpr size_t kChunkBytes = size_t{4} << 20;

  explicit StorageCopier(std::shared_ptr<const InputFile> input);

  struct Copied {
    uint64_t hash = 0;    ///< XXH3-64 of the bytes emitted
    ConvertStats stats;   ///< what a conversion did (zeros when none)
    uint32_t source_crc32 = 0;  ///< CRC-32 of the input bytes, when they were transformed
  };
  /// Streams the output bytes of `storage` to `emit`.
  Copied copy(const Storage& storage, const std::function<void(std::span<const std::byte>)>& emit);

 private:
  std::shared_ptr<const InputFile> input_;
  std::vector<std::byte> in_;
  std::vector<std::byte> out_;
};

}  // namespace ckptfix
