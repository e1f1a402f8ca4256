// The GPU round trip through the CUDA runtime (host code only; no kernels).
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "ckptfix/error.h"
#include "bytes/gpu.h"

namespace ckptfix {
namespace {

std::string describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(ErrorKind::kGpu, std::string("GPU round trip: ") + what + " failed (" + describe(err) + ")");
}

}  // namespace

struct GpuRoundTrip::State {
  void* device = nullptr;
  size_t capacity = 0;
};

bool gpu_support_built() { return true; }

const GpuStatus& gpu_status() {
  static const GpuStatus status = [] {
    GpuStatus s;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
      s.reason = err == cudaErrorNoDevice ? "no CUDA device (" + describe(err) + ")"
                                          : "no usable CUDA driver (" + describe(err) + ")";
    } else if (err != cudaSuccess) {
      s.reason = "CUDA is not usable (" + describe(err) + ")";
    } else if (count == 0) {
      s.reason = "no CUDA device";
    } else {
      cudaDeviceProp prop{};
      const cudaError_t perr = cudaGetDeviceProperties(&prop, 0);
      s.usable = perr == cudaSuccess;
      s.device = s.usable ? std::string(prop.name) + " (cuda:0)" : "";
      s.reason = s.usable ? "" : "cannot query CUDA device 0 (" + describe(perr) + ")";
    }
    cudaGetLastError();  // clear the sticky error, if any
    return s;
  }();
  return status;
}

GpuRoundTrip::GpuRoundTrip(size_t chunk_bytes) : state_(std::make_unique<State>()) {
  if (!gpu_status().usable) throw Error(ErrorKind::kGpu, "GPU round trip: " + gpu_status().reason);
  check(cudaSetDevice(0), "cudaSetDevice(0)");
  check(cudaMalloc(&state_->device, chunk_bytes), "cudaMalloc");
  state_->capacity = chunk_bytes;
}

GpuRoundTrip::~GpuRoundTrip() {
  if (state_ && state_->device != nullptr) cudaFree(state_->device);
}

void GpuRoundTrip::roundtrip(std::span<const std::byte> in, std::span<std::byte> out) {
  if (in.size() > state_->capacity || out.size() != in.size()) {
    throw Error(ErrorKind::kGpu, "GPU round trip: chunk larger than the device buffer");
  }
  check(cudaMemset(state_->device, 0xA5, in.size()), "cudaMemset");
  check(cudaMemcpy(state_->device, in.data(), in.size(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  std::memset(out.data(), 0x5A, out.size());
  check(cudaMemcpy(out.data(), state_->device, out.size(), cudaMemcpyDeviceToHost), "cudaMemcpy from the device");
}

}  // namespace ckptfix
