// Test seams of save(): what a test may put between the writer and the file.
// Internal: the unit tests and the test-only CLI ckptfix_fault_injection
// (docs/testing.md) use them; save() itself is save_with_seams with none.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "ckptfix/safetensors.h"
#include "ckptfix/save.h"
#include "io/byte_sink.h"

namespace ckptfix {

struct SaveSeams {
  /// Wraps the temporary file's sink (e.g. in one that fails part-way; each
  /// file's, for a safetensors shard set).
  std::function<std::unique_ptr<ByteSink>(ByteSink& file)> wrap_sink;
  /// Runs on the finished temporary file before verification (e.g. to damage
  /// it). With this hook, no record is read back while writing, so the final
  /// verification sees what the hook did.
  std::function<void(const std::filesystem::path& temp, const SaveResult& result)> before_verify;
  /// safetensors: runs on the temporary file after each tensor is written,
  /// before it is read back ([offset, offset + size) are its bytes).
  std::function<void(const std::filesystem::path& temp, uint64_t offset, uint64_t size)> after_tensor;
  /// The GPU load test changes one byte in device memory after each upload
  /// (load_test.h): verification must fail naming a tensor.
  bool corrupt_on_device = false;
};

SaveResult save_with_seams(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options,
                           const SaveSeams& seams);

SafetensorsResult save_safetensors_with_seams(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                              const SafetensorsOptions& options, const SaveSeams& seams);

}  // namespace ckptfix
