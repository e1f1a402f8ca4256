// The GPU load test (src/bytes/load_test.h): its checks agree with the CPU
// statistics, its staging packs and splits storages without losing or
// moving a byte, a changed byte on the device is caught and named. All of
// it runs on the host device here; the same tests run on the CUDA device
// where one is usable and skip with the reason otherwise.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>
#include <random>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "ckptfix/stats.h"
#include "bytes/byte_checker.h"
#include "bytes/gpu.h"
#include "bytes/load_test.h"
#include "bytes/load_test_opening.h"
#include "bytes/xxh3.h"
#include "stats/stats_kernels.h"
#include "test_support.h"
#include "write/fault_injection.h"
#include "write/save_seams.h"
#include "zip/crc32.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const DType kFloats[] = {DType::kFloat16,       DType::kBFloat16,       DType::kFloat32,
                         DType::kFloat64,       DType::kFloat8E4M3Fn,   DType::kFloat8E5M2,
                         DType::kFloat8E4M3Fnuz, DType::kFloat8E5M2Fnuz, DType::kFloat8E8M0Fnu};

// The counts of one element, as the load test and as inspect --stats see it.
void expect_same_class(DType dtype, uint64_t bits) {
  const uint32_t size = element_size(dtype);
  std::byte bytes[8];
  std::memcpy(bytes, &bits, size);
  const BlockStats stats = block_stats(dtype, bytes, 1);
  LoadCheck check;
  add_element(check, float_coding(dtype), bits);
  ASSERT_EQ(check.nan, stats.nan) << dtype_name(dtype) << " bits " << bits;
  ASSERT_EQ(check.posinf, stats.posinf) << dtype_name(dtype) << " bits " << bits;
  ASSERT_EQ(check.neginf, stats.neginf) << dtype_name(dtype) << " bits " << bits;
}

TEST(LoadCheckTest, NanAndInfAsTheStatisticsCountThem) {
  for (DType dtype : kFloats) {
    ASSERT_EQ(coding_size(float_coding(dtype)), element_size(dtype)) << dtype_name(dtype);
    if (element_size(dtype) <= 2) {  // every value
      for (uint64_t bits = 0; bits < (uint64_t{1} << (8 * element_size(dtype))); ++bits) expect_same_class(dtype, bits);
    }
  }
  std::mt19937_64 random(7);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t bits = random();
    // Every exponent and sign, with random and with zero mantissas.
    expect_same_class(DType::kFloat32, bits & 0xFFFFFFFF);
    expect_same_class(DType::kFloat32, bits & 0xFF800000);
    expect_same_class(DType::kFloat64, bits);
    expect_same_class(DType::kFloat64, bits & 0xFFF0000000000000);
  }
  EXPECT_EQ(float_coding(DType::kInt32), FloatCoding::kNone);
  EXPECT_EQ(float_coding(DType::kComplex64), FloatCoding::kNone);
}

std::vector<std::byte> random_bytes(std::mt19937_64& random, size_t n) {
  std::vector<std::byte> out(n);
  for (std::byte& b : out) b = static_cast<std::byte>(random() & 0xFF);
  return out;
}

// Feeds `bytes` in random pieces (including empty ones).
template <typename F>
void in_pieces(std::mt19937_64& random, std::span<const std::byte> bytes, F&& add) {
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min<size_t>(bytes.size() - at, random() % 3 == 0 ? random() % 9 : random() % 5000);
    add(bytes.subspan(at, n));
    at += n;
  }
}

TEST(LoadCheckTest, TheChecksumDoesNotDependOnThePieces) {
  std::mt19937_64 random(11);
  for (size_t n : {0, 1, 3, 4, 5, 7, 8, 9, 31, 32, 33, 1000, 65537}) {
    const std::vector<std::byte> bytes = random_bytes(random, n);
    WordChecksum whole, pieces;
    whole.update(bytes);
    in_pieces(random, bytes, [&](std::span<const std::byte> p) { pieces.update(p); });
    const LoadCheck a = whole.finish(), b = pieces.finish();
    EXPECT_TRUE(a.same_bytes(b)) << n;
    EXPECT_TRUE(a.same_bytes(word_checksum_reference(bytes))) << n;
    // Any one changed byte, and two swapped words, change it.
    if (n >= 8) {
      std::vector<std::byte> changed = bytes;
      changed[random() % n] ^= std::byte{0x10};
      WordChecksum c;
      c.update(changed);
      EXPECT_FALSE(c.finish().same_bytes(a)) << n;
      std::vector<std::byte> swapped = bytes;
      std::swap_ranges(swapped.begin(), swapped.begin() + 4, swapped.begin() + 4);
      WordChecksum s;
      s.update(swapped);
      if (std::memcmp(bytes.data(), bytes.data() + 4, 4) != 0) EXPECT_FALSE(s.finish().same_bytes(a)) << n;
    }
  }
}

struct Stored {
  DType dtype;
  std::vector<std::byte> bytes;
};

// Storages of every float dtype and some that are not, sizes from 0 to past
// an item, some holding NaN and Inf.
std::vector<Stored> storages(std::mt19937_64& random, int count, size_t max_elements) {
  const DType others[] = {DType::kInt8, DType::kInt64, DType::kComplex64, DType::kBool, DType::kUntyped};
  std::vector<Stored> out;
  for (int i = 0; i < count; ++i) {
    const DType dtype = random() % 4 == 0 ? others[random() % 5] : kFloats[random() % 9];
    const size_t elements = random() % 5 == 0 ? 0 : random() % (max_elements + 1);
    out.push_back({dtype, random_bytes(random, elements * element_size(dtype))});
  }
  return out;
}

// What the statistics count in a storage (the reference of the device's counts).
BlockStats reference_counts(const Stored& s) {
  BlockStats total;
  if (stats_class(s.dtype) != StatsClass::kFloat) return total;
  const size_t size = element_size(s.dtype), n = s.bytes.size() / size;
  for (size_t at = 0; at < n; at += kStatsBlock) {
    merge_block(total, block_stats(s.dtype, s.bytes.data() + at * size, std::min<size_t>(kStatsBlock, n - at)));
  }
  return total;
}

// Every storage through a LoadTest on `device`, in random pieces: the
// device's result of each must be the CPU's checksum and the statistics'
// counts, in ticket order.
void expect_device_reads_every_storage(std::unique_ptr<LoadTestDevice> device, size_t slot_bytes, int count,
                                       size_t max_elements, uint64_t seed) {
  std::mt19937_64 random(seed);
  const std::vector<Stored> all = storages(random, count, max_elements);
  LoadTest test(std::move(device), slot_bytes);
  std::vector<LoadTest::Result> results;
  for (size_t i = 0; i < all.size(); ++i) {
    test.begin(float_coding(all[i].dtype));
    in_pieces(random, all[i].bytes, [&](std::span<const std::byte> p) { test.add(p); });
    ASSERT_EQ(test.end(), i);
    for (const LoadTest::Result& r : test.results(false)) results.push_back(r);
  }
  for (const LoadTest::Result& r : test.results(true)) results.push_back(r);
  ASSERT_EQ(results.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const Stored& s = all[i];
    SCOPED_TRACE("storage " + std::to_string(i) + ": " + std::string(dtype_name(s.dtype)) + ", " +
                 std::to_string(s.bytes.size()) + " bytes, slots of " + std::to_string(slot_bytes));
    EXPECT_EQ(results[i].ticket, i);
    EXPECT_EQ(results[i].bytes, s.bytes.size());
    WordChecksum cpu;
    cpu.update(s.bytes);
    EXPECT_TRUE(results[i].device.same_bytes(cpu.finish()));
    const BlockStats counts = reference_counts(s);
    EXPECT_EQ(results[i].device.nan, counts.nan);
    EXPECT_EQ(results[i].device.posinf, counts.posinf);
    EXPECT_EQ(results[i].device.neginf, counts.neginf);
  }
}

TEST(LoadTestTest, StagingPacksAndSplitsWithoutLosingAByte) {
  // Slots from the smallest allowed up: storages split across slots at
  // every phase, several per slot.
  for (size_t slot : {64, 80, 208, 4096, 1 << 20}) {
    expect_device_reads_every_storage(host_load_test(slot, false), slot, 300, 300, slot);
  }
  // Storages larger than an item and than a slot.
  expect_device_reads_every_storage(host_load_test(1 << 20, false), 1 << 20, 12, 200000, 3);
  // More storages than a slot has items for.
  expect_device_reads_every_storage(host_load_test(1 << 20, false), 1 << 20, 20000, 2, 5);
}

TEST(LoadTestTest, TheCudaDeviceReadsWhatTheHostDoes) {
  const GpuStatus& status = gpu_status();
  if (!status.usable) GTEST_SKIP() << "GPU test skipped: " << status.reason;
  for (size_t slot : {64, 4096, 1 << 20}) {
    expect_device_reads_every_storage(open_cuda_load_test(slot, false), slot, 300, 300, slot);
  }
  expect_device_reads_every_storage(open_cuda_load_test(LoadTest::kSlotBytes, false), LoadTest::kSlotBytes, 12, 2000000, 3);
  expect_device_reads_every_storage(open_cuda_load_test(1 << 20, false), 1 << 20, 20000, 2, 5);
}

// Three storages through a ByteChecker on `device`; the report.
GpuReport check_three(std::unique_ptr<LoadTestDevice> device, const std::string& name) {
  GpuReport report;
  ByteChecker checker(std::move(device), name, report);
  const float f[] = {1.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 2.0f};
  const int64_t i[] = {1, -1, 0x7FF8000000000000};  // NaN's bits, but integers
  const std::vector<std::byte> empty;
  const auto bytes = [](const auto& a) { return std::as_bytes(std::span(a)); };
  checker.begin(OnDevice{DType::kFloat32, ErrorKind::kVerification, "archive/data/0"});
  checker.update(bytes(f));
  checker.finish();
  checker.digest(sizeof i, [&](std::span<std::byte> out) { std::memcpy(out.data(), i, out.size()); },
                 OnDevice{DType::kInt64, ErrorKind::kVerification, "archive/data/1"}, Sum::kXxh3);
  checker.begin(OnDevice{DType::kFloat16, ErrorKind::kVerification, "archive/data/2"});
  checker.update(empty);
  checker.finish();
  checker.begin(std::nullopt);  // not a storage: not loaded
  checker.update(bytes(f));
  checker.finish();
  checker.finish_device();
  return report;
}

TEST(LoadTestTest, TheReportSaysWhatTheDeviceChecked) {
  const GpuReport report = check_three(host_load_test(LoadTest::kSlotBytes, false), "host");
  EXPECT_EQ(report.status, GpuReport::Status::kOk);
  EXPECT_EQ(report.device, "host");
  EXPECT_EQ(report.storages, 3u);
  EXPECT_EQ(report.bytes, 16u + 24u);
  EXPECT_EQ(report.nan, 1u);
  EXPECT_EQ(report.inf, 1u);
}

TEST(LoadTestTest, AByteChangedOnTheDeviceIsCaughtAndNamed) {
  expect_error([] { check_three(host_load_test(LoadTest::kSlotBytes, true), "host"); }, ErrorKind::kVerification,
               "archive/data/0: the bytes loaded on host differ from the bytes read on the CPU");
}

// How long the opening took on its thread, and how long its first user
// waited for it (GpuReport::Phases: open, open_waited).
TEST(LoadTestTest, ADeviceOpenedInTheBackgroundSaysHowLongItTookAndWasWaitedFor) {
  auto device = open_in_background([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    return host_load_test(4096, false);
  });
  EXPECT_EQ(device->open_seconds(), 0.0);  // not open yet: nothing to say
  device->staging(0);                       // waits
  EXPECT_GE(device->open_seconds(), 0.075);
  EXPECT_GE(device->open_waited_seconds(), 0.05);
  EXPECT_LE(device->open_waited_seconds(), device->open_seconds() + 0.01);
}

// The device opened on a thread of its own (as verification opens CUDA's)
// is the same device once open; an error opening it is thrown at its first
// use and at every later one, the end of verification's included.
TEST(LoadTestTest, ADeviceOpenedInTheBackgroundIsWaitedForAtFirstUse) {
  std::atomic<bool> opened{false};
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  auto device = open_in_background([&opened, released] {
    released.wait_for(std::chrono::seconds(5));  // until the caller has gone on (were it this thread: 5 s, then fail)
    opened = true;
    return host_load_test(4096, false);
  });
  EXPECT_FALSE(opened.load());
  go.set_value();
  expect_device_reads_every_storage(std::move(device), 4096, 300, 300, 11);
  EXPECT_TRUE(opened.load());
  expect_error([] { check_three(open_in_background([] { return host_load_test(LoadTest::kSlotBytes, true); }), "host"); },
               ErrorKind::kVerification, "archive/data/0: the bytes loaded on host differ from the bytes read on the CPU");

  const auto failing = [] {
    return open_in_background([]() -> std::unique_ptr<LoadTestDevice> {
      throw Error(ErrorKind::kGpu, "cudaHostAlloc (staging slot): out of memory");
    });
  };
  expect_error([&] { check_three(failing(), "cuda:0"); }, ErrorKind::kGpu, "cudaHostAlloc (staging slot): out of memory");
  GpuReport report;
  ByteChecker unused(failing(), "cuda:0", report);  // no storage ever reaches it
  expect_error([&] { unused.finish_device(); }, ErrorKind::kGpu, "out of memory");
  expect_error([&] { unused.finish_device(); }, ErrorKind::kGpu, "out of memory");
}

// A read-back with the load test reads each piece straight into the staging
// slot (LoadTest::room/commit) and sums it there: the same sums as bytes
// copied in, across items and slots, and a byte changed on the device is
// still caught.
TEST(LoadTestTest, BytesReadStraightIntoStagingAreSummedAndLoaded) {
  const uint64_t sizes[] = {4, 1000, (uint64_t{256} << 10) + 12, (uint64_t{64} << 20) + 100};
  std::vector<std::byte> bytes(sizes[3]);
  std::mt19937_64 random(17);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  for (const Sum sum : {Sum::kXxh3, Sum::kCrc32}) {
    GpuReport report;
    ByteChecker checker(host_load_test(LoadTest::kSlotBytes, false), "host", report);
    uint64_t total = 0;
    for (const uint64_t size : sizes) {
      SCOPED_TRACE(size);
      const auto expected = std::span<const std::byte>(bytes).first(size);
      uint64_t at = 0, reads = 0;
      const Digest d = checker.digest(size, [&](std::span<std::byte> out) {
        std::memcpy(out.data(), bytes.data() + at, out.size());
        at += out.size(), ++reads;
      }, OnDevice{DType::kFloat32, ErrorKind::kVerification, "archive/data/" + std::to_string(size)}, sum);
      EXPECT_EQ(at, size);
      EXPECT_GE(reads, size / (uint64_t{256} << 10));
      if (sum == Sum::kXxh3) EXPECT_EQ(d.hash, record_hash(expected));
      if (sum == Sum::kCrc32) EXPECT_EQ(d.crc, crc32_update(0, expected));
      total += size;
    }
    checker.finish_device();
    EXPECT_EQ(report.storages, 4u);
    EXPECT_EQ(report.bytes, total);
  }
  GpuReport report;
  ByteChecker faulty(host_load_test(LoadTest::kSlotBytes, true), "host", report);
  expect_error([&] {
    faulty.digest(sizes[2], [&](std::span<std::byte> out) { std::memset(out.data(), 1, out.size()); },
                  OnDevice{DType::kFloat32, ErrorKind::kVerification, "archive/data/0"}, Sum::kXxh3);
    faulty.finish_device();
  }, ErrorKind::kVerification, "archive/data/0: the bytes loaded on host differ from the bytes read on the CPU");
}

TEST(LoadTestTest, AStorageAnErrorLeftPartWayIsDroppedNotCompared) {
  // A read that fails part-way leaves begin() without finish(); the checker
  // goes on with the next storage, and the device's result of the first is
  // not compared with a checksum that was never finished.
  GpuReport report;
  ByteChecker checker(host_load_test(LoadTest::kSlotBytes, false), "host", report);
  const std::vector<std::byte> bytes(1000, std::byte{7});
  checker.begin(OnDevice{DType::kFloat32, ErrorKind::kVerification, "archive/data/0"});
  checker.update(std::span(bytes).first(500));
  checker.begin(OnDevice{DType::kFloat32, ErrorKind::kVerification, "archive/data/1"});
  checker.update(bytes);
  checker.finish();
  checker.finish_device();
  EXPECT_EQ(report.storages, 1u);
  EXPECT_EQ(report.bytes, 1000u);
}

class GpuSaveTest : public test::TempDirTest {};

TEST_F(GpuSaveTest, EveryStorageIsLoadedAndAFaultOnTheDeviceFailsTheWrite) {
  const GpuStatus& status = gpu_status();
  if (!status.usable) GTEST_SKIP() << "GPU test skipped: " << status.reason;
  const Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  SaveOptions options;
  options.verify_options.gpu = GpuMode::kRequire;
  const SaveResult result = save(ck, dir_ / "out.pt", options);
  ASSERT_TRUE(result.verification);
  EXPECT_EQ(result.verification->gpu.status, GpuReport::Status::kOk);
  EXPECT_EQ(result.verification->gpu.storages, ck.storages().size());
  EXPECT_GT(result.verification->gpu.seconds, 0);
  fs::remove(dir_ / "out.pt");
  expect_error([&] { save_with_seams(ck, dir_ / "out.pt", options, fault_seams("corrupt-on-device")); },
               ErrorKind::kVerification, "differ from the bytes read on the CPU");
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace ckptfix
