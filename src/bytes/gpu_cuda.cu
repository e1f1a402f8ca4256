// The GPU load test's device (load_test.h) through the CUDA runtime, and the
// probe of whether a device can be used at all.
//
// Per slot: pinned staging memory the host fills, device memory it is
// uploaded to with cudaMemcpyAsync, the work items (also uploaded), and the
// results, zeroed on the device, added into by the kernel and copied back
// into pinned memory. One stream runs the slots in turn, so the device works
// on one slot while the host fills the other. Every CUDA call is checked;
// device memory is bounded by the two slots; no managed memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ckptfix/error.h"
#include "bytes/gpu_driver.h"
#include "bytes/load_test_device.h"

namespace ckptfix {
namespace {

std::string describe(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(ErrorKind::kGpu, std::string("GPU load test: ") + what + " failed (" + describe(err) + ")");
}

constexpr int kThreads = 256;

// One block per item: its words into the checksum, its elements into the
// NaN/Inf counts, the block's sums added into the item's result. The sums
// are integers modulo 2^64, so the order of the additions does not matter.
__global__ void check_items(const std::byte* slot, const LoadItem* items, LoadCheck* results) {
  const LoadItem item = items[blockIdx.x];
  const std::byte* p = slot + item.offset;  // 16-byte aligned
  LoadCheck mine;
  const uint32_t whole = item.size / 4;
  const uint32_t* words = reinterpret_cast<const uint32_t*>(p);
  for (uint32_t w = threadIdx.x; w < whole; w += blockDim.x) add_word(mine, item.first_word + w, words[w]);
  if (threadIdx.x == 0 && item.size % 4 != 0) {
    uint32_t last = 0;
    for (uint32_t b = 0; b < item.size % 4; ++b) last |= static_cast<uint32_t>(p[4 * whole + b]) << (8 * b);
    add_word(mine, item.first_word + whole, last);
  }
  const uint32_t size = coding_size(item.coding);
  if (size != 0) {
    const uint32_t count = item.size / size;
    for (uint32_t e = threadIdx.x; e < count; e += blockDim.x) {
      uint64_t bits;
      switch (size) {
        case 1: bits = static_cast<uint8_t>(p[e]); break;
        case 2: bits = reinterpret_cast<const uint16_t*>(p)[e]; break;
        case 4: bits = reinterpret_cast<const uint32_t*>(p)[e]; break;
        default: bits = reinterpret_cast<const uint64_t*>(p)[e]; break;
      }
      add_element(mine, item.coding, bits);
    }
  }
  // The block's sums: warp shuffles, then one value per warp in shared memory.
  uint64_t v[5] = {mine.sum, mine.weighted, mine.nan, mine.posinf, mine.neginf};
  for (int k = 0; k < 5; ++k) {
    for (int offset = 16; offset > 0; offset /= 2) v[k] += __shfl_down_sync(0xFFFFFFFFu, v[k], offset);
  }
  __shared__ uint64_t warps[kThreads / 32][5];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    for (int k = 0; k < 5; ++k) warps[warp][k] = v[k];
  }
  __syncthreads();
  if (threadIdx.x < 5) {
    uint64_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warps[w][threadIdx.x];
    uint64_t* out = reinterpret_cast<uint64_t*>(&results[item.result]);  // LoadCheck is five uint64_t
    atomicAdd(reinterpret_cast<unsigned long long*>(out + threadIdx.x), static_cast<unsigned long long>(total));
  }
}

static_assert(sizeof(LoadCheck) == 5 * sizeof(uint64_t), "the kernel adds into LoadCheck as five uint64_t");

class CudaLoadTest final : public LoadTestDevice {
 public:
  CudaLoadTest(size_t slot_bytes, bool inject_fault) : inject_fault_(inject_fault) {
    if (!gpu_status().usable) throw Error(ErrorKind::kGpu, "GPU load test: " + gpu_status().reason);
    try {
      check(cudaSetDevice(0), "cudaSetDevice(0)");
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      for (Slot& s : slots_) {
        check(cudaHostAlloc(reinterpret_cast<void**>(&s.staging), slot_bytes, cudaHostAllocDefault), "cudaHostAlloc (staging)");
        check(cudaMalloc(reinterpret_cast<void**>(&s.device), slot_bytes), "cudaMalloc (slot)");
        check(cudaHostAlloc(reinterpret_cast<void**>(&s.items_host), kItemsBytes, cudaHostAllocDefault), "cudaHostAlloc (items)");
        check(cudaMalloc(reinterpret_cast<void**>(&s.items_device), kItemsBytes), "cudaMalloc (items)");
        check(cudaHostAlloc(reinterpret_cast<void**>(&s.results_host), kResultsBytes, cudaHostAllocDefault), "cudaHostAlloc (results)");
        check(cudaMalloc(reinterpret_cast<void**>(&s.results_device), kResultsBytes), "cudaMalloc (results)");
        check(cudaEventCreate(&s.start), "cudaEventCreate");
        check(cudaEventCreate(&s.done), "cudaEventCreate");
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaLoadTest() override { release(); }

  std::byte* staging(int slot) override { return slots_[slot].staging; }

  void launch(int slot, const std::vector<LoadItem>& items, uint32_t results) override {
    Slot& s = slots_[slot];
    if (items.size() > kMaxLoadItems || results > kMaxLoadItems) {
      throw Error(ErrorKind::kInternal, "GPU load test: more work items than a slot holds");
    }
    uint64_t end = 0;
    for (const LoadItem& item : items) end = std::max<uint64_t>(end, item.offset + item.size);
    std::memcpy(s.items_host, items.data(), items.size() * sizeof(LoadItem));
    s.results = results;
    check(cudaEventRecord(s.start, stream_), "cudaEventRecord");
    check(cudaMemcpyAsync(s.device, s.staging, end, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (bytes to the device)");
    check(cudaMemcpyAsync(s.items_device, s.items_host, items.size() * sizeof(LoadItem), cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync (work items)");
    check(cudaMemsetAsync(s.results_device, 0, results * sizeof(LoadCheck), stream_), "cudaMemsetAsync (results)");
    if (inject_fault_) {
      // The test-only fault: one byte changed in device memory after the
      // upload (its complement, so it differs whatever it was).
      for (const LoadItem& item : items) {
        if (item.size == 0) continue;
        const int changed = static_cast<int>(~static_cast<unsigned>(s.staging[item.offset]) & 0xFF);
        check(cudaMemsetAsync(s.device + item.offset, changed, 1, stream_), "cudaMemsetAsync (injected fault)");
        break;
      }
    }
    if (!items.empty()) {
      check_items<<<static_cast<unsigned>(items.size()), kThreads, 0, stream_>>>(s.device, s.items_device, s.results_device);
      check(cudaGetLastError(), "the check_items kernel launch");
    }
    check(cudaMemcpyAsync(s.results_host, s.results_device, results * sizeof(LoadCheck), cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (results to the host)");
    check(cudaEventRecord(s.done, stream_), "cudaEventRecord");
    s.launched = true;
  }

  std::vector<LoadCheck> wait(int slot) override {
    Slot& s = slots_[slot];
    if (!s.launched) return {};
    check(cudaEventSynchronize(s.done), "waiting for the device (cudaEventSynchronize)");
    s.launched = false;
    float ms = 0;
    check(cudaEventElapsedTime(&ms, s.start, s.done), "cudaEventElapsedTime");
    seconds_ += ms / 1000.0;
    return std::vector<LoadCheck>(s.results_host, s.results_host + s.results);
  }

  double seconds() const override { return seconds_; }

 private:
  static constexpr size_t kItemsBytes = kMaxLoadItems * sizeof(LoadItem);
  static constexpr size_t kResultsBytes = kMaxLoadItems * sizeof(LoadCheck);
  struct Slot {
    std::byte* staging = nullptr;
    std::byte* device = nullptr;
    LoadItem* items_host = nullptr;
    LoadItem* items_device = nullptr;
    LoadCheck* results_host = nullptr;
    LoadCheck* results_device = nullptr;
    cudaEvent_t start = nullptr, done = nullptr;
    uint32_t results = 0;
    bool launched = false;
  };

  // Frees what was allocated, after the device is done with it (errors
  // ignored: this runs on the way out, often because of one).
  void release() {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (Slot& s : slots_) {
      if (s.staging) cudaFreeHost(s.staging);
      if (s.device) cudaFree(s.device);
      if (s.items_host) cudaFreeHost(s.items_host);
      if (s.items_device) cudaFree(s.items_device);
      if (s.results_host) cudaFreeHost(s.results_host);
      if (s.results_device) cudaFree(s.results_device);
      if (s.start) cudaEventDestroy(s.start);
      if (s.done) cudaEventDestroy(s.done);
      s = Slot{};
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  bool inject_fault_;
  cudaStream_t stream_ = nullptr;
  Slot slots_[2];
  double seconds_ = 0;
};

}  // namespace

bool gpu_support_built() { return true; }

const GpuStatus& gpu_status() {
  static const GpuStatus status = [] {
    GpuStatus s;
    s.runtime = cuda_version_text(CUDART_VERSION);
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorInsufficientDriver) {
      // The driver's own version and the oldest one this runtime runs on.
      int driver_cuda = 0;
      cudaDriverGetVersion(&driver_cuda);
      s.reason = insufficient_driver_reason(installed_nvidia_driver(), driver_cuda, CUDART_VERSION);
    } else if (err == cudaErrorNoDevice) {
      s.reason = "no CUDA device (" + describe(err) + ")";
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

std::unique_ptr<LoadTestDevice> open_cuda_load_test(size_t slot_bytes, bool inject_fault) {
  return std::make_unique<CudaLoadTest>(slot_bytes, inject_fault);
}

}  // namespace ckptfix
