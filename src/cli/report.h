// Shared pieces of the command line: exit codes, error lines, byte counts
// for people, and the JSON forms of paths and tensors.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "ckptfix/weights_only.h"

namespace ckptfix::cli {

/// Exit codes: 0 success, 1 an input failed, 2 usage error.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

/// "1.5 MiB", "12 B".
std::string human_bytes(uint64_t bytes);

/// The one-line error: "ckptfix: error: 'FILE': WHERE: WHAT". Text that is
/// not a ckptfix::Error (which is printable already) is made printable.
void print_error(const std::exception& e);

/// `doc` as indented JSON. Strings that are not UTF-8 (a key, a path) have
/// their bad bytes replaced by U+FFFD, and the document then says so with
/// "invalid_utf8_replaced": true.
std::string json_text(nlohmann::json doc);

/// Adds --limit NAME=VALUE (repeatable): a ReadLimits field by name, or
/// one of `extra` (a command's own limits, comma-separated).
void add_limit_option(CLI::App* cmd, std::vector<std::string>& limits, const std::string& extra = "");
/// One --limit NAME=VALUE (VALUE may end in K, M, G, T); throws Error(kInvalidArgument).
std::pair<std::string, uint64_t> parse_limit(const std::string& item);
/// Options for opening inputs with the --limit values; throws
/// Error(kInvalidArgument) for an unknown name or a bad value.
OpenOptions open_options(const std::vector<std::string>& limits);

/// For an input that does not open because it is damaged (Error kCorrupt):
/// `e` with "; ckptfix salvage can recover 11 of 13 tensors" added when
/// salvage would recover something; any other error as it is.
Error with_salvage_hint(const Error& e, const std::string& path, const OpenOptions& options);

/// Usage errors (bad option values, outputs that collide) exit with 2;
/// everything else with 1, an output that exists among them.
int exit_code_for(const Error& e);

/// ["state_dict", "conv.weight"] / [0, 1] as a JSON array.
nlohmann::json path_to_json(const Path& path);

/// The "verification" object of a written file's JSON report (skipped when
/// there is none: --no-verify).
nlohmann::json verification_json(const std::optional<VerifyReport>& verification);
/// A VerifyReport as every --json report shows it (verify and the writing commands alike).
nlohmann::json verification_json(const VerifyReport& report);
/// The "gpu" object: status, and reason or device, bytes, seconds.
nlohmann::json gpu_json(const GpuReport& gpu);

/// An error's one line as the command line says it: the library names its
/// options by their field names in backquotes (`keep`, `to_device`); this
/// names the flags that set them (--keep, --to) and adds the flag that
/// would help ("use --force" for an existing output).
std::string cli_message(const Error& e);
/// The "weights_only" object: {"loads", "globals", "opcodes"}.
nlohmann::json weights_only_json(const WeightsOnlyVerdict& verdict);
/// A global with its kind and use: {"name", "kind", "use", "where", and
/// "how" unless it is only referenced}.
nlohmann::json global_use_json(const GlobalRef& g);

/// Version string.
const char* version();
/// What --version prints: version, commit, and whether the GPU load test is
/// built in and usable here.
std::string version_text();


/// The command being run ("fix", "strip-prefix"): error messages name the
/// library's options by this command's flags (`strip_prefixes` is --prefix
/// of strip-prefix, --strip-prefix of fix).
void set_current_command(const std::string& name);
/// The --long option names `command` has, so that a message about a
/// command names only flags it takes, and says which command has the others.
void set_command_flags(const std::string& command, const std::vector<std::string>& flags);

/// A line of an error's details (Error::details), its option names said as
/// the error's own are (cli_message).
std::string detail_text(const std::string& line);
/// Every line of an error's details, as detail_text says each.
std::vector<std::string> detail_lines(const Error& e);



}  // namespace ckptfix::cli
