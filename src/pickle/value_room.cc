#include "pickle/value_room.h"

#include <new>
#include <system_error>
#include <utility>

namespace ckptfix {

ValueRoom::ValueRoom(ValueGraph& graph) : graph_(graph) {
  if (std::thread::hardware_concurrency() == 1) return;  // no second core: a thread would only take turns
  try {
    thread_ = std::thread([this] { make_ahead(); });
  } catch (const std::system_error&) {
    return;  // no second thread: the graph makes its own chunks
  }
  graph_.take_room_from(this);
}

ValueRoom::~ValueRoom() {
  graph_.take_room_from(nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  taken_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<Value[]> ValueRoom::take() {
  std::unique_ptr<Value[]> chunk;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (chunks_.empty()) return nullptr;
    chunk = std::move(chunks_.back());
    chunks_.pop_back();
    ++taken_count_;
  }
  taken_.notify_one();
  return chunk;
}

size_t ValueRoom::taken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return taken_count_;
}

void ValueRoom::make_ahead() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (chunks_.size() >= kAhead) {
      taken_.wait(lock);
      continue;
    }
    lock.unlock();
    std::unique_ptr<Value[]> chunk;
    try {
      chunk = ValueGraph::new_chunk();  // its pages written here, not by the reader
    } catch (const std::bad_alloc&) {
      lock.lock();
      break;  // the reader makes its own, and says what it cannot
    }
    lock.lock();
    chunks_.push_back(std::move(chunk));
  }
}

std::unique_ptr<Value[]> ValueGraph::take_shared_room() { return shared_room_->take(); }

}  // namespace ckptfix
