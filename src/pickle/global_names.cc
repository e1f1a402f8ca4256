#include "pickle/global_names.h"

#include <string>

#include "ckptfix/error.h"

namespace ckptfix {
namespace {

bool identifier_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool identifier_char(char c) { return identifier_start(c) || (c >= '0' && c <= '9'); }

void check_part(std::string_view what, std::string_view text, uint64_t max_bytes) {
  if (text.size() > max_bytes) {
    throw Error(ErrorKind::kLimit, "global " + std::string(what) + " is " + std::to_string(text.size()) +
                                       " bytes long (limit max_name_bytes = " + std::to_string(max_bytes) + ")");
  }
  if (is_dotted_identifier(text)) return;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      throw Error(ErrorKind::kUnsupported, "global " + std::string(what) + " '" + std::string(text) +
                                               "' is not ASCII; ckptfix reads only ASCII global names, the only "
                                               "ones pickle protocol 2 (torch.save's) can write");
    }
  }
  throw Error(ErrorKind::kCorrupt,
              "global " + std::string(what) + " '" + std::string(text) + "' is not a dotted Python identifier");
}

}  // namespace

bool is_dotted_identifier(std::string_view text) {
  bool at_start = true;  // of a part: an identifier must start here
  for (char c : text) {
    if (at_start) {
      if (!identifier_start(c)) return false;
      at_start = false;
    } else if (c == '.') {
      at_start = true;
    } else if (!identifier_char(c)) {
      return false;
    }
  }
  return !at_start;  // not empty, no trailing dot
}

void check_global_name(std::string_view module, std::string_view name, uint64_t max_bytes) {
  check_part("module", module, max_bytes);
  check_part("name", name, max_bytes);
}

}  // namespace ckptfix
