// The device side of the GPU load test (load_test.h): what a device is
// given and does. C++17, as nvcc compiles it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bytes/load_check.h"

namespace ckptfix {

/// One piece of work for the device: `size` bytes at `offset` in a slot,
/// the part of a storage that starts at its word `first_word`. Parts start
/// 16-byte aligned in the slot and at an 8-byte multiple of their storage.
struct LoadItem {
  uint64_t offset = 0;
  uint64_t first_word = 0;
  uint32_t size = 0;
  uint32_t result = 0;  ///< index of the slot's result it adds into
  FloatCoding coding = FloatCoding::kNone;
};

/// Work items (and results) a slot holds at most: tiny storages take one each.
constexpr size_t kMaxLoadItems = 8192;

/// A device that checks staged bytes. Two slots; each is filled by the
/// host, launched, then waited for before it is filled again.
class LoadTestDevice {
 public:
  virtual ~LoadTestDevice() = default;
  /// The slot's staging memory, of the slot size (pinned host memory for CUDA).
  virtual std::byte* staging(int slot) = 0;
  /// Starts, asynchronously: the slot's bytes to the device, every item
  /// read there, `results` sums back to the host.
  virtual void launch(int slot, const std::vector<LoadItem>& items, uint32_t results) = 0;
  /// Waits for the slot's launch; its results, one per result index.
  virtual std::vector<LoadCheck> wait(int slot) = 0;
  /// Seconds the device spent on launches waited for (transfers and kernels).
  virtual double seconds() const = 0;
  /// Seconds opening it took, on its own thread, and that its user then
  /// waited for it (a device opened in the background: load_test_opening.h).
  virtual double open_seconds() const { return 0; }
  virtual double open_waited_seconds() const { return 0; }
};

/// The CUDA device (cuda:0), or Error(kGpu) naming what failed. With
/// `inject_fault` (the test-only fault build), one byte of each slot is
/// changed in device memory after its upload: verification must catch it.
std::unique_ptr<LoadTestDevice> open_cuda_load_test(size_t slot_bytes, bool inject_fault);

/// The same device work on the CPU: the slot copied to "device memory",
/// the fault injected there, every item checked with load_check.h.
std::unique_ptr<LoadTestDevice> host_load_test(size_t slot_bytes, bool inject_fault);

/// Whether a CUDA device can be used here, and if not, why.
struct GpuStatus {
  bool usable = false;
  std::string reason;  ///< why not (empty when usable)
  std::string device;  ///< device name (when usable)
  std::string runtime;  ///< the CUDA runtime built in ("13.0"); empty when none is
};

/// Probes once per process (cudaGetDeviceCount and device 0's properties).
const GpuStatus& gpu_status();

/// True when this build contains the CUDA code at all.
bool gpu_support_built();

}  // namespace ckptfix
