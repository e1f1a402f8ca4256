// ckptfix remap IN... --to DEVICE | --map FROM=TO...: retags the saved device
// of storages, so the file loads without map_location.
#include "ckptfix/error.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {

CommandRun register_remap(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    PassOptions passes;
    std::vector<std::string> maps;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("remap", "Retag the saved device of storages (e.g. --to cpu, --map cuda:3=cuda:0)");
  add_rewrite_options(cmd, args->out);
  add_remap_options(cmd, args->passes, args->maps);
  add_key_option(cmd, args->passes);
  return [args] {
    PassOptions passes = args->passes;
    try {
      finish_remap_options(args->maps, passes);
      if (!passes.to_device && passes.device_map.empty()) {
        throw Error(ErrorKind::kInvalidArgument, "remap needs --to DEVICE or --map FROM=TO");
      }
    } catch (const Error& e) {
      print_error(e);
      return exit_code_for(e);
    }
    return run_rewrite("remap", args->out, passes);
  };
}

}  // namespace ckptfix::cli
