// The safetensors container: an 8-byte little-endian header length N, N
// bytes of JSON, then the tensor bytes (docs/format.md, "safetensors").
//
//   {"__metadata__": {"k": "v", ...},                       (optional)
//    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//
// Offsets are relative to the byte after the header. This file knows the
// container only: reading checks every rule the safetensors library checks
// (and a few it does not), writing produces byte for byte what
// `safetensors.torch.save_file` produces. formats/safetensors_format.cc turns
// a header into the model, write/safetensors_writer.cc the model into bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptfix/dtype.h"

namespace ckptfix {

/// The safetensors library's limit on the header (and ours).
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kFloat32;
  /// The shape as the header records it (for F4, counting 4-bit values).
  std::vector<int64_t> shape;
  uint64_t begin = 0;  ///< data_offsets, relative to data_start
  uint64_t end = 0;
};

using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  ///< in header order
  std::optional<SafetensorsMetadata> metadata;  ///< `__metadata__`, in header order
  uint64_t data_start = 0;  ///< 8 + N
};

/// True when `file` starts like a safetensors file: a header length that
/// fits the file, then '{'.
bool looks_like_safetensors(std::span<const std::byte> file);

/// Parses and checks the header of a whole file: the length within the file
/// and kMaxSafetensorsHeader, strict JSON, known dtypes, shapes and offsets
/// with checked arithmetic, tensors tiling the data exactly (no holes, no
/// overlaps, the last ending at the end of the file), metadata strings only
/// (`"__metadata__": null` is no metadata, as the safetensors library reads it).
/// Throws Error(kCorrupt) naming the tensor or the byte of the header; a
/// dtype torch has no type for is Error(kUnsupported).
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file);
/// The same for a file of `file_size` bytes of which `head` holds at least
/// the first 8 + N (all, when the file is shorter): the header is read, the
/// tensor bytes are not. `allow_cut_data` (salvage): the file may end
/// before the tensors' data does.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> head, uint64_t file_size,
                                           bool allow_cut_data = false);

class InputFile;
/// parse_safetensors_header of a file, reading only the length and the
/// header (never the tensors' bytes).
SafetensorsHeader read_safetensors_header(const InputFile& file, bool allow_cut_data = false);

/// The 8-byte length and the JSON header, space-padded to a multiple of 8,
/// exactly as the safetensors library writes them. `entries` must already
/// be in the order of their offsets.
std::string encode_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::optional<SafetensorsMetadata>& metadata);

/// The safetensors name of a dtype ("F32", "F8_E4M3", "F4"), or nullopt for
/// dtypes safetensors cannot hold (complex128, complex32, quantized, bits).
std::optional<std::string_view> safetensors_dtype_name(DType dtype);
/// The dtype of a safetensors name, or nullopt.
std::optional<DType> dtype_from_safetensors(std::string_view name);
/// The rank of a dtype in the safetensors library's Dtype enum: tensors are
/// written in descending rank, then by name (safetensors' `prepare`).
int safetensors_dtype_rank(DType dtype);

/// 4-bit values per stored byte as safetensors counts them: 2 for F4
/// (torch's float4_e2m1fn_x2 counts packed bytes), else 1.
inline uint32_t safetensors_values_per_element(DType dtype) { return dtype == DType::kFloat4E2M1FnX2 ? 2 : 1; }

}  // namespace ckptfix
