// The GPU round trip in a build without the CUDA Toolkit.
#include "ckptfix/error.h"
#include "bytes/gpu.h"

namespace ckptfix {

struct GpuRoundTrip::State {};

bool gpu_support_built() { return false; }

const GpuStatus& gpu_status() {
  static const GpuStatus status{false, "this ckptfix was built without the CUDA Toolkit", ""};
  return status;
}

GpuRoundTrip::GpuRoundTrip(size_t) { throw Error(ErrorKind::kGpu, gpu_status().reason); }
GpuRoundTrip::~GpuRoundTrip() = default;
void GpuRoundTrip::roundtrip(std::span<const std::byte>, std::span<std::byte>) {}

}  // namespace ckptfix
