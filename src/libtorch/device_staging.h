// Host bytes onto a device at transfer speed (issue 36): load_state_dict's
// path for a map_location that is not the CPU.
//
// Each storage's bytes are read (on several threads) into one of two
// staging buffers, pinned for an accelerator, and copied to the device
// asynchronously on a stream of their own while the next buffer is filled;
// a buffer is filled again only after the event recorded behind its last
// copy has passed. Only LibTorch's device-generic API is used (pinned
// TensorOptions, Tensor::copy_ with non_blocking, c10::Stream, c10::Event,
// c10::StreamGuard), so the same code builds against a CPU-only LibTorch and
// dispatches to CUDA at run time. With a CPU target it runs the same loop
// with plain buffers and synchronous copies: what the tests exercise on
// machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace ckptfix::libtorch {

class DeviceStaging {
 public:
  /// Fills `out` with the bytes at `offset` of what is being copied; may throw.
  using Fill = std::function<void(uint64_t offset, std::span<std::byte> out)>;

  /// Two staging buffers of `buffer_bytes` (at least 1) for copies onto `device`.
  DeviceStaging(at::Device device, size_t buffer_bytes);
  /// Waits for the copies in flight, also when an error ends a load part-way:
  /// the buffers they read from must outlive them.
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  /// Copies `target.numel()` bytes, produced by `fill` one buffer at a time,
  /// into `target` (a contiguous uint8 tensor on the device). The device's
  /// current stream is made to wait for the copies, so work queued on it
  /// afterwards sees the bytes; the host does not wait.
  void copy(at::Tensor& target, const Fill& fill);

  /// Waits until every copy has completed.
  void finish();

  /// Bytes moved so far.
  uint64_t bytes() const { return bytes_; }

 private:
  static void wait(const c10::Event& event);

  at::Device device_;
  bool asynchronous_;  // an accelerator: a stream of our own, events, pinned buffers
  std::vector<at::Tensor> buffers_;
  std::vector<std::optional<c10::Event>> events_;  // behind each buffer's last copy
  std::optional<c10::Stream> stream_;
  size_t next_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace ckptfix::libtorch
