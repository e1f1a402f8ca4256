// ckptfix's XXH3 (AVX2 where the CPU has it, src/bytes/xxh3_avx2.c) against
// libxxhash's own entry points (SSE2 as Debian builds them): one-shot at every
// length that takes a different path, at unaligned starts, and long runs fed
// in pieces that cross the 256-byte stripe blocks and the state's buffer.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bytes/xxh3.h"
#include "ckptfix/error.h"
#include "dtype_kernels/cpu_features.h"

namespace ckptfix {
namespace {

std::vector<std::byte> random_bytes(size_t n) {
  std::mt19937_64 random(3);
  std::vector<std::byte> bytes(n);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  return bytes;
}

uint64_t library(std::span<const std::byte> data) { return XXH3_64bits(data.data(), data.size()); }

void note_vector_width() {
#if CKPTFIX_AVX2_KERNELS
  if (!cpu_has_avx2()) std::puts("note: no AVX2 on this CPU: the library's XXH3 is compared with itself");
#else
  std::puts("note: not x86-64: the library's XXH3 is compared with itself");
#endif
}

TEST(Xxh3, IsTheLibrarysAtEveryLengthAndAlignment) {
  note_vector_width();
  const auto bytes = random_bytes(4096 + 64);
  EXPECT_EQ(xxh3_64({}), 0x2D06800538D394C2u);  // XXH3-64 of nothing, seed 0 (xxHash's tests)
  for (size_t length = 0; length <= 4096; ++length) {
    for (size_t offset : {0, 1, 7, 32}) {
      const auto data = std::span<const std::byte>(bytes).subspan(offset, length);
      ASSERT_EQ(xxh3_64(data), library(data)) << "length " << length << ", offset " << offset;
      Xxh3 running;
      running.update(data);
      ASSERT_EQ(running.digest(), library(data)) << "length " << length << ", offset " << offset;
    }
  }
}

TEST(Xxh3, PiecesGiveTheWholesHash) {
  const auto bytes = random_bytes((size_t{4} << 20) + 97);
  const uint64_t whole = library(bytes);
  EXPECT_EQ(xxh3_64(bytes), whole);
  Xxh3 running;
  for (size_t piece : {size_t{1}, size_t{63}, size_t{64}, size_t{240}, size_t{256}, size_t{1031}, size_t{256} << 10,
                       bytes.size()}) {
    running.reset();
    for (size_t at = 0; at < bytes.size(); at += piece) {
      running.update(std::span<const std::byte>(bytes).subspan(at, std::min(piece, bytes.size() - at)));
    }
    EXPECT_EQ(running.digest(), whole) << "pieces of " << piece;
  }
  running.reset();
  EXPECT_EQ(running.digest(), library({}));
}

// The record hash is defined by the library's XXH3: of the little-endian
// XXH3-64s of the 1 MiB pieces, the last one shorter.
uint64_t record_hash_by_definition(std::span<const std::byte> data) {
  std::vector<std::byte> hashes;
  for (size_t at = 0; at < data.size(); at += RecordHash::kPiece) {
    const uint64_t h = library(data.subspan(at, std::min(RecordHash::kPiece, data.size() - at)));
    for (int i = 0; i < 8; ++i) hashes.push_back(static_cast<std::byte>(h >> (8 * i)));
  }
  return library(hashes);
}

TEST(RecordHash, IsTheHashOfThePiecesHashes) {
  const auto bytes = random_bytes((size_t{3} << 20) + 12345);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{1000}, RecordHash::kPiece - 1, RecordHash::kPiece,
                            RecordHash::kPiece + 1, size_t{2} * RecordHash::kPiece, bytes.size()}) {
    const auto data = std::span<const std::byte>(bytes).first(size);
    EXPECT_EQ(record_hash(data), record_hash_by_definition(data)) << size;
  }
  EXPECT_EQ(record_hash({}), library({}));  // no pieces
}

TEST(RecordHash, AnyCutGivesTheSameHashAndPiecesHashedElsewhereJoin) {
  const auto bytes = random_bytes((size_t{3} << 20) + 12345);
  const uint64_t whole = record_hash(bytes);
  RecordHash running;
  for (size_t cut : {size_t{1}, size_t{4095}, size_t{256} << 10, RecordHash::kPiece + 7, bytes.size()}) {
    for (size_t at = 0; at < bytes.size(); at += cut) {
      running.update(std::span<const std::byte>(bytes).subspan(at, std::min(cut, bytes.size() - at)));
    }
    EXPECT_EQ(running.digest(), whole) << "cut every " << cut;  // and digest() starts again
  }
  // Whole pieces hashed apart (other threads) and joined in order, then a
  // part given as bytes: the same.
  for (size_t at = 0; at < 2 * RecordHash::kPiece; at += RecordHash::kPiece) {
    running.add_piece(xxh3_64(std::span<const std::byte>(bytes).subspan(at, RecordHash::kPiece)));
  }
  running.update(std::span<const std::byte>(bytes).subspan(2 * RecordHash::kPiece));
  EXPECT_EQ(running.digest(), whole);
  running.update(std::span<const std::byte>(bytes).first(10));
  EXPECT_THROW(running.add_piece(0), Error);  // not between pieces
  running.reset();
  EXPECT_EQ(running.digest(), library({}));
}

}  // namespace
}  // namespace ckptfix
