#include "json/json.h"

#include <cstdio>
#include <functional>
#include <unordered_set>

#include "ckptfix/error.h"
#include "io/utf8.h"

namespace ckptfix {

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<uint64_t> JsonValue::as_uint() const {
  if (kind != Kind::kNumber || text.empty() || text.size() > 20) return std::nullopt;
  uint64_t n = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(n, uint64_t{10}, &n) || __builtin_add_overflow(n, uint64_t(c - '0'), &n)) {
      return std::nullopt;
    }
  }
  return n;
}

std::string_view JsonValue::kind_name() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "a boolean";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kArray: return "an array";
    case Kind::kObject: return "an object";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, size_t max_depth) : text_(text), max_depth_(max_depth) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (at_ != text_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::kCorrupt, "invalid JSON at byte " + std::to_string(at_) + ": " + what);
  }

  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) {
      ++at_;
    }
  }

  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }

  void expect(char c) {
    if (at_ >= text_.size() || text_[at_] != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }

  void literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) fail("unknown literal");
    at_ += word.size();
  }

  // Values nest through arrays and objects; depth is bounded, so recursion is too.
  JsonValue value(size_t depth) {
    if (depth > max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
    skip_space();
    JsonValue v;
    v.offset = at_;
    switch (peek()) {
      case '{': object(v, depth); break;
      case '[': array(v, depth); break;
      case '"':
        v.kind = JsonValue::Kind::kString;
        v.text = string();
        break;
      case 't': literal("true"), v.kind = JsonValue::Kind::kBool, v.boolean = true; break;
      case 'f': literal("false"), v.kind = JsonValue::Kind::kBool; break;
      case 'n': literal("null"); break;
      case '\0':
        if (at_ >= text_.size()) fail("unexpected end of text");
        fail("unexpected character");
      default:
        v.kind = JsonValue::Kind::kNumber;
        v.text = number();
    }
    return v;
  }

  // Objects of up to this many members find a repeated key by a scan.
  static constexpr size_t kLinearFindMembers = 16;

  // Adds `key` to `seen` (filled from `members` the first time); false when it was there.
  static bool note_key(std::unordered_set<std::string>& seen, const std::vector<JsonMember>& members,
                       const std::string& key) {
    if (seen.empty()) {
      for (const JsonMember& m : members) seen.insert(m.key);
    }
    return seen.insert(key).second;
  }

 public:
  // The members of the top-level object, each handed to `on_member` as soon
  // as it is parsed and then dropped (parse_json_members).
  void members(const std::function<void(std::string, JsonValue)>& on_member) {
    skip_space();
    if (peek() != '{') fail(std::string("expected an object, not ") + (at_ < text_.size() ? "this" : "the end of text"));
    std::unordered_set<std::string> seen;
    each_member(
        0, [&](const std::string& key) { return !seen.insert(key).second; },
        [&](std::string key, JsonValue value) { on_member(std::move(key), std::move(value)); });
    skip_space();
    if (at_ != text_.size()) fail("unexpected text after the value");
  }

 private:
  // The members of the object at `at_` ('{'), each key checked by
  // `repeated` before its value is parsed, then handed to `take`: the one
  // loop of object() and members().
  template <class Repeated, class Take>
  void each_member(size_t depth, Repeated repeated, Take take) {
    ++at_;
    skip_space();
    if (peek() == '}') {
      ++at_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      const size_t key_at = at_;
      std::string key = string();
      if (repeated(key)) {
        at_ = key_at;
        fail("key '" + printable(key) + "' appears twice in one object");
      }
      skip_space();
      expect(':');
      JsonValue member = value(depth + 1);
      take(std::move(key), std::move(member));
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect('}');
      return;
    }
  }

  void object(JsonValue& v, size_t depth) {
    std::unordered_set<std::string> seen;
    v.kind = JsonValue::Kind::kObject;
    // A set once the object is large: a linear find per member would make
    // a 100,000-tensor safetensors header quadratic.
    each_member(
        depth,
        [&](const std::string& key) {
          return seen.empty() && v.members.size() < kLinearFindMembers ? v.find(key) != nullptr
                                                                        : !note_key(seen, v.members, key);
        },
        [&](std::string key, JsonValue member) { v.members.push_back({std::move(key), std::move(member)}); });
  }

  void array(JsonValue& v, size_t depth) {
    v.kind = JsonValue::Kind::kArray;
    ++at_;
    skip_space();
    if (peek() == ']') {
      ++at_;
      return;
    }
    while (true) {
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      expect(']');
      return;
    }
  }

  std::string number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      return at_ - from;
    };
    if (peek() == '-') ++at_;
    if (peek() == '0') {
      ++at_;
    } else if (digits() == 0) {
      fail("unexpected character");
    }
    if (peek() == '.') {
      ++at_;
      if (digits() == 0) fail("a digit must follow the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++at_;
      if (peek() == '+' || peek() == '-') ++at_;
      if (digits() == 0) fail("a digit must follow the exponent");
    }
    return std::string(text_.substr(start, at_ - start));
  }

  unsigned hex4() {
    if (text_.size() - at_ < 4) fail("truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[at_++];
      u <<= 4;
      if (c >= '0' && c <= '9') u |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') u |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= unsigned(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return u;
  }

  // One UTF-8 sequence starting at at_, copied to out; refuses overlong
  // forms, surrogates and code points above U+10FFFF.
  void utf8_sequence(std::string& out) {
    const auto b0 = static_cast<unsigned char>(text_[at_]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 1, cp = b0 & 0x1F, min = 0x80;
    else if (b0 >= 0xE0 && b0 <= 0xEF) n = 2, cp = b0 & 0x0F, min = 0x800;
    else if (b0 >= 0xF0 && b0 <= 0xF4) n = 3, cp = b0 & 0x07, min = 0x10000;
    else fail("invalid UTF-8");
    if (text_.size() - at_ <= n) fail("invalid UTF-8 (truncated sequence)");
    for (size_t i = 1; i <= n; ++i) {
      const auto b = static_cast<unsigned char>(text_[at_ + i]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8");
    out.append(text_.substr(at_, n + 1));
    at_ += n + 1;
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c == '"') {
        ++at_;
        return out;
      }
      if (c < 0x20) fail("control character in a string");
      if (c >= 0x80) {
        utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++at_;
        continue;
      }
      ++at_;
      if (at_ >= text_.size()) fail("unterminated string");
      const char e = text_[at_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(at_, 2) != "\\u") fail("lone high surrogate in \\u escape");
            at_ += 2;
            const uint32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("lone high surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }

  std::string_view text_;
  size_t max_depth_;
  size_t at_ = 0;
};

}  // namespace

JsonValue parse_json(std::string_view text, size_t max_depth) { return Parser(text, max_depth).document(); }

void parse_json_members(std::string_view text, const std::function<void(std::string key, JsonValue value)>& on_member,
                        size_t max_depth) {
  Parser(text, max_depth).members(on_member);
}

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_quote_ascii(std::string_view text) {
  std::string out = "\"";
  auto u = [&](uint32_t unit) {
    char buf[16];  // "\\uXXXX" for a 16-bit unit; room for any uint32_t, which g++ 10 counts
    std::snprintf(buf, sizeof buf, "\\u%04x", unit);
    out += buf;
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    uint32_t cp = c;
    size_t n = 1;
    if (c >= 0xF0) cp = c & 0x07, n = 4;
    else if (c >= 0xE0) cp = c & 0x0F, n = 3;
    else if (c >= 0xC0) cp = c & 0x1F, n = 2;
    for (size_t k = 1; k < n && i + k < text.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    i += n;
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7E) {
      out += static_cast<char>(cp);
    } else if (cp >= 0x10000) {
      u(0xD800 + ((cp - 0x10000) >> 10));
      u(0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      u(cp);
    }
  }
  return out + "\"";
}

}  // namespace ckptfix
