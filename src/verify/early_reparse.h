// The data.pkl a save writes, read back from the file and parsed on a
// thread of its own while the storage records after it are written; the
// final verification's re-read of the finished file takes that parse
// (model/preparsed_pickle.h) instead of parsing the record again. For
// 100,000 tensors the parse is half of the re-read.
#pragma once

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>

#include "bytes/background.h"
#include "ckptfix/checkpoint.h"
#include "model/preparsed_pickle.h"
#include "pickle/value.h"
#include "zip/zip_writer.h"

namespace ckptfix {

class EarlyReparse {
 public:
  /// For the file a save is writing at `path`, parsed within `limits`.
  /// Until start(), the thread makes room ahead for up to `expected_values`
  /// values of the parse (ValueGraph::add_room): the pickle is written on
  /// the caller's thread meanwhile, and the parse after it then touches
  /// no new page for them.
  EarlyReparse(std::filesystem::path path, const ReadLimits& limits, size_t expected_values = 0);
  EarlyReparse(const EarlyReparse&) = delete;
  EarlyReparse& operator=(const EarlyReparse&) = delete;

  /// `record` (data.pkl) is complete in the file: read it back and parse it.
  void start(const WrittenRecord& record);
  /// The parse; null when there was none, or the bytes read back were not
  /// those written, or parsing them failed: the re-read then parses the
  /// record itself, and says what is wrong with it.
  std::unique_ptr<PreparsedPickle> take();

 private:
  std::filesystem::path path_;
  ReadLimits limits_;
  std::optional<std::future<std::unique_ptr<PreparsedPickle>>> parse_;
  std::atomic<bool> started_{false};  // start() was called: the room made so far will do
  ValueGraph room_;                   // made and then used on the thread alone, in task order
  Background thread_;  // last: joined first, before what its task uses goes
};

}  // namespace ckptfix
