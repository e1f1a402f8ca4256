// Whether the GPU load test runs for a GpuMode (load_test.h holds the test).
//
// Built against the CUDA runtime and its kernel when CMake finds the CUDA
// Toolkit and nvcc (gpu_cuda.cu), otherwise as a stub that reports why it
// cannot run (gpu_none.cc).
#pragma once

#include "ckptfix/verify.h"
#include "bytes/load_test_device.h"

namespace ckptfix {

/// What the load test will do for `mode` here: kOk (with the device),
/// kSkipped (with the reason) or kOff. The one place where GpuMode::kRequire
/// meets an unusable device: it throws Error(kGpu) then.
GpuReport plan_gpu(GpuMode mode);

}  // namespace ckptfix
