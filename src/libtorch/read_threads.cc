#include "libtorch/read_threads.h"

#include <algorithm>

namespace ckptfix::libtorch {

ReadThreads::ReadThreads(size_t threads) : threads_(std::max<size_t>(1, threads)) {}

ReadThreads::~ReadThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ReadThreads::run(size_t count, const std::function<void(size_t)>& item) {
  if (count == 0) return;
  if (count == 1 || threads_ == 1) {
    for (size_t i = 0; i < count; ++i) item(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (workers_.size() + 1 < threads_) workers_.emplace_back([this] { work(); });
  item_ = &item;
  count_ = count;
  next_ = 0;
  error_ = nullptr;
  ++task_;
  wake_.notify_all();
  take_items();
  // Every item has been taken; wait for the workers still running one.
  done_.wait(lock, [&] { return running_ == 0; });
  item_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ReadThreads::work() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (item_ != nullptr && task_ != seen); });
    if (stopping_) return;
    seen = task_;
    take_items();
    if (running_ == 0) done_.notify_all();
  }
}

void ReadThreads::take_items() {
  ++running_;
  while (next_ < count_ && !error_) {
    const size_t i = next_++;
    const std::function<void(size_t)>& item = *item_;
    mutex_.unlock();
    std::exception_ptr failed;
    try {
      item(i);
    } catch (...) {
      failed = std::current_exception();
    }
    mutex_.lock();
    if (failed && !error_) error_ = failed;
  }
  --running_;
}

}  // namespace ckptfix::libtorch
