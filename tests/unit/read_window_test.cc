// ReadWindow (src/io/read_window.h): every read gives the file's bytes,
// whatever the order of the reads, across files and at the file's end; in
// order, one read of the file serves many records, and out of order the
// window shrinks so that no read costs much more than the record.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "io/read_window.h"

namespace ckptfix {
namespace {

struct FakeFile {
  std::vector<std::byte> bytes;
  size_t reads = 0;
  uint64_t bytes_read = 0;
  explicit FakeFile(size_t size, unsigned seed) : bytes(size) {
    std::mt19937 rng(seed);
    for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
  }
  std::function<void(uint64_t, std::span<std::byte>)> reader() {
    return [this](uint64_t at, std::span<std::byte> out) {
      ASSERT_LE(at + out.size(), bytes.size());
      std::copy_n(bytes.begin() + static_cast<std::ptrdiff_t>(at), out.size(), out.begin());
      ++reads;
      bytes_read += out.size();
    };
  }
  bool same(std::span<const std::byte> got, uint64_t offset) const {
    return std::equal(got.begin(), got.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset));
  }
};

TEST(ReadWindow, ReadsInOrderShareOneReadOfTheFile) {
  FakeFile file(3 << 20, 1);
  ReadWindow window;
  size_t records = 0;
  for (uint64_t at = 0; at + 300 <= file.bytes.size(); at += 320, ++records) {
    ASSERT_TRUE(file.same(window.bytes(&file, at, 300, file.bytes.size(), file.reader()), at)) << at;
  }
  EXPECT_LT(file.reads * 100, records);  // 256 KiB a read: about 800 records each
}

TEST(ReadWindow, AnyOrderGivesTheFilesBytesAndCostsLittleMoreThanARecordARead) {
  FakeFile a(1 << 20, 2), b(1 << 16, 3);
  std::vector<uint64_t> offsets(3000);
  std::iota(offsets.begin(), offsets.end(), 0);
  std::shuffle(offsets.begin(), offsets.end(), std::mt19937(4));
  ReadWindow window;
  std::mt19937 rng(5);
  uint64_t asked = 0;
  for (uint64_t k : offsets) {
    FakeFile& f = k % 7 == 0 ? b : a;
    const uint64_t size = 1 + rng() % 700;
    const uint64_t at = (k * 337) % (f.bytes.size() - size + 1);
    ASSERT_TRUE(f.same(window.bytes(&f, at, size, f.bytes.size(), f.reader()), at)) << k;
    asked += size;
  }
  // The last record of a file, where the window cannot reach past it.
  ASSERT_TRUE(a.same(window.bytes(&a, a.bytes.size() - 5, 5, a.bytes.size(), a.reader()), a.bytes.size() - 5));
  // The window shrinks where reads jump about: a few windows' worth more than asked, not 256 KiB a read.
  EXPECT_LT(a.bytes_read + b.bytes_read, asked * 2 + (size_t{8} << 20));
}

TEST(ReadWindow, AFailedReadLeavesNothingBehind) {
  FakeFile file(1 << 16, 6);
  ReadWindow window;
  auto failing = [](uint64_t, std::span<std::byte>) { throw std::runtime_error("read failed"); };
  EXPECT_THROW(window.bytes(&file, 0, 10, file.bytes.size(), failing), std::runtime_error);
  EXPECT_TRUE(file.same(window.bytes(&file, 0, 10, file.bytes.size(), file.reader()), 0));
  EXPECT_EQ(file.reads, 1u);
}

}  // namespace
}  // namespace ckptfix
