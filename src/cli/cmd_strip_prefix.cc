// ckptfix strip-prefix IN... [--prefix P]... [--auto]: removes wrapper
// prefixes (module., _orig_mod., ...) from state-dict keys and _metadata.
#include "cli/commands.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_strip_prefix(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "strip-prefix", "Remove a prefix (default 'module.') from state-dict keys and their _metadata");
  add_rewrite_options(cmd, args->out);
  cmd->add_option("--prefix", args->passes.strip_prefixes, "Prefix to remove (repeatable; default: module.)")
      ->allow_extra_args(false);
  cmd->add_flag("--auto", args->passes.auto_strip,
                "Remove every known wrapper prefix all keys share (module., _orig_mod., _forward_module., "
                "_checkpoint_wrapped_module., _fsdp_wrapped_module.), repeatedly");
  add_key_option(cmd, args->passes);
  return [args] {
    PassOptions passes = args->passes;
    if (passes.strip_prefixes.empty() && !passes.auto_strip) passes.strip_prefixes.push_back("module.");
    return run_rewrite("strip-prefix", args->out, passes);
  };
}

}  // namespace ckptfix::cli
