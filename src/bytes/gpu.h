// The GPU round trip: bytes copied into GPU memory and back.
//
// Built against the CUDA runtime when CMake finds the CUDA Toolkit
// (gpu_cuda.cc), otherwise as a stub that reports why it cannot run
// (gpu_none.cc). The device path is deliberately small: one device buffer,
// cleared before each upload, and host memory cleared before each download,
// so a copy that did not happen cannot look like one that did.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "ckptfix/verify.h"

namespace ckptfix {

/// What the round trip will do for `mode` here: kOk (with the device),
/// kSkipped (with the reason) or kOff. The one place where GpuMode::kRequire
/// meets an unusable device: it throws Error(kGpu) then.
GpuReport plan_gpu(GpuMode mode);

/// Whether a CUDA device can be used here, and if not, why.
struct GpuStatus {
  bool usable = false;
  std::string reason;  ///< why not (empty when usable)
  std::string device;  ///< device name (when usable)
};

/// Probes once per process (cudaGetDeviceCount and device 0's properties).
const GpuStatus& gpu_status();

/// True when this build contains the CUDA code at all.
bool gpu_support_built();

/// Copies chunks to the GPU and back. Throws Error(kGpu) on any CUDA error.
class GpuRoundTrip {
 public:
  explicit GpuRoundTrip(size_t chunk_bytes);
  ~GpuRoundTrip();
  GpuRoundTrip(const GpuRoundTrip&) = delete;
  GpuRoundTrip& operator=(const GpuRoundTrip&) = delete;

  /// Uploads `in` (at most chunk_bytes) and downloads it into `out` (same size).
  void roundtrip(std::span<const std::byte> in, std::span<std::byte> out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ckptfix
