#include "libtorch/device_staging.h"

#include <algorithm>
#include <thread>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace ckptfix::libtorch {

DeviceStaging::DeviceStaging(at::Device device, size_t buffer_bytes)
    : device_(device), asynchronous_(device.type() != at::kCPU) {
  const auto options = at::TensorOptions().dtype(at::kByte).pinned_memory(asynchronous_);
  for (int i = 0; i < 2; ++i) buffers_.push_back(at::empty({static_cast<int64_t>(std::max<size_t>(1, buffer_bytes))}, options));
  events_.resize(buffers_.size());
  if (asynchronous_) {
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(device.type());
    stream_ = impl->getStreamFromGlobalPool(device, /*isHighPriority=*/false);
    // What the device's current stream queued (the targets' allocation) comes first.
    c10::Event ready(device.type());
    ready.record(impl->getStream(device));
    ready.block(*stream_);
  }
}

DeviceStaging::~DeviceStaging() {
  try {
    finish();
  } catch (...) {  // a destructor must not throw; the load already failed with its own error
  }
}

void DeviceStaging::copy(at::Tensor& target, const Fill& fill) {
  const uint64_t total = static_cast<uint64_t>(target.numel());
  const uint64_t size = static_cast<uint64_t>(buffers_[0].numel());
  for (uint64_t start = 0; start < total; start += size) {
    const int64_t n = static_cast<int64_t>(std::min(size, total - start));
    const size_t i = next_;
    next_ = (next_ + 1) % buffers_.size();
    if (events_[i]) wait(*events_[i]);  // its last copy to the device is done
    at::Tensor buffer = buffers_[i].narrow(0, 0, n);
    fill(start, std::span(static_cast<std::byte*>(buffer.data_ptr()), static_cast<size_t>(n)));
    at::Tensor part = target.narrow(0, static_cast<int64_t>(start), n);
    if (!asynchronous_) {
      part.copy_(buffer);
    } else {
      c10::StreamGuard on(*stream_);
      part.copy_(buffer, /*non_blocking=*/true);
      events_[i].emplace(device_.type());
      events_[i]->record(*stream_);
    }
    bytes_ += static_cast<uint64_t>(n);
  }
  if (asynchronous_ && total > 0) {
    // The target is the current stream's to use once these copies are done;
    // its memory must not be reused while they run, even if the load fails.
    target.record_stream(*stream_);
    c10::Event copied(device_.type());
    copied.record(*stream_);
    copied.block(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
  }
}

void DeviceStaging::wait(const c10::Event& event) {
  // c10::Event::synchronize is newer than some LibTorch releases ckptfix
  // builds with (1.13): ask until the device says it has passed.
  while (!event.query()) std::this_thread::yield();
}

void DeviceStaging::finish() {
  if (stream_) stream_->synchronize();
}

}  // namespace ckptfix::libtorch
