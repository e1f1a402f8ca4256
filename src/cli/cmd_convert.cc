// ckptfix convert IN... -o OUT | --out-dir DIR: re-writes checkpoints as torch
// zip files (upgrading legacy files), changing nothing else.
#include "cli/commands.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_convert(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("convert", "Re-write checkpoints as torch zip files (legacy files are upgraded)");
  add_rewrite_options(cmd, args->out);
  cmd->add_option_function<std::string>(
      "--extract", [args](const std::string& path) { args->passes.extract = path; },
      "Keep only the value at this '/'-separated path, e.g. state_dict (it becomes the root)");
  return [args] { return run_rewrite("convert", args->out, args->passes); };
}

}  // namespace ckptfix::cli
