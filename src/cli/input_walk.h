// Which inputs a run has: its file arguments, and with --recursive every
// checkpoint below its directory arguments (docs/cli.md, "What -r takes").
#pragma once

#include <string>
#include <vector>

#include "ckptfix/error.h"

namespace ckptfix::cli {

/// What expand_inputs needs of the command line.
struct InputArgs {
  std::vector<std::string> inputs;  ///< the arguments
  bool recursive = false;
  std::vector<std::string> globs;  ///< file names taken below a directory (default *.pt *.pth *.bin *.ckpt)
  std::string tag;                 ///< --tag: each argument's DeepSpeed tag directory is the input
  /// A directory never walked (the run's --out-dir, where it lies inside
  /// an input tree: a rerun would read its own outputs as inputs).
  std::string exclude;
};

/// One input.
struct Input {
  std::string path;      ///< to open: as given, or as found (through the names walked, links not resolved)
  std::string relative;  ///< its path below the directory argument it was found under (or its own name)
  std::string error;     ///< set when it cannot be used: the run reports it failed, with this reason
  ErrorKind kind = ErrorKind::kNotCheckpoint;  ///< the error's kind (kIo: a dangling link, an unreadable directory)
};

/// The inputs, in argument order, each directory's in sorted order. A
/// walk takes every file whose name matches the globs (links to files
/// included, named by the link) and every distributed or DeepSpeed
/// checkpoint directory; it follows links to directories outside the tree,
/// never into the tree again or into a directory above it. A link that
/// matches but leads nowhere (dangling, or a loop of links), a directory it
/// cannot read, and a tree with no checkpoint at all are inputs with an
/// error, never left out. Throws Error(kInvalidArgument) for a --tag that
/// is no plain name or comes with --recursive.
std::vector<Input> expand_inputs(const InputArgs& args);

}  // namespace ckptfix::cli
