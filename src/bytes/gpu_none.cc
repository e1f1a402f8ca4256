// The GPU load test in a build without the CUDA Toolkit (or without nvcc).
#include "ckptfix/error.h"
#include "bytes/gpu.h"
#include "bytes/load_test.h"

namespace ckptfix {

bool gpu_support_built() { return false; }

const GpuStatus& gpu_status() {
  static const GpuStatus status{false, "this ckptfix was built without the CUDA Toolkit", "", ""};
  return status;
}

std::unique_ptr<LoadTestDevice> open_cuda_load_test(size_t, bool) { throw Error(ErrorKind::kGpu, gpu_status().reason); }

}  // namespace ckptfix
