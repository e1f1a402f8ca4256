// ckptfix convert IN... -o OUT | --out-dir DIR: re-writes checkpoints as torch
// zip files (upgrading legacy files) or safetensors, changing nothing else.
#include "ckptfix/error.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_convert(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("convert", "Re-write checkpoints as torch zip files (legacy files are upgraded) or as safetensors");
  add_rewrite_options(cmd, args->out);
  cmd->add_option_function<std::string>(
      "--extract", [args](const std::string& path) { args->passes.extract = path; },
      "Keep only the value at this '/'-separated path, e.g. state_dict (it becomes the root)");
  cmd->add_flag("--for-libtorch", args->passes.for_libtorch,
                "Write the state dict so LibTorch's torch::jit::pickle_load reads it: a plain dict on the CPU, "
                "no _metadata");
  cmd->add_option("--key", args->passes.keys,
                  "The state dict to write: with --for-libtorch, the one LibTorch gets (default: the root, or the "
                  "only one); otherwise the same as --extract (a safetensors output needs one when the root is a "
                  "training checkpoint)")
      ->allow_extra_args(false);
  add_weights_only_options(cmd, args->passes, true);
  return [args] {
    PassOptions passes = args->passes;
    if (!passes.keys.empty() && !passes.for_libtorch) {
      if (passes.keys.size() > 1 || passes.extract) {
        print_error(Error(ErrorKind::kInvalidArgument, "convert takes one --key (or --extract) without --for-libtorch"));
        return kExitUsage;
      }
      passes.extract = passes.keys.front();
      passes.keys.clear();
    }
    return run_rewrite("convert", args->out, passes);
  };
}

}  // namespace ckptfix::cli
