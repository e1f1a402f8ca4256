// What `ckptfix inspect` prints for people, from the JSON document its
// --json prints (cmd_inspect.cc builds it): one rendering of one reading.
#pragma once

#include <ostream>

#include <nlohmann/json.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/stats.h"
#include "ckptfix/torch_version.h"

namespace ckptfix::cli {

/// Prints `doc` (inspect's JSON of `ck`) as text to `out`; `stats` when --stats.
void print_human(const Checkpoint& ck, TorchVersion torch, const StatsReport* stats, const nlohmann::json& doc,
                 std::ostream& out);

}  // namespace ckptfix::cli
