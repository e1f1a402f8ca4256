// One rewrite as one library call: an input read, the passes applied, the
// call policy judged, the output written by the writer of its format,
// verified, and only then put in place. The command line fills a
// RewriteJob from its flags and renders the RewriteOutcome; a C++ program
// does the same in a few lines (docs/library.md). Nothing here names a
// flag: messages name options by their field names in backquotes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/passes.h"
#include "ckptfix/rerun.h"
#include "ckptfix/safetensors.h"
#include "ckptfix/save.h"

namespace ckptfix {

struct SaveSeams;  // the test-only writers' faults (write/save_seams.h)

/// What the output is written as.
enum class OutputFormat {
  kByName,       ///< by the output's extension (.safetensors; .pt, .pth, .bin, .ckpt), else the input's format
  kTorch,        ///< a torch.save zip (a .bin shard set with max_shard_size)
  kSafetensors,  ///< a safetensors file (a shard set with max_shard_size)
  kDcp,          ///< a torch.distributed.checkpoint directory
};

/// The input as a reader made it, and what reading it changed.
struct ReadInput {
  Checkpoint checkpoint;
  /// What reading changed, said before the passes' changes ("salvaged 7 of
  /// 9 tensors"); an input read with notes is rewritten even in place.
  std::vector<std::string> notes;
};

/// One rewrite, as data.
struct RewriteJob {
  std::filesystem::path input;
  /// The output file (a directory for kDcp); the input itself with `in_place`.
  std::filesystem::path output;
  OutputFormat format = OutputFormat::kByName;
  /// Replace the input, only once its new version is complete; an input with
  /// nothing to change is left alone.
  bool in_place = false;
  /// Write whatever is there. Without it an output made before from this
  /// input as it is now by this recipe (rerun.h) is done, and one that is
  /// not known to be is kept only where its bytes are what this job writes.
  bool force = false;
  /// The passes, checked (validate_pass_options).
  std::shared_ptr<const ValidPassOptions> passes;
  /// Verification, threads, sync, the output fence, the globals trusted...
  /// (`overwrite` is set from `force` and `in_place`; `policy.made_from`
  /// from `recipe`).
  SaveOptions save;
  /// safetensors outputs only (safetensors.h).
  bool drop_aliases = false;
  std::vector<std::pair<std::string, std::string>> metadata;
  /// Above 0: a shard set (safetensors, or a torch output named *.bin).
  uint64_t max_shard_size = 0;
  /// What makes the output besides its input (rerun.h: recipe_id).
  std::string recipe;
  /// How the input is read, once and again for each shard of a torch shard
  /// set. Unset: Checkpoint::open(input, open).
  std::function<ReadInput()> read;
  OpenOptions open;
  /// Called with the output's folder before anything is written there (a
  /// caller that removes the folders it made, if empty, records them).
  std::function<void(const std::filesystem::path& folder)> before_write;
  /// The test-only build's faults; null everywhere else.
  std::shared_ptr<const SaveSeams> test_seams;
};

enum class RewriteStatus {
  kChanged,        ///< written, with changes (or converted, or a shard set)
  kWrittenAsIs,    ///< written, nothing changed
  kNothingToDo,    ///< in place, nothing to change: the input left alone
  kDoneBefore,     ///< the output was made before from this input as it is now by this recipe
  kKeptExisting,   ///< the output there has the very bytes this job writes: left as it was
};

/// What a rewrite did, as data for a report.
struct RewriteOutcome {
  RewriteStatus status = RewriteStatus::kNothingToDo;
  CheckpointFormat input_format = CheckpointFormat::kZip;
  /// kZip (a torch file, or a torch .bin shard set), kSafetensors or kDcp.
  CheckpointFormat written_as = CheckpointFormat::kZip;
  std::vector<std::string> notes;  ///< ReadInput::notes
  PassReport report;
  /// The passes' warnings.
  std::vector<std::string> warnings;
  /// Globals ckptfix does not know as data that the output keeps (not
  /// called: a value), and those it calls because `save.allow_globals`
  /// trusts them.
  std::vector<GlobalRef> unknown_globals, trusted_calls;
  /// The writer's result, of the one writer that ran.
  std::optional<SaveResult> torch;
  std::optional<TorchShardSetResult> torch_shards;
  std::optional<SafetensorsResult> safetensors;
  std::optional<DcpSaveResult> dcp;
  /// Across writers: bytes written, the file the verification names (a
  /// set's index), its verification (unset: not verified), shards of a
  /// torch shard set (0: one file).
  uint64_t bytes = 0;
  std::string verified_file;
  std::optional<VerifyReport> verification;
  size_t shard_count = 0;
  /// For kDoneBefore and kKeptExisting, and for an output there that this
  /// job would not have written so: what was found (rerun.h).
  OutputFinding found;
};

/// Runs `job`: reads the input, applies the passes, refuses a call the
/// policy refuses (Error kUnsafe) and an option the output's format does
/// not take (Error kInvalidArgument), writes, verifies, replaces. Errors
/// name the input file.
RewriteOutcome rewrite(const RewriteJob& job);

/// What the output of `job` on `input` is written as, by `format`, the
/// output's name and the input's format.
CheckpointFormat output_format_of(OutputFormat format, const std::filesystem::path& output,
                                  const Checkpoint& input, bool for_libtorch);

}  // namespace ckptfix
