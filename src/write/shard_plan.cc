#include "write/shard_plan.h"

#include <algorithm>

#include "json/json.h"

namespace ckptfix {

std::vector<std::vector<size_t>> split_into_shards(const std::vector<ShardItem>& items, uint64_t limit) {
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  uint64_t current_size = 0;
  std::map<int32_t, size_t> first_of_storage;  // storage -> index of its first tensor
  std::vector<size_t> followers;               // tensors whose storage came earlier
  for (size_t i = 0; i < items.size(); ++i) {
    if (!first_of_storage.emplace(items[i].storage, i).second) {
      followers.push_back(i);
      continue;
    }
    const uint64_t size = items[i].storage_bytes;
    if (size > limit) {
      shards.push_back({i});
      continue;
    }
    if (current_size + size > limit && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_size = 0;
    }
    current.push_back(i);
    current_size += size;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  for (size_t i : followers) {
    const size_t first = first_of_storage.at(items[i].storage);
    for (auto& shard : shards) {
      if (std::find(shard.begin(), shard.end(), first) != shard.end()) {
        shard.push_back(i);
        break;
      }
    }
  }
  if (shards.empty()) shards.emplace_back();
  return shards;
}

namespace {

std::string five_digits(size_t n) {
  std::string s = std::to_string(n);
  return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
}

}  // namespace

std::string shard_file_name(const std::string& stem, size_t k, size_t n, const std::string& extension) {
  return stem + "-" + five_digits(k + 1) + "-of-" + five_digits(n) + extension;
}

std::string shard_index_json(uint64_t total_size, const std::map<std::string, std::string>& weight_map) {
  std::string out = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_size) + "\n  },\n  \"weight_map\": {";
  bool first = true;
  for (const auto& [tensor, file] : weight_map) {
    out += (first ? "\n    " : ",\n    ") + json_quote_ascii(tensor) + ": " + json_quote_ascii(file);
    first = false;
  }
  out += weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

}  // namespace ckptfix
