// ckptfix: the command line. It parses flags into option structs, calls the
// library, prints, and maps errors to exit codes; nothing more.
#include <algorithm>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/last_resort.h"
#include "cli/commands.h"
#include "cli/disposal.h"
#include "cli/report.h"
#include "cli/stop.h"
#include "cli/suggestions.h"

namespace {

// Every option name of `cmd` (--long and -s forms), for suggestions.
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> out;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
    for (const std::string& s : o->get_snames()) out.push_back("-" + s);
  }
  return out;
}

// For an option CLI11 did not expect: "unknown option '--strp-prefix' of
// strip-prefix; did you mean '--prefix'?", or nothing when no argument is
// an unknown option.
std::string unknown_option_message(const CLI::App& cmd, const std::string& command, int argc, char** argv) {
  const std::vector<std::string> known = option_names(cmd);
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end()) continue;
    if (arg[1] != '-' && arg.size() > 2) continue;  // -qj: short flags run together
    std::string message = "unknown option '" + arg + "' of " + command;
    if (const auto near = ckptfix::cli::closest_name(arg, known)) message += "; did you mean '" + *near + "'?";
    return message;
  }
  return "";
}

// `--strip-prefix` of fix and diff is a flag whose value is optional
// (alone: 'module.'), so CLI11 takes only `--strip-prefix=model.` as a value
// and `--strip-prefix model.` as a flag and an input file. The space is what
// people write: a next word that ends in '.' and names no file is the
// prefix, joined to its flag before CLI11 parses. One that names no file and
// has no '.' at all (`model_`, `backbone`) is no file name either: a usage
// error says how to write it (CLI::ValidationError).
std::vector<std::string> with_prefix_values_joined(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const bool has_optional_prefix = argc > 1 && (args[1] == "fix" || args[1] == "diff");
  if (!has_optional_prefix) return args;
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    const bool joinable = args[i] == "--strip-prefix" && i + 1 < args.size() && !args[i + 1].empty() &&
                          args[i + 1][0] != '-' && args[i + 1].back() == '.' &&
                          !std::filesystem::exists(std::filesystem::path(args[i + 1]));
    const bool prefix_like = args[i] == "--strip-prefix" && i + 1 < args.size() && !args[i + 1].empty() &&
                             args[i + 1][0] != '-' && args[i + 1].find('.') == std::string::npos &&
                             args[i + 1].find('/') == std::string::npos &&
                             !std::filesystem::exists(std::filesystem::path(args[i + 1]));
    if (joinable) {
      out.push_back("--strip-prefix=" + args[i + 1]);
      ++i;
    } else if (prefix_like) {
      throw CLI::ValidationError("'" + args[i + 1] + "' after --strip-prefix names no file; to strip the prefix '" +
                                 args[i + 1] + "', write --strip-prefix=" + args[i + 1] +
                                 " (alone, --strip-prefix strips 'module.')");
    } else {
      out.push_back(args[i]);
    }
  }
  return out;
}

// CLI11's words for a value that is no number, or out of range ("Could
// not convert: --jobs = abc", "--threads: Value 0 not in range 1 to
// 1024"), as one short line that names the option and the value.
std::string numeric_option_message(const CLI::ParseError& e) {
  const std::string text = e.what();
  const std::string convert = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr && text.rfind(convert, 0) == 0) {
    const size_t eq = text.find(" = ", convert.size());
    if (eq != std::string::npos) {
      return text.substr(convert.size(), eq - convert.size()) + " '" + text.substr(eq + 3) + "': not a number";
    }
  }
  const size_t value = text.find(": Value ");
  const size_t range = text.find(" not in range ");
  if (value != std::string::npos && range != std::string::npos && range > value) {
    return text.substr(0, value) + " '" + text.substr(value + 8, range - value - 8) + "': give a number from " +
           text.substr(range + 14);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckptfix::cli;
  start_signal_thread();  // first: every thread made later inherits the blocked signals
  install_last_resort_handlers();
  raise_open_file_limit();
  CLI::App app{"ckptfix: convert and repair PyTorch checkpoints without Python, never running pickle code", "ckptfix"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return version_text(); });
  std::vector<std::pair<std::string, CommandRun>> commands;
  commands.emplace_back("inspect", register_inspect(app));
  commands.emplace_back("convert", register_convert(app));
  commands.emplace_back("strip-prefix", register_strip_prefix(app));
  commands.emplace_back("add-prefix", register_add_prefix(app));
  commands.emplace_back("remap", register_remap(app));
  commands.emplace_back("cast", register_cast(app));
  commands.emplace_back("fix", register_fix(app));
  commands.emplace_back("verify", register_verify(app));
  commands.emplace_back("diff", register_diff(app));
  commands.emplace_back("check", register_check(app));
  commands.emplace_back("weights-only", register_weights_only(app));
  commands.emplace_back("salvage", register_salvage(app));
  commands.emplace_back("layout", register_layout(app));

  for (const auto& c : commands) set_command_flags(c.first, option_names(*app.get_subcommand(c.first)));

  // `ckptfix` alone: what it does and its commands, as --help says it.
  if (argc == 1) {
    std::cerr << app.help() << std::flush;
    return kExitUsage;
  }

  // CLI11 would call an unknown command an unexpected argument; say it
  // plainly, with the command that was most likely meant.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    std::vector<std::string> names;
    for (const auto& c : commands) names.push_back(c.first);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::cerr << "ckptfix: error: unknown command '" << ckptfix::printable(name) << "'";
      if (const auto near = closest_name(name, names)) std::cerr << "; did you mean '" << *near << "'?";
      std::cerr << "\nrun 'ckptfix --help' for the commands" << std::endl;
      return kExitUsage;
    }
    set_current_command(name);
  }
  std::vector<std::string> joined;
  try {
    joined = with_prefix_values_joined(argc, argv);
  } catch (const CLI::ValidationError& e) {
    std::cerr << "ckptfix: error: " << ckptfix::printable(e.what()) << "\nrun 'ckptfix " << ckptfix::printable(argv[1])
              << " --help' for usage" << std::endl;
    return kExitUsage;
  }
  std::vector<char*> joined_argv;
  for (std::string& a : joined) joined_argv.push_back(a.data());
  argc = static_cast<int>(joined_argv.size());
  joined_argv.push_back(nullptr);
  argv = joined_argv.data();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string message = numeric_option_message(e);
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && argc > 1) {
      const std::string name = argv[1];
      for (const auto& c : commands) {
        if (c.first != name) continue;
        if (std::string unknown = unknown_option_message(*app.get_subcommand(name), name, argc, argv); !unknown.empty()) {
          message = std::move(unknown);
        }
      }
    }
    std::cerr << "ckptfix: error: " << ckptfix::printable(message) << "\n";
    std::cerr << "run 'ckptfix " << (argc > 1 && argv[1][0] != '-' ? ckptfix::printable(argv[1]) + " " : "")
              << "--help' for usage" << std::endl;
    return kExitUsage;
  }
  // The commands report each input's failure themselves; this is the last
  // line, so that nothing ever ends in std::terminate (exit 134).
  try {
    for (auto& [name, run] : commands) {
      // What the command handed to disposal.h is left to the system.
      if (!app.get_subcommand(name)->parsed()) continue;
      const int code = run();
      end_if_pipe_closed();
      exit_now(ending_exit_code(code));
    }
  } catch (const std::exception& e) {
    print_error(e);
    exit_now(ending_exit_code(kExitFailed));
  }
  return kExitUsage;
}
