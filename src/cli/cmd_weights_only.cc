// ckptfix weights-only IN... -o OUT [--drop-unknown]: rewrites what the
// default torch.load of torch >= 2.6 (weights_only=True) refuses into the
// plain data it stands for (the table in docs/cli.md); `fix` and `convert`
// take the same as --weights-only.
#include "cli/commands.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

void add_weights_only_options(CLI::App* cmd, PassOptions& passes, bool with_switch) {
  if (with_switch) {
    cmd->add_flag("--weights-only", passes.weights_only,
                  "Rewrite what the default torch.load (weights_only=True) refuses: namespaces, numpy values, "
                  "paths, pickled modules (see ckptfix weights-only)");
  }
  cmd->add_flag("--drop-unknown", passes.drop_unknown,
                "Replace values of classes no rule knows with None (reported) instead of refusing the input");
}

CommandRun register_weights_only(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "weights-only",
      "Make checkpoints load with torch.load's default weights_only=True (torch >= 2.6), keeping their information");
  add_rewrite_options(cmd, args->out);
  add_weights_only_options(cmd, args->passes, false);
  return [args] {
    PassOptions passes = args->passes;
    passes.weights_only = true;
    return run_rewrite("weights-only", args->out, passes);
  };
}

}  // namespace ckptfix::cli
