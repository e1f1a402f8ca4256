// ckptfix's DType and LibTorch's ScalarType, both ways.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "ckptfix/dtype.h"

namespace ckptfix::libtorch {

/// The ScalarType of a DType, or nullopt when this LibTorch has none (1.13
/// lacks the bits, float8, uint16/32/64, float4 and bcomplex32 types).
std::optional<c10::ScalarType> to_scalar_type(DType dtype);
/// The DType of a ScalarType, or nullopt.
std::optional<DType> from_scalar_type(c10::ScalarType type);

}  // namespace ckptfix::libtorch
