// What a rewrite says of an input: its report lines for people, and its
// "changes" object for the JSON report.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckptfix/passes.h"
#include "ckptfix/save.h"

namespace ckptfix::cli {

/// One line per kind of change the passes made, for people.
std::vector<std::string> describe(const PassReport& report, const SaveResult* saved);
/// A line per key a fit moved, made or left out (grouped by rule beyond 200).
std::string fit_key_lines(const PassReport& report);
/// The "changes" object: what the passes did, with the cast's counts from `saved`.
nlohmann::json changes_json(const PassReport& report, const SaveResult* saved);
/// The warning for globals an output keeps that ckptfix does not know as data.
std::string unknown_globals_warning(const std::vector<std::string>& names);
/// The warning for a call --allow-global trusts.
std::string trusted_call_warning(const GlobalRef& g);

}  // namespace ckptfix::cli
