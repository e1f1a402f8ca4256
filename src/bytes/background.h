// One worker thread running tasks in order, so hashing and read-back
// verification overlap with writing on a second core.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace ckptfix {

class Background {
 public:
  /// The thread starts with the first task (many small files never need it).
  Background() = default;
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  /// Queues `task`; its result (or exception) arrives through the future.
  template <typename F>
  auto run(F task) -> std::future<decltype(task())> {
    using R = decltype(task());
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::move(task));
    std::future<R> result = packaged->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back([packaged] { (*packaged)(); });
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    ready_.notify_one();
    return result;
  }

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ckptfix
