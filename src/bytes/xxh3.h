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
  /// xxhash's XXH3_state_t, held here rather than allocated: a writer makes
  /// a few hashers per record, and a file may have 100,000 records. Its
  /// size and alignment are checked against xxhash.h in xxh3.cc.
  static constexpr size_t kStateSize = 640;
  alignas(64) std::byte state_[kStateSize];
};

/// XXH3-64 (seed 0) of one buffer.
uint64_t xxh3_64(std::span<const std::byte> bytes);

/// The verification hash of a record's bytes: the XXH3-64 of the XXH3-64s
/// (8 bytes each, little-endian) of its consecutive pieces of kPiece bytes,
/// the last one shorter (none for no bytes). Unlike one XXH3 over the whole,
/// pieces can be hashed on different threads and joined in order: the
/// writer converts a large record on two cores at once
/// (storage_pipeline.h), and the read-back hashes the bytes it reads in one
/// stream. Both ends must use this, never a plain Xxh3.
class RecordHash {
 public:
  static constexpr size_t kPiece = size_t{1} << 20;

  /// Hashes the next bytes, in any sizes.
  void update(std::span<const std::byte> bytes);
  /// Joins the hash (xxh3_64) of the next piece, hashed elsewhere: a whole
  /// one, or the last. Only between pieces: after bytes of a piece were
  /// given to update(), Error(kInternal).
  void add_piece(uint64_t piece_hash);
  /// The hash of everything so far; it then starts again.
  uint64_t digest();
  /// Starts again, forgetting what was given.
  void reset();

 private:
  void end_piece();
  void join(uint64_t piece_hash);

  Xxh3 piece_;
  Xxh3 pieces_;
  size_t in_piece_ = 0;
};

/// RecordHash of one buffer.
uint64_t record_hash(std::span<const std::byte> bytes);

}  // namespace ckptfix
