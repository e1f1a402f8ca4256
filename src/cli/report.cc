#include "cli/report.h"


#include <algorithm>
#include <map>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "ckptfix/salvage.h"
#include "cli/python_names.h"

namespace ckptfix::cli {

std::string human_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  }
  return buf;
}

namespace {

// The library's option names (fields of PassOptions, CheckOptions, ...) and
// the flags that set them.
constexpr std::pair<std::string_view, std::string_view> kFlagOfOption[] = {
    {"keys", "--key"},
    {"like", "--like"},
    {"like_key", "--like-key"},
    {"renames", "--rename"},
    {"drops", "--drop"},
    {"allow_missing", "--allow-missing"},
    {"drop_unexpected", "--drop-unexpected"},
    {"drop_mismatched", "--drop-mismatched"},
    {"dtype_like", "--dtype like"},
    {"extract", "--extract"},
    {"strip_prefixes", "--prefix"},
    {"add_prefix", "--add-prefix"},
    {"to_device", "--to"},
    {"device_map", "--map FROM=TO"},
    {"cast_to", "--dtype"},
    {"cast_from", "--from"},
    {"keep", "--keep"},
    {"for_libtorch", "--for-libtorch"},
    {"weights_only", "--weights-only"},
    {"drop_unknown", "--drop-unknown"},
    {"allow_globals", "--allow-global"},
    {"no_prefixes", "--no-prefix"},
    {"gpu", "--gpu"},
    {"overwrite", "--force"},
    {"in_place", "--in-place"},
    {"drop_aliases", "--drop-aliases"},
    {"metadata", "--metadata"},
    {"max_shard_size", "--max-shard-size"},
    {"stage", "--stage DIR"},
    {"torch", "--torch"},
};

// Where a command spells an option its own way.
struct CommandFlag {
  std::string_view command;
  std::string_view option;
  std::string_view flag;
};
constexpr CommandFlag kCommandFlags[] = {
    {"fix", "strip_prefixes", "--strip-prefix"},
    {"fix", "auto_strip", "--auto-prefix"},
    {"strip-prefix", "auto_strip", "--auto"},
    {"add-prefix", "add_prefix", "--prefix"},
};

std::string g_command;  // set once, before any thread starts
// Every command's option names (--long), set once before any thread starts:
// a hint names a flag only where the command has it.
std::map<std::string, std::set<std::string>> g_flags_of_command;

// `flag` ("--extract", "--map FROM=TO") as the current command can take
// it, or, when it has no such option, with the commands that have it
// ("--extract of ckptfix convert"); as is when the commands are not known.
std::string flag_for_command(std::string_view flag) {
  const std::string name(flag.substr(0, flag.find(' ')));
  const auto own = g_flags_of_command.find(g_command);
  if (own == g_flags_of_command.end() || own->second.count(name) != 0) return std::string(flag);
  std::string others;
  for (const auto& [command, flags] : g_flags_of_command) {
    if (flags.count(name) != 0) others += (others.empty() ? "" : " or ") + command;
  }
  if (others.empty()) return std::string(flag);
  return std::string(flag) + " of ckptfix " + others + " (" + g_command + " has no " + name + ")";
}

// Phrases of the library that the command line says its own way.
constexpr std::pair<std::string_view, std::string_view> kPhraseOfOption[] = {
    {"the weights-only repair (`weights_only`)", "ckptfix weights-only (or --weights-only of convert and fix)"},
    {"`allow_globals` trusts", "--allow-global PATTERN trusts"},
};

std::string with_flags(std::string text) {
  // Options are named in backquotes; most texts (a report's 100,000 key
  // moves) have none, and every pattern below would search them in vain.
  if (text.find('`') == std::string::npos) return text;
  for (const auto& [phrase, said] : kPhraseOfOption) {
    for (size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + said.size())) {
      text.replace(at, phrase.size(), said);
    }
  }
  for (const CommandFlag& c : kCommandFlags) {
    if (c.command != g_command) continue;
    const std::string quoted = "`" + std::string(c.option) + "`";
    for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + c.flag.size())) {
      text.replace(at, quoted.size(), c.flag);
    }
  }
  for (const auto& [option, flag] : kFlagOfOption) {
    const std::string quoted = "`" + std::string(option) + "`";
    size_t at = text.find(quoted);
    if (at == std::string::npos) continue;
    const std::string said = flag_for_command(flag);
    for (; at != std::string::npos; at = text.find(quoted, at + said.size())) {
      text.replace(at, quoted.size(), said);
    }
  }
  return text;
}

}  // namespace

void set_current_command(const std::string& name) { g_command = name; }

void set_command_flags(const std::string& command, const std::vector<std::string>& flags) {
  g_flags_of_command[command].insert(flags.begin(), flags.end());
}

std::string cli_message(const Error& e) {
  std::string text = with_flags(e.what());
  if (e.kind() == ErrorKind::kExists) text += "; use --force to overwrite it";
  if (python_option_names()) text = with_python_names(std::move(text));
  return text;
}

void print_error(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  std::cerr << "ckptfix: error: " << printable(error != nullptr ? cli_message(*error) : e.what()) << "\n";
  if (error != nullptr) {
    for (const std::string& line : error->details()) std::cerr << "ckptfix:   " << detail_text(line) << "\n";
  }
  std::cerr << std::flush;
}

std::vector<std::string> detail_lines(const Error& e) {
  std::vector<std::string> out;
  for (const std::string& line : e.details()) out.push_back(detail_text(line));
  return out;
}

std::string detail_text(const std::string& line) {
  std::string text = with_flags(line);
  if (python_option_names()) text = with_python_names(std::move(text));
  return printable(text);
}


std::string json_text(nlohmann::json doc) {
  try {
    return doc.dump(2);
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8
    doc["invalid_utf8_replaced"] = true;
    return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

void add_limit_option(CLI::App* cmd, std::vector<std::string>& limits, const std::string& extra) {
  std::string names;
  for (std::string_view n : ReadLimits::names()) names += (names.empty() ? "" : ", ") + std::string(n);
  if (!extra.empty()) names += ", " + extra;
  cmd->add_option("--limit", limits,
                  "NAME=VALUE: raise (or lower) a limit on what reading a file may cost (repeatable; "
                  "docs/security.md): " + names + ". VALUE may end in K, M, G or T (powers of 1024)")
      ->allow_extra_args(false);
}

std::pair<std::string, uint64_t> parse_limit(const std::string& item) {
  const auto eq = item.find('=');
  auto bad = [&](const std::string& why) { return Error(ErrorKind::kInvalidArgument, "--limit '" + item + "': " + why); };
  if (eq == std::string::npos) throw bad("expected NAME=VALUE");
  std::string value = item.substr(eq + 1);
  unsigned shift = 0;
  if (!value.empty()) {
    const std::string units = "KMGT";
    const auto unit = units.find(value.back());
    if (unit != std::string::npos) {
      shift = 10 * static_cast<unsigned>(unit + 1);
      value.pop_back();
    }
  }
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 19) {
    throw bad("VALUE must be a non-negative integer, optionally ending in K, M, G or T");
  }
  const uint64_t number = std::stoull(value);
  if (shift > 0 && number > (UINT64_MAX >> shift)) throw bad("VALUE is too large");
  return {item.substr(0, eq), number << shift};
}

OpenOptions open_options(const std::vector<std::string>& limits) {
  OpenOptions options;
  for (const std::string& item : limits) {
    const auto [name, value] = parse_limit(item);
    auto bad = [&](const std::string& why) { return Error(ErrorKind::kInvalidArgument, "--limit '" + item + "': " + why); };
    if (!options.limits.set(name, value)) {
      std::string names;
      for (std::string_view n : ReadLimits::names()) names += (names.empty() ? "" : ", ") + std::string(n);
      throw bad("unknown limit '" + name + "'; the limits are " + names);
    }
  }
  return options;
}

Error with_salvage_hint(const Error& e, const std::string& path, const OpenOptions& options) {
  Error hinted = e;
  if (e.kind() == ErrorKind::kCorrupt) {
    if (const std::string hint = salvage_hint(path, options); !hint.empty()) hinted.note(hint);
  }
  return hinted;
}

int exit_code_for(const Error& e) {
  // Fixed by changing the command line, not the input. An output that
  // exists is a problem of that input (a rerun writes the others): 1.
  return e.kind() == ErrorKind::kInvalidArgument ? kExitUsage : kExitFailed;
}

nlohmann::json path_to_json(const Path& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const PathElement& p : path) {
    if (const auto* s = std::get_if<std::string>(&p)) {
      out.push_back(*s);
    } else {
      out.push_back(std::get<int64_t>(p));
    }
  }
  return out;
}

nlohmann::json verification_json(const std::optional<VerifyReport>& verification) {
  if (!verification) return {{"status", "skipped"}, {"reason", "--no-verify"}};
  return verification_json(*verification);
}

nlohmann::json verification_json(const VerifyReport& v) {
  return {{"status", "ok"},
          {"records", v.records},
          {"records_crc_checked", v.records_crc_checked},
          {"records_copied", v.records_copied},
          {"storages", v.storages},
          {"tensors", v.tensors},
          {"bytes", v.bytes},
          {"seconds", v.seconds},
          {"gpu", gpu_json(v.gpu)}};
}

nlohmann::json gpu_json(const GpuReport& gpu) {
  nlohmann::json out = {{"status", gpu_status_name(gpu.status)}};
  if (!gpu.reason.empty()) out["reason"] = gpu.reason;
  if (gpu.status == GpuReport::Status::kOk) {
    out["device"] = gpu.device;
    out["storages"] = gpu.storages;
    out["bytes"] = gpu.bytes;
    out["nan"] = gpu.nan;
    out["inf"] = gpu.inf;
    out["seconds"] = gpu.seconds;
    out["gb_per_s"] = gpu.seconds > 0 ? static_cast<double>(gpu.bytes) / gpu.seconds / 1e9 : 0.0;
    const GpuReport::Phases& p = gpu.phases;
    out["phases"] = {{"open", p.open},           {"open_waited", p.open_waited},     {"host_copy", p.host_copy},
                     {"checksum", p.checksum},   {"device", gpu.seconds},            {"device_waited", p.device_waited},
                     {"writer_waited", p.writer_waited}};
  }
  return out;
}

nlohmann::json global_use_json(const GlobalRef& g) {
  nlohmann::json j = {{"name", g.dotted()}, {"kind", global_kind_name(g.kind)}, {"use", global_use_name(g.use)},
                      {"where", g.where}};
  if (g.use != GlobalUse::kReferenced) j["how"] = g.how;
  return j;
}

nlohmann::json weights_only_json(const WeightsOnlyVerdict& verdict) {
  return {{"loads", verdict.loads}, {"globals", verdict.globals}, {"opcodes", verdict.opcodes}};
}

const char* version() {
#ifdef CKPTFIX_VERSION
  return CKPTFIX_VERSION;
#else
  return "unknown";
#endif
}

std::string version_text() {
#ifdef CKPTFIX_COMMIT
  const char* commit = CKPTFIX_COMMIT;
#else
  const char* commit = "unknown";
#endif
  std::string out = std::string("ckptfix ") + version() + " (commit " + commit + ")\n";
  const GpuSupport gpu = gpu_support();
  if (!gpu.built_in) return out + "GPU load test: not built in (verification runs on the CPU)";
  out += "GPU load test: built in (CUDA runtime " + gpu.cuda_runtime + ", linked statically; needs an NVIDIA driver " +
         (gpu.minimum_driver.empty() ? std::string("for it") : gpu.minimum_driver + " or newer") + ")\n";
  return out + "on this machine: " +
         (gpu.usable ? "usable, " + gpu.device : "not usable, " + gpu.reason + " (verification runs on the CPU)");
}

}  // namespace ckptfix::cli
