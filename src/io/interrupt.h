// The library's side of include/ckptfix/interrupt.h: where writes check
// for an interruption, and the table of the temporary files being written.
#pragma once

#include <cstdint>
#include <string>

#include "ckptfix/interrupt.h"

namespace ckptfix {

/// Throws Error(kInterrupted) when interrupt_writes() was called. Called
/// wherever a write makes progress: each buffer written, each piece read back.
void stop_point();

/// Adds a temporary file being written to the table remove_temporary_files()
/// empties; returns its ticket for forget_temporary().
uint64_t remember_temporary(const std::string& path);
/// Takes a temporary file out of the table: it was renamed into place or removed.
void forget_temporary(uint64_t ticket) noexcept;

}  // namespace ckptfix
