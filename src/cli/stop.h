// Why a run stops before its work is done, and how it ends then.
//
// SIGINT, SIGTERM and SIGHUP (Ctrl-C, a CI job's timeout, Slurm's time
// limit and scancel, Kubernetes ending a pod, a closed terminal) are
// blocked in every thread and taken by one thread that waits for them.
// The first asks the run to stop: no input is started after it, the writes
// in progress fail at their next check (the library's interrupt_writes(),
// removing their temporary files as any failure does), the report is
// finished (every input done with its outcome, the others "interrupted"),
// one line says so, and the process exits with 128 + the signal (130,
// 143, 129). A second signal removes every temporary file at once and
// exits then. SIGKILL cannot be caught: the next write of the same output
// removes what the killed run left (io/atomic_file.h).
//
// Standard output failing stops a run the same way: on a closed pipe
// (`ckptfix check -r models | head`) the process then ends as command-line
// tools do, killed by SIGPIPE, saying nothing; on any other failure (a full
// disk, an I/O error) it says so on stderr and exits 1, since the report
// it was writing is lost.
#pragma once

#include <string>

namespace ckptfix::cli {

/// Blocks the stop signals and starts the thread that takes them. First
/// thing in main(), before any other thread, so that every thread inherits
/// the mask. SIGPIPE is ignored: a closed pipe is an error a write returns.
void start_signal_thread();

/// Whether the run should start no more inputs: a stop signal came, or
/// standard output failed.
bool stopping();

/// The stop signal that came (SIGINT, SIGTERM, SIGHUP), or 0.
int stop_signal();

/// "SIGINT", "SIGTERM", "SIGHUP".
std::string signal_name(int signal);

/// Standard output failed with `error` (errno): the run stops. EPIPE: a
/// closed pipe.
void stdout_failed(int error);

/// The errno standard output failed with, or 0.
int stdout_error();

/// Why an input was not started, for its report: "interrupted by SIGTERM
/// before it was started", "not started: standard output failed".
std::string not_started_reason();

/// Prints the one line that says a stop signal ended the run:
/// "ckptfix: interrupted by SIGTERM: `what`". Once; later calls print nothing.
void say_interrupted(const std::string& what);

/// The exit code of a run that ends with `code`, considering why it
/// stopped: 128 + the signal (saying so, unless said already); 1 when
/// standard output or standard error failed (saying so where it can).
int ending_exit_code(int code);

/// Ends the process as a closed pipe ends a command-line tool (killed by
/// SIGPIPE), where standard output failed so; otherwise returns.
void end_if_pipe_closed();

}  // namespace ckptfix::cli
