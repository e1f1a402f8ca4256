#include "io/mapping_guard.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <utility>

namespace ckptfix {
namespace {

// The table the handler reads. Only lock-free atomics: a signal handler may
// not take locks, and may interrupt a thread in the middle of (un)guarding.
struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<uintptr_t> base{0};  // 0 while not guarding; set last, cleared first
  std::atomic<size_t> length{0};
  std::atomic<bool> lost{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free && std::atomic<size_t>::is_always_lock_free);

std::array<Slot, MappingGuard::kMaxGuarded> g_slots;
struct sigaction g_previous {};
uintptr_t g_page = 4096;

void pass_on(int signal, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  // The default action (an ignored SIGBUS from a fault is the default too):
  // on return the access faults again and the process dies of it.
  ::signal(SIGBUS, SIG_DFL);
}

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : g_slots) {
    const uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || address < base || address - base >= slot.length.load(std::memory_order_relaxed)) continue;
    // mmap is a plain system call on Linux, safe here though POSIX does not list it.
    void* page = reinterpret_cast<void*>(address & ~(g_page - 1));
    if (::mmap(page, g_page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) break;
    slot.lost.store(true, std::memory_order_relaxed);
    return;
  }
  pass_on(signal, info, context);
}

void install_handler() {
  g_page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

MappingGuard::MappingGuard(const void* base, size_t length) {
  if (base == nullptr || length == 0) return;
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  for (size_t i = 0; i < g_slots.size(); ++i) {
    bool expected = false;
    if (!g_slots[i].taken.compare_exchange_strong(expected, true)) continue;
    g_slots[i].lost.store(false);
    g_slots[i].length.store(length);
    g_slots[i].base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
}

MappingGuard::~MappingGuard() { release(); }

MappingGuard::MappingGuard(MappingGuard&& other) noexcept : slot_(std::exchange(other.slot_, -1)) {}

MappingGuard& MappingGuard::operator=(MappingGuard&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

bool MappingGuard::lost() const { return slot_ >= 0 && g_slots[static_cast<size_t>(slot_)].lost.load(); }

void MappingGuard::release() {
  if (slot_ < 0) return;
  Slot& slot = g_slots[static_cast<size_t>(slot_)];
  slot.base.store(0, std::memory_order_release);
  slot.taken.store(false);
  slot_ = -1;
}

}  // namespace ckptfix
