#include "ckptfix/error.h"

#include <cstdio>

namespace ckptfix {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kNotCheckpoint: return "not-checkpoint";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kCorrupt: return "corrupt";
    case ErrorKind::kUnsafe: return "unsafe";
    case ErrorKind::kInvalidArgument: return "invalid-argument";
    case ErrorKind::kConflict: return "conflict";
    case ErrorKind::kExists: return "exists";
    case ErrorKind::kVerification: return "verification";
    case ErrorKind::kGpu: return "gpu";
    case ErrorKind::kLimit: return "limit";
    case ErrorKind::kInternal: return "internal";
    case ErrorKind::kInterrupted: return "interrupted";
  }
  return "unknown";
}

Error::Error(ErrorKind kind, std::string message)
    : kind_(kind), message_(printable(message)) {
  render();
}

Error& Error::in_file(std::string file) {
  if (file_.empty()) {
    file_ = printable(file);
    render();
  }
  return *this;
}

Error& Error::at(std::string location) {
  if (location_.empty()) {
    location_ = printable(location);
    render();
  }
  return *this;
}

Error& Error::within(std::string_view outer_text) {
  const std::string outer = printable(outer_text);
  if (location_.empty()) {
    location_ = outer;
  } else if (location_.front() == '+') {
    location_ = outer + location_;
  } else {
    location_ = outer + ": " + location_;
  }
  render();
  return *this;
}

Error& Error::set_location(std::string location) {
  location_ = printable(location);
  render();
  return *this;
}

Error& Error::note(const std::string& text) {
  message_ += "; " + printable(text);
  render();
  return *this;
}

Error& Error::detail(const std::string& line) {
  details_.push_back(printable(line));
  return *this;
}

void Error::render() {
  rendered_.clear();
  if (!file_.empty()) rendered_ += "'" + file_ + "': ";
  if (!location_.empty()) rendered_ += location_ + ": ";
  rendered_ += message_;
}

std::string hex_offset(unsigned long long offset) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", offset);
  return buf;
}

namespace {

// Length of the UTF-8 sequence starting at s[i] and its code point, or 0
// when the bytes there are not UTF-8 (overlong, surrogate, beyond U+10FFFF
// or cut short). Encoded surrogates (ED A0 80 ...) count as invalid here:
// they are not text, whatever Python's 'surrogatepass' lets through.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& code_point) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) {
    code_point = c;
    return 1;
  }
  size_t n;
  uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, min = 0x80, code_point = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3, min = 0x800, code_point = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, min = 0x10000, code_point = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (b(k) & 0x3F);
  }
  if (code_point < min || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return 0;
  return n;
}

// Code points that move the cursor, end a line or reorder text on a terminal.
bool unprintable(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0x200E ||
         cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xFEFF;
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence(text, i, cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(text[i]));
      out += buf;
      ++i;
      continue;
    }
    if (unprintable(cp)) {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence(text, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace ckptfix
