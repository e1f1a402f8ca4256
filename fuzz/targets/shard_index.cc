// The shard-set index parser: JSON, the weight_map, total_size, and the rule
// that every shard is a plain file name (the invariant checked here: nothing
// that passes could make ckptfix open a file outside the index's directory).
#include <cstdlib>

#include "formats/shard_index.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {

void shard_index(const uint8_t* data, size_t size) {
  expect_clean([&] {
    const ShardIndex index = parse_shard_index(std::string_view(reinterpret_cast<const char*>(data), size), 1u << 18);
    for (const std::string& shard : index.shards) {
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
          shard.find('\0') != std::string::npos) {
        std::abort();
      }
    }
    for (const auto& [tensor, shard] : index.shard_of) {
      if (index.shards.count(shard) == 0) std::abort();
    }
  });
}

}  // namespace ckptfix::fuzz
