// Atomic outputs: temporary files beside the target, stale ones from dead
// processes removed, nothing left behind on failure, no silent overwrite.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/atomic_file.h"
#include "test_support.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public test::TempDirTest {
 protected:
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(AtomicFileTest, UncommittedFileLeavesNothing) {
  {
    AtomicFile out(dir_ / "out.pt", false);
    out.sink().write(as_bytes("partial"));
    EXPECT_TRUE(fs::exists(out.temp_path()));
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(AtomicFileTest, CommitReplacesOnlyWhenAllowed) {
  std::ofstream(dir_ / "out.pt") << "old";
  test::expect_error([&] { AtomicFile out(dir_ / "out.pt", false); }, ErrorKind::kExists, "output exists");
  AtomicFile out(dir_ / "out.pt", true);
  out.sink().write(as_bytes("new"));
  out.commit(true);  // with fsync of the file and the directory
  EXPECT_EQ(test::read_file((dir_ / "out.pt").string()), "new");
  EXPECT_EQ(listing(), std::vector<std::string>{"out.pt"});
}

TEST_F(AtomicFileTest, OutputAppearingMeanwhileIsNotOverwritten) {
  AtomicFile out(dir_ / "out.pt", false);
  out.sink().write(as_bytes("mine"));
  std::ofstream(dir_ / "out.pt") << "theirs";
  test::expect_error([&] { out.commit(false); }, ErrorKind::kExists, "output appeared while writing");
  EXPECT_EQ(test::read_file((dir_ / "out.pt").string()), "theirs");
}

TEST_F(AtomicFileTest, StaleTemporariesOfDeadProcessesAreRemoved) {
  // pid_max is at most 2^22 on Linux, so this pid never belongs to a live process.
  const fs::path stale = dir_ / ".out.pt.ckptfix-4194305-0.tmp";
  const fs::path live = dir_ / (".out.pt.ckptfix-" + std::to_string(::getpid()) + "-999.tmp");
  const fs::path other = dir_ / ".other.pt.ckptfix-4194305-0.tmp";
  std::ofstream(stale) << "x";
  std::ofstream(live) << "x";
  std::ofstream(other) << "x";
  EXPECT_EQ(AtomicFile::stale_temporaries(dir_ / "out.pt"), std::vector<fs::path>{stale});
  { AtomicFile out(dir_ / "out.pt", false); }
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live));   // a running writer's file is left alone
  EXPECT_TRUE(fs::exists(other));  // another output's file too
}

TEST_F(AtomicFileTest, ReplacingKeepsTheTargetsPermissions) {
  std::ofstream(dir_ / "out.pt") << "old";
  fs::permissions(dir_ / "out.pt", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  AtomicFile out(dir_ / "out.pt", true);
  out.commit(false);
  EXPECT_EQ(fs::status(dir_ / "out.pt").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
}

// Copies at any input and output offsets (spliced through a pipe here, or
// through the buffer where the pipe cannot be had) must give the input's
// bytes exactly, across pipe- and buffer-sized pieces.
TEST_F(AtomicFileTest, CopiesAtEveryPagePhaseGiveTheInputsBytes) {
  std::string input(3 * (size_t{1} << 20) + 12345, '\0');
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::ofstream(dir_ / "in.bin", std::ios::binary) << input;
  const int fd = ::open((dir_ / "in.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  for (const uint64_t prefix : {0, 64, 4096, 4160}) {
    for (const uint64_t from : {0, 64, 4096, 8191}) {
      const uint64_t length = input.size() - from - 7;
      AtomicFile out(dir_ / "out.bin", true);
      out.sink().write(as_bytes(std::string(prefix, 'p')));
      ASSERT_TRUE(out.sink().copy_from(fd, from, length));
      out.sink().write(as_bytes("end"));
      EXPECT_EQ(out.sink().position(), prefix + length + 3);
      out.commit(false);
      std::ifstream back(dir_ / "out.bin", std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(back)), std::istreambuf_iterator<char>());
      EXPECT_EQ(bytes, std::string(prefix, 'p') + input.substr(from, length) + "end")
          << "prefix " << prefix << ", from " << from;
    }
  }
  ::close(fd);
}

// An output that does not splice (here: opened for appending, which splice
// refuses) gets the rest of the copy through the buffer, and so do all
// later copies of that sink: the same bytes either way.
TEST_F(AtomicFileTest, AnOutputThatDoesNotSpliceIsCopiedThroughTheBuffer) {
  std::string input(3 * (size_t{1} << 20) + 999, '\0');
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>((i * 2654435761u) >> 9);
  std::ofstream(dir_ / "in.bin", std::ios::binary) << input;
  const int in = ::open((dir_ / "in.bin").c_str(), O_RDONLY);
  const int out = ::open((dir_ / "out.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(in, 0);
  ASSERT_GE(out, 0);
  {
    FileSink sink(out, "out.bin");
    sink.write(as_bytes(std::string(10, 'p')));
    ASSERT_TRUE(sink.copy_from(in, 7, input.size() - 7));
    ASSERT_TRUE(sink.copy_from(in, 0, 5000));
    sink.write(as_bytes("end"));
    sink.flush();
    EXPECT_EQ(sink.position(), 10 + input.size() - 7 + 5000 + 3);
  }
  ::close(in);
  ::close(out);
  std::ifstream back(dir_ / "out.bin", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(back)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, std::string(10, 'p') + input.substr(7) + input.substr(0, 5000) + "end");
}

// Whether the file system under `dir` can share blocks between files (FICLONE).
bool can_share_blocks(const fs::path& dir) {
  std::ofstream(dir / "probe-a", std::ios::binary) << std::string(4096, 'x');
  const int a = ::open((dir / "probe-a").c_str(), O_RDONLY);
  const int b = ::open((dir / "probe-b").c_str(), O_WRONLY | O_CREAT, 0644);
  const bool shared = a >= 0 && b >= 0 && ::ioctl(b, FICLONE, a) == 0;
  ::close(a);
  ::close(b);
  fs::remove(dir / "probe-a");
  fs::remove(dir / "probe-b");
  return shared;
}

// Bytes of `file` in extents the file system marks shared with another file.
uint64_t shared_bytes(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  constexpr unsigned kExtents = 64;
  std::vector<std::byte> space(sizeof(fiemap) + kExtents * sizeof(fiemap_extent));
  auto* map = reinterpret_cast<fiemap*>(space.data());
  map->fm_length = FIEMAP_MAX_OFFSET;
  map->fm_flags = FIEMAP_FLAG_SYNC;
  map->fm_extent_count = kExtents;
  uint64_t shared = 0;
  if (::ioctl(fd, FS_IOC_FIEMAP, map) == 0) {
    for (unsigned i = 0; i < map->fm_mapped_extents; ++i) {
      if (map->fm_extents[i].fe_flags & FIEMAP_EXTENT_SHARED) shared += map->fm_extents[i].fe_length;
    }
  }
  ::close(fd);
  return shared;
}

// On XFS (with reflink) and btrfs, a copy at the input's page phase shares
// the whole blocks and copies the ends. scripts/fs_check.sh runs the unit
// tests with TMPDIR on such file systems; elsewhere this says why it skips.
TEST_F(AtomicFileTest, CopiesAtTheInputsPhaseShareBlocksWhereTheFileSystemCan) {
  if (!can_share_blocks(dir_)) GTEST_SKIP() << "the file system of " << dir_ << " cannot share blocks (see scripts/fs_check.sh)";
  std::string input(4 * (size_t{1} << 20), '\0');
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<char>((i * 2654435761u) >> 11);
  std::ofstream(dir_ / "in.bin", std::ios::binary) << input;
  const int fd = ::open((dir_ / "in.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const uint64_t from = 4096 + 100, length = input.size() - from - 1000;
  {
    AtomicFile out(dir_ / "out.bin", true);
    out.sink().write(as_bytes(std::string(100, 'p')));  // the same phase as `from`
    ASSERT_TRUE(out.sink().copy_from(fd, from, length));
    out.sink().write(as_bytes("end"));
    out.commit(false);
  }
  ::close(fd);
  std::ifstream back(dir_ / "out.bin", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(back)), std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, std::string(100, 'p') + input.substr(from, length) + "end");
  // Every whole block between the ends: [4096, 4096 * 1023) of the output.
  EXPECT_EQ(shared_bytes(dir_ / "out.bin"), (length - (4096 - 100)) / 4096 * 4096);
}

}  // namespace
}  // namespace ckptfix
