#include "pickle/text_codecs.h"

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
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
      // raw-unicode-escape only treats \u / \U after an even run of backslashes;
      // pickle writes them only for non-latin-1 characters and backslashes.
      size_t j = i + 2;
      uint32_t cp;
      if (!read_hex(s, j, s[i + 1] == 'u' ? 4 : 8, cp) || cp > 0x10FFFF) return false;
      append_utf8(utf8, cp);
      i = j;
    } else {
      append_utf8(utf8, c);
      ++i;
    }
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

}  // namespace ckptfix
