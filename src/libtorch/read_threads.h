// The threads that read a staging buffer's share of a storage (issue 36).
//
// Not at::parallel_for: it is inlined from ATen's headers, and where ATen
// is built with OpenMP (pip's wheels, Debian's) its `#pragma omp parallel`
// is compiled into the caller, which runs it on one thread unless it is
// itself built with -fopenmp (measured: 1 of 4 threads). Linking OpenMP
// into ckptfix_torch would put a second OpenMP runtime beside the wheel's
// own libgomp; threads of our own need neither.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptfix::libtorch {

class ReadThreads {
 public:
  /// Up to `threads` threads run a task, the caller's among them; the
  /// others start with the first task that has more than one item.
  explicit ReadThreads(size_t threads);
  ~ReadThreads();
  ReadThreads(const ReadThreads&) = delete;
  ReadThreads& operator=(const ReadThreads&) = delete;

  /// Calls item(i) for every i in [0, count), spread over the threads, and
  /// returns when all calls have returned. If a call throws, items not yet
  /// started are skipped and the first exception is rethrown here.
  void run(size_t count, const std::function<void(size_t)>& item);

 private:
  void work();
  void take_items();  // with mutex_ held on entry and on return

  const size_t threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* item_ = nullptr;  // the task running; null between tasks
  size_t count_ = 0, next_ = 0, running_ = 0;
  uint64_t task_ = 0;  // counts tasks, so that a worker joins each one once
  std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace ckptfix::libtorch
