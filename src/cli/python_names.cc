#include "cli/python_names.h"

#include <cstdlib>
#include <string_view>
#include <utility>

namespace ckptfix::cli {
namespace {

// Phrases first (they hold flags), then flags, longest first where one
// begins another (--keep-partial-optimizer before --keep).
constexpr std::pair<std::string_view, std::string_view> kPythonPhrases[] = {
    {"ckptfix weights-only (or --weights-only of convert and fix)",
     "ckptfix.weights_only() (or weights_only=True of ckptfix.convert() and ckptfix.fix())"},
    {"ckptfix salvage can recover", "ckptfix.salvage() can recover"},
    {"--allow-global PATTERN", "allow_globals=['PATTERN']"},
    {"--map FROM=TO", "map={'FROM': 'TO'}"},
    {"--dtype like", "dtype='like'"},
};

constexpr std::pair<std::string_view, std::string_view> kPythonNames[] = {
    {"--keep-partial-optimizer", "keep_partial_optimizer=True"},
    {"--drop-unexpected", "drop_unexpected=True"},
    {"--drop-mismatched", "drop_mismatched=True"},
    {"--allow-missing", "allow_missing=True"},
    {"--require-complete", "require_complete=True"},
    {"--max-shard-size", "max_shard_size"},
    {"--drop-aliases", "drop_aliases=True"},
    {"--drop-unknown", "drop_unknown=True"},
    {"--for-libtorch", "for_libtorch=True"},
    {"--weights-only", "weights_only=True"},
    {"--allow-global", "allow_globals"},
    {"--strip-prefix", "strip_prefix"},
    {"--auto-prefix", "auto_prefix=True"},
    {"--add-prefix", "add_prefix"},
    {"--no-prefix", "no_prefix"},
    {"--no-verify", "verify=False"},
    {"--recursive", "recursive=True"},
    {"--metadata", "metadata"},
    {"--like-key", "like_key"},
    {"--rename", "rename"},
    {"--extract", "extract"},
    {"--no-crc", "crc=False"},
    {"--finite", "finite=True"},
    {"--format", "format"},
    {"--glob", "glob"},
    {"--like", "like"},
    {"--drop", "drop"},
    {"--prefix", "strip_prefix"},
    {"--force", "force=True"},
    {"--stats", "stats=True"},
    {"--torch", "torch"},
    {"--dtype", "dtype"},
    {"--from", "cast_from"},
    {"--keep", "keep"},
    {"--auto", "auto_prefix=True"},
    {"--key", "key"},
    {"--map", "map"},
    {"--to", "to"},
};

bool continues_a_flag(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

}  // namespace

bool python_option_names() {
  static const bool on = [] {
    const char* v = std::getenv("CKPTFIX_OPTION_NAMES");
    return v != nullptr && std::string_view(v) == "python";
  }();
  return on;
}

std::string with_python_names(std::string text) {
  for (const auto& [phrase, python] : kPythonPhrases) {
    for (size_t at = text.find(phrase); at != std::string::npos; at = text.find(phrase, at + python.size())) {
      text.replace(at, phrase.size(), python);
    }
  }
  for (const auto& [flag, python] : kPythonNames) {
    for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = (at == 0 || !continues_a_flag(text[at - 1])) && (end == text.size() || !continues_a_flag(text[end]));
      if (!whole) continue;
      text.replace(at, flag.size(), python);
      at += python.size() - 1;
    }
  }
  return text;
}

}  // namespace ckptfix::cli
