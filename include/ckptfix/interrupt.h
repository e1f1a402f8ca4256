// Stopping the writes in progress: what a program does when it is told to
// stop (SIGINT, SIGTERM, SIGHUP: Ctrl-C, a CI timeout, Slurm's time limit,
// `kubectl delete`).
//
// Every output is written to a temporary file beside it and renamed into
// place only once complete and verified, so a program killed in between
// leaves its output as it was, and a temporary file that the next write of
// the same output removes. A program that catches its stop signal can do
// better: interrupt_writes() has every write in progress fail at its next
// check (each buffer written, each piece read back: milliseconds) with
// Error(kInterrupted), and that failure removes its temporary files as any
// failure does; remove_temporary_files() removes them at once, for a
// program that must end now without waiting for its writes to unwind.
#pragma once

#include <cstddef>

namespace ckptfix {

/// Has every write in progress, and every write started after it, fail with
/// Error(kInterrupted) at its next check. Safe from any thread and from a
/// signal handler (one atomic store).
void interrupt_writes() noexcept;

/// Whether interrupt_writes() was called since the last clear_interrupt().
bool writes_interrupted() noexcept;

/// Lets writes run again: for a program that handled its stop and goes on.
void clear_interrupt() noexcept;

/// Removes the temporary file of every write in progress in this process
/// now, without waiting for the writes (which then fail); returns how many
/// it removed. Safe from any thread, not from a signal handler (it takes a
/// lock): the CLI calls it from the thread that waits for signals.
size_t remove_temporary_files() noexcept;

}  // namespace ckptfix
