#include "cli/read_ahead.h"

#include <filesystem>
#include <system_error>

namespace ckptfix::cli {

ReadAhead::ReadAhead(const BatchArgs& batch, const OpenOptions& options) {
  std::error_code ec;
  if (batch.inputs.size() != 1 || !batch.tag.empty() || !std::filesystem::is_regular_file(batch.inputs[0], ec)) return;
  try {
    opened_ = std::async(std::launch::async, [path = batch.inputs[0], options] { return Checkpoint::open(path, options); });
    path_ = batch.inputs[0];
  } catch (const std::system_error&) {
    // No thread to be had: the input is opened when it is asked for, as usual.
  }
}

ReadAhead::~ReadAhead() {
  if (opened_.valid()) opened_.wait();
}

InputReader ReadAhead::reader() {
  return [this](const std::string& path, const OpenOptions& options, Outcome&) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (opened_.valid() && path == path_) return ReadInput{opened_.get(), {}};  // get() leaves it invalid: once
    }
    return ReadInput{Checkpoint::open(path, options), {}};
  };
}

}  // namespace ckptfix::cli
