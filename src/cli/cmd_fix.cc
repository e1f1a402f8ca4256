// ckptfix fix IN... [passes]: several passes in one read and one write, in
// the order strip, add, remap, cast (see include/ckptfix/passes.h for why);
// or, with --like REF, the state dict fitted to a model (fit.h), then
// remapped and cast.
#include <optional>

#include "ckptfix/error.h"
#include "cli/commands.h"
#include "cli/disposal.h"
#include "cli/like_options.h"
#include "cli/read_ahead.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_fix(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
    std::vector<std::string> maps;
    std::string dtype;
    std::vector<std::string> from;
    LikeArgs like;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "fix", "Apply several passes in one read and write: strip, add prefix, remap, cast (in that order)");
  add_rewrite_options(cmd, args->out);
  cmd->add_flag("--strip-prefix{module.}", args->passes.strip_prefixes,
                "Remove this prefix from keys (repeatable; --strip-prefix alone means 'module.')");
  cmd->add_flag("--auto-prefix", args->passes.auto_strip, "Remove every known wrapper prefix all keys share");
  cmd->add_option("--add-prefix", args->passes.add_prefix, "Add this prefix to keys");
  add_remap_options(cmd, args->passes, args->maps);
  add_cast_options(cmd, args->dtype, args->from, args->passes, false);
  add_like_options(cmd, args->like, true);
  add_key_option(cmd, args->passes);
  add_weights_only_options(cmd, args->passes, true);
  return [args] {
    PassOptions passes = args->passes;
    std::optional<ReadAhead> input;  // opened while the reference is read
    try {
      finish_remap_options(args->maps, passes);
      // --dtype like: each floating tensor to the model's type for it.
      const bool dtype_like = args->dtype == "like";
      finish_cast_options(dtype_like ? std::string() : args->dtype, args->from, passes);
      passes.fit = fit_options(args->like);
      passes.fit.dtype_like = dtype_like;
      const bool any_pass = !passes.strip_prefixes.empty() || passes.auto_strip || !passes.add_prefix.empty() ||
                            passes.to_device || !passes.device_map.empty() || passes.cast_to || dtype_like ||
                            !args->like.like.empty() || passes.weights_only || passes.drop_unknown || passes.for_libtorch;
      if (!any_pass) {
        throw Error(ErrorKind::kInvalidArgument,
                    "fix needs a pass: --strip-prefix, --auto-prefix, --add-prefix, --to, --map, --dtype, --like or "
                    "--weights-only (ckptfix convert re-writes a file, or changes its format, alone)");
      }
      if (!args->like.like.empty()) input.emplace(args->out.batch, rewrite_open_options(args->out, passes));
      OpenOptions reference_open = open_options(args->out.batch.limits);
      // The input is opened on the other core meanwhile, and the fit waits
      // for it, not for the reference: that core is not taken from it.
      if (input && input->opening()) reference_open.make_values_ahead = false;
      passes.like = read_like(args->like, reference_open);
    } catch (const Error& e) {
      print_error(e);
      return exit_code_for(e);
    }
    const int code = run_rewrite("fix", args->out, passes, input ? input->reader() : InputReader{});
    if (passes.like) dispose_of(std::move(passes.like));  // a model of 100,000 keys takes a while to free
    return code;
  };
}

}  // namespace ckptfix::cli
