// The options of fitting keys to a model (fix --like, check --like):
// --like REF, --like-key PATH, and for fix --rename, --drop,
// --allow-missing, --drop-unexpected, --drop-mismatched.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/fit.h"

namespace ckptfix::cli {

struct LikeArgs {
  std::string like;      ///< --like REF
  std::string like_key;  ///< --like-key PATH
  std::string like_name;  ///< --like-name (hidden): what messages call the reference (the model's class)
  std::vector<std::string> renames;  ///< --rename REGEX=REPL
  FitOptions fit;        ///< --drop, --allow-missing, --drop-unexpected, --drop-mismatched
};

/// Adds --like and --like-key; with `fit_options` (fix) the rest.
void add_like_options(CLI::App* cmd, LikeArgs& args, bool fit_options);

/// The model reference --like names (read once, before any input), or null
/// without --like; throws Error naming the file.
std::shared_ptr<const ModelReference> read_like(const LikeArgs& args, const OpenOptions& open);

/// --rename REGEX=REPL split at its first '=' that no backslash escapes
/// (`\=` is a literal '=' in the pattern, as in Python); throws
/// Error(kInvalidArgument) without one.
std::pair<std::string, std::string> parse_rename(const std::string& text);

/// The FitOptions of `args`, renames parsed.
FitOptions fit_options(const LikeArgs& args);

}  // namespace ckptfix::cli
