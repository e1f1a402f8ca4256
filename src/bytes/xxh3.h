// XXH3-64, the verification hash, on the widest vectors the CPU has.
//
// Debian's libxxhash is built for x86-64's baseline (SSE2), and its static
// archive (what the release build links) has no run-time dispatch: on an
// AVX2 CPU its XXH3 runs at half the speed it could, and it hashes every
// byte a verified write produces and every byte it reads back. Where AVX2
// is usable, xxh3_avx2.c (the same xxhash.h, compiled for AVX2) hashes
// instead; the algorithm does not depend on the vector width, so the
// results are the library's (tests/unit/xxh3_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace ckptfix {

/// A running XXH3-64 (seed 0) over bytes given in pieces.
class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(const Xxh3&) = delete;
  Xxh3& operator=(const Xxh3&) = delete;

  void update(std::span<const std::byte> bytes);
  uint64_t digest() const;
  /// Starts again, as a new Xxh3 (without allocating).
  void reset();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// XXH3-64 (seed 0) of one buffer.
uint64_t xxh3_64(std::span<const std::byte> bytes);

}  // namespace ckptfix
