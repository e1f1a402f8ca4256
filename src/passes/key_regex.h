// The regular expressions of `fix --rename REGEX=REPL` (issue 51).
//
// Python's `re` syntax, the part of it a key rename needs, matched by a Pike
// VM (Thompson's construction, run as one pass over the text with every
// thread at once): time proportional to the key's length times the
// pattern's size, whatever the pattern (no backtracking: `(a*)*b` against
// "aaaa...c" costs what `ab` does), and no recursion on the text.
//
//   literals; `.` (any character but newline); classes `[a-z_]`, `[^0-9]`;
//   `\d \D \w \W \s \S`, `\t \n`, `\` before any punctuation;
//   `^` `$` (start and end of the key); groups `( )`, `(?: )`;
//   alternation `|`; `*` `+` `?` `{m}` `{m,}` `{m,n}`, each lazy with `?`.
//
// Matching is leftmost-first, as Python's: of the matches that start
// first, the one its quantifiers' preferences choose. Bytes, ASCII classes.
// Replacements name groups as Python's re.sub does: `\1`...`\9`, `\g<N>`,
// `\g<0>` the whole match; `\\` a backslash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfix {

class KeyRegex {
 public:
  /// At most this many pattern bytes, groups and program instructions.
  static constexpr size_t kMaxPatternBytes = 1000;
  static constexpr size_t kMaxGroups = 9;
  static constexpr size_t kMaxInstructions = 20000;

  /// Compiles `pattern`. Throws Error(kInvalidArgument) saying what is
  /// wrong and at which byte ("unbalanced ')' at offset 4").
  static KeyRegex compile(std::string_view pattern);

  /// The leftmost match in `text` starting at or after `from`: the begin
  /// and end of the match (group 0) and of each group (-1 when a group did
  /// not take part), or nullopt.
  std::optional<std::vector<int64_t>> search(std::string_view text, size_t from = 0) const;

  /// `text` with every non-overlapping match replaced, as Python's
  /// re.sub(pattern, replacement, text) gives it (an empty match next to
  /// the previous match is not replaced again); nullopt when nothing
  /// matched. Throws Error(kInvalidArgument) for a replacement naming a
  /// group the pattern does not have.
  std::optional<std::string> replace_all(std::string_view text, std::string_view replacement) const;

  /// Checks `replacement` against this pattern's groups (what replace_all
  /// would refuse), without a text.
  void check_replacement(std::string_view replacement) const;

  /// Capturing groups in the pattern.
  size_t groups() const { return groups_; }

  enum class Op : uint8_t { kByte, kClass, kAny, kSplit, kJump, kSave, kBegin, kEnd, kLoopEnter, kLoopBack, kFail, kMatch };
  struct Instruction {
    Op op = Op::kMatch;
    uint8_t byte = 0;      ///< kByte
    /// kSplit: the preferred branch; kJump: the target; kSave, kLoopEnter: the slot; kClass: the class;
    /// kLoopBack: the loop's start
    uint32_t x = 0;
    uint32_t y = 0;        ///< kSplit: the other branch; kLoopBack: where an iteration that took no byte goes
    uint32_t z = 0;        ///< kLoopBack: the slot kLoopEnter set
  };

 private:
  KeyRegex() = default;
  std::vector<Instruction> program_;
  std::vector<std::vector<bool>> classes_;  // 256 entries each
  size_t groups_ = 0;
  size_t loops_ = 0;  // unbounded repeats: each keeps where its iteration began
};

}  // namespace ckptfix
