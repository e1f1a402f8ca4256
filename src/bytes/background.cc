#include "bytes/background.h"

namespace ckptfix {

Background::~Background() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();  // finishes what was queued: every future gets its value
}

void Background::loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void wait_for_all(std::vector<std::future<void>>& tasks) {
  std::exception_ptr first;
  for (std::future<void>& task : tasks) {
    try {
      task.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace ckptfix
