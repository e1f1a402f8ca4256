// The outcome of one rewrite (ckptfix/rewrite.h) as its report: a line of
// text for people and the input's object of the JSON report. Only
// rendering: every decision was made by the library's rewrite().
#pragma once

#include <filesystem>
#include <string>

#include "ckptfix/rewrite.h"
#include "cli/batch.h"

namespace ckptfix::cli {

/// Fills `o` (its text and JSON) from what rewrite() did for `input`.
void render_rewrite(const std::string& command, bool json, const Input& input, const std::filesystem::path& output,
                    const RewriteOutcome& out, Outcome& o);
/// The report of an input whose output is there already, made from it as
/// it is now by these options (rerun.h): nothing is read or written.
Outcome already_done(const Input& input, const std::filesystem::path& output);
/// The report of an input rewritten in place under another name already.
Outcome rewritten_as(const Input& input, const std::string& first);

}  // namespace ckptfix::cli
