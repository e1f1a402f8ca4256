// What the GPU load test says about the NVIDIA driver it finds: the
// driver's own version (from the kernel module) against the CUDA runtime
// linked into ckptfix. Host code only, so that every build (with or
// without the CUDA Toolkit) compiles and tests it; gpu_cuda.cu uses it.
#pragma once

#include <string>
#include <string_view>

namespace ckptfix {

/// The oldest NVIDIA driver a CUDA runtime of major version `cuda_major`
/// runs on (CUDA's minor version compatibility: any 13.x runtime on any
/// R580 driver), "580.65.06"; empty for a major ckptfix does not know.
std::string_view minimum_nvidia_driver(int cuda_major);

/// The driver version in the text of /proc/driver/nvidia/version ("NVRM
/// version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..."),
/// or empty when it names none.
std::string nvidia_driver_version(std::string_view proc_text);

/// The driver version of this machine's NVIDIA kernel module, or empty when
/// none is loaded (no /proc/driver/nvidia/version).
std::string installed_nvidia_driver();

/// "13.0" for a CUDA version number as the runtime gives it (13000).
std::string cuda_version_text(int version);

/// Why the GPU load test cannot use the driver the CUDA runtime found
/// insufficient: `driver` is nvidia_driver_version's answer (may be empty),
/// `driver_cuda` what cudaDriverGetVersion said (0: no driver), `runtime`
/// the runtime's CUDART_VERSION. "NVIDIA driver 535.104.05 supports CUDA
/// 12.2, older than the CUDA 13.0 this ckptfix was built with: the GPU load
/// test needs driver 580.65.06 or newer", or "no NVIDIA driver is installed".
std::string insufficient_driver_reason(const std::string& driver, int driver_cuda, int runtime);

}  // namespace ckptfix
