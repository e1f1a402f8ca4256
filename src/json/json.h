// A strict JSON reader for the small documents ckptfix reads from untrusted
// files: safetensors headers and shard-set index files.
//
// RFC 8259 exactly: UTF-8 only (invalid sequences and lone surrogate escapes
// are refused), no comments, no trailing commas, no NaN, and, stricter than
// the RFC, no key twice in one object (a second definition of a tensor must
// not silently win). Nesting is bounded (max_depth) and the parser is
// iterative over the text, so hostile input costs time linear in its size.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfix {

struct JsonMember;

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  ///< kString: the decoded string; kNumber: the literal as written
  std::vector<JsonValue> items;  ///< kArray
  std::vector<JsonMember> members;  ///< kObject, in document order
  size_t offset = 0;  ///< where the value starts in the document

  /// The member named `key` of an object, or nullptr.
  const JsonValue* find(std::string_view key) const;
  /// A number written as a non-negative integer that fits in 64 bits
  /// (no fraction, no exponent), or nullopt.
  std::optional<uint64_t> as_uint() const;
  /// "object", "string", ... (for messages).
  std::string_view kind_name() const;
};

/// One member of an object.
struct JsonMember {
  std::string key;
  JsonValue value;
};

/// Parses `text` (one value, surrounded by optional whitespace). Throws
/// Error(kCorrupt) "invalid JSON at byte N: ...".
JsonValue parse_json(std::string_view text, size_t max_depth = 64);

/// Parses `text`, which must be one object, handing each member to
/// `on_member` as soon as it is parsed, in document order, without keeping
/// it: for documents too large to hold whole as JsonValues (a model
/// reference of 1,000,000 keys). Keys must be distinct, as for parse_json;
/// errors are parse_json's, and whatever `on_member` throws.
void parse_json_members(std::string_view text, const std::function<void(std::string key, JsonValue value)>& on_member,
                        size_t max_depth = 64);

/// `text` as a JSON string literal the way serde_json writes it (the
/// safetensors library's serializer): `"` and `\` escaped, \b \f \n \r \t,
/// other control characters as \u00XX (lower-case hex), everything else,
/// DEL and non-ASCII included, as it is.
std::string json_quote(std::string_view text);

/// `text` as Python's json.dumps writes a str (ensure_ascii): `"` and `\`
/// escaped, \b \f \n \r \t, every other character outside ' '..'~' as
/// \uXXXX in lower-case hex (a surrogate pair above U+FFFF). `text` must be
/// valid UTF-8.
std::string json_quote_ascii(std::string_view text);

}  // namespace ckptfix
