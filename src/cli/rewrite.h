// What every rewriting command (convert, strip-prefix, add-prefix, remap,
// cast, fix) shares: where outputs go, which dicts to edit, and the work on
// one input: open, apply the passes, write, verify, report.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ckptfix/passes.h"
#include "ckptfix/rewrite.h"
#include "cli/batch.h"

namespace ckptfix::cli {

struct RewriteArgs {
  BatchArgs batch;
  std::string output;   ///< -o, one input only
  std::string out_dir;  ///< --out-dir: same relative paths under DIR
  bool in_place = false;
  bool in_place_offered = true;  ///< false for salvage, which never replaces its input
  bool force = false;  ///< --force: replace outputs, even those a rerun would take for done
  bool no_verify = false;
  bool sync = false;
  std::string gpu = "auto";
  /// --format: "safetensors", "pt" or "dcp" (a directory); empty: from the output's extension
  /// (.safetensors, or .pt/.pth/.bin/.ckpt), else the input's format.
  std::string format;
  bool drop_aliases = false;          ///< --drop-aliases (safetensors outputs)
  std::vector<std::string> metadata;  ///< --metadata KEY=VALUE (safetensors outputs)
  std::optional<std::string> max_shard_size;  ///< --max-shard-size SIZE (safetensors outputs: a shard set)
  std::optional<std::string> torch;           ///< --torch VERSION: the release the output is for
  std::vector<std::string> allow_globals;     ///< --allow-global PATTERN: calls of unknown globals to trust
};

/// Adds the batch options, -o, --out-dir, --in-place, --force, --no-verify, --gpu, --threads,
/// --format, --drop-aliases, --metadata, --torch, --max-shard-size, --allow-global. Without `may_replace_input`
/// (salvage), neither --in-place nor --no-verify.
void add_rewrite_options(CLI::App* cmd, RewriteArgs& args, bool may_replace_input = true);
/// Adds --key PATH (repeatable).
void add_key_option(CLI::App* cmd, PassOptions& passes);
/// --weights-only (when `with_switch`; the weights-only command implies it) and --drop-unknown.
void add_weights_only_options(CLI::App* cmd, PassOptions& passes, bool with_switch);
/// Adds --to and --map FROM=TO.
void add_remap_options(CLI::App* cmd, PassOptions& passes, std::vector<std::string>& maps);
/// Adds --dtype, --from, --keep (the dtype strings are parsed by finish_cast_options).
void add_cast_options(CLI::App* cmd, std::string& dtype, std::vector<std::string>& from, PassOptions& passes,
                      bool required);

/// Turns --map FROM=TO strings into pairs; throws Error(kInvalidArgument).
void finish_remap_options(const std::vector<std::string>& maps, PassOptions& passes);
/// Parses --dtype and --from; throws Error(kInvalidArgument).
void finish_cast_options(const std::string& dtype, const std::vector<std::string>& from, PassOptions& passes);
/// Parses a dtype given on the command line (fp16, bfloat16, ...); throws Error(kInvalidArgument).
DType parse_user_dtype(const std::string& text, const std::string& flag);
/// Parses a torch release given with --torch (2.6, 2.11.0, ...): one ckptfix
/// models; throws Error(kInvalidArgument).
TorchVersion parse_user_torch(const std::string& text);
/// The help text of --torch.
std::string torch_option_help(const std::string& what);
/// Parses --max-shard-size: "5GB" (decimal, as transformers reads it),
/// "500MiB" (binary), "1000" (bytes); throws Error(kInvalidArgument).
uint64_t parse_size(const std::string& text);
/// Parses --metadata KEY=VALUE items; throws Error(kInvalidArgument).
std::vector<std::pair<std::string, std::string>> parse_metadata(const std::vector<std::string>& items);

/// What reading one input gave (ckptfix/rewrite.h): the checkpoint, and
/// what the reading itself did, for the front of the input's report line
/// ("salvaged 11 of 13 tensors"); an input with such notes counts as changed.
using ReadInput = ckptfix::ReadInput;
/// How a rewriting command reads an input: Checkpoint::open, or for salvage
/// its own reader, which may also add to the input's outcome (its JSON
/// object and text), kept even when the reader then fails.
using InputReader = std::function<ReadInput(const std::string& path, const OpenOptions& options, Outcome& outcome)>;

/// The options run_rewrite opens each input with.
OpenOptions rewrite_open_options(const RewriteArgs& args, const PassOptions& passes);

/// Runs `command` over every input, each read by `read` (default:
/// Checkpoint::open). Returns the exit code.
int run_rewrite(const std::string& command, const RewriteArgs& args, const PassOptions& passes,
                const InputReader& read = {});

}  // namespace ckptfix::cli
