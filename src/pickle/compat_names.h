// The Python 3 name CPython's unpickler loads for a Python 2 name
// (_compat_pickle, applied by find_class to pickles of protocol 0 to 2).
#pragma once

#include <string_view>
#include <utility>

namespace ckptfix {

/// (module, name) as CPython resolves it: mapped where _compat_pickle maps
/// it (`StringIO`, `open` -> `io`, `open`), else as it is.
std::pair<std::string_view, std::string_view> python3_name(std::string_view module, std::string_view name);

}  // namespace ckptfix
