// The last resort of the command line: running out of memory, or an
// exception that reaches std::terminate, still ends in the usual one-line
// error naming the input and an exit code, never in an abort; and the
// process's limits raised where a large input needs them.
#pragma once

#include <string>

namespace ckptfix::cli {

/// The input this thread is working on, for the last-resort error line
/// (see install_last_resort_handlers); empty when none.
void set_current_input(const std::string& path);

/// Makes running out of memory end in the usual one-line error and exit 1,
/// never in std::terminate: a reserve of memory is given back at the first
/// failed allocation (so that code which allocates while it unwinds, like
/// nlohmann::json's destructor, can finish), and should an exception still
/// reach std::terminate, it prints "ckptfix: error: 'FILE': ..." and exits 1.
void install_last_resort_handlers();

/// Raises the soft limit on open files to the hard one: a distributed
/// checkpoint of a thousand ranks holds a thousand .distcp files, each kept
/// open while the checkpoint is.
void raise_open_file_limit();
/// Takes the memory reserve again once an input that ran out of memory is done.
void rearm_memory_reserve();
/// The exit code of the last-resort line (1; diff, where 1 means "different", sets 2).
void set_last_resort_exit_code(int code);
/// The exit code of a failure of ckptfix itself (the last-resort line's,
/// standard output that cannot be written): 1, or diff's 2.
int trouble_exit_code();

}  // namespace ckptfix::cli
