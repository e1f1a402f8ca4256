#include "diff/float8.h"

#include <cmath>
#include <limits>

namespace ckptfix {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sign, `exponent_bits`-bit biased exponent, `mantissa_bits`-bit mantissa,
// with subnormals when the exponent field is 0.
double decode(uint8_t bits, int exponent_bits, int mantissa_bits, int bias) {
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const double fraction = static_cast<double>(mantissa) / (1 << mantissa_bits);
  if (exponent == 0) return sign * std::ldexp(fraction, 1 - bias);
  return sign * std::ldexp(1.0 + fraction, exponent - bias);
}

}  // namespace

double float8_value(DType dtype, uint8_t bits) {
  switch (dtype) {
    case DType::kFloat8E4M3Fn:  // no infinities; S.1111.111 is NaN
      return (bits & 0x7F) == 0x7F ? kNaN : decode(bits, 4, 3, 7);
    case DType::kFloat8E5M2:  // IEEE-like: exponent 31 is infinity or NaN
      if ((bits & 0x7C) == 0x7C) return (bits & 0x03) ? kNaN : ((bits & 0x80) ? -HUGE_VAL : HUGE_VAL);
      return decode(bits, 5, 2, 15);
    case DType::kFloat8E4M3Fnuz:  // "fnuz": no infinities, no -0; 0x80 is the NaN
      return bits == 0x80 ? kNaN : decode(bits, 4, 3, 8);
    case DType::kFloat8E5M2Fnuz:
      return bits == 0x80 ? kNaN : decode(bits, 5, 2, 16);
    case DType::kFloat8E8M0Fnu:  // exponent only: 2^(e - 127); 0xFF is NaN
      return bits == 0xFF ? kNaN : std::ldexp(1.0, bits - 127);
    default: return kNaN;
  }
}

}  // namespace ckptfix
