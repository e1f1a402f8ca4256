// Error messages for the Python package (python/ckptfix): its functions run
// this binary with CKPTFIX_OPTION_NAMES=python, and what a message names by
// a flag (--force, --key, --recursive) it then names by the argument of the
// Python function that sets it (force=True, key, recursive=True), so that a
// Python caller is never told about flags it cannot pass.
#pragma once

#include <string>

namespace ckptfix::cli {

/// Whether the environment asks for Python's names (CKPTFIX_OPTION_NAMES=python).
bool python_option_names();

/// `text` (a message naming flags) with each flag and a few phrases named
/// as the Python package names them.
std::string with_python_names(std::string text);

}  // namespace ckptfix::cli
