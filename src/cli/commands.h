// Each subcommand registers itself on the CLI11 app; the returned callback
// runs it after parsing and returns the exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ckptfix::cli {

using CommandRun = std::function<int()>;

CommandRun register_inspect(CLI::App& app);
CommandRun register_convert(CLI::App& app);
CommandRun register_strip_prefix(CLI::App& app);
CommandRun register_add_prefix(CLI::App& app);
CommandRun register_remap(CLI::App& app);
CommandRun register_cast(CLI::App& app);
CommandRun register_fix(CLI::App& app);
CommandRun register_verify(CLI::App& app);
CommandRun register_diff(CLI::App& app);
CommandRun register_check(CLI::App& app);
CommandRun register_layout(CLI::App& app);
CommandRun register_weights_only(CLI::App& app);
CommandRun register_salvage(CLI::App& app);

}  // namespace ckptfix::cli
