// PointerSet and PointerMap (src/pickle/pointer_set.h) against std::set and
// std::map on random inserts, lookups and erases, across growth and the
// wrap-around of a probe run, and with adjacent addresses (the values of a
// graph lie next to each other in memory).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "pickle/pointer_set.h"

namespace ckptfix {
namespace {

TEST(PointerSet, AgreesWithStdSetThroughGrowthAndErases) {
  std::vector<int> pool(5000);
  std::mt19937 rng(7);
  for (int round = 0; round < 4; ++round) {
    PointerSet<int> set;
    std::set<const int*> expected;
    for (int step = 0; step < 40000; ++step) {
      const int* p = &pool[rng() % (round == 0 ? 100 : pool.size())];
      switch (rng() % 3) {
        case 0:
          EXPECT_EQ(set.insert(p), expected.insert(p).second);
          break;
        case 1:
          set.erase(p);
          expected.erase(p);
          break;
        default:
          EXPECT_EQ(set.contains(p), expected.count(p) == 1);
      }
      ASSERT_EQ(set.size(), expected.size());
    }
    for (const int& v : pool) EXPECT_EQ(set.contains(&v), expected.count(&v) == 1);
    set.clear();
    EXPECT_TRUE(set.empty());
    EXPECT_FALSE(set.contains(&pool[0]));
  }
  PointerSet<int> empty;
  EXPECT_FALSE(empty.contains(nullptr));
  empty.erase(&pool[0]);  // nothing to erase: no effect
  EXPECT_EQ(empty.size(), 0u);
}

// `map` holds exactly what `expected` holds, for every key of `pool`.
void expect_same_entries(const PointerMap<int, uint64_t>& map, const std::map<const int*, uint64_t>& expected,
                         const std::vector<int>& pool) {
  EXPECT_EQ(map.size(), expected.size());
  for (const int& v : pool) {
    const uint64_t* got = map.find(&v);
    const auto it = expected.find(&v);
    ASSERT_EQ(got != nullptr, it != expected.end());
    if (got != nullptr) {
      EXPECT_EQ(*got, it->second);
    }
  }
}

TEST(PointerMap, KeepsTheFirstValueOfEachKey) {
  std::vector<int> pool(3000);
  PointerMap<int, uint64_t> map;
  std::map<const int*, uint64_t> expected;
  std::mt19937 rng(11);
  for (uint64_t step = 0; step < 20000; ++step) {
    const int* p = &pool[rng() % pool.size()];
    EXPECT_EQ(map.emplace(p, step), expected.emplace(p, step).second);
  }
  expect_same_entries(map, expected, pool);
}

// Erasing moves later entries of a run back: their values must move with
// them (the checkpoint's tensor table erases and reassigns).
TEST(PointerMap, ValuesFollowTheirKeysThroughErasesAndAssignments) {
  std::vector<int> pool(2000);
  PointerMap<int, uint64_t> map;
  std::map<const int*, uint64_t> expected;
  std::mt19937 rng(5);
  for (uint64_t step = 0; step < 30000; ++step) {
    const int* p = &pool[rng() % pool.size()];
    switch (rng() % 3) {
      case 0:
        map.erase(p);
        expected.erase(p);
        break;
      case 1:
        map[p] = step;
        expected[p] = step;
        break;
      default:
        EXPECT_EQ(map.emplace(p, step), expected.emplace(p, step).second);
    }
  }
  expect_same_entries(map, expected, pool);
}

}  // namespace
}  // namespace ckptfix
