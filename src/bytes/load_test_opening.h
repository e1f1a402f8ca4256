// A load test device opened on a thread of its own (load_test_device.h).
// Opening the CUDA one makes the process's CUDA context and pins the
// staging slots: a quarter of a second or more on the GPU machine (the
// loader bench's "init", docs/performance.md). Made before the writer
// starts, that time was on every verified job's path; opened beside it,
// it is spent while the first records are written.
#pragma once

#include <functional>
#include <memory>

#include "bytes/load_test_device.h"

namespace ckptfix {

/// The device `open` makes, made on a new thread while the caller goes on.
/// Its first use waits for it. An error `open` throws is thrown there, and
/// again at every later use (seconds() included, which the end of every
/// verification calls: a device that failed to open is never passed over).
std::unique_ptr<LoadTestDevice> open_in_background(std::function<std::unique_ptr<LoadTestDevice>()> open);

}  // namespace ckptfix
