// Shared pieces of the command line: exit codes, error lines, byte counts
// for people, and the JSON forms of paths and tensors.
#pragma once

#include <cstdint>
#include <string>

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

/// The one-line error: "ckptfix: error: 'FILE': WHERE: WHAT".
void print_error(const std::exception& e);
void print_warning(const std::string& message);

/// Usage errors (bad option values, an output that exists without --force)
/// exit with 2; everything else with 1.
int exit_code_for(const Error& e);

/// ["state_dict", "conv.weight"] / [0, 1] as a JSON array.
nlohmann::json path_to_json(const Path& path);

/// The "verification" object of a written file's JSON report.
nlohmann::json verification_json(const SaveResult& saved);
/// The "gpu" object: status, and reason or device, bytes, seconds.
nlohmann::json gpu_json(const GpuReport& gpu);

/// How inspect describes a global's kind: "weights_only allowlist", "known data, ...".
std::string global_kind_text(GlobalKind kind);
/// The "weights_only" object: {"loads", "globals", "opcodes"}.
nlohmann::json weights_only_json(const WeightsOnlyVerdict& verdict);

/// Version string.
const char* version();

}  // namespace ckptfix::cli
