#include "libtorch/scalar_types.h"

#include <utility>
#include <vector>

namespace ckptfix::libtorch {
namespace {

// c10::ScalarType::NAME where this LibTorch has it, else nullopt: LibTorch
// 1.13 stops at QUInt2x4; the bits types, float8, uint16/32/64, float8_e8m0fnu,
// float4_e2m1fn_x2 and BComplex32 arrived during 2.x. Detected, not looked
// up in a version table, so any LibTorch in between gets what it has.
#define CKPTFIX_SCALAR_TYPE(NAME)                                           \
  []<typename E = c10::ScalarType>() -> std::optional<c10::ScalarType> {   \
    if constexpr (requires { E::NAME; }) {                                  \
      return E::NAME;                                                       \
    } else {                                                                \
      return std::nullopt;                                                  \
    }                                                                       \
  }()

const std::vector<std::pair<DType, c10::ScalarType>>& pairs() {
  static const std::vector<std::pair<DType, c10::ScalarType>> table = [] {
    const std::pair<DType, std::optional<c10::ScalarType>> all[] = {
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
        {DType::kUInt16, CKPTFIX_SCALAR_TYPE(UInt16)},
        {DType::kUInt32, CKPTFIX_SCALAR_TYPE(UInt32)},
        {DType::kUInt64, CKPTFIX_SCALAR_TYPE(UInt64)},
        {DType::kFloat8E4M3Fn, CKPTFIX_SCALAR_TYPE(Float8_e4m3fn)},
        {DType::kFloat8E5M2, CKPTFIX_SCALAR_TYPE(Float8_e5m2)},
        {DType::kFloat8E4M3Fnuz, CKPTFIX_SCALAR_TYPE(Float8_e4m3fnuz)},
        {DType::kFloat8E5M2Fnuz, CKPTFIX_SCALAR_TYPE(Float8_e5m2fnuz)},
        {DType::kFloat8E8M0Fnu, CKPTFIX_SCALAR_TYPE(Float8_e8m0fnu)},
        {DType::kFloat4E2M1FnX2, CKPTFIX_SCALAR_TYPE(Float4_e2m1fn_x2)},
        {DType::kBits8, CKPTFIX_SCALAR_TYPE(Bits8)},
        {DType::kBits16, CKPTFIX_SCALAR_TYPE(Bits16)},
        {DType::kBits1x8, CKPTFIX_SCALAR_TYPE(Bits1x8)},
        {DType::kBits2x4, CKPTFIX_SCALAR_TYPE(Bits2x4)},
        {DType::kBits4x2, CKPTFIX_SCALAR_TYPE(Bits4x2)},
        {DType::kBComplex32, CKPTFIX_SCALAR_TYPE(BComplex32)},
    };
    std::vector<std::pair<DType, c10::ScalarType>> present;
    for (const auto& [dtype, type] : all) {
      if (type) present.emplace_back(dtype, *type);
    }
    return present;
  }();
  return table;
}

#undef CKPTFIX_SCALAR_TYPE

}  // namespace

std::optional<c10::ScalarType> to_scalar_type(DType dtype) {
  for (const auto& [d, s] : pairs()) {
    if (d == dtype) return s;
  }
  return std::nullopt;
}

std::optional<DType> from_scalar_type(c10::ScalarType type) {
  for (const auto& [d, s] : pairs()) {
    if (s == type) return d;
  }
  return std::nullopt;
}

}  // namespace ckptfix::libtorch
