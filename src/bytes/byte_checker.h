// Reading bytes once and proving them: CRC-32 and XXH3 of every chunk and,
// when a CUDA device is usable and wanted, every storage loaded on the
// device and checked there (the GPU load test, load_test.h). ReadBack is
// the check of a written file's bytes, the same whether the writer runs it
// on a record as soon as it is complete (or on each part of one that two
// threads write, as soon as the part is) or verify_written() on the records
// left at the end.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckptfix/error.h"
#include "ckptfix/verify.h"
#include "ckptfix/dtype.h"
#include "bytes/gpu.h"
#include "bytes/load_test.h"
#include "io/read_window.h"

namespace ckptfix {

/// The sum a run of bytes is checked by. XXH3 where the writer took one of
/// the bytes it wrote: equal XXH3-64s prove the bytes, and with them the
/// CRC-32 it took of the same bytes for the archive, so a second sum would
/// only cost time. CRC-32 where nothing else is known: copies judged by the
/// CRC their input records, a file's own check (ckptfix verify).
/// kNone: bytes only loaded on the device, their XXH3 checked elsewhere
/// (part by part, by the threads that wrote them).
enum class Sum { kCrc32, kXxh3, kNone };

/// The sum computed (the other is 0).
struct Digest {
  uint32_t crc = 0;
  uint64_t hash = 0;  ///< XXH3-64
};

/// A storage's bytes loaded on the device too: how the device reads its
/// elements, and what a difference found there is reported as.
struct OnDevice {
  DType dtype = DType::kUntyped;
  ErrorKind kind = ErrorKind::kVerification;
  std::string where;  ///< the record or tensor a difference names
};

/// "0x1234abcd", "0x0123456789abcdef".
std::string hex32(uint32_t v);
std::string hex64(uint64_t v);

class ByteChecker {
 public:
  /// Bytes read per call: small enough to stay in a core's L2 cache while
  /// they are summed (4 MiB cost a read-back 2 % more).
  static constexpr size_t kChunk = size_t{512} << 10;

  /// Sets up the GPU load test for `mode` and records in `gpu` whether it
  /// runs or why not (plan_gpu); throws Error(kGpu) when required but
  /// impossible. `inject_gpu_fault`: the test-only fault (load_test.h).
  ByteChecker(GpuMode mode, GpuReport& gpu, ProgressCallback progress = {}, uint64_t total = 0,
              bool inject_gpu_fault = false);
  /// With the load test on `device` (tests: host_load_test), reported as `name`.
  ByteChecker(std::unique_ptr<LoadTestDevice> device, const std::string& name, GpuReport& gpu);
  ~ByteChecker();

  bool gpu_enabled() const { return load_test_ != nullptr; }

  /// Computes `sum` of `size` bytes obtained from `read(buffer)` (which fills
  /// the whole buffer it is given), loading them on the device too when
  /// `device` is given and the load test runs.
  Digest digest(uint64_t size, const std::function<void(std::span<std::byte>)>& read,
                const std::optional<OnDevice>& device, Sum sum);

  /// The same for bytes that are already in memory (e.g. a mapped window):
  /// begin(), update() with consecutive views, finish().
  void begin(const std::optional<OnDevice>& device, Sum sum = Sum::kCrc32);
  void update(std::span<const std::byte> bytes);
  Digest finish();

  /// Waits for the device and compares every storage still outstanding;
  /// completes the GpuReport. The device's results are compared as they come
  /// back, so a difference may also be thrown by update() or finish(): an
  /// Error of the storage's OnDevice::kind, at its `where`.
  void finish_device();

 private:
  struct Running;
  struct Expected;
  void sum_piece(std::span<const std::byte> piece);  // into the running sum, and the device's reference
  void updated(uint64_t bytes);                // compares what came back, reports progress
  void compare(bool wait);

  std::unique_ptr<Running> running_;  // reused from record to record
  bool running_active_ = false;       // between begin() and finish()
  GpuReport& gpu_report_;
  std::unique_ptr<LoadTest> load_test_;
  std::deque<Expected> expected_;
  std::vector<std::byte> buffer_;
  ProgressCallback progress_;
  uint64_t total_;
  uint64_t done_ = 0;
  double read_seconds_ = 0;      // reads straight into the staging slots (GpuReport::Phases::host_copy)
  double checksum_seconds_ = 0;  // the CPU's reference checksum (GpuReport::Phases::checksum)
};

/// Reads records of a file that is still being written back through a
/// file descriptor of its own (so through the page cache, not the writer's
/// buffers) and checks them against what was written.
class ReadBack {
 public:
  ReadBack(const std::string& path, GpuMode gpu, ProgressCallback progress = {}, uint64_t total = 0,
           bool inject_gpu_fault = false);
  /// With the load test on `device` (tests: host_load_test), reported as `name`.
  ReadBack(const std::string& path, std::unique_ptr<LoadTestDevice> device, const std::string& name);
  ~ReadBack();
  ReadBack(const ReadBack&) = delete;
  ReadBack& operator=(const ReadBack&) = delete;

  /// Throws Error(kVerification) naming `record` when the bytes at
  /// [offset, offset + size) do not have `hash` (when given) or else `crc`
  /// (when given: a zip record whose bytes were not hashed; see Sum), or when,
  /// loaded on the device as elements of `device_dtype` (when given), the
  /// device reads them differently.
  void check(const std::string& record, uint64_t offset, uint64_t size, std::optional<uint32_t> crc,
             std::optional<uint64_t> hash, std::optional<DType> device_dtype);

  /// For a record that several threads write in parts: reads the part at
  /// [offset, offset + buffer.size()) into `buffer` and throws
  /// Error(kVerification) naming `record` and the part's place in it
  /// (`offset` - `record_offset`) when its XXH3-64 is not `hash`. Any thread
  /// may call it, several at once. It has no load test: a record the device
  /// must read is given to load_on_device() too, in order.
  void check_part(const std::string& record, uint64_t record_offset, uint64_t offset, std::span<std::byte> buffer,
                  uint64_t hash) const;
  /// Reads the bytes at [offset, offset + buffer.size()) of `record` into
  /// `buffer` (an error names the record). Any thread, several at once.
  void read_part(const std::string& record, uint64_t offset, std::span<std::byte> buffer) const {
    read_exactly(buffer, offset, record);
  }
  /// Throws check()'s Error(kVerification) for a record whose bytes read
  /// back have CRC-32 `read` where `written` was written.
  static void check_crc(const std::string& record, uint32_t read, uint32_t written);
  /// Counts a record that check_part read back whole.
  void add_checked(uint64_t size) { bytes_ += size; }
  /// The device half of check() alone, for a record whose every part
  /// check_part proved: its bytes loaded on the device as elements of
  /// `device_dtype` and compared there (nothing without the load test).
  /// One thread at a time, in the order of the records, like check().
  void load_on_device(const std::string& record, uint64_t offset, uint64_t size, DType device_dtype);

  /// The file is complete (written and flushed): check() may read small
  /// records in windows that reach past them (io/read_window.h). Not for a
  /// file still being written, whose bytes past a record may not be there.
  void file_is_complete() { windows_ = true; }

  /// The load test's last results compared (ByteChecker::finish_device).
  void finish_device() { checker_.finish_device(); }
  /// Counts time the writer spent waiting for this read-back (GpuReport::Phases::writer_waited).
  void writer_waited(double seconds) { gpu_.phases.writer_waited += seconds; }

  uint64_t bytes() const { return bytes_; }
  /// Whether check() loads storages on a device too (the GPU load test).
  bool loads_on_device() const { return checker_.gpu_enabled(); }
  const GpuReport& gpu() const { return gpu_; }

 private:
  void read_exactly(std::span<std::byte> out, uint64_t offset, const std::string& record) const;

  std::string path_;
  int fd_ = -1;
  GpuReport gpu_;
  ByteChecker checker_;
  std::atomic<uint64_t> bytes_{0};  // added to by the worker's check() and this thread's add_checked()
  std::atomic<uint64_t> seen_size_{0};  // the file's size when check() last asked
  bool windows_ = false;  // file_is_complete()
  ReadWindow window_;     // check()'s, one thread at a time
};

}  // namespace ckptfix
