// ckptfix cast IN... --dtype T [--from T,...] [--keep GLOB]...: converts
// floating tensors bit-identically to torch's Tensor.to(dtype).
#include "ckptfix/error.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_cast(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
    std::string dtype;
    std::vector<std::string> from;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("cast", "Convert floating tensors of state dicts to another float type");
  add_rewrite_options(cmd, args->out);
  add_cast_options(cmd, args->dtype, args->from, args->passes, true);
  add_key_option(cmd, args->passes);
  return [args] {
    PassOptions passes = args->passes;
    try {
      finish_cast_options(args->dtype, args->from, passes);
    } catch (const Error& e) {
      print_error(e);
      return exit_code_for(e);
    }
    return run_rewrite("cast", args->out, passes);
  };
}

}  // namespace ckptfix::cli
