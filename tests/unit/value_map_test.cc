// ValueMap and ValueSet (src/pickle/value_map.h) against std::map and
// std::set, on values of two graphs (which share serial numbers), values
// made outside any graph (no serial) and values moved onto another's number:
// every answer must be what a map keyed by address gives.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "pickle/value_map.h"

namespace ckptfix {
namespace {

struct Pool {
  ValueGraph a, b;
  std::vector<Value> outside = std::vector<Value>(50);  // kNoSerial each
  std::vector<const Value*> all;
  Pool() {
    for (int i = 0; i < 3000; ++i) all.push_back(a.make(ValueKind::kInt));
    for (int i = 0; i < 2000; ++i) all.push_back(b.make(ValueKind::kInt));  // the numbers 0..1999 again
    for (const Value& v : outside) all.push_back(&v);
    // A value moved onto another slot carries its number there: two values of a with one number.
    Value* moved_to = a.make(ValueKind::kNone);
    *moved_to = std::move(*a.make(ValueKind::kStr));
    all.push_back(moved_to);
  }
};

TEST(ValueMap, AgreesWithStdMapWhereSerialsCollide) {
  Pool pool;
  EXPECT_EQ(pool.outside[0].serial, Value::kNoSerial);
  std::mt19937 rng(11);
  for (int round = 0; round < 3; ++round) {
    ValueMap<uint64_t> map;
    if (round == 2) map.reserve(1500);  // sized ahead (for part of the numbers) answers as grown
    std::map<const Value*, uint64_t> expected;
    for (int step = 0; step < 60000; ++step) {
      const Value* p = pool.all[rng() % (round == 0 ? 200 : pool.all.size())];
      switch (rng() % 4) {
        case 0:
          EXPECT_EQ(map.emplace(p, step), expected.emplace(p, step).second);
          break;
        case 1:
          map.erase(p);
          expected.erase(p);
          break;
        case 2:
          map[p] += 1;
          expected[p] += 1;
          break;
        default: {
          const uint64_t* got = map.find(p);
          const auto it = expected.find(p);
          ASSERT_EQ(got != nullptr, it != expected.end());
          if (got != nullptr) EXPECT_EQ(*got, it->second);
        }
      }
      ASSERT_EQ(map.size(), expected.size());
    }
    for (const Value* p : pool.all) EXPECT_EQ(map.count(p), expected.count(p));
  }
}

TEST(ValueSet, AgreesWithStdSetWhereSerialsCollide) {
  Pool pool;
  std::mt19937 rng(5);
  ValueSet set;
  std::set<const Value*> expected;
  for (int step = 0; step < 60000; ++step) {
    const Value* p = pool.all[rng() % pool.all.size()];
    if (rng() % 3 == 0) {
      set.erase(p);
      expected.erase(p);
    } else {
      EXPECT_EQ(set.insert(p), expected.insert(p).second);
    }
    ASSERT_EQ(set.size(), expected.size());
  }
  for (const Value* p : pool.all) EXPECT_EQ(set.contains(p), expected.count(p) == 1);
}

}  // namespace
}  // namespace ckptfix
