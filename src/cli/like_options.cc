#include "cli/like_options.h"

#include "ckptfix/error.h"

namespace ckptfix::cli {

void add_like_options(CLI::App* cmd, LikeArgs& args, bool fit_options) {
  cmd->add_option("--like", args.like,
                  "The model the state dict goes into: a checkpoint (a meta-device state dict will do) or a JSON "
                  "{key: {shape, dtype}} file" +
                      std::string(fit_options ? "; the keys are fitted to it (--dtype like: each floating tensor to "
                                                "its type)"
                                              : "; its load_state_dict(strict=True) must accept the file as it is"))
      ->allow_extra_args(false);
  cmd->add_option("--like-key", args.like_key, "With --like: the state dict of the reference at this path")
      ->allow_extra_args(false);
  // For the Python package's like=model: its messages name the model's
  // class, not the temporary file the reference was written to. Hidden.
  cmd->add_option("--like-name", args.like_name, "What messages call the --like reference")->group("");
  if (!fit_options) return;
  cmd->add_option("--rename", args.renames,
                  "With --like: rename keys by REGEX=REPL first, as Python's re.sub (repeatable, in order)")
      ->allow_extra_args(false);
  cmd->add_option("--drop", args.fit.drops, "With --like: leave out the keys matching this glob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--allow-missing", args.fit.allow_missing,
                "With --like: write what fits even where the model has keys the file lacks (load with strict=False)");
  cmd->add_flag("--drop-unexpected", args.fit.drop_unexpected, "With --like: leave out the keys the model does not have");
  cmd->add_flag("--drop-mismatched", args.fit.drop_mismatched,
                "With --like: leave out the keys whose shape is not the model's (they are then missing)");
}

std::shared_ptr<const ModelReference> read_like(const LikeArgs& args, const OpenOptions& open) {
  if (args.like.empty()) {
    if (!args.like_key.empty()) throw Error(ErrorKind::kInvalidArgument, "--like-key goes with --like");
    return nullptr;
  }
  ModelReference reference = read_model_reference(args.like, args.like_key, open);
  if (!args.like_name.empty()) reference.name = args.like_name;
  return std::make_shared<const ModelReference>(std::move(reference));
}

std::pair<std::string, std::string> parse_rename(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;  // an escaped character, '=' included, belongs to the pattern
      continue;
    }
    if (text[i] == '=') {
      if (i == 0) break;
      return {text.substr(0, i), text.substr(i + 1)};
    }
  }
  throw Error(ErrorKind::kInvalidArgument, "--rename '" + text + "': expected REGEX=REPLACEMENT (a '=' in the regex is '\\=')");
}

FitOptions fit_options(const LikeArgs& args) {
  FitOptions fit = args.fit;
  for (const std::string& r : args.renames) fit.renames.push_back(parse_rename(r));
  return fit;
}

}  // namespace ckptfix::cli
