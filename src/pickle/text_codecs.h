// Text conversions the pickle layer needs: protocol 0's quoted string and
// raw-unicode-escape literals, big decimal integers, and latin-1 <-> UTF-8
// (protocol 2 spells bytes as _codecs.encode(<latin-1 str>, 'latin1')).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "io/utf8.h"

namespace ckptfix {

/// Decodes a protocol 0 STRING argument: a Python 2 repr, quoted with ' or ".
bool decode_python_string_literal(std::string_view quoted, std::string& out);

/// Decodes protocol 0 UNICODE (raw-unicode-escape) into UTF-8.
bool decode_raw_unicode_escape(std::string_view text, std::string& utf8);

/// Converts a decimal integer literal (optional sign) into minimal
/// little-endian two's complement bytes, as pickle's LONG1 stores them.
bool decimal_to_le_twos_complement(std::string_view decimal, std::string& out);

/// Each byte becomes the code point of the same value, UTF-8 encoded.
std::string latin1_to_utf8(std::string_view bytes);

/// Whether `text` is UTF-8 as CPython's "surrogatepass" decoder takes it:
/// strict UTF-8 (no overlong forms, nothing past U+10FFFF), but encoded
/// surrogates (ED A0 80 .. ED BF BF) allowed, as pickle writes a lone one.
bool is_utf8_surrogatepass(std::string_view text);

/// Whether `text` is a FLOAT literal CPython's load_float reads as strtod in
/// the C locale does: `[+-]?(digits[.digits]|.digits)([eE][+-]?digits)?`, or
/// `[+-]?(inf|infinity|nan)` in any case; no space, no hex, no `nan(...)`.
bool is_plain_float_literal(std::string_view text);


}  // namespace ckptfix
