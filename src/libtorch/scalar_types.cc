#include "libtorch/scalar_types.h"

#include <array>
#include <utility>

namespace ckptfix::torch {
namespace {

constexpr std::array<std::pair<DType, c10::ScalarType>, 18> kPairs = {{
    {DType::kFloat16, c10::ScalarType::Half},
    {DType::kBFloat16, c10::ScalarType::BFloat16},
    {DType::kFloat32, c10::ScalarType::Float},
    {DType::kFloat64, c10::ScalarType::Double},
    {DType::kInt8, c10::ScalarType::Char},
    {DType::kUInt8, c10::ScalarType::Byte},
    {DType::kInt16, c10::ScalarType::Short},
    {DType::kInt32, c10::ScalarType::Int},
    {DType::kInt64, c10::ScalarType::Long},
    {DType::kBool, c10::ScalarType::Bool},
    {DType::kComplex32, c10::ScalarType::ComplexHalf},
    {DType::kComplex64, c10::ScalarType::ComplexFloat},
    {DType::kComplex128, c10::ScalarType::ComplexDouble},
    {DType::kQInt8, c10::ScalarType::QInt8},
    {DType::kQUInt8, c10::ScalarType::QUInt8},
    {DType::kQInt32, c10::ScalarType::QInt32},
    {DType::kQUInt4x2, c10::ScalarType::QUInt4x2},
    {DType::kQUInt2x4, c10::ScalarType::QUInt2x4},
}};

}  // namespace

std::optional<c10::ScalarType> to_scalar_type(DType dtype) {
  for (const auto& [d, s] : kPairs) {
    if (d == dtype) return s;
  }
  return std::nullopt;
}

std::optional<DType> from_scalar_type(c10::ScalarType type) {
  for (const auto& [d, s] : kPairs) {
    if (s == type) return d;
  }
  return std::nullopt;
}

}  // namespace ckptfix::torch
