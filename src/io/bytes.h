// Little- and big-endian loads and stores on byte spans, and overflow-checked
// arithmetic for sizes and offsets read from untrusted files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>

namespace ckptfix {

template <typename T>
inline T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // x86-64 and aarch64 Linux are little-endian
  return v;
}

template <typename T>
inline T load_be(const std::byte* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = static_cast<T>((v << 8) | static_cast<T>(std::to_integer<uint8_t>(p[i])));
  return v;
}

template <typename T>
inline void store_le(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

/// The bits of `from` as a `To` of the same size: std::bit_cast, which the
/// release build's compiler (g++ 10, for glibc 2.31: docs/release.md) lacks.
template <typename To, typename From>
inline To copy_bits(const From& from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

/// Appends v little-endian to a byte string.
template <typename T>
inline void append_le(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof v);
  out.append(buf, sizeof buf);
}

/// a + b, or nullopt on overflow.
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a * b, or nullopt on overflow.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::string_view as_chars(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

inline std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

}  // namespace ckptfix
