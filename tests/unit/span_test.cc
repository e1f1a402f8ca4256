// ckptfix::Span (include/ckptfix/span.h): made from what std::span is made
// from, made into a std::span, and of one layout whatever the libstdc++.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ckptfix/span.h"

namespace ckptfix {
namespace {

// The layout the C++ package's GCC 10 library and a newer compiler's program agree on.
static_assert(sizeof(Span<const std::byte>) == 2 * sizeof(void*));
static_assert(std::is_trivially_copyable_v<Span<int>>);

size_t total(Span<const int> values) {
  size_t sum = 0;
  for (int v : values) sum += static_cast<size_t>(v);
  return sum;
}

TEST(Span, ConvertsFromAndToStdSpan) {
  std::vector<int> v = {1, 2, 3, 4};
  std::array<int, 3> a = {5, 6, 7};
  const int c[] = {8, 9};
  EXPECT_EQ(total(v), 10u);
  EXPECT_EQ(total(a), 18u);
  EXPECT_EQ(total(c), 17u);
  EXPECT_EQ(total(std::span<const int>(v).subspan(1, 2)), 5u);
  Span<int> mutable_view = v;
  EXPECT_EQ(total(mutable_view), 10u);  // Span<int> -> Span<const int>
  const std::span<int> back = mutable_view;  // std::span from it (a borrowed contiguous range)
  back[0] = 10;
  EXPECT_EQ(v[0], 10);
  const Span<const int> part = Span<const int>(v).subspan(2);
  ASSERT_EQ(part.size(), 2u);
  EXPECT_EQ(part.front(), 3);
  EXPECT_EQ(part.back(), 4);
  EXPECT_EQ(part.first(1).size(), 1u);
  EXPECT_EQ(Span<const std::byte>().size_bytes(), 0u);
  EXPECT_TRUE(Span<const std::string>().empty());
}

}  // namespace
}  // namespace ckptfix
