#include "cli/disposal.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "bytes/background.h"

namespace ckptfix::cli {
namespace {

// Never destroyed: exit_now ends the process while it may still be busy.
Background& disposal_thread() {
  static Background* const thread = new Background();
  return *thread;
}

}  // namespace

void dispose(std::function<void()> drop) {
  try {
    disposal_thread().run(std::move(drop));  // the future is not kept: nothing waits for a disposal
  } catch (const std::system_error&) {
    // No thread to be had: the task, and what it held, went as run() threw.
  }
}

void exit_now(int code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}

}  // namespace ckptfix::cli
