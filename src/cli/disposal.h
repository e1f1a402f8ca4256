// What a command is done with, destroyed on another thread, and at the
// end of the process not destroyed at all.
//
// A checkpoint of 100,000 tensors is a graph of about 1.5 million values:
// freeing them took a tenth of a `fix --like` of that file, after its last
// line was printed. The CLI hands such objects here: in a batch, they are
// freed beside the next file's work; when the command is done, main() ends
// the process without waiting (exit_now), and the system takes the memory
// back at once. Only the CLI does this; the library frees what it makes.
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace ckptfix::cli {

/// Runs `drop` (which destroys what it holds) on the disposal thread.
void dispose(std::function<void()> drop);

/// Destroys `object` on the disposal thread.
template <typename T>
void dispose_of(T&& object) {
  auto held = std::make_shared<std::decay_t<T>>(std::forward<T>(object));
  dispose([held = std::move(held)]() mutable { held.reset(); });
}

/// Ends the process with `code`: stdout and stderr flushed, what is left to
/// dispose of left to the system, no static destructors run. Only from main().
[[noreturn]] void exit_now(int code);

}  // namespace ckptfix::cli
