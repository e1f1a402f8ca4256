// The writer's ways of piping a large record (storage_pipeline.h): one
// thread converting while the worker writes (any sink), or every thread of
// the write taking parts of the record through every stage and writing them
// at their place (a sink that takes write_at, as files do; copies too with
// more than two threads). All must give the same bytes, CRC-32s, hashes and
// cast counts for every shape of record and every number of threads from 1
// to 64: sizes that end inside a part and inside a window, casts that narrow
// and widen, one whose result depends on the element's position in the
// storage (float64 to bfloat16); and a write failing part-way must fail the
// save, from whichever thread it happens on. Torch judges the casts themselves
// (tests/interop/test_casts.py, through files: the two-thread path).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "bytes/byte_checker.h"
#include "bytes/load_test_device.h"
#include "bytes/xxh3.h"
#include "ckptfix/builder.h"
#include "ckptfix/checkpoint.h"
#include "ckptfix/passes.h"
#include "ckptfix/save.h"
#include "io/atomic_file.h"
#include "io/byte_sink.h"
#include "model/checkpoint_impl.h"
#include "test_support.h"
#include "write/checkpoint_writer.h"
#include "write/fault_injection.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using PipelineTest = test::TempDirTest;

// A file holding `count` elements of `dtype` with random bits (NaNs, infinities
// and subnormals among them) in one storage, and a small storage beside it;
// in torch 2.6's layout, or with torch 2.7's `.format_version` (whose padding
// the writer must keep: torch may compute the offsets).
Checkpoint large_checkpoint(const fs::path& path, DType dtype, uint64_t count, bool format_version = false) {
  std::mt19937_64 random(count);
  std::vector<std::byte> large(count * element_size(dtype));
  for (std::byte& b : large) b = static_cast<std::byte>(random());
  if (dtype == DType::kFloat64) {  // NaNs at the end, where the conversion depends on the position
    const uint64_t nan = 0x7FF8000000000123;
    for (uint64_t i = count - std::min<uint64_t>(count, 20); i < count; ++i) std::memcpy(&large[i * 8], &nan, 8);
  }
  std::vector<std::byte> small(16 * element_size(dtype), std::byte{0x3c});
  Checkpoint built = make_state_dict_checkpoint(
      {{large.data(), large.size(), dtype, "cpu"}, {small.data(), small.size(), dtype, "cpu"}},
      {{"large", 0, 0, {static_cast<int64_t>(count)}, {1}}, {"small", 1, 0, {16}, {1}}});
  impl_of(built).style.format_version = format_version;
  SaveOptions options;
  options.verify = false;
  options.overwrite = true;
  save(built, path, options);
  return Checkpoint::open(path);
}

struct Written {
  std::string bytes;
  SaveResult result;
  uint64_t written_at = 0;  // bytes that came through write_at
};

// A memory sink that counts what comes through write_at (the two-thread path).
class CountingSink final : public ByteSink {
 public:
  explicit CountingSink(bool positional) : memory_(positional) {}
  void write(std::span<const std::byte> data) override { memory_.write(data); }
  uint64_t position() const override { return memory_.position(); }
  bool can_write_at() const override { return memory_.can_write_at(); }
  uint64_t reserve(uint64_t length) override { return memory_.reserve(length); }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    memory_.write_at(offset, data);
    written_at_ += data.size();
  }
  const std::string& bytes() const { return memory_.bytes(); }
  uint64_t written_at() const { return written_at_; }

 private:
  MemorySink memory_;
  std::atomic<uint64_t> written_at_{0};
};

// Writes `checkpoint` into memory: with `positional`, the sink takes
// write_at and large converted records go in parts (and copies, with more
// than two `threads`). With `hash`, the hashes a read-back compares are made.
Written write_to_memory(const Checkpoint& checkpoint, bool positional, bool hash = true, unsigned threads = 2) {
  CountingSink sink(positional);
  SaveOptions options;
  options.verify = hash;
  options.threads = threads;
  Written w;
  w.result = write_checkpoint(checkpoint, sink, options);
  w.bytes = sink.bytes();
  w.written_at = sink.written_at();
  return w;
}

TEST_F(PipelineTest, BothThreadsWriteWhatOneThreadWrites) {
  struct Case {
    DType from, to;
    uint64_t count;
    bool hash = true;
  };
  const Case cases[] = {
      {DType::kFloat32, DType::kBFloat16, 5'000'003},     // 3 windows, the last part short
      {DType::kFloat32, DType::kBFloat16, 5'000'003, false},  // not verified: no hashes
      {DType::kFloat64, DType::kBFloat16, 1'500'001},     // the result depends on the position
      {DType::kFloat64, DType::kFloat8E5M2, 3'000'001},   // 8 bytes in, 1 out: a part a window
      {DType::kBFloat16, DType::kFloat32, 3'000'001},     // widens: 16 parts a window
      {DType::kFloat32, DType::kFloat8E4M3Fn, 2'100'000},  // narrows to a quarter
      {DType::kFloat16, DType::kBFloat16, (uint64_t{1} << 19) * 3},  // ends on a part's end
  };
  for (const Case& c : cases) for (const bool format_version : {false, true}) {
    SCOPED_TRACE(std::string(dtype_name(c.from)) + " to " + std::string(dtype_name(c.to)) + ", " + std::to_string(c.count) +
                 (format_version ? ", .format_version" : "") + (c.hash ? "" : ", no hashes"));
    Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", c.from, c.count, format_version);
    PassOptions cast;
    cast.cast_to = c.to;
    apply_passes(checkpoint, cast);
    const Written one = write_to_memory(checkpoint, false, c.hash);
    const Written both = write_to_memory(checkpoint, true, c.hash);
    EXPECT_EQ(one.written_at, 0u);
    EXPECT_EQ(both.written_at, c.count * element_size(c.to));  // the large record, all of it through both threads
    ASSERT_TRUE(one.bytes == both.bytes);
    ASSERT_EQ(one.result.records.size(), both.result.records.size());
    for (size_t i = 0; i < one.result.records.size(); ++i) {
      const SaveResult::Record& a = one.result.records[i];
      const SaveResult::Record& b = both.result.records[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.data_offset, b.data_offset);
      EXPECT_EQ(a.crc32, b.crc32) << a.name;
      EXPECT_EQ(a.has_hash, b.has_hash) << a.name;
      EXPECT_EQ(a.hash, b.hash) << a.name;
      // And what they say is the bytes' own.
      const auto bytes = std::as_bytes(std::span(both.bytes)).subspan(b.data_offset, b.size);
      EXPECT_EQ(b.crc32, crc32_update(0, bytes)) << b.name;
      EXPECT_EQ(b.has_hash, c.hash) << b.name;
      if (c.hash) EXPECT_EQ(b.hash, record_hash(bytes)) << b.name;
    }
    ASSERT_EQ(one.result.storages.size(), both.result.storages.size());
    for (size_t i = 0; i < one.result.storages.size(); ++i) {
      EXPECT_EQ(one.result.storages[i].overflowed, both.result.storages[i].overflowed);
      EXPECT_EQ(one.result.storages[i].flushed, both.result.storages[i].flushed);
    }
  }
}

// Storages of every size around the part (1 MiB) and the large-record
// threshold (1 MiB of input), from none to many parts, copied and cast.
Checkpoint checkpoint_of_every_size(const fs::path& path) {
  const std::vector<uint64_t> counts = {0, 1, 7, (uint64_t{1} << 18) - 1, uint64_t{1} << 18, (uint64_t{1} << 18) + 1,
                                        (uint64_t{1} << 19) + 3, 3'000'001, 6'291'456};
  std::mt19937_64 random(7);
  std::vector<std::vector<std::byte>> bytes;
  std::vector<StorageSpec> storages;
  std::vector<TensorSpec> tensors;
  for (const uint64_t count : counts) {
    bytes.emplace_back(count * 4);
    for (std::byte& b : bytes.back()) b = static_cast<std::byte>(random());
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    storages.push_back({bytes[i].data(), bytes[i].size(), DType::kFloat32, "cpu"});
    tensors.push_back({"t" + std::to_string(i), i, 0, {static_cast<int64_t>(counts[i])}, {1}});
  }
  Checkpoint built = make_state_dict_checkpoint(storages, tensors);
  SaveOptions options;
  options.verify = false;
  options.overwrite = true;
  save(built, path, options);
  return Checkpoint::open(path);
}

// A write limited to N threads (SaveOptions::threads): with one, everything
// on the caller's; with more, large converted records split among them.
// Whatever the number, the same bytes and sums, and every byte of a large
// converted record comes through write_at once.
TEST_F(PipelineTest, EveryThreadCountWritesWhatOneThreadWrites) {
  for (const bool cast : {false, true}) {
    SCOPED_TRACE(cast ? "cast to bfloat16" : "copied");
    Checkpoint checkpoint = checkpoint_of_every_size(dir_ / "in.pt");
    if (cast) {
      PassOptions passes;
      passes.cast_to = DType::kBFloat16;
      apply_passes(checkpoint, passes);
    }
    const Written one = write_to_memory(checkpoint, true, true, 1);
    uint64_t large_bytes = 0;  // what goes in parts: records of at least 1 MiB of input
    for (const Storage& s : impl_of(checkpoint).storages) {
      if (s.nbytes >= (uint64_t{1} << 20)) large_bytes += s.output_nbytes();
    }
    for (const unsigned threads : {1u, 2u, 3u, 4u, 5u, 8u, 16u, 64u}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      const Written w = write_to_memory(checkpoint, true, true, threads);
      ASSERT_TRUE(w.bytes == one.bytes);
      EXPECT_EQ(w.written_at, cast ? large_bytes : 0u);  // copies are never written in parts
      ASSERT_EQ(w.result.records.size(), one.result.records.size());
      for (size_t i = 0; i < w.result.records.size(); ++i) {
        const SaveResult::Record& r = w.result.records[i];
        EXPECT_EQ(r.crc32, one.result.records[i].crc32) << r.name;
        EXPECT_EQ(r.hash, one.result.records[i].hash) << r.name;
        const auto bytes = std::as_bytes(std::span(w.bytes)).subspan(r.data_offset, r.size);
        EXPECT_EQ(r.crc32, crc32_update(0, bytes)) << r.name;
        EXPECT_EQ(r.hash, record_hash(bytes)) << r.name;
      }
    }
  }
}

// A write failing in any thread fails the save, with the failure's own line,
// whatever the number of threads (the others stop at their next part).
TEST_F(PipelineTest, AWriteFailingInAnyThreadFailsTheSave) {
  for (const bool cast : {false, true}) {
    Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 5'000'003);
    if (cast) {
      PassOptions passes;
      passes.cast_to = DType::kBFloat16;
      apply_passes(checkpoint, passes);
    }
    for (const unsigned threads : {1u, 3u, 8u, 64u}) {
      for (const uint64_t limit : {uint64_t{100'000}, uint64_t{4'000'000}, uint64_t{9'900'000}}) {
        SCOPED_TRACE(std::string(cast ? "cast, " : "copy, ") + std::to_string(threads) + " threads, " + std::to_string(limit));
        MemorySink memory(true);
        const std::unique_ptr<ByteSink> failing =
            fault_seams("write-fails-after:" + std::to_string(limit)).wrap_sink(memory);
        SaveOptions options;
        options.threads = threads;
        expect_error([&] { write_checkpoint(checkpoint, *failing, options); }, ErrorKind::kIo,
                     "write failed: injected fault after " + std::to_string(limit) + " bytes");
      }
    }
  }
}

// Only in torch 2.6's layout: with `.format_version` the padding is torch's.
TEST_F(PipelineTest, LargeConvertedRecordsStartOnA32KiBBoundary) {
  Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 1'000'000);
  PassOptions cast;
  cast.cast_to = DType::kFloat16;
  apply_passes(checkpoint, cast);
  const Written w = write_to_memory(checkpoint, true);
  bool seen = false;
  for (const WrittenStorage& s : w.result.storages) {
    for (const SaveResult::Record& r : w.result.records) {
      if (r.name != s.record) continue;
      if (r.size >= (uint64_t{1} << 20)) {
        EXPECT_EQ(r.data_offset % (uint64_t{32} << 10), 0u) << r.name;
        seen = true;
      } else {
        EXPECT_EQ(r.data_offset % 64, 0u) << r.name;  // torch's alignment, torch's padding
      }
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(PipelineTest, AWriteFailingPartWayFailsTheSave) {
  Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 5'000'003);
  PassOptions cast;
  cast.cast_to = DType::kBFloat16;
  apply_passes(checkpoint, cast);
  // In the first window (this thread claims it as the worker starts), the
  // second (the worker's, unless this thread got there first) and the last.
  for (const uint64_t limit : {uint64_t{100'000}, uint64_t{4'000'000}, uint64_t{6'000'000}, uint64_t{9'900'000}}) {
    SCOPED_TRACE(limit);
    MemorySink memory(true);
    const std::unique_ptr<ByteSink> failing =
        fault_seams("write-fails-after:" + std::to_string(limit)).wrap_sink(memory);
    SaveOptions options;
    expect_error([&] { write_checkpoint(checkpoint, *failing, options); }, ErrorKind::kIo,
                 "write failed: injected fault after " + std::to_string(limit) + " bytes");
  }
}

// A file sink that takes write_at on any file system and changes one byte,
// `damage_at` bytes into the reserved range, as it is written (none: -1).
class DamagingFileSink final : public ByteSink {
 public:
  DamagingFileSink(int fd, const std::string& name, int64_t damage_at) : file_(fd, name), damage_at_(damage_at) {}
  void write(std::span<const std::byte> data) override { file_.write(data); }
  uint64_t position() const override { return file_.position(); }
  void flush() override { file_.flush(); }
  bool can_write_at() const override { return true; }
  uint64_t reserve(uint64_t length) override { return reserved_ = file_.reserve(length); }
  void write_at(uint64_t offset, std::span<const std::byte> data) override {
    const uint64_t target = reserved_ + static_cast<uint64_t>(damage_at_);
    if (damage_at_ < 0 || target < offset || target >= offset + data.size()) return file_.write_at(offset, data);
    std::vector<std::byte> damaged(data.begin(), data.end());
    damaged[target - offset] ^= std::byte{0x40};
    file_.write_at(offset, damaged);
  }

 private:
  FileSink file_;
  int64_t damage_at_;
  uint64_t reserved_ = 0;
};

// Records written in parts are read back part by part as they are written,
// by the thread that wrote each part: all of their bytes, and a part damaged
// on its way to the file is named, wherever it is, with any number of threads.
TEST_F(PipelineTest, EveryThreadReadsBackThePartsItWrites) {
  Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 5'000'003);
  PassOptions cast;
  cast.cast_to = DType::kBFloat16;
  apply_passes(checkpoint, cast);
  const uint64_t record_size = 5'000'003 * 2;
  const uint64_t part = uint64_t{1} << 20;
  // None; in the first part, one in the worker's first window, the last part.
  for (const unsigned threads : {1u, 2u, 6u})
  for (const int64_t damage_at : {int64_t{-1}, int64_t{5}, int64_t{(5 << 20) + 77}, int64_t{record_size - 1}}) {
    SCOPED_TRACE(std::to_string(threads) + " threads, damaged at " + std::to_string(damage_at));
    const fs::path out = dir_ / "out.pt";
    const int fd = ::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    {
      DamagingFileSink sink(fd, out.string(), damage_at);
      ReadBack read_back(out.string(), GpuMode::kOff);
      SaveOptions options;
      options.threads = threads;
      if (damage_at < 0) {
        const SaveResult result = write_checkpoint(checkpoint, sink, options, &read_back);
        uint64_t read_back_while_writing = 0;
        for (const SaveResult::Record& r : result.records) {
          EXPECT_EQ(r.read_back, r.size >= part) << r.name;
          if (r.read_back) read_back_while_writing += r.size;
        }
        EXPECT_EQ(read_back_while_writing, record_size);
        EXPECT_EQ(read_back.bytes(), record_size);
      } else {
        const uint64_t from = static_cast<uint64_t>(damage_at) / part * part;
        expect_error([&] { write_checkpoint(checkpoint, sink, options, &read_back); }, ErrorKind::kVerification,
                     "the bytes read back differ from the bytes meant to be written in its bytes [" +
                         std::to_string(from) + ", " + std::to_string(std::min(from + part, record_size)) + ") (XXH3 0x");
      }
    }
    ::close(fd);
  }
}

// A file sink that copies as files do, then changes the byte `damage_at`
// bytes into the copy (none: -1), as a disk might.
class DamagedCopySink final : public ByteSink {
 public:
  DamagedCopySink(int fd, const std::string& name, int64_t damage_at) : fd_(fd), file_(fd, name), damage_at_(damage_at) {}
  void write(std::span<const std::byte> data) override { file_.write(data); }
  uint64_t position() const override { return file_.position(); }
  void flush() override { file_.flush(); }
  bool can_copy_from() const override { return true; }
  bool copy_from(int fd, uint64_t offset, uint64_t length) override {
    const uint64_t at = file_.position();
    if (!file_.copy_from(fd, offset, length)) return false;
    if (damage_at_ >= 0 && static_cast<uint64_t>(damage_at_) < length) {
      std::byte b{};
      EXPECT_EQ(::pread(fd_, &b, 1, static_cast<off_t>(at + damage_at_)), 1);
      b ^= std::byte{0x10};
      EXPECT_EQ(::pwrite(fd_, &b, 1, static_cast<off_t>(at + damage_at_)), 1);
    }
    return true;
  }

 private:
  int fd_;
  FileSink file_;
  int64_t damage_at_;
};

// A copy is read back by the worker and, with more than two threads, the
// helpers too, a part each at a time (with the GPU load test, here its host
// twin, the helpers alone while the worker loads the record on the device):
// every byte of it, and a byte damaged anywhere fails the write by the
// CRC-32 the input records.
TEST_F(PipelineTest, ACopyIsReadBackByEveryThread) {
  const Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 5'000'003);
  const uint64_t record_size = 5'000'003 * 4;
  for (const bool device : {false, true})
  for (const unsigned threads : {1u, 2u, 3u, 8u})
  for (const int64_t damage_at : {int64_t{-1}, int64_t{3}, int64_t{(7 << 20) + 5}, int64_t{record_size - 1}}) {
    SCOPED_TRACE(std::to_string(threads) + " threads, damaged at " + std::to_string(damage_at) +
                 (device ? ", the host device" : ""));
    const fs::path out = dir_ / "out.pt";
    const int fd = ::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    {
      DamagedCopySink sink(fd, out.string(), damage_at);
      std::unique_ptr<ReadBack> owned =
          device ? std::make_unique<ReadBack>(out.string(), host_load_test(LoadTest::kSlotBytes, false), "host")
                 : std::make_unique<ReadBack>(out.string(), GpuMode::kOff);
      ReadBack& read_back = *owned;
      SaveOptions options;
      options.threads = threads;
      if (damage_at < 0) {
        const SaveResult result = write_checkpoint(checkpoint, sink, options, &read_back);
        read_back.finish_device();
        for (const SaveResult::Record& r : result.records) {
          EXPECT_EQ(r.read_back, r.size >= (uint64_t{1} << 20)) << r.name;
          if (r.read_back) {
            EXPECT_FALSE(r.has_hash) << "a copy, checked by its CRC-32";
          }
        }
        EXPECT_EQ(read_back.bytes(), record_size);
        EXPECT_EQ(read_back.gpu().bytes, device ? record_size : 0u);
      } else {
        expect_error([&] { write_checkpoint(checkpoint, sink, options, &read_back); }, ErrorKind::kVerification,
                     "archive/data/0: the bytes read back have CRC-32 0x");
      }
    }
    ::close(fd);
  }
}

// With the GPU load test (here its host twin, which does the device's work
// on the CPU), records written in parts are still read back part by part by
// their writers, and each is then loaded on the device by the worker, in
// order: every large record reaches the device once, and a fault there fails
// the write, whatever the number of threads.
TEST_F(PipelineTest, RecordsWrittenInPartsAreLoadedOnTheDeviceToo) {
  Checkpoint checkpoint = large_checkpoint(dir_ / "in.pt", DType::kFloat32, 5'000'003);
  PassOptions cast;
  cast.cast_to = DType::kBFloat16;
  apply_passes(checkpoint, cast);
  const uint64_t record_size = 5'000'003 * 2;
  for (const unsigned threads : {1u, 2u, 6u})
  for (const bool fault : {false, true}) {
    SCOPED_TRACE(std::to_string(threads) + " threads" + (fault ? ", a fault on the device" : ""));
    const fs::path out = dir_ / "out.pt";
    const int fd = ::open(out.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    {
      DamagingFileSink sink(fd, out.string(), -1);
      ReadBack read_back(out.string(), host_load_test(LoadTest::kSlotBytes, fault), "host");
      SaveOptions options;
      options.threads = threads;
      auto write = [&] {
        const SaveResult result = write_checkpoint(checkpoint, sink, options, &read_back);
        read_back.finish_device();
        return result;
      };
      if (!fault) {
        const SaveResult result = write();
        for (const SaveResult::Record& r : result.records) EXPECT_EQ(r.read_back, r.size >= (uint64_t{1} << 20)) << r.name;
        EXPECT_EQ(read_back.bytes(), record_size);
        EXPECT_EQ(read_back.gpu().storages, 1u);
        EXPECT_EQ(read_back.gpu().bytes, record_size);
        // Where the time went: the reads into the slots and the reference
        // checksum were timed; the host device is not opened on a thread.
        const GpuReport::Phases& phases = read_back.gpu().phases;
        EXPECT_GT(phases.host_copy, 0.0);
        EXPECT_GT(phases.checksum, 0.0);
        EXPECT_EQ(phases.open, 0.0);
        EXPECT_GE(phases.writer_waited, 0.0);
      } else {
        expect_error(write, ErrorKind::kVerification, "the bytes loaded on host differ from the bytes read on the CPU");
      }
    }
    ::close(fd);
  }
}

}  // namespace
}  // namespace ckptfix

namespace ckptfix {
namespace {

// torch <= 2.6 writes storage records in the string order of their keys.
TEST(KeysInTextOrder, IsTheSortOfTheirDecimalText) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{9}, size_t{10}, size_t{11}, size_t{99}, size_t{100},
                   size_t{101}, size_t{1000}, size_t{1234}, size_t{10001}}) {
    std::vector<size_t> expected(n);
    for (size_t i = 0; i < n; ++i) expected[i] = i;
    std::sort(expected.begin(), expected.end(), [](size_t a, size_t b) { return std::to_string(a) < std::to_string(b); });
    EXPECT_EQ(keys_in_text_order(n), expected) << n;
  }
}

}  // namespace
}  // namespace ckptfix
