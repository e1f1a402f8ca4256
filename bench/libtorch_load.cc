// The C++ loader for bench/python_load.py (issue 36): one process loads a
// state dict with ckptfix::libtorch::load_state_dict onto a device and reads
// one element of every page of every tensor (a sum per tensor, synchronized
// on a GPU), and prints what python_load.py prints for its peers.
//
//   ckptfix_libtorch_load FILE DEVICE [STAGING_BYTES]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "ckptfix/error.h"
#include "ckptfix/libtorch.h"

namespace {

long long status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size())) * 1024;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: ckptfix_libtorch_load FILE DEVICE [STAGING_BYTES]\n");
    return 2;
  }
  ckptfix::libtorch::LoadOptions options;
  options.map_location = argv[2];
  if (argc > 3) options.staging_bytes = std::stoull(argv[3]);
  try {
    // The device's context is made before the clock starts, as python_load.py
    // does for its peers: "seconds" is the load itself, "init" the context.
    const auto began = std::chrono::steady_clock::now();
    const bool cuda = options.map_location.rfind("cuda", 0) == 0;
    if (options.map_location != "cpu") at::empty({1}, at::TensorOptions().device(at::Device(options.map_location)));
    if (cuda) torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    const auto tensors = ckptfix::libtorch::load_state_dict(argv[1], options);
    double total = 0;
    for (const auto& [name, t] : tensors) {
      const at::Tensor flat = t.reshape(-1);
      total += flat.slice(0, 0, flat.numel(), std::max<int64_t>(1, 4096 / t.element_size())).sum().item<double>();
    }
    if (cuda) torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double init = std::chrono::duration<double>(start - began).count();
    // steady_clock is CLOCK_MONOTONIC, the clock the parent (python_load.py)
    // read at the launch: the process's start to its last byte on the device.
    const double done_at = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    std::printf("{\"seconds\": %.6f, \"init\": %.6f, \"anon\": %lld, \"file\": %lld, \"check\": %.6f, \"done_at\": %.6f}\n",
                seconds, init, status_bytes("RssAnon:"), status_bytes("RssFile:"), total, done_at);
    return 0;
  } catch (const ckptfix::Error& e) {
    std::fprintf(stderr, "ckptfix: error: %s\n", e.what());
    return 1;
  }
}
