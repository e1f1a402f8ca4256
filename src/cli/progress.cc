#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "ckptfix/error.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

std::string bar(uint64_t done, uint64_t total, int width) {
  const int filled = total == 0 || done >= total
                         ? width
                         : static_cast<int>(static_cast<double>(done) / static_cast<double>(total) * width);
  // Appended piece by piece: `"[" + std::string(...)` trips GCC 12's false -Wrestrict (PR 105651).
  std::string s = "[";
  s.append(static_cast<size_t>(filled), '#');
  s.append(static_cast<size_t>(width - filled), '.');
  return s + "]";
}

}  // namespace

void Progress::phase(const std::string& name, uint64_t total) {
  if (display_ != nullptr) display_->phase(slot_, name, total);
}

void Progress::update(uint64_t done) {
  if (display_ != nullptr) display_->update(slot_, done);
}

bool ProgressDisplay::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ProgressDisplay::ProgressDisplay(bool enabled, size_t slots)
    : enabled_(enabled), slots_(slots), start_(std::chrono::steady_clock::now()), delay_(1000) {
  // CKPTFIX_PROGRESS_DELAY_MS: how long work runs before bars appear (tests use 0).
  if (const char* d = std::getenv("CKPTFIX_PROGRESS_DELAY_MS")) delay_ = std::chrono::milliseconds(std::atoi(d));
}

ProgressDisplay::~ProgressDisplay() {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_locked();
}

void ProgressDisplay::begin(size_t slot, const std::string& label) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[slot] = Slot{true, printable(label), "opening", 0, 0, std::chrono::steady_clock::now()};
  redraw_locked(false);
}

void ProgressDisplay::end(size_t slot) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[slot].active = false;
  redraw_locked(true);
}

void ProgressDisplay::phase(size_t slot, const std::string& name, uint64_t total) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slots_[slot];
  s.phase = name;
  s.total = total;
  s.done = 0;
  s.phase_start = std::chrono::steady_clock::now();
  redraw_locked(true);
}

void ProgressDisplay::update(size_t slot, uint64_t done) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  slots_[slot].done = done;
  redraw_locked(false);
}

void ProgressDisplay::print(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  clear_locked();
  std::cerr << text << std::flush;
  redraw_locked(true);
}

void ProgressDisplay::clear_locked() {
  if (lines_drawn_ == 0) return;
  std::fprintf(stderr, "\x1b[%zuF\x1b[J", lines_drawn_);  // up to the first bar, clear to the end
  std::fflush(stderr);
  lines_drawn_ = 0;
}

void ProgressDisplay::redraw_locked(bool force) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < delay_) return;
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  clear_locked();
  for (const Slot& s : slots_) {
    if (!s.active) continue;
    const double seconds = std::chrono::duration<double>(now - s.phase_start).count();
    const double rate = seconds > 0 ? static_cast<double>(s.done) / seconds : 0;
    std::string eta = "--";
    if (rate > 0 && s.total > s.done) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0fs", static_cast<double>(s.total - s.done) / rate);
      eta = buf;
    }
    if (s.total == 0) {  // nothing to measure yet
      std::fprintf(stderr, "%s %s\n", s.label.c_str(), s.phase.c_str());
      ++lines_drawn_;
      continue;
    }
    std::fprintf(stderr, "%s %-9s %s %s / %s  %s/s  ETA %s\n", s.label.c_str(), s.phase.c_str(),
                 bar(s.done, s.total, 24).c_str(), human_bytes(s.done).c_str(), human_bytes(s.total).c_str(),
                 human_bytes(static_cast<uint64_t>(rate)).c_str(), eta.c_str());
    ++lines_drawn_;
  }
  std::fflush(stderr);
}

}  // namespace ckptfix::cli
