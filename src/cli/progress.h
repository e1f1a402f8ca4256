// Progress bars on stderr: one line per file being processed, redrawn in
// place, shown only when stderr is a terminal, the run is neither --quiet
// nor --json, and the work has taken more than about a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ckptfix::cli {

class ProgressDisplay;

/// One file's progress, handed to the code that does the work.
class Progress {
 public:
  Progress() = default;  // a no-op progress
  Progress(ProgressDisplay* display, size_t slot) : display_(display), slot_(slot) {}
  /// Starts (or restarts) a phase: "writing", "verifying", ...
  void phase(const std::string& name, uint64_t total);
  void update(uint64_t done);

 private:
  ProgressDisplay* display_ = nullptr;
  size_t slot_ = 0;
};

class ProgressDisplay {
 public:
  /// `enabled`: a terminal, not quiet, not JSON.
  ProgressDisplay(bool enabled, size_t slots);
  ~ProgressDisplay();

  bool enabled() const { return enabled_; }
  /// A file begins in a slot (one slot per worker).
  void begin(size_t slot, const std::string& label);
  void end(size_t slot);
  void phase(size_t slot, const std::string& name, uint64_t total);
  void update(size_t slot, uint64_t done);
  /// Prints finished text above the bars (so it is not overwritten).
  void print(const std::string& text);

  /// True when stderr is a terminal and the environment does not say otherwise.
  static bool stderr_is_terminal();

 private:
  struct Slot {
    bool active = false;
    std::string label, phase;
    uint64_t total = 0, done = 0;
    std::chrono::steady_clock::time_point phase_start;
  };
  void redraw_locked(bool force);
  void clear_locked();

  bool enabled_;
  std::mutex mutex_;
  std::vector<Slot> slots_;
  size_t lines_drawn_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  std::chrono::milliseconds delay_;
};

}  // namespace ckptfix::cli
