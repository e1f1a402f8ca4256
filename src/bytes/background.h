// One worker thread running tasks in order, so hashing and read-back
// verification overlap with writing on a second core; or, where the
// caller may use no second thread (a write limited to one), none: each
// task runs at once on the caller's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptfix {

class Background {
 public:
  /// The thread starts with the first task (many small files never need it).
  /// `on_caller`: no thread; run() does each task before it returns.
  explicit Background(bool on_caller = false) : on_caller_(on_caller) {}
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  /// Queues `task`; its result (or exception) arrives through the future.
  /// When the thread cannot be started (std::system_error), nothing is
  /// queued: `task` is destroyed, unrun, as the exception leaves.
  template <typename F>
  auto run(F task) -> std::future<decltype(task())> {
    using R = decltype(task());
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::move(task));
    std::future<R> result = packaged->get_future();
    if (on_caller_) {
      (*packaged)();  // its exception, like its value, goes into the future
      return result;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });  // first: a failure leaves nothing queued
      queue_.emplace_back([packaged] { (*packaged)(); });
    }
    ready_.notify_one();
    return result;
  }

 private:
  void loop();

  const bool on_caller_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Waits for every one of `tasks` (they may use what the caller holds, so
/// none is left running), then throws the first failure in their order.
void wait_for_all(std::vector<std::future<void>>& tasks);

}  // namespace ckptfix
