#include "safetensors/header.h"

#include <algorithm>
#include <numeric>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "io/input_file.h"
#include "json/json.h"

namespace ckptfix {
namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
};

// In the order of the safetensors library's Dtype enum (0.8), which decides
// the order tensors are written in; 0.4 has a subset in the same order.
constexpr DTypeName kDTypes[] = {
    {DType::kBool, "BOOL"},
    {DType::kFloat4E2M1FnX2, "F4"},
    {DType::kUInt8, "U8"},
    {DType::kInt8, "I8"},
    {DType::kFloat8E5M2, "F8_E5M2"},
    {DType::kFloat8E4M3Fn, "F8_E4M3"},
    {DType::kFloat8E8M0Fnu, "F8_E8M0"},
    {DType::kFloat8E4M3Fnuz, "F8_E4M3FNUZ"},
    {DType::kFloat8E5M2Fnuz, "F8_E5M2FNUZ"},
    {DType::kInt16, "I16"},
    {DType::kUInt16, "U16"},
    {DType::kFloat16, "F16"},
    {DType::kBFloat16, "BF16"},
    {DType::kInt32, "I32"},
    {DType::kUInt32, "U32"},
    {DType::kFloat32, "F32"},
    {DType::kComplex64, "C64"},
    {DType::kFloat64, "F64"},
    {DType::kInt64, "I64"},
    {DType::kUInt64, "U64"},
};

// Names the safetensors format has but torch has no dtype for.
constexpr std::string_view kWithoutTorchType[] = {"F6_E2M3", "F6_E3M2", "C32", "F8_E3M4", "F8_E4M3B11FNUZ"};

Error corrupt_at(const std::string& where, const std::string& message) {
  return std::move(Error(ErrorKind::kCorrupt, message).at(where));
}

std::string tensor_where(const std::string& name) { return "safetensors header, tensor '" + name + "'"; }

SafetensorsEntry read_entry(const std::string& name, const JsonValue& info) {
  const std::string where = tensor_where(name);
  if (info.kind != JsonValue::Kind::kObject) {
    throw corrupt_at(where, "expected an object with dtype, shape and data_offsets, found " + std::string(info.kind_name()));
  }
  SafetensorsEntry e;
  e.name = name;
  const JsonValue* dtype = info.find("dtype");
  const JsonValue* shape = info.find("shape");
  const JsonValue* offsets = info.find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr) {
    throw corrupt_at(where, std::string("missing '") + (dtype == nullptr ? "dtype" : shape == nullptr ? "shape" : "data_offsets") + "'");
  }
  if (dtype->kind != JsonValue::Kind::kString) throw corrupt_at(where, "dtype is not a string");
  const auto known = dtype_from_safetensors(dtype->text);
  if (!known) {
    const bool named = std::find(std::begin(kWithoutTorchType), std::end(kWithoutTorchType), dtype->text) !=
                       std::end(kWithoutTorchType);
    throw Error(named ? ErrorKind::kUnsupported : ErrorKind::kCorrupt,
                named ? "dtype " + dtype->text + " has no torch type" : "unknown dtype '" + printable(dtype->text) + "'")
        .at(where);
  }
  e.dtype = *known;
  if (shape->kind != JsonValue::Kind::kArray) throw corrupt_at(where, "shape is not an array");
  uint64_t values = 1;
  for (const JsonValue& d : shape->items) {
    const auto n = d.as_uint();
    if (!n || *n > static_cast<uint64_t>(INT64_MAX)) throw corrupt_at(where, "shape holds something other than a size");
    const auto product = checked_mul(values, *n);
    if (!product) throw corrupt_at(where, "the shape's element count overflows");
    values = *product;
    e.shape.push_back(static_cast<int64_t>(*n));
  }
  if (offsets->kind != JsonValue::Kind::kArray || offsets->items.size() != 2 || !offsets->items[0].as_uint() ||
      !offsets->items[1].as_uint()) {
    throw corrupt_at(where, "data_offsets is not a pair of offsets");
  }
  e.begin = *offsets->items[0].as_uint();
  e.end = *offsets->items[1].as_uint();
  if (e.end < e.begin) throw corrupt_at(where, "data_offsets end before they begin");
  const uint32_t per = safetensors_values_per_element(e.dtype);
  if (per > 1 && (e.shape.empty() || e.shape.back() % per != 0)) {
    throw Error(ErrorKind::kUnsupported,
                "an F4 tensor needs an even last dimension to be torch's float4_e2m1fn_x2 (two values per byte); "
                "shape is " + shape_text(e.shape))
        .at(where);
  }
  const auto bytes = checked_mul(values / per, element_size(e.dtype));
  if (!bytes || *bytes != e.end - e.begin) {
    throw corrupt_at(where, "shape " + shape_text(e.shape) + " of " + std::string(dtype->text) + " needs " +
                                (bytes ? std::to_string(*bytes) : std::string("more than 2^64")) +
                                " bytes but data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                                "] hold " + std::to_string(e.end - e.begin));
  }
  return e;
}

}  // namespace

std::optional<std::string_view> safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const DTypeName& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

int safetensors_dtype_rank(DType dtype) {
  for (size_t i = 0; i < std::size(kDTypes); ++i) {
    if (kDTypes[i].dtype == dtype) return static_cast<int>(i);
  }
  return -1;
}

bool looks_like_safetensors(std::span<const std::byte> file) {
  // No magic number: a length, then the JSON object. Lengths beyond the file
  // still count, so that a truncated file is reported as one.
  return file.size() >= 10 && std::to_integer<char>(file[8]) == '{' && load_le<uint64_t>(file.data()) >= 2;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file) {
  return parse_safetensors_header(file, file.size());
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> head, uint64_t file_size, bool allow_cut_data) {
  if (file_size < 8 || head.size() < 8) {
    throw Error(ErrorKind::kCorrupt, "file is " + std::to_string(file_size) +
                                         " bytes, shorter than a safetensors header length");
  }
  const uint64_t n = load_le<uint64_t>(head.data());
  if (n > kMaxSafetensorsHeader) {
    throw corrupt_at("safetensors header", "header length " + std::to_string(n) + " exceeds the format's limit of " +
                                               std::to_string(kMaxSafetensorsHeader) + " bytes");
  }
  if (n > file_size - 8) {
    throw corrupt_at("safetensors header", "header length " + std::to_string(n) + " runs past the end of the file (" +
                                               std::to_string(file_size) + " bytes); the file is truncated");
  }
  if (n > head.size() - 8) throw Error(ErrorKind::kInternal, "parse_safetensors_header: the header was not read whole");
  const std::string_view text = as_chars(head.subspan(8, n));
  JsonValue root;
  try {
    root = parse_json(text, 8);
  } catch (Error& e) {
    throw e.at("safetensors header");
  }
  if (root.kind != JsonValue::Kind::kObject) throw corrupt_at("safetensors header", "the header is not a JSON object");

  SafetensorsHeader header;
  header.data_start = 8 + n;
  for (const auto& [name, info] : root.members) {
    if (name == "__metadata__") {
      if (info.kind == JsonValue::Kind::kNull) continue;  // safetensors reads null as no metadata
      if (info.kind != JsonValue::Kind::kObject) throw corrupt_at("safetensors header", "__metadata__ is not an object");
      SafetensorsMetadata metadata;
      for (const auto& [k, v] : info.members) {
        if (v.kind != JsonValue::Kind::kString) {
          throw corrupt_at("safetensors header", "__metadata__ value of '" + printable(k) + "' is " +
                                                     std::string(v.kind_name()) + ", not a string");
        }
        metadata.emplace_back(k, v.text);
      }
      header.metadata = std::move(metadata);
      continue;
    }
    header.entries.push_back(read_entry(name, info));
  }

  // The tensors must tile the data exactly, as safetensors' validate() requires.
  std::vector<size_t> order(header.entries.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = header.entries[a];
    const auto& y = header.entries[b];
    return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
  });
  uint64_t at = 0;
  for (size_t i : order) {
    const SafetensorsEntry& e = header.entries[i];
    if (e.begin != at) {
      throw corrupt_at(tensor_where(e.name), e.begin > at ? "a hole of " + std::to_string(e.begin - at) +
                                                                " bytes precedes its data (offset " + std::to_string(at) + ")"
                                                          : "its data overlaps the tensor before it (offset " +
                                                                std::to_string(e.begin) + " < " + std::to_string(at) + ")");
    }
    at = e.end;
  }
  const uint64_t data = file_size - header.data_start;
  if (at != data && !(allow_cut_data && at > data)) {
    throw corrupt_at("safetensors header",
                     at > data ? "the tensors need " + std::to_string(at) + " bytes of data but the file holds " +
                                     std::to_string(data) + "; the file is truncated"
                               : "the file holds " + std::to_string(data - at) +
                                     " bytes of data after the last tensor");
  }
  return header;
}

std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::optional<SafetensorsMetadata>& metadata) {
  std::string json = "{";
  if (metadata) {
    json += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata->size(); ++i) {
      if (i) json += ',';
      json += json_quote((*metadata)[i].first) + ':' + json_quote((*metadata)[i].second);
    }
    json += '}';
    if (!entries.empty()) json += ',';
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const SafetensorsEntry& e = entries[i];
    if (i) json += ',';
    json += json_quote(e.name) + ":{\"dtype\":\"" + std::string(*safetensors_dtype_name(e.dtype)) + "\",\"shape\":[";
    for (size_t d = 0; d < e.shape.size(); ++d) {
      if (d) json += ',';
      json += std::to_string(e.shape[d]);
    }
    json += "],\"data_offsets\":[" + std::to_string(e.begin) + ',' + std::to_string(e.end) + "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  append_le<uint64_t>(out, json.size());
  return out + json;
}

SafetensorsHeader read_safetensors_header(const InputFile& file, bool allow_cut_data) {
  // The length, then the header it gives (within the format's limit and the
  // file): only those bytes are read, never the tensors'.
  const FileBytes length = file.head(8);
  uint64_t n = length.size() == 8 ? load_le<uint64_t>(length.data()) : 0;
  n = std::min({n, kMaxSafetensorsHeader, file.size() - std::min<uint64_t>(file.size(), 8)});
  const FileBytes head = file.head(8 + n);
  return parse_safetensors_header(head.span(), file.size(), allow_cut_data);
}

}  // namespace ckptfix
