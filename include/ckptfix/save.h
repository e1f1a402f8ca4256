// Writing a checkpoint as a torch zip file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Options for writing.
struct SaveOptions {
  /// Root folder inside the zip. Empty: keep the input's (zip inputs), or
  /// "archive" (legacy inputs), the name torch uses when saving to a buffer.
  std::string archive_root;
  /// Replace an existing output file.
  bool overwrite = false;
  /// fsync the new file before the rename and its directory after, for
  /// durability across power loss (the rename is atomic either way).
  bool sync = false;
  /// Called as tensor bytes are written ("writing") and, through
  /// verify_options, read back ("verifying"): (phase, bytes done, bytes total).
  ProgressCallback progress;
  /// Write the pickle as LibTorch's unpickler needs it (8-byte LONG1s); use
  /// with PassOptions::for_libtorch.
  bool libtorch_pickle = false;
  /// Verify the finished temporary file before it replaces anything
  /// (see verify.h). Off only on request.
  bool verify = true;
  VerifyOptions verify_options;  ///< what verification does (GPU load test, limits)
};

/// One storage as written: where it went and what it holds.
struct WrittenStorage {
  size_t storage = 0;       ///< index into Checkpoint::storages()
  std::string key;          ///< its key in the output ("0", "1", ...)
  std::string record;       ///< "<root>/data/<key>"
  uint64_t nbytes = 0;
  uint32_t crc32 = 0;
  uint64_t hash = 0;        ///< XXH3-64 of the written bytes (when has_hash)
  bool has_hash = true;     ///< false for bytes copied unchanged, checked by CRC-32 against the input's
  uint64_t overflowed = 0;  ///< cast: finite values that became ±inf
  uint64_t flushed = 0;     ///< cast: non-zero values that became ±0
};

/// What a write produced.
struct SaveResult {
  uint64_t bytes = 0;  ///< size of the output file
  std::string archive_root;  ///< the root folder written
  std::vector<WrittenStorage> storages;  ///< in output order
  /// Every record written, in order, with offsets (for verification).
  struct Record {
    std::string name;  ///< the record name
    uint64_t data_offset = 0;
    uint64_t size = 0;
    uint32_t crc32 = 0;
    uint64_t hash = 0;  ///< XXH3-64 of the bytes meant to be written (when has_hash)
    bool has_hash = true;  ///< false: copied unchanged, checked by CRC-32 only
    bool read_back = false;  ///< its bytes were already read back and checked while writing
  };
  std::vector<Record> records;  ///< every record written, in order
  /// What verification checked (empty when it was turned off).
  std::optional<VerifyReport> verification;
  /// The GPU load test done while reading records back during the write.
  GpuReport readback_gpu;
};

/// Writes `checkpoint` (with any edits the passes made) to `path` atomically:
/// a temporary file beside it, verified (unless options.verify is false),
/// then renamed into place. On any failure the temporary file is removed and
/// nothing else is touched. Tensor bytes are streamed from the input file;
/// memory does not grow with the checkpoint's size. Also refuses an input
/// whose storage records do not match their recorded CRC-32.
SaveResult save(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options = {});

}  // namespace ckptfix
