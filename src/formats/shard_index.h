// The index file of a Hugging Face shard set, parsed (formats/shard_index.cc
// reads the set it names).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace ckptfix {

struct ShardIndex {
  std::map<std::string, std::string> shard_of;  ///< tensor -> shard file name (a plain name, checked)
  std::set<std::string> shards;                 ///< the distinct shard file names, sorted
  std::optional<uint64_t> total_size;           ///< metadata.total_size, when given
};

/// Parses an index's JSON: a weight_map object of tensor -> file name (each a
/// name beside the index, never a path: Error(kUnsafe) otherwise), an
/// optional metadata.total_size. Throws Error(kCorrupt) naming what is wrong,
/// Error(kLimit) above 64 MiB or `max_tensors` entries.
ShardIndex parse_shard_index(std::string_view text, uint64_t max_tensors);

}  // namespace ckptfix
