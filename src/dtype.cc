#include "ckptfix/dtype.h"

#include <array>

namespace ckptfix {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  uint32_t size;
  const char* storage_class;  // nullptr: no typed storage class
  const char* alias;          // torch attribute alias, or nullptr
  const char* scalar_type;    // LibTorch's c10::ScalarType name
};

constexpr std::array kTable = {
    DTypeInfo{DType::kFloat16, "float16", 2, "HalfStorage", "half", "Half"},
    DTypeInfo{DType::kBFloat16, "bfloat16", 2, "BFloat16Storage", nullptr, "BFloat16"},
    DTypeInfo{DType::kFloat32, "float32", 4, "FloatStorage", "float", "Float"},
    DTypeInfo{DType::kFloat64, "float64", 8, "DoubleStorage", "double", "Double"},
    DTypeInfo{DType::kInt8, "int8", 1, "CharStorage", nullptr, "Char"},
    DTypeInfo{DType::kUInt8, "uint8", 1, "ByteStorage", nullptr, "Byte"},
    DTypeInfo{DType::kInt16, "int16", 2, "ShortStorage", "short", "Short"},
    DTypeInfo{DType::kInt32, "int32", 4, "IntStorage", "int", "Int"},
    DTypeInfo{DType::kInt64, "int64", 8, "LongStorage", "long", "Long"},
    DTypeInfo{DType::kBool, "bool", 1, "BoolStorage", nullptr, "Bool"},
    DTypeInfo{DType::kComplex32, "complex32", 4, nullptr, "chalf", "ComplexHalf"},  // Python has no ComplexHalfStorage
    DTypeInfo{DType::kComplex64, "complex64", 8, "ComplexFloatStorage", "cfloat", "ComplexFloat"},
    DTypeInfo{DType::kComplex128, "complex128", 16, "ComplexDoubleStorage", "cdouble", "ComplexDouble"},
    DTypeInfo{DType::kQInt8, "qint8", 1, "QInt8Storage", nullptr, "QInt8"},
    DTypeInfo{DType::kQUInt8, "quint8", 1, "QUInt8Storage", nullptr, "QUInt8"},
    DTypeInfo{DType::kQInt32, "qint32", 4, "QInt32Storage", nullptr, "QInt32"},
    DTypeInfo{DType::kQUInt4x2, "quint4x2", 1, "QUInt4x2Storage", nullptr, "QUInt4x2"},
    DTypeInfo{DType::kQUInt2x4, "quint2x4", 1, "QUInt2x4Storage", nullptr, "QUInt2x4"},
    DTypeInfo{DType::kUInt16, "uint16", 2, nullptr, nullptr, "UInt16"},
    DTypeInfo{DType::kUInt32, "uint32", 4, nullptr, nullptr, "UInt32"},
    DTypeInfo{DType::kUInt64, "uint64", 8, nullptr, nullptr, "UInt64"},
    DTypeInfo{DType::kFloat8E4M3Fn, "float8_e4m3fn", 1, nullptr, nullptr, "Float8_e4m3fn"},
    DTypeInfo{DType::kFloat8E5M2, "float8_e5m2", 1, nullptr, nullptr, "Float8_e5m2"},
    DTypeInfo{DType::kFloat8E4M3Fnuz, "float8_e4m3fnuz", 1, nullptr, nullptr, "Float8_e4m3fnuz"},
    DTypeInfo{DType::kFloat8E5M2Fnuz, "float8_e5m2fnuz", 1, nullptr, nullptr, "Float8_e5m2fnuz"},
    DTypeInfo{DType::kFloat8E8M0Fnu, "float8_e8m0fnu", 1, nullptr, nullptr, "Float8_e8m0fnu"},
    DTypeInfo{DType::kFloat4E2M1FnX2, "float4_e2m1fn_x2", 1, nullptr, nullptr, "Float4_e2m1fn_x2"},
    DTypeInfo{DType::kBits8, "bits8", 1, nullptr, nullptr, "Bits8"},
    DTypeInfo{DType::kBits16, "bits16", 2, nullptr, nullptr, "Bits16"},
    DTypeInfo{DType::kBits1x8, "bits1x8", 1, nullptr, nullptr, "Bits1x8"},
    DTypeInfo{DType::kBits2x4, "bits2x4", 1, nullptr, nullptr, "Bits2x4"},
    DTypeInfo{DType::kBits4x2, "bits4x2", 1, nullptr, nullptr, "Bits4x2"},
    DTypeInfo{DType::kBComplex32, "bcomplex32", 4, nullptr, nullptr, "BComplex32"},
    DTypeInfo{DType::kUntyped, "untyped", 1, "UntypedStorage", nullptr, nullptr},
};

const DTypeInfo& info(DType d) {
  for (const auto& i : kTable) {
    if (i.dtype == d) return i;
  }
  return kTable.back();
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

TorchVersion first_torch_loading(DType dtype) {
  // Checked for 1.13 against Debian 12's torch 1.13.1 (hasattr(torch, name)
  // and torch.save of a tensor); the dtypes without a typed storage class
  // are saved through _rebuild_tensor_v3, which arrived with float8 in 2.1.
  switch (dtype) {
    case DType::kComplex32:  // torch 1.13 has the dtype but cannot save or load it ("not recognized")
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2:
    case DType::kBits8:
    case DType::kBits16:
    case DType::kBits1x8:
    case DType::kBits2x4:
    case DType::kBits4x2: return {2, 1};
    case DType::kFloat8E4M3Fnuz:
    case DType::kFloat8E5M2Fnuz: return {2, 2};
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64: return {2, 3};
    case DType::kFloat8E8M0Fnu: return {2, 7};
    case DType::kFloat4E2M1FnX2: return {2, 8};
    case DType::kBComplex32: return {2, 14};
    default: return modeled_torch_versions().front();
  }
}
uint32_t element_size(DType dtype) { return info(dtype).size; }

uint32_t packed_values(DType dtype) {
  return dtype == DType::kQUInt4x2 ? 2 : dtype == DType::kQUInt2x4 ? 4 : 1;
}

bool is_castable_float(DType d) {
  return d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat32 || d == DType::kFloat64;
}

bool is_cast_type(DType d) {
  return is_castable_float(d) || d == DType::kFloat8E4M3Fn || d == DType::kFloat8E5M2;
}

bool is_floating(DType d) {
  switch (d) {
    case DType::kFloat8E4M3Fn:
    case DType::kFloat8E5M2:
    case DType::kFloat8E4M3Fnuz:
    case DType::kFloat8E5M2Fnuz:
    case DType::kFloat8E8M0Fnu:
    case DType::kFloat4E2M1FnX2: return true;
    default: return is_castable_float(d);
  }
}

uint32_t swap_unit(DType d) {
  switch (d) {
    case DType::kComplex32:
    case DType::kBComplex32:
    case DType::kComplex64:
    case DType::kComplex128: return element_size(d) / 2;
    default: return element_size(d);
  }
}

std::optional<std::string_view> storage_class_name(DType dtype) {
  const auto& i = info(dtype);
  if (i.storage_class == nullptr) return std::nullopt;
  return std::string_view(i.storage_class);
}

std::optional<DType> dtype_from_storage_class(std::string_view name) {
  for (const auto& i : kTable) {
    if (i.storage_class != nullptr && name == i.storage_class) return i.dtype;
  }
  // LibTorch's pickler (torch::pickle_save, torch.jit) spells every dtype
  // "<c10::ScalarType>Storage", including those Python has no class for.
  for (const auto& i : kTable) {
    if (i.scalar_type != nullptr && name == libtorch_storage_class(i.dtype)) return i.dtype;
  }
  return std::nullopt;
}

std::string libtorch_storage_class(DType dtype) {
  const char* name = info(dtype).scalar_type;
  return name == nullptr ? std::string() : std::string(name) + "Storage";
}

std::optional<DType> dtype_from_torch_attribute(std::string_view name) {
  for (const auto& i : kTable) {
    if (i.dtype == DType::kUntyped) continue;
    if (name == i.name || (i.alias != nullptr && name == i.alias)) return i.dtype;
  }
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view text) {
  if (text == "fp16") return DType::kFloat16;
  if (text == "bf16") return DType::kBFloat16;
  if (text == "fp32") return DType::kFloat32;
  if (text == "fp64") return DType::kFloat64;
  // No bare "fp8": which of the two formats is meant would be a guess.
  if (text == "fp8_e4m3" || text == "fp8_e4m3fn") return DType::kFloat8E4M3Fn;
  if (text == "fp8_e5m2") return DType::kFloat8E5M2;
  return dtype_from_torch_attribute(text);
}

}  // namespace ckptfix
