// The last-resort handlers (cli/last_resort.h).
#include "cli/last_resort.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "cli/report.h"

namespace ckptfix::cli {

namespace {

// The input of this thread, for the last-resort line (a fixed buffer: that
// line is written when memory has run out).
thread_local char current_input[4096];
// Atomic: batch workers rearm it while another may be running out of memory.
std::atomic<char*> memory_reserve{nullptr};
std::atomic<int> last_resort_exit_code{kExitFailed};
constexpr size_t kReserveBytes = size_t{32} << 20;

// new_handler: the first failed allocation gives the reserve back and fails
// anyway, so that what unwinds (destructors that allocate) has memory to do it.
void out_of_memory() {
  char* reserve = memory_reserve.exchange(nullptr);
  if (reserve == nullptr) throw std::bad_alloc();  // already given back: fail for real
  delete[] reserve;
  throw std::bad_alloc();
}

// Appends `text` to buf[*n..cap) as printable() would, without allocating.
void append_printable(char* buf, size_t cap, size_t* n, const char* text) {
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(text); *p != 0 && *n + 5 < cap; ++p) {
    if (*p < 0x20 || *p >= 0x7F) {
      *n += static_cast<size_t>(std::snprintf(buf + *n, cap - *n, "\\x%02x", *p));
    } else {
      buf[(*n)++] = static_cast<char>(*p);
    }
  }
}

[[noreturn]] void last_resort() {
  const char* what = "an unexpected failure";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = "out of memory (the file needs more than this machine can allocate)";
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  }
  static char line[8192];
  size_t n = 0;
  append_printable(line, sizeof line, &n, "ckptfix: error: ");
  if (current_input[0] != 0) {
    append_printable(line, sizeof line, &n, "'");
    append_printable(line, sizeof line, &n, current_input);
    append_printable(line, sizeof line, &n, "': ");
  }
  append_printable(line, sizeof line, &n, what);
  line[n++] = '\n';
  std::fflush(stdout);
  std::fwrite(line, 1, n, stderr);
  std::_Exit(last_resort_exit_code);
}

}  // namespace

void set_current_input(const std::string& path) {
  const size_t n = std::min(path.size(), sizeof current_input - 1);
  path.copy(current_input, n);
  current_input[n] = 0;
}

void raise_open_file_limit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);  // best effort: without it, very large sets fail to open with a clear error
  }
}

void install_last_resort_handlers() {
  rearm_memory_reserve();
  std::set_new_handler(out_of_memory);
  std::set_terminate(last_resort);
}

void set_last_resort_exit_code(int code) { last_resort_exit_code = code; }

int trouble_exit_code() { return last_resort_exit_code; }

void rearm_memory_reserve() {
  if (memory_reserve.load() != nullptr) return;
  char* fresh = new (std::nothrow) char[kReserveBytes];
  char* expected = nullptr;
  if (!memory_reserve.compare_exchange_strong(expected, fresh)) delete[] fresh;
}

}  // namespace ckptfix::cli
