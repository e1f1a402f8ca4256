// fnmatch.fnmatchcase semantics: '*' any run (also '/' and '.'), '?' one
// character, '[seq]' / '[!seq]' sets with ranges; no escaping.
#include "ckptfix/passes.h"

namespace ckptfix {
namespace {

// Matches a [...] set at pattern[p] against c; sets `end` past the ']'.
// Returns -1 when the bracket is not closed (then '[' is a literal).
int match_set(std::string_view pattern, size_t p, char c, size_t& end) {
  size_t i = p + 1;
  bool negate = false;
  if (i < pattern.size() && pattern[i] == '!') {
    negate = true;
    ++i;
  }
  bool matched = false;
  bool first = true;
  while (i < pattern.size() && (first || pattern[i] != ']')) {
    first = false;
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      matched |= pattern[i] <= c && c <= pattern[i + 2];
      i += 3;
    } else {
      matched |= pattern[i] == c;
      ++i;
    }
  }
  if (i >= pattern.size()) return -1;
  end = i + 1;
  return matched != negate ? 1 : 0;
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  size_t p = 0, t = 0;
  size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size()) {
      const char pc = pattern[p];
      if (pc == '*') {
        star_p = p++;
        star_t = t;
        continue;
      }
      if (pc == '?') {
        ++p;
        ++t;
        continue;
      }
      if (pc == '[') {
        size_t end = 0;
        const int m = match_set(pattern, p, text[t], end);
        if (m == 1) {
          p = end;
          ++t;
          continue;
        }
        if (m == -1 && text[t] == '[') {
          ++p;
          ++t;
          continue;
        }
      } else if (pc == text[t]) {
        ++p;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace ckptfix
