// Atomic outputs: temporary files beside the target, stale ones from dead
// processes removed, nothing left behind on failure, no silent overwrite.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <functional>
#include <optional>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/atomic_file.h"
#include "io/input_file.h"
#include "io/mapped_window.h"
#include "io/mapping_guard.h"
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

TEST_F(AtomicFileTest, AFileBeingRewrittenIsReplacedOnlyIfNobodyChangedIt) {
  // The target is the input (--in-place): its stamp when it was read.
  const fs::path target = dir_ / "in.pt";
  auto write_target = [&](const std::string& contents) {
    std::ofstream(target, std::ios::binary | std::ios::trunc) << contents;
    return *stamp_of(target);
  };
  struct Change {
    const char* what;
    std::function<void()> make;
    std::optional<std::string> left;  // what the target holds after it (none: removed)
  };
  const std::vector<Change> changes = {
      {"rewritten in place, as torch.save does", [&] { write_target("newer checkpoint"); }, "newer checkpoint"},
      {"replaced by a rename (the same bytes, another file)",
       [&] {
         std::ofstream(dir_ / "x") << "old";
         fs::rename(dir_ / "x", target);
       },
       "old"},
      {"removed", [&] { fs::remove(target); }, std::nullopt},
  };
  for (const Change& change : changes) {
    SCOPED_TRACE(change.what);
    const FileStamp read = write_target("old");
    AtomicFile out(target, true);
    out.replace_only_if_unchanged(read);
    out.sink().write(as_bytes("rewritten"));
    change.make();
    test::expect_error([&] { out.commit(false); }, ErrorKind::kConflict,
                       "in.pt': the file changed while it was being rewritten (another program wrote, replaced or "
                       "removed it): it was not replaced; nothing was written");
    if (change.left) {
      EXPECT_EQ(test::read_file(target.string()), *change.left);
    } else {
      EXPECT_FALSE(fs::exists(target));
    }
  }
  // Nobody changed it: replaced.
  const FileStamp read = write_target("old");
  {
    AtomicFile out(target, true);
    out.replace_only_if_unchanged(read);
    out.sink().write(as_bytes("rewritten"));
    out.commit(false);
  }
  EXPECT_EQ(test::read_file(target.string()), "rewritten");
  EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"}) << "no temporary file left by the refused commits";
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

TEST_F(AtomicFileTest, ATargetThatIsASymbolicLinkIsWrittenThrough) {
  // As torch.save and cp do: the file the link leads to gets the new bytes
  // (with its permissions) and the link stays, in another directory too.
  fs::create_directory(dir_ / "blobs");
  fs::create_directory(dir_ / "snapshot");
  std::ofstream(dir_ / "blobs" / "file") << "old";
  fs::permissions(dir_ / "blobs" / "file", fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink("../blobs/file", dir_ / "snapshot" / "model.pt");
  // It exists (the file it leads to does): not replaced without overwrite.
  test::expect_error([&] { AtomicFile out(dir_ / "snapshot" / "model.pt", false); }, ErrorKind::kExists,
                     "output exists");
  AtomicFile out(dir_ / "snapshot" / "model.pt", true);
  EXPECT_EQ(out.temp_path().parent_path(), fs::canonical(dir_ / "blobs"));  // the rename stays in one directory
  out.sink().write(as_bytes("new"));
  out.commit(true);
  EXPECT_TRUE(fs::is_symlink(dir_ / "snapshot" / "model.pt"));
  EXPECT_EQ(fs::read_symlink(dir_ / "snapshot" / "model.pt"), "../blobs/file");
  EXPECT_EQ(test::read_file((dir_ / "blobs" / "file").string()), "new");
  EXPECT_EQ(fs::status(dir_ / "blobs" / "file").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(listing(), (std::vector<std::string>{"blobs", "snapshot"}));
  EXPECT_EQ(fs::directory_iterator(dir_ / "blobs")->path().filename(), "file");  // no temporary left
}

TEST_F(AtomicFileTest, OnlyARegularFileIsEverReplaced) {
  // Renaming over anything else would replace the node itself (as root, an
  // output of /dev/null would become a checkpoint) or fail at the very end:
  // each is refused before a temporary file exists, whether or not
  // overwriting is allowed.
  fs::create_directory(dir_ / "dir");
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0644), 0);
  fs::create_symlink("nowhere.pt", dir_ / "dangling.pt");
  fs::create_symlink("loop2", dir_ / "loop1");
  fs::create_symlink("loop1", dir_ / "loop2");
  fs::create_symlink("fifo", dir_ / "to-fifo");
  const std::vector<std::string> before = listing();
  const std::vector<std::pair<fs::path, std::string>> refused = {
      {dir_ / "dir", "is a directory: an output must be a regular file"},
      {dir_ / "fifo", "is a FIFO: an output must be a regular file"},
      {dir_ / "to-fifo", "is a FIFO: an output must be a regular file"},
      {"/dev/null", "is a character device: an output must be a regular file"},  // never committed here
      {dir_ / "dangling.pt", "is a symbolic link that leads to no file (No such file or directory)"},
      {dir_ / "loop1", "is a symbolic link that leads to no file (Too many levels of symbolic links)"},
  };
  for (const auto& [target, message] : refused) {
    for (const bool overwrite : {false, true}) {
      SCOPED_TRACE(target.string() + (overwrite ? " (overwrite)" : ""));
      test::expect_error([&] { AtomicFile out(target, overwrite); }, ErrorKind::kInvalidArgument, message);
    }
  }
  EXPECT_EQ(listing(), before);
  EXPECT_TRUE(fs::is_fifo(dir_ / "fifo"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(AtomicFileTest, ADirectoryThatTakesNoFileIsNamedWithTheOutput) {
  // The error names the output asked for and its directory, not the temporary file's name.
  const fs::path target = dir_ / "missing" / "out.pt";
  test::expect_error([&] { AtomicFile out(target, false); }, ErrorKind::kIo,
                     "'" + target.string() + "': cannot create a file in '" + (dir_ / "missing").string() +
                         "' (an output is written to a new file in its directory, then renamed into place): "
                         "No such file or directory");
}

TEST_F(AtomicFileTest, ReplacingKeepsPermissionsTheUmaskWouldClear) {
  const fs::path target = dir_ / "out.pt";
  std::ofstream(target) << "old";
  ASSERT_EQ(::chmod(target.c_str(), 0666), 0);
  const mode_t umask_was = ::umask(022);
  {
    AtomicFile out(target, true);
    out.commit(false);
  }
  ::umask(umask_was);
  EXPECT_EQ(fs::status(target).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write |
                fs::perms::others_read | fs::perms::others_write);
}

TEST_F(AtomicFileTest, ReplacingKeepsTheTargetsOwner) {
  // A user's checkpoint that `sudo ckptfix --in-place` rewrites stays the user's.
  if (::geteuid() != 0) GTEST_SKIP() << "not root: only root can make a file another user's to test this";
  const fs::path target = dir_ / "out.pt";
  std::ofstream(target) << "old";
  ASSERT_EQ(::chown(target.c_str(), 12345, 23456), 0);
  {
    AtomicFile out(target, true);
    out.sink().write(as_bytes("new"));
    out.commit(false);
  }
  struct stat after {};
  ASSERT_EQ(::stat(target.c_str(), &after), 0);
  EXPECT_EQ(test::read_file(target.string()), "new");
  EXPECT_EQ(after.st_uid, 12345u);
  EXPECT_EQ(after.st_gid, 23456u);
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

// A new file's bulk ranges (ByteSink::expect: a record's data) get their
// blocks before they are written on ext4, where that is faster
// (atomic_file.cc); a file that replaces another does not (a crash must not
// leave zeros under the old name), nor does a file elsewhere. Either way the
// bytes are those written, by write_at() into a reserved range and by
// write(). scripts/fs_check.sh runs this on ext4, tmpfs, XFS and btrfs.
TEST_F(AtomicFileTest, ANewFilesBulkRangeGetsItsBlocksFirstOnExt4Only) {
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir_.c_str(), &fs), 0);
  const bool ext4 = static_cast<unsigned long>(fs.f_type) == 0xEF53UL;
  constexpr uint64_t kLength = uint64_t{4} << 20;
  std::string bytes(kLength, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 7);
  const auto all = as_bytes(bytes);
  for (const bool replacing : {false, true}) {
    for (const bool positioned : {true, false}) {
      fs::remove(dir_ / "out.bin");
      if (replacing) std::ofstream(dir_ / "out.bin") << "old";
      AtomicFile out(dir_ / "out.bin", true);
      out.sink().expect(kLength);
      struct stat st {};
      ASSERT_EQ(::stat(out.temp_path().c_str(), &st), 0);
      const std::string what = std::string(replacing ? "replacing a file" : "a new file") + (ext4 ? " on ext4" : "");
      if (ext4 && !replacing) {
        EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, kLength) << what;
      } else {
        EXPECT_EQ(st.st_blocks, 0) << what << ": nothing allocated before the writes";
      }
      if (positioned) {  // in two halves, the second first (as the two threads may)
        ASSERT_EQ(out.sink().reserve(kLength), 0u);
        out.sink().write_at(kLength / 2, std::span(all).subspan(kLength / 2));
        out.sink().write_at(0, std::span(all).first(kLength / 2));
      } else {
        out.sink().write(std::span(all).first(12345));
        out.sink().write(std::span(all).subspan(12345));
      }
      out.sink().write(as_bytes("end"));
      out.commit(false);
      EXPECT_EQ(test::read_file((dir_ / "out.bin").string()), bytes + "end") << what;
    }
  }
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


// A file that shrinks while it is mapped and read (another program truncates
// or rewrites it): a clean error naming the file and what was read, never a
// "Bus error" (mapping_guard.h).
class ShrinkingFileTest : public test::TempDirTest {
 protected:
  // A file of `size` bytes of 0xA5, open for reading.
  int make(uint64_t size) {
    path_ = dir_ / "in.bin";
    std::ofstream(path_, std::ios::binary) << std::string(size, '\xA5');
    return ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  }
  fs::path path_;
};

TEST_F(ShrinkingFileTest, AWindowThatLosesItsPagesIsAnErrorNotACrash) {
  const uint64_t size = uint64_t{20} << 20;  // three windows
  const int fd = make(size);
  ASSERT_GE(fd, 0);
  std::vector<uint64_t> nonzero;  // per window: bytes read that were not zero
  try {
    for_each_mapped(fd, "in.bin", 0, size, "record 'big'", [&](std::span<const std::byte> view) {
      if (nonzero.empty()) fs::resize_file(path_, 4096);  // cut while the first window is mapped
      nonzero.push_back(static_cast<uint64_t>(std::count_if(view.begin(), view.end(), [](std::byte b) { return b != std::byte{0}; })));
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()),
              "'in.bin': record 'big': the file shrank while being read (truncated or rewritten by another program?) "
              "or could not be read");
  }
  ::close(fd);
  ASSERT_EQ(nonzero.size(), 1u) << "the first window's error ends the reading";
  EXPECT_EQ(nonzero[0], 4096u) << "what was lost reads as zeros";
}

TEST_F(ShrinkingFileTest, AnErrorFromTheVisitIsReplacedByTheShrinking) {
  const int fd = make(uint64_t{1} << 20);
  ASSERT_GE(fd, 0);
  test::expect_error(
      [&] {
        for_each_mapped(fd, "in.bin", 0, uint64_t{1} << 20, "r", [&](std::span<const std::byte> view) {
          fs::resize_file(path_, 0);
          if (view.back() == std::byte{0}) throw Error(ErrorKind::kCorrupt, "a parser choking on zeros");
        });
      },
      ErrorKind::kIo, "the file shrank while being read");
  ::close(fd);
}

TEST_F(ShrinkingFileTest, AWindowReadWholeIsNoError) {
  const int fd = make(uint64_t{9} << 20);
  ASSERT_GE(fd, 0);
  uint64_t seen = 0;
  for_each_mapped(fd, "in.bin", 100, (uint64_t{9} << 20) - 100, "r", [&](std::span<const std::byte> view) {
    seen += static_cast<uint64_t>(std::count(view.begin(), view.end(), std::byte{0xA5}));
  });
  EXPECT_EQ(seen, (uint64_t{9} << 20) - 100);
  ::close(fd);
}

TEST_F(ShrinkingFileTest, AMappedRangeSaysItLostBytes) {
  make(uint64_t{9} << 20);  // files of up to 8 MiB are read into memory when opened
  const auto file = InputFile::open(path_);
  const MappedRange range = file->map_range(1000, 60000, "archive/data.pkl");
  EXPECT_EQ(range.span()[59999], std::byte{0xA5});
  range.check_intact();  // nothing lost yet
  fs::resize_file(path_, 8192);
  EXPECT_EQ(range.span()[59999], std::byte{0}) << "a lost page reads as zeros";
  EXPECT_EQ(range.span()[0], std::byte{0xA5}) << "pages still in the file keep their bytes";
  test::expect_error([&] { range.check_intact(); }, ErrorKind::kIo,
                     "in.bin': archive/data.pkl: the file shrank while being read");
}

// Whether AddressSanitizer's SIGBUS handler was installed before ours (the sanitized test build).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitizerHandlesSigbus = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitizerHandlesSigbus = true;
#else
constexpr bool kSanitizerHandlesSigbus = false;
#endif
#else
constexpr bool kSanitizerHandlesSigbus = false;
#endif

TEST_F(ShrinkingFileTest, AFaultOutsideAGuardedRangeIsLeftToThePreviousHandler) {
  // As without ckptfix: the process dies of SIGBUS (the default action), or
  // the handler installed before reports it (AddressSanitizer's, in that build).
  make(65536);
  auto touch_a_lost_unguarded_page = [this] {
    const auto file = InputFile::open(path_);
    const MappedRange guarded = file->map_range(0, 4096, "guarded");  // installs the handler
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    void* unguarded = ::mmap(nullptr, 65536, PROT_READ, MAP_SHARED, fd, 0);
    fs::resize_file(path_, 0);
    volatile std::byte b = static_cast<const std::byte*>(unguarded)[40000];
    (void)b;
    std::exit(0);
  };
  if (kSanitizerHandlesSigbus) {
    EXPECT_DEATH(touch_a_lost_unguarded_page(), "AddressSanitizer: BUS");
  } else {
    EXPECT_EXIT(touch_a_lost_unguarded_page(), ::testing::KilledBySignal(SIGBUS), "");
  }
}

TEST(MappingGuard, AtMostTheTablesSizeAreGuardedAtOnce) {
  static char page[4096];
  std::vector<MappingGuard> guards;
  for (size_t i = 0; i < MappingGuard::kMaxGuarded; ++i) guards.emplace_back(page, sizeof page);
  EXPECT_TRUE(std::all_of(guards.begin(), guards.end(), [](const MappingGuard& g) { return g.guarding(); }));
  MappingGuard one_more(page, sizeof page);
  EXPECT_FALSE(one_more.guarding()) << "read unguarded, as before";
  EXPECT_FALSE(one_more.lost());
  guards.pop_back();
  EXPECT_TRUE(MappingGuard(page, sizeof page).guarding()) << "a released slot is reused";
}

}  // namespace
}  // namespace ckptfix
