// Verification: proving a checkpoint file holds what it should.
//
//  * save() (save.h) verifies every file it writes, on the finished
//    temporary file, before it may replace anything: the archive is re-read
//    (records, offsets, 64-byte alignment, CRC-32s), the pickle is re-parsed
//    and its tensors compared with what the passes intended (keys, dtypes,
//    shapes, strides, offsets, devices, sharing), and every storage's bytes
//    are hashed (XXH3-64) and compared with the hash of the bytes the writer
//    meant to write (the source bytes, converted where a cast asked for it).
//    Its report is SaveResult::verification.
//  * verify_file() checks a checkpoint on its own: structure, every record's
//    CRC-32, a safe parse of the pickle, every tensor view inside its
//    storage, every storage record of the right size (for safetensors files:
//    every rule of the header, and every tensor's bytes read).
//  * save_safetensors() (safetensors.h) verifies its output the same way:
//    the header re-read and compared, every tensor's bytes hashed.
// Both can add the GPU load test: every storage uploaded to GPU memory and
// read there, as elements of its dtype, by a kernel whose checksum of its
// bytes must equal the one the CPU computed from the bytes meant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// Whether to run the GPU load test.
enum class GpuMode {
  kAuto,     ///< when a CUDA device is usable; otherwise report why it was skipped
  kRequire,  ///< fail (Error kGpu) when no CUDA device is usable
  kOff,      ///< never
};

/// Parses "auto", "require" or "off"; throws Error(kInvalidArgument).
GpuMode parse_gpu_mode(const std::string& text);

/// Progress of long work: (phase, bytes done, bytes total).
using ProgressCallback = std::function<void(std::string_view phase, uint64_t done, uint64_t total)>;

/// How to verify.
struct VerifyOptions {
  GpuMode gpu = GpuMode::kAuto;  ///< whether to run the GPU load test
  ProgressCallback progress;  ///< phase "verifying"
  /// How verify_file opens the file (its limits). save() re-opens a written
  /// file with the limits the intended checkpoint was opened with.
  OpenOptions open;
};

/// What the GPU load test did: every storage's bytes uploaded to the device
/// and read there as elements of its dtype by a kernel whose checksum of
/// them must equal the CPU's (and which counts NaN and Inf as it goes).
struct GpuReport {
  /// Whether the load test ran.
  enum class Status {
    kOk,       ///< it ran
    kSkipped,  ///< GpuMode::kAuto and no usable device (see reason)
    kOff,      ///< GpuMode::kOff
  };
  Status status = Status::kOff;  ///< what happened
  std::string reason;          ///< why it was skipped
  std::string device;          ///< e.g. "NVIDIA H100 80GB HBM3 (cuda:0)"
  uint64_t storages = 0;       ///< storages loaded and checked on the device (every tensor's; a shared one once)
  uint64_t bytes = 0;          ///< their bytes
  uint64_t nan = 0;            ///< NaN elements the device counted in floating storages
  uint64_t inf = 0;            ///< +Inf and -Inf elements likewise
  double seconds = 0;  ///< device time: transfers and kernels (CUDA events)
  /// Where the rest of the load test's time went, in seconds of the threads
  /// that spent it: what to look at when it costs a write more than the
  /// device's own time explains (docs/verification.md).
  struct Phases {
    double open = 0;           ///< opening the device, on a thread of its own: context, pinned and device slots
    double open_waited = 0;    ///< the read-back waiting for that opening to finish
    double host_copy = 0;      ///< bytes read from the file into, or copied into, the pinned slots
    double checksum = 0;       ///< the CPU's reference checksum of the same bytes
    double device_waited = 0;  ///< the read-back waiting for a slot the device still held
    double writer_waited = 0;  ///< the writer waiting for the read-back after its last record
  };
  Phases phases;

  /// Adds what another load test of the same device did (a write's two passes).
  void add(const GpuReport& other);
};

/// "ok", "skipped" or "off", as reports print a GpuReport::Status.
std::string_view gpu_status_name(GpuReport::Status status);

/// What was verified.
struct VerifyReport {
  bool written = false;             ///< a file save() wrote (true) or verify_file (false)
  CheckpointFormat format = CheckpointFormat::kZip;  ///< only zip files have CRCs
  uint64_t records = 0;             ///< zip records read back
  uint64_t records_crc_checked = 0; ///< ... whose bytes match their CRC-32: recomputed, or (records ckptfix hashed as it wrote them) read back with the XXH3 of the bytes that CRC was taken from
  uint64_t records_copied = 0;      ///< ... copied unchanged, so checked by the CRC-32 the input records (no XXH3)
  uint64_t zips = 0;                ///< a distributed checkpoint's chunk and value zips checked
  uint64_t storages = 0;            ///< storages whose bytes were checked
  uint64_t tensors = 0;             ///< tensor positions compared
  uint64_t bytes = 0;               ///< bytes read back and hashed
  double seconds = 0;  ///< time verification took
  GpuReport gpu;  ///< the GPU load test

  /// One line for people, e.g. "read back 12 records (CRC-32 and XXH3 as
  /// written), 9 tensors as intended; GPU load test skipped: no CUDA device".
  std::string summary() const;
};

/// Checks a checkpoint on its own. Throws Error(kCorrupt) naming the damaged
/// record or structure, the errors Checkpoint::open throws, or Error(kGpu)
/// when the GPU load test is required (GpuMode::kRequire) but cannot run.
VerifyReport verify_file(const std::filesystem::path& file, const VerifyOptions& options = {});

/// Fails early (Error kGpu) when `mode` is kRequire and no CUDA device is
/// usable: what verify_file and save() do before reading or writing anything.
void require_gpu_if_asked(GpuMode mode);

/// What this build has for the GPU load test, and what it finds here.
struct GpuSupport {
  bool built_in = false;       ///< built with the CUDA runtime (linked statically) and the checking kernel
  std::string cuda_runtime;    ///< that runtime's version, "13.0" (built in only)
  std::string minimum_driver;  ///< the oldest NVIDIA driver it runs on, "580.65.06" (built in only)
  bool usable = false;         ///< a CUDA device is usable on this machine now
  std::string device;          ///< "NVIDIA H100 80GB HBM3 (cuda:0)", when usable
  std::string reason;          ///< why not, when not usable ("no NVIDIA driver is installed")
};

/// Probes once per process (the CUDA driver, if any, is loaded to ask it).
GpuSupport gpu_support();

}  // namespace ckptfix
