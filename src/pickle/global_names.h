// What a global's module and name may be.
//
// pickle resolves GLOBAL module name by importing `module` and walking the
// dotted `name` with getattr, so both are dotted Python identifiers. ckptfix
// accepts exactly that, in ASCII: torch.save writes protocol 2, where
// CPython refuses to write a non-ASCII global at all. Anything else (empty
// parts, spaces, a newline that would let a name carry pickle opcodes into a
// GLOBAL line) is refused when read, and the pickler refuses to write it.
#pragma once

#include <cstdint>
#include <string_view>

namespace ckptfix {

/// True for "a", "a.b", "_x.y1": ASCII identifiers joined by single dots.
bool is_dotted_identifier(std::string_view text);

/// Throws Error naming what is wrong with a global's module or name:
/// kLimit when one is longer than max_bytes (ReadLimits::max_name_bytes),
/// kUnsupported for non-ASCII, kCorrupt for anything else that is not a
/// dotted identifier.
void check_global_name(std::string_view module, std::string_view name, uint64_t max_bytes);

}  // namespace ckptfix
