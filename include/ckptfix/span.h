// ckptfix::Span: what the public API passes where std::span would do.
//
// std::span's layout is not the same in every libstdc++: GCC 10's holds the
// size before the pointer, GCC 11 and later the pointer first. The C++
// package's library is built by GCC 10 (for glibc 2.31) and linked into
// programs built by newer compilers, so a std::span crossing that boundary
// would be read the wrong way round (a crash, found by the package test of
// issue 52). This type's layout is ckptfix's own; it is made from a
// std::span (or a vector, an array) and a std::span is made from it (it is a
// borrowed contiguous range) in the caller's code, with the caller's std::span.
#pragma once

#include <cstddef>
#include <iterator>
#include <ranges>
#include <span>
#include <type_traits>

namespace ckptfix {

template <typename T>
class Span {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using iterator = T*;

  constexpr Span() noexcept = default;
  constexpr Span(T* data, size_t size) noexcept : data_(data), size_(size) {}
  /// From a std::span, a std::vector, a std::array, a Span of non-const T...
  template <typename Range>
    requires(std::ranges::contiguous_range<Range> && std::ranges::sized_range<Range> &&
             std::is_convertible_v<std::remove_reference_t<std::ranges::range_reference_t<Range>> (*)[], T (*)[]> &&
             !std::is_same_v<std::remove_cvref_t<Range>, Span>)
  constexpr Span(Range&& range) noexcept  // NOLINT(google-explicit-constructor): as std::span's
      : data_(std::ranges::data(range)), size_(std::ranges::size(range)) {}

  constexpr T* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  constexpr bool empty() const noexcept { return size_ == 0; }
  constexpr T* begin() const noexcept { return data_; }
  constexpr T* end() const noexcept { return data_ + size_; }
  constexpr T& operator[](size_t i) const noexcept { return data_[i]; }
  constexpr T& front() const noexcept { return data_[0]; }
  constexpr T& back() const noexcept { return data_[size_ - 1]; }
  constexpr Span subspan(size_t offset, size_t count = static_cast<size_t>(-1)) const noexcept {
    return Span(data_ + offset, count == static_cast<size_t>(-1) ? size_ - offset : count);
  }
  constexpr Span first(size_t count) const noexcept { return Span(data_, count); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ckptfix

// A Span is a view, borrowed like std::span (ranges may keep its iterators).
template <typename T>
inline constexpr bool std::ranges::enable_borrowed_range<ckptfix::Span<T>> = true;
template <typename T>
inline constexpr bool std::ranges::enable_view<ckptfix::Span<T>> = true;
