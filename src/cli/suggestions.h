// "Did you mean ...?": the known name closest to a mistyped one.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ckptfix::cli {

/// The name among `known` closest to `typed` (fewest single-character
/// edits, a swap of two neighbours counting as one), if it is close enough
/// to be what was meant: at most 2 edits, and fewer than half of `typed`'s
/// characters; nullopt otherwise.
std::optional<std::string> closest_name(const std::string& typed, const std::vector<std::string>& known);

}  // namespace ckptfix::cli
