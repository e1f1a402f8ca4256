// Running the same job again: outputs already made are left as they are.
//
// A batch interrupted halfway, or a job-array task retried, is run again
// as it was. Outputs the first run finished must then be recognised as
// done (reported unchanged, not rewritten), and an output that no longer
// matches its input (the input changed since, or the options did) must
// never be taken for done.
//
// How an output knows what it was made from, without a byte of it
// changing (convert still gives back the bytes torch wrote): each output
// carries a record in an extended attribute, `user.ckptfix.made-from`, set
// on the finished temporary file before it is renamed into place. It holds
// the recipe (a hash of everything that decides the output's bytes besides
// the input: recipe_id), the input's path, the stamp of every input file
// as it was when read (inode, size, status-change time: any write,
// truncation, rename or replacement of an input moves it, and no program
// can set it back), and the stamp of every file written (inode, size,
// modification time). A rerun reads the record and stats the files: no
// input is opened, no output read.
//
// Where the record cannot be (a file system without user extended
// attributes: tmpfs before Linux 6.6, some network file systems; an output
// copied without its attributes; a file another program wrote), the
// output's bytes are the only witness: the run writes its output to a
// temporary file as always and keeps the existing one if the bytes are the
// same (OutputPolicy::keep_identical), reporting it unchanged. That costs
// what a first run costs, and is always right, since outputs are
// deterministic.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/outputs.h"
#include "ckptfix/passes.h"

namespace ckptfix {

/// What decides an output's bytes besides its input: the passes, and how
/// the output is written.
struct OutputRecipe {
  /// How the input is read: "" (Checkpoint::open) or the name of another
  /// reader ("salvage").
  std::string reader;
  /// The format asked for: "pt", "safetensors", "dcp", "" (by the output's
  /// name, else the input's).
  std::string format;
  /// The pickle written for LibTorch (SaveOptions::libtorch_pickle).
  bool libtorch_pickle = false;
  /// safetensors: SafetensorsOptions::drop_aliases and metadata.
  bool drop_aliases = false;
  std::vector<std::pair<std::string, std::string>> metadata;
  /// A shard set's largest file (0: one file).
  uint64_t max_shard_size = 0;
};

/// A hash (32 hex digits) of `passes` and `recipe`: equal for two runs
/// exactly when they write the same bytes from the same input. Options
/// that change how a run goes but not what it writes (threads,
/// verification, limits, trusted globals) are not in it. The torch release
/// an output is for is, the default resolved (PassOptions::torch).
std::string recipe_id(const ValidPassOptions& passes, const OutputRecipe& recipe);

/// What a run finds where it is about to write an output.
enum class OutputState {
  kAbsent,    ///< nothing there: write it
  kDone,      ///< made from this input, as it is now, by this recipe, and not changed since: nothing to do
  kOutdated,  ///< made by ckptfix, but from another input, by other options, or its input or a file of it changed since
  kUnknown,   ///< there, with no record of what made it (see above): only its bytes can tell
};

/// "absent", "done", "outdated", "unknown".
std::string_view output_state_name(OutputState state);

/// What find_output found, and why, in words for a message ("the input
/// changed since it was written").
struct OutputFinding {
  OutputState state = OutputState::kAbsent;
  std::string why;
};

/// Looks at `output` (the path a write is given: a file, a shard set's
/// name, a distributed checkpoint's directory) for an earlier output made
/// from `made_from`: its record is on the file itself, on a shard set's
/// index (`output` + ".index.json") or on a directory's `.metadata`. `in_place`: the output is the input itself, rewritten, so
/// the input's stamp is not compared (the rewrite changed it); the output's
/// is. Never reads an input or an output's bytes; never throws.
OutputFinding find_output(const std::filesystem::path& output, const MadeFrom& made_from, bool in_place = false);

}  // namespace ckptfix
