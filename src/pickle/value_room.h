// The memory of a graph's values made on a second thread while a pickle is
// read into it.
//
// Reading a state dict of 100,000 tensors makes 1.5 million values, and
// half the time of it was the kernel handing out and zeroing the pages of
// their memory the first time each was written. Where another core is
// free, a ValueRoom makes that memory there: chunks of values, every page
// written, kept a few ahead of the reader, which takes them before making
// any of its own (ValueGraph::make). What is made and not taken is freed.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "pickle/value.h"

namespace ckptfix {

class ValueRoom {
 public:
  /// Starts making chunks for `graph` and has it take them, until this is
  /// destroyed; on one core, or with no thread to be had, `graph` makes its
  /// own as ever.
  explicit ValueRoom(ValueGraph& graph);
  /// Stops the thread, detaches the graph and frees the chunks not taken.
  ~ValueRoom();
  ValueRoom(const ValueRoom&) = delete;
  ValueRoom& operator=(const ValueRoom&) = delete;

  /// A chunk made ahead, or null when none is ready (ValueGraph::make).
  std::unique_ptr<Value[]> take();
  /// Chunks taken so far.
  size_t taken() const;

 private:
  // Made and not taken at most: a few hundred KiB to a few MiB ahead of
  // the reader, never much more than it will use.
  static constexpr size_t kAhead = 32;
  void make_ahead();

  ValueGraph& graph_;
  mutable std::mutex mutex_;
  std::condition_variable taken_;
  std::vector<std::unique_ptr<Value[]>> chunks_;
  size_t taken_count_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ckptfix
