#include "ckptfix/prefixes.h"

#include <algorithm>
#include <array>

namespace ckptfix {

Span<const std::string_view> known_wrapper_prefixes() {
  static constexpr std::array<std::string_view, 5> kPrefixes = {
      "module.", "_orig_mod.", "_forward_module.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.",
  };
  return kPrefixes;
}

std::string shared_wrapper_prefix(Span<const std::string> keys) {
  if (keys.empty()) return {};
  std::string prefix;
  for (bool found = true; found;) {
    found = false;
    for (std::string_view wrapper : known_wrapper_prefixes()) {
      const std::string candidate = prefix + std::string(wrapper);
      const bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) {
        return k.size() > candidate.size() && k.compare(0, candidate.size(), candidate) == 0;
      });
      if (all) {
        prefix = candidate;
        found = true;
        break;
      }
    }
  }
  return prefix;
}

}  // namespace ckptfix
