// ckptfix add-prefix IN... --prefix P: adds a prefix to state-dict keys so a
// plain state dict loads into a DataParallel/DDP-wrapped model.
#include "cli/commands.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_add_prefix(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("add-prefix", "Add a prefix (e.g. 'module.') to state-dict keys and their _metadata");
  add_rewrite_options(cmd, args->out);
  cmd->add_option("--prefix", args->passes.add_prefix, "Prefix to add to keys that do not start with it")->required();
  add_key_option(cmd, args->passes);
  return [args] { return run_rewrite("add-prefix", args->out, args->passes); };
}

}  // namespace ckptfix::cli
