#include "cli/last_resort.h"
#include "cli/stop.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <thread>
#include <algorithm>
#include <string>
#include <system_error>

#include "ckptfix/interrupt.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_stdout_error{0};
std::atomic<bool> g_told{false};

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

// Writes `text` to stderr without the iostreams (their lock may be held by
// the thread this one is about to end).
void say(const std::string& text) {
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void wait_for_signals() {
  const sigset_t set = stop_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    int none = 0;
    if (g_signal.compare_exchange_strong(none, sig)) {
      interrupt_writes();  // the writes in progress fail at their next check, removing their files
      continue;
    }
    // The second: at once.
    const size_t removed = remove_temporary_files();
    say("ckptfix: " + signal_name(sig) + " again: stopped at once" +
        (removed > 0 ? "; removed " + std::to_string(removed) + " unfinished output" + (removed == 1 ? "" : "s") : "") +
        "\n");
    ::_exit(128 + g_signal.load());
  }
}

// Blocked as the program starts, before main() and any static
// constructor that could start a thread: a signal in the first moments is
// then kept for the thread that waits for it (the shared libraries load
// before this, a millisecond in which a signal still ends the process).
__attribute__((constructor(101))) void block_stop_signals_early() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace

void start_signal_thread() {
  ::signal(SIGPIPE, SIG_IGN);
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  try {
    std::thread(wait_for_signals).detach();
  } catch (const std::system_error&) {
    // No thread: the signals then end the process as by default.
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
}

bool stopping() { return g_signal.load() != 0 || g_stdout_error.load() != 0; }

int stop_signal() { return g_signal.load(); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    default: return "signal " + std::to_string(signal);
  }
}

void stdout_failed(int error) {
  int none = 0;
  if (g_stdout_error.compare_exchange_strong(none, error == 0 ? EIO : error)) {
    interrupt_writes();  // the report is lost: nothing more is written
  }
}

int stdout_error() { return g_stdout_error.load(); }

std::string not_started_reason() {
  if (const int sig = g_signal.load()) return "interrupted by " + signal_name(sig) + " before it was started";
  return "not started: standard output failed (" + std::string(std::strerror(g_stdout_error.load())) + ")";
}

void say_interrupted(const std::string& what) {
  if (g_told.exchange(true)) return;
  std::cerr << "ckptfix: interrupted by " << signal_name(g_signal.load()) << ": " << what << std::endl;
}

int ending_exit_code(int code) {
  std::cout.flush();
  if (const int sig = g_signal.load()) {
    say_interrupted("stopped before its work was done; nothing unfinished was left behind");
    return 128 + sig;
  }
  const int error = g_stdout_error.load();
  if (error != 0 && error != EPIPE) {
    std::cerr << "ckptfix: error: cannot write to standard output: " << std::strerror(error)
              << "; the run stopped, and its report is incomplete" << std::endl;
    return std::max(code, trouble_exit_code());
  }
  std::cerr.flush();
  if (!std::cerr) return std::max(code, trouble_exit_code());  // nothing can say why
  return code;
}

void end_if_pipe_closed() {
  if (g_stdout_error.load() != EPIPE) return;
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr);
  ::raise(SIGPIPE);
  ::_exit(128 + SIGPIPE);  // not reached
}

}  // namespace ckptfix::cli
