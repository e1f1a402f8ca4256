#include "io/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix {
namespace {

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "interrupt_writes must be safe in a signal handler");

// The temporary files being written, by ticket. A map: a batch writes a few
// at a time, and each is added and taken out once.
struct Temporaries {
  std::mutex mutex;
  uint64_t next = 1;
  std::map<uint64_t, std::string> paths;
};

Temporaries& temporaries() {
  // Never destroyed: a signal may come while static destructors run.
  static Temporaries* const table = new Temporaries();
  return *table;
}

}  // namespace

void interrupt_writes() noexcept { g_interrupted.store(true, std::memory_order_relaxed); }

bool writes_interrupted() noexcept { return g_interrupted.load(std::memory_order_relaxed); }

void clear_interrupt() noexcept { g_interrupted.store(false, std::memory_order_relaxed); }

void stop_point() {
  if (g_interrupted.load(std::memory_order_relaxed)) {
    throw Error(ErrorKind::kInterrupted, "interrupted before the output was complete; nothing was written");
  }
}

uint64_t remember_temporary(const std::string& path) {
  Temporaries& t = temporaries();
  std::lock_guard<std::mutex> lock(t.mutex);
  const uint64_t ticket = t.next++;
  t.paths.emplace(ticket, path);
  return ticket;
}

void forget_temporary(uint64_t ticket) noexcept {
  Temporaries& t = temporaries();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.paths.erase(ticket);
}

size_t remove_temporary_files() noexcept {
  Temporaries& t = temporaries();
  std::lock_guard<std::mutex> lock(t.mutex);
  size_t removed = 0;
  for (const auto& [ticket, path] : t.paths) removed += ::unlink(path.c_str()) == 0 ? 1 : 0;
  t.paths.clear();
  return removed;
}

}  // namespace ckptfix
