// The values that stand for bytes in a pickle: bytes themselves (protocol
// 3 and later), protocol 2's _codecs.encode(str, 'latin1'), and an
// io.BytesIO holding bytes, which Transformer Engine keeps as a module's
// extra state (docs/security.md, "What runs after weights_only").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pickle/value.h"

namespace ckptfix {

/// The bytes a str of code points 0..255 stands for (protocol 2's
/// _codecs.encode(str, 'latin1')), or nullopt for a code point above 255.
std::optional<std::string> utf8_to_latin1(const std::string& text);

/// The bytes `v` is when loaded: a bytes value, or
/// _codecs.encode(<str of code points 0..255>, 'latin1') with nothing else
/// done to it; nullopt otherwise.
std::optional<std::string> bytes_of(const Value& v);

/// An io.BytesIO as pickle makes it.
struct BytesIOValue {
  std::string bytes;      ///< its buffer
  int64_t position = 0;   ///< where a read starts (pickled as it was)
};

/// `v` as an io.BytesIO of plain bytes, in either of the forms pickle gives
/// one: NEWOBJ(_io.BytesIO, ()) then BUILD((bytes, position, None or {})),
/// how CPython pickles one, or _io.BytesIO(bytes) (a REDUCE, with no state).
/// nullopt for anything else (a state that gives it attributes, a position
/// that is not an int, an argument that is not bytes).
std::optional<BytesIOValue> bytes_io_of(const Value& v);

/// True for a global naming io.BytesIO (_io.BytesIO, io.BytesIO).
bool is_bytes_io_class(const Value& global);

}  // namespace ckptfix
