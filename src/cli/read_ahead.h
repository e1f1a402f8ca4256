// An input opened on another thread while the command does other work
// first: fix --like reads its reference meanwhile. Opening a state dict of
// 100,000 tensors and reading a reference of as many keys each take about
// as long, and they need nothing of each other.
#pragma once

#include <future>
#include <mutex>
#include <string>

#include "ckptfix/checkpoint.h"
#include "cli/batch.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

class ReadAhead {
 public:
  /// Starts opening the one input of `batch` with `options`, when there is
  /// exactly one and it is a plain file (not a directory, not with --tag);
  /// otherwise does nothing.
  ReadAhead(const BatchArgs& batch, const OpenOptions& options);
  /// Waits for the opening, whatever became of it.
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  /// A reader for run_rewrite: the input opened ahead (or its error), the
  /// first time it is asked for that path; Checkpoint::open for anything
  /// else. `options` must be what was given to the constructor.
  InputReader reader();
  /// Whether the input is being opened on a thread of its own.
  bool opening() const { return opened_.valid(); }

 private:
  std::string path_;
  std::future<Checkpoint> opened_;
  std::mutex mutex_;  // run_rewrite may read inputs on several threads
};

}  // namespace ckptfix::cli
