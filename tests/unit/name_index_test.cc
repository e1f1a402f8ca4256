// NameIndex (src/passes/name_index.h) against std::unordered_map: the
// first index of each name is kept, through growth from an empty table.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "passes/name_index.h"

namespace ckptfix {
namespace {

TEST(NameIndex, AgreesWithUnorderedMapThroughGrowth) {
  std::mt19937 rng(3);
  std::vector<std::string> names;
  for (int i = 0; i < 20000; ++i) names.push_back("layers." + std::to_string(rng() % 9000) + ".weight");
  names.push_back("");  // the empty name is a name
  for (size_t expected : {size_t{0}, names.size()}) {
    NameIndex index(expected);
    std::unordered_map<std::string_view, size_t> map;
    for (size_t i = 0; i < names.size(); ++i) {
      const auto [had, added] = index.emplace(names[i], i);
      const auto [it, map_added] = map.emplace(names[i], i);
      ASSERT_EQ(added, map_added) << names[i];
      ASSERT_EQ(had, it->second) << names[i];
    }
    EXPECT_EQ(index.size(), map.size());
    for (int k = 0; k < 10000; ++k) {
      const std::string name = "layers." + std::to_string(rng() % 10000) + ".weight";
      const auto it = map.find(name);
      EXPECT_EQ(index.find(name), it == map.end() ? std::nullopt : std::optional(it->second)) << name;
    }
  }
}

}  // namespace
}  // namespace ckptfix
