// How a state dict is split into a Hugging Face shard set, and the index that
// names the shards: shared by the safetensors writer and the torch (.bin)
// shard set writer, so that both split and name as transformers does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ckptfix {

/// One tensor of the state dict, in state-dict order: its storage and the
/// bytes that storage takes in the output.
struct ShardItem {
  int32_t storage = -1;
  uint64_t storage_bytes = 0;
};

/// The shards of a set as huggingface_hub's split_torch_state_dict_into_shards
/// makes them (what transformers' save_pretrained writes): tensors in
/// state-dict order, a new shard when the next would pass the limit, a
/// tensor larger than the limit alone in a shard (placed before the one
/// being filled), tensors sharing a storage in the shard of the first of
/// them, each storage counted once. Indices into `items`; at least one
/// (possibly empty) shard.
std::vector<std::vector<size_t>> split_into_shards(const std::vector<ShardItem>& items, uint64_t limit);

/// "model-00002-of-00005.safetensors" for stem "model", k = 1 (0-based), n = 5.
std::string shard_file_name(const std::string& stem, size_t k, size_t n, const std::string& extension);

/// The index as transformers writes it: json.dumps(index, indent=2,
/// sort_keys=True) + "\n", so ASCII only; `weight_map` maps each key to its
/// shard's file name.
std::string shard_index_json(uint64_t total_size, const std::map<std::string, std::string>& weight_map);

}  // namespace ckptfix
