// The values of torch's 8-bit floating types, for comparing tensors.
#pragma once

#include <cstdint>

#include "ckptfix/dtype.h"

namespace ckptfix {

/// The value of one element of a float8 dtype (float8_e4m3fn, float8_e5m2,
/// float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu), as torch's
/// `.to(torch.float32)` gives it: NaN where the format says NaN. `dtype`
/// must be one of those five.
double float8_value(DType dtype, uint8_t bits);

}  // namespace ckptfix
