// What the GPU load test says about the NVIDIA driver it finds (issue 34: a
// driver too old for the CUDA runtime built in is named with its version
// and the minimum, and the write goes on verified on the CPU).
#include <gtest/gtest.h>

#include "bytes/gpu_driver.h"

namespace ckptfix {
namespace {

TEST(GpuDriver, ReadsTheKernelModulesVersion) {
  // /proc/driver/nvidia/version as drivers 535 and 580 write it.
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 "
                                  "UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "535.104.05");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
                                  "(dvs-builder@U16-I3-B03-4-3)  Tue Jul 22 18:20:15 UTC 2025\n"),
            "580.65.06");
  EXPECT_EQ(nvidia_driver_version("NVRM version: NVIDIA UNIX aarch64 Kernel Module  570.124.06  Wed Feb 26 2025\n"),
            "570.124.06");
  EXPECT_EQ(nvidia_driver_version(""), "");
  EXPECT_EQ(nvidia_driver_version("something else entirely 42\n"), "");
}

TEST(GpuDriver, NamesTheDriverAndTheMinimum) {
  EXPECT_EQ(minimum_nvidia_driver(13), "580.65.06");
  EXPECT_EQ(minimum_nvidia_driver(12), "525.60.13");
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12020), "12.2");
  EXPECT_EQ(insufficient_driver_reason("535.104.05", 12020, 13000),
            "NVIDIA driver 535.104.05 supports CUDA 12.2, older than the CUDA 13.0 this ckptfix was built with: the "
            "GPU load test needs driver 580.65.06 or newer");
  EXPECT_EQ(insufficient_driver_reason("", 0, 13000), "no NVIDIA driver is installed");
  // A driver the runtime reaches but whose module version cannot be read.
  EXPECT_EQ(insufficient_driver_reason("", 12080, 13000),
            "NVIDIA driver (version unknown) supports CUDA 12.8, older than the CUDA 13.0 this ckptfix was built "
            "with: the GPU load test needs driver 580.65.06 or newer");
}

}  // namespace
}  // namespace ckptfix
