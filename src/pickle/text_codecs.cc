#include "pickle/text_codecs.h"

#include <cctype>
#include <cstdint>
#include <vector>

namespace ckptfix {

std::string latin1_to_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (unsigned char c : bytes) append_utf8(out, c);
  return out;
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool read_hex(std::string_view s, size_t& i, size_t digits, uint32_t& value) {
  if (i + digits > s.size()) return false;
  value = 0;
  for (size_t k = 0; k < digits; ++k) {
    const int h = hex_value(s[i + k]);
    if (h < 0) return false;
    value = value * 16 + static_cast<uint32_t>(h);
  }
  i += digits;
  return true;
}

}  // namespace

bool decode_python_string_literal(std::string_view q, std::string& out) {
  if (q.size() < 2 || (q.front() != '\'' && q.front() != '"') || q.back() != q.front()) return false;
  std::string_view s = q.substr(1, q.size() - 2);
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const char c = s[i++];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i >= s.size()) return false;
    const char e = s[i++];
    switch (e) {
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;
      case 'x': {
        uint32_t v;
        if (!read_hex(s, i, 2, v)) return false;
        out += static_cast<char>(v);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k) v = v * 8 + static_cast<uint32_t>(s[i++] - '0');
          out += static_cast<char>(v & 0xFF);
        } else {
          out += '\\';  // unknown escapes are kept literally, as Python 2 did
          out += e;
        }
    }
  }
  return true;
}

bool decode_raw_unicode_escape(std::string_view s, std::string& utf8) {
  utf8.clear();
  // As CPython's _PyUnicode_DecodeRawUnicodeEscapeStateful: a backslash
  // always takes the character after it, so \u or \U is an escape only
  // after an odd run of backslashes (`\\u0041` is those 7 characters); any
  // other byte is the code point of that value (latin-1).
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i++]);
    if (c != '\\' || i >= s.size()) {
      append_utf8(utf8, c);
      continue;
    }
    const char next = s[i++];
    if (next != 'u' && next != 'U') {
      append_utf8(utf8, '\\');
      append_utf8(utf8, static_cast<unsigned char>(next));
      continue;
    }
    uint32_t cp;
    if (!read_hex(s, i, next == 'u' ? 4 : 8, cp) || cp > 0x10FFFF) return false;
    append_utf8(utf8, cp);
  }
  return true;
}

bool decimal_to_le_twos_complement(std::string_view text, std::string& out) {
  bool negative = false;
  size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) negative = text[i++] == '-';
  if (i >= text.size()) return false;
  // Magnitude as little-endian base-256 digits, built by repeated *10 + d.
  std::vector<uint8_t> mag;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    uint32_t carry = static_cast<uint32_t>(text[i] - '0');
    for (auto& b : mag) {
      const uint32_t v = b * 10u + carry;
      b = static_cast<uint8_t>(v & 0xFF);
      carry = v >> 8;
    }
    while (carry) {
      mag.push_back(static_cast<uint8_t>(carry & 0xFF));
      carry >>= 8;
    }
  }
  while (!mag.empty() && mag.back() == 0) mag.pop_back();
  if (mag.empty()) {
    out.clear();
    return true;
  }
  if (negative) {  // two's complement: invert and add one
    uint32_t carry = 1;
    for (auto& b : mag) {
      const uint32_t v = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(v & 0xFF);
      carry = v >> 8;
    }
    if (!(mag.back() & 0x80)) mag.push_back(0xFF);
    while (mag.size() > 1 && mag.back() == 0xFF && (mag[mag.size() - 2] & 0x80)) mag.pop_back();
  } else if (mag.back() & 0x80) {
    mag.push_back(0);
  }
  out.assign(mag.begin(), mag.end());
  return true;
}

bool is_utf8_surrogatepass(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (static_cast<size_t>(end - p) < n) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((p[k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[k] & 0x3F);
    }
    static constexpr uint32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10FFFF) return false;  // overlong, or past Unicode
    p += n;
  }
  return true;
}

bool is_plain_float_literal(std::string_view t) {
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  std::string lower(t.substr(i));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity" || lower == "nan") return true;
  auto digits = [&](size_t& at) {
    const size_t from = at;
    while (at < t.size() && t[at] >= '0' && t[at] <= '9') ++at;
    return at - from;
  };
  size_t whole = digits(i), fraction = 0;
  if (i < t.size() && t[i] == '.') {
    ++i;
    fraction = digits(i);
  }
  if (whole + fraction == 0) return false;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    if (digits(i) == 0) return false;
  }
  return i == t.size();
}

}  // namespace ckptfix
