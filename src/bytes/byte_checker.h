// Reading bytes once and proving them: CRC-32 and XXH3 of every chunk and,
// when a CUDA device is usable and wanted, the same chunk copied through GPU
// memory and hashed again. ReadBack is the check of a written file's bytes,
// the same whether the writer runs it on a record as soon as it is complete
// or verify_written() on the records left at the end.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckptfix/error.h"
#include "ckptfix/verify.h"
#include "bytes/gpu.h"

namespace ckptfix {

struct Digest {
  uint32_t crc = 0;
  uint64_t hash = 0;      ///< XXH3-64
  uint64_t gpu_hash = 0;  ///< XXH3-64 of the bytes back from the GPU (when it ran)
  bool through_gpu = false;  ///< the bytes went through the GPU round trip
};

/// Throws Error(`kind`) at `where` when the bytes that came back from the
/// GPU differ from the bytes sent.
void expect_gpu_bytes(const Digest& digest, ErrorKind kind, const std::string& where);

/// "0x1234abcd", "0x0123456789abcdef".
std::string hex32(uint32_t v);
std::string hex64(uint64_t v);

class ByteChecker {
 public:
  static constexpr size_t kChunk = size_t{4} << 20;

  /// Sets up the GPU round trip for `mode` and records in `gpu` whether it
  /// runs or why not (plan_gpu); throws Error(kGpu) when required but impossible.
  ByteChecker(GpuMode mode, GpuReport& gpu, ProgressCallback progress = {}, uint64_t total = 0);
  ~ByteChecker();

  bool gpu_enabled() const { return gpu_ != nullptr; }

  /// Digests `size` bytes obtained from `read(buffer)` (which fills the whole
  /// buffer it is given), sending them through the GPU when `through_gpu`.
  Digest digest(uint64_t size, const std::function<void(std::span<std::byte>)>& read, bool through_gpu);

  /// The same for bytes that are already in memory (e.g. a mapped window):
  /// begin(), update() with consecutive views, finish(). Without `hash`,
  /// only the CRC-32 is computed (plus XXH3 when the GPU round trip runs).
  void begin(bool through_gpu, bool hash = true);
  void update(std::span<const std::byte> bytes);
  Digest finish();

 private:
  struct Running;
  std::unique_ptr<Running> running_;
  GpuReport& gpu_report_;
  std::unique_ptr<GpuRoundTrip> gpu_;
  std::vector<std::byte> buffer_;
  std::vector<std::byte> returned_;
  ProgressCallback progress_;
  uint64_t total_;
  uint64_t done_ = 0;
};

/// Reads records of a file that is still being written back through a
/// file descriptor of its own (so through the page cache, not the writer's
/// buffers) and checks them against what was written.
class ReadBack {
 public:
  ReadBack(const std::string& path, GpuMode gpu, ProgressCallback progress = {}, uint64_t total = 0);
  ~ReadBack();
  ReadBack(const ReadBack&) = delete;
  ReadBack& operator=(const ReadBack&) = delete;

  /// Throws Error(kVerification) naming `record` when the bytes at
  /// [offset, offset + size) do not have `crc` (when given: zip records) and
  /// `hash` (when given), or when, sent `through_gpu`, they come back
  /// different.
  void check(const std::string& record, uint64_t offset, uint64_t size, std::optional<uint32_t> crc,
             std::optional<uint64_t> hash, bool through_gpu = true);

  uint64_t bytes() const { return bytes_; }
  const GpuReport& gpu() const { return gpu_; }

 private:
  static constexpr uint64_t kMapped = uint64_t{1} << 20;
  void read_exactly(std::span<std::byte> out, uint64_t offset, const std::string& record) const;

  std::string path_;
  int fd_ = -1;
  GpuReport gpu_;
  ByteChecker checker_;
  uint64_t bytes_ = 0;
};

}  // namespace ckptfix
