// Tensor element types as torch names them, with their storage classes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ckptfix/torch_version.h"

namespace ckptfix {

/// Element types a torch checkpoint can hold.
enum class DType : uint8_t {
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kInt8,
  kUInt8,
  kInt16,
  kInt32,
  kInt64,
  kBool,
  kComplex32,
  kComplex64,
  kComplex128,
  kQInt8,
  kQUInt8,
  kQInt32,
  kQUInt4x2,
  kQUInt2x4,
  kUInt16,
  kUInt32,
  kUInt64,
  kFloat8E4M3Fn,
  kFloat8E5M2,
  kFloat8E4M3Fnuz,
  kFloat8E5M2Fnuz,
  kFloat8E8M0Fnu,
  kFloat4E2M1FnX2,
  kBits8,
  kBits16,
  kBits1x8,
  kBits2x4,
  kBits4x2,
  kBComplex32,  ///< complex of two bfloat16 (torch >= 2.14)
  kUntyped,  ///< bytes of a torch.UntypedStorage whose tensor type is not known
};

/// torch's name: "float32", "bfloat16", "int64", ...
std::string_view dtype_name(DType dtype);
/// The first torch release whose torch.load reads tensors of `dtype`:
/// float8_e8m0fnu 2.7 (pytorch PR #147466), float4_e2m1fn_x2 2.8 (#148791),
/// bcomplex32 2.14 (#186928); 2.6 (the oldest ckptfix models) for the rest.
TorchVersion first_torch_loading(DType dtype);
/// Bytes per element of a storage (1 for the packed sub-byte quantized types).
uint32_t element_size(DType dtype);
/// Tensor elements per storage element: 2 for quint4x2 and 4 for quint2x4,
/// whose tensors count 4- and 2-bit values; 1 for every other dtype
/// (float4_e2m1fn_x2 and the bits types count whole bytes).
uint32_t packed_values(DType dtype);
/// float16, bfloat16, float32, float64 (what LibTorch loading casts).
bool is_castable_float(DType dtype);
/// The types `cast` converts between: the four above, float8_e4m3fn and
/// float8_e5m2.
bool is_cast_type(DType dtype);
/// Any floating type, including float8 variants.
bool is_floating(DType dtype);
/// Size of the unit to byte-swap for big-endian data (half an element for complex).
uint32_t swap_unit(DType dtype);

/// The typed storage class torch 1.x uses for a dtype ("FloatStorage"), or
/// nullopt for the types torch 2.x saves as an UntypedStorage plus a dtype
/// argument of _rebuild_tensor_v3 (torch.storage._new_dtypes: float8*,
/// float4_e2m1fn_x2, uint16/32/64, bits*, complex32, bcomplex32).
std::optional<std::string_view> storage_class_name(DType dtype);
/// The dtype of a storage class name such as "HalfStorage" (or LibTorch's
/// spelling, "Float8_e4m3fnStorage"); nullopt if unknown.
std::optional<DType> dtype_from_storage_class(std::string_view name);
/// The storage class LibTorch's own pickler writes and its unpickler reads
/// for a dtype: c10::ScalarType name + "Storage" ("HalfStorage",
/// "Float8_e4m3fnStorage", "ComplexHalfStorage"); empty for kUntyped.
std::string libtorch_storage_class(DType dtype);
/// The dtype of a torch global attribute name such as "float16" or "half".
std::optional<DType> dtype_from_torch_attribute(std::string_view name);
/// Parses a user-facing dtype: fp16|float16|half, bf16|bfloat16, fp32|float32|float,
/// fp64|float64|double, fp8_e4m3|fp8_e4m3fn|float8_e4m3fn, fp8_e5m2|float8_e5m2
/// (and any other torch dtype name).
std::optional<DType> parse_dtype(std::string_view text);

}  // namespace ckptfix
