// The `.metadata` file of a torch.distributed.checkpoint directory, parsed
// (formats/dcp_format.cc reads the directory it describes; see
// docs/dcp-format-notes.md for the layout and where each rule comes from).
//
// torch reads `.metadata` with a raw pickle.load. ckptfix reads it with its
// own unpickler, which runs nothing, and accepts only the globals DCP
// itself pickles (its metadata classes, torch.Size, torch dtypes, the
// layout reducer, pathlib paths): any other global is refused by name.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// Where one item's bytes are: a torch.save zip at [offset, offset+length)
/// of the .distcp file `file` (a plain name in the directory, checked).
struct DcpLocation {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::vector<std::string> transforms;  ///< _StorageInfo.transform_descriptors ("stream.zstd/1")
};

/// One box of a tensor and where it was saved.
struct DcpChunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  DcpLocation location;
};

/// A step of the path dcp_to_torch_save places an entry at: a str key
/// (a dict) or an int (an index into a list, or a dict's int key).
struct DcpPathStep {
  bool is_int = false;
  std::string key;
  int64_t index = 0;
};

struct DcpEntry {
  std::string fqn;
  bool is_tensor = false;
  // Tensors:
  DType dtype = DType::kFloat32;
  std::vector<int64_t> size;
  std::vector<DcpChunk> chunks;
  // Bytes items (any value that is not a tensor, saved with torch.save):
  DcpLocation location;
  /// planner_data[fqn], or the fqn alone when there is none.
  std::vector<DcpPathStep> path;
};

struct DcpMetadata {
  std::vector<DcpEntry> entries;  ///< in state_dict_metadata's order
  std::string version;            ///< Metadata.version ("1.0.0"; empty before torch 2.7)
};

/// Tensors with more chunks than this are not checked pairwise for overlaps
/// (the work would grow with the square of their number).
constexpr size_t kMaxPairwiseChunks = 1024;

/// Parses `.metadata`'s pickle. Checks its structure, that every chunk is
/// inside its tensor, that chunk volumes add up to the tensor's (and, up to
/// kMaxPairwiseChunks chunks a tensor, that no two overlap), and that every item's
/// storage is named exactly once. Throws Error(kUnsafe) naming any other
/// global, Error(kCorrupt) naming what is wrong, Error(kLimit) beyond
/// `limits`.
DcpMetadata parse_dcp_metadata(std::span<const std::byte> pickle, const ReadLimits& limits);

}  // namespace ckptfix
