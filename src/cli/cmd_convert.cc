// ckptfix convert IN... -o OUT | --out-dir DIR: re-writes checkpoints as torch
// zip files (upgrading legacy files), changing nothing else.
#include "cli/commands.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_convert(CLI::App& app) {
  auto args = std::make_shared<RewriteArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Re-write checkpoints as torch zip files (legacy files are upgraded)");
  add_rewrite_options(cmd, *args);
  return [args] { return run_rewrite("convert", *args, PassOptions{}); };
}

}  // namespace ckptfix::cli
