// The zip layer on in-memory bytes: writer layout (alignment, descriptors,
// zip64 end records), reader lookups, and one test per zip error.
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>
#include <functional>
#include <optional>
#include <random>

#include "dtype_kernels/cpu_features.h"
#include "io/input_file.h"
#include "test_support.h"
#include "zip/crc32.h"
#include "zip/zip_reader.h"

namespace ckptfix {
namespace {

using test::expect_error;

ZipReader read_zip(std::string bytes) { return ZipReader(InputFile::from_memory(std::move(bytes), "mem.pt")); }

class ZipRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(ZipRoundTrip, RecordsAreAlignedCrcdAndReadBack) {
  const size_t size = GetParam();
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>(i * 7 + 3);
  MemorySink sink;
  ZipWriter zip(sink);
  zip.add("root/data.pkl", as_bytes("pickle"));
  zip.add("root/data/0", as_bytes(payload));
  zip.add("root/a-much-longer-record-name/for/padding", as_bytes(payload));
  zip.finish();

  ZipReader reader = read_zip(sink.bytes());
  ASSERT_EQ(reader.entries().size(), 3u);
  EXPECT_TRUE(reader.layout().has_zip64_eocd);  // torch always writes the zip64 end records
  for (const ZipEntry& e : reader.entries()) {
    EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
    EXPECT_EQ(e.method, 0);
  }
  const ZipEntry* data = reader.find("root/data/0");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->size, size);
  EXPECT_EQ(data->crc32, crc32_update(0, as_bytes(payload)));
  EXPECT_EQ(reader.read_all(*data, size), payload);
  // A record of zero bytes has no data descriptor, as miniz writes it.
  EXPECT_EQ(data->flags, size ? 0x0808 : 0x0800);
}

INSTANTIATE_TEST_SUITE_P(Sizes, ZipRoundTrip, ::testing::Values(0, 1, 3, 63, 64, 65, 4099, 1 << 20));

// CRC-32 against zlib's (a third implementation): every length up to 3 KiB
// at every alignment inside 32 bytes, from random starting CRCs, and long
// runs continued piece by piece, through the folded paths' every exit: what
// crc32_update picks, and each fold width the CPU can run.
TEST(Crc32, IsZlibsAtEveryLengthAndAlignment) {
  if (!cpu_has_avx2_vpclmulqdq()) std::puts("note: no VPCLMULQDQ on this CPU: libdeflate's CRC-32 alone is tested");
  if (cpu_has_avx2_vpclmulqdq() && !cpu_has_avx512_vpclmulqdq()) {
    std::puts("note: no AVX-512 on this CPU: the 512-bit fold is not tested");
  }
  std::mt19937_64 random(36);
  std::vector<std::byte> bytes((size_t{1} << 20) + 97);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  auto zlib_crc = [](uint32_t crc, std::span<const std::byte> data) {
    return static_cast<uint32_t>(::crc32(crc, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
  };
  using Crc = std::function<std::optional<uint32_t>(uint32_t, std::span<const std::byte>)>;
  const std::vector<std::pair<std::string, Crc>> kinds = {
      {"crc32_update", [](uint32_t crc, std::span<const std::byte> d) { return std::optional(crc32_update(crc, d)); }},
      {"256-bit fold", [](uint32_t crc, std::span<const std::byte> d) { return crc32_update_folded(256, crc, d); }},
      {"512-bit fold", [](uint32_t crc, std::span<const std::byte> d) { return crc32_update_folded(512, crc, d); }},
  };
  for (const auto& [kind, crc_of] : kinds) {
    if (!crc_of(0, {})) continue;  // not on this CPU
    for (size_t length = 0; length <= 3072; ++length) {
      for (size_t offset = 0; offset < 32; ++offset) {
        const auto data = std::span<const std::byte>(bytes).subspan(offset, length);
        const auto start = static_cast<uint32_t>(random());
        ASSERT_EQ(*crc_of(start, data), zlib_crc(start, data)) << kind << ", length " << length << ", offset " << offset;
      }
    }
    for (size_t piece : {size_t{511}, size_t{512}, size_t{1023}, size_t{1024}, size_t{4096} + 5, size_t{256} << 10,
                         bytes.size()}) {
      uint32_t crc = 0;
      for (size_t at = 0; at < bytes.size(); at += piece) {
        crc = *crc_of(crc, std::span<const std::byte>(bytes).subspan(at, std::min(piece, bytes.size() - at)));
      }
      EXPECT_EQ(crc, zlib_crc(0, bytes)) << kind << ", pieces of " << piece;
      EXPECT_EQ(crc, crc32_update_reference(0, bytes));
    }
  }
}

// What lets parts of a record be summed on two threads.
TEST(Crc32, CombinedPartsGiveTheWholesCrc) {
  std::mt19937_64 random(7);
  std::vector<std::byte> bytes((size_t{3} << 20) + 11);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random());
  for (const size_t size : {size_t{70'001}, bytes.size()}) {
    const auto data = std::span<const std::byte>(bytes).first(size);
    const uint32_t whole = crc32_update(0, data);
    for (size_t part : {size_t{1}, size_t{1000}, size_t{1} << 20, data.size()}) {
      if (part == 1 && size > 70'001) continue;  // a million joins prove no more
      uint32_t crc = 0;
      const Crc32Join join(part);  // one shift for every whole part
      for (size_t at = 0; at < data.size(); at += part) {
        const auto piece = data.subspan(at, std::min(part, data.size() - at));
        crc = piece.size() == part ? join(crc, crc32_update(0, piece)) : crc32_combine(crc, crc32_update(0, piece), piece.size());
      }
      EXPECT_EQ(crc, whole) << size << " bytes in parts of " << part;
    }
    EXPECT_EQ(crc32_combine(whole, 0, 0), whole);
    EXPECT_EQ(crc32_combine(0, whole, data.size()), whole);
  }
}

// A phase puts the data where asked, still aligned: a copy's page phase, or a
// multiple of 32 KiB; one the writer cannot honour gets torch's padding.
TEST(ZipWriter, PutsARecordsDataAtTheAskedPhase) {
  MemorySink sink;
  ZipWriter zip(sink);
  const std::string data(100, 'x');
  auto record = [&](const std::string& name, std::optional<ZipWriter::Phase> phase) {
    zip.begin(name, data.size(), phase);
    zip.write(as_bytes(data));
    zip.end();
    return zip.records().back().data_offset;
  };
  EXPECT_EQ(record("a/first", std::nullopt) % 64, 0u);
  EXPECT_EQ(record("a/page", ZipWriter::Phase{4096 + 640, 4096}) % 4096, 640u);
  EXPECT_EQ(record("a/folio", ZipWriter::Phase{0, ZipWriter::kMaxModulo}) % ZipWriter::kMaxModulo, 0u);
  const uint64_t before = sink.position();
  const uint64_t too_wide = record("a/too_wide", ZipWriter::Phase{0, uint64_t{64} << 10});
  EXPECT_LT(too_wide - before, 30u + 11 + 4 + 64);  // torch's padding: less than the alignment
  EXPECT_EQ(too_wide % 64, 0u);
  EXPECT_EQ(record("a/unaligned", ZipWriter::Phase{100, 4096}) % 64, 0u);  // not a multiple of 64: ignored
  zip.finish();
  ZipReader reader = read_zip(sink.bytes());
  for (const char* name : {"a/first", "a/page", "a/folio", "a/too_wide", "a/unaligned"}) {
    const ZipEntry* entry = reader.find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_EQ(reader.read_all(*entry, data.size()), data) << name;  // the crc checks too
  }
}

TEST(ZipWriter, ReproducesTorchsOwnBytes) {
  // Re-writing every record of a torch 1.13 file, in its order, with
  // ckptfix's writer gives back the very same file.
  const std::string original = test::read_file(test::fixture_path("plain_state_dict.pt"));
  ZipReader reader = read_zip(original);
  MemorySink sink;
  ZipWriter zip(sink);
  for (const ZipEntry& e : reader.entries()) zip.add(e.name, as_bytes(reader.read_all(e, 1 << 20)));
  zip.finish();
  EXPECT_EQ(sink.bytes(), original);
}

TEST(ZipWriter, AlignsToTorchsStorageAlignment) {
  // config.save.storage_alignment = 4096: every record, data.pkl included,
  // starts on a multiple of it, with the least padding (torch's getPadding).
  MemorySink sink;
  ZipWriter zip(sink, 4096);
  zip.add("r/data.pkl", as_bytes("pickle"));
  zip.add("r/data/0", as_bytes(std::string(5000, 'x')));
  zip.finish();
  ZipReader reader = read_zip(sink.bytes());
  for (const ZipEntry& e : reader.entries()) EXPECT_EQ(e.data_offset % 4096, 0u) << e.name;
  EXPECT_EQ(reader.entries()[0].data_offset, 4096u);
  EXPECT_EQ(reader.entries()[1].data_offset, 8192u);
  expect_error([&] { ZipWriter bad(sink, 100); }, ErrorKind::kInvalidArgument, "alignment 100 is not a multiple of 64");
  expect_error([&] { ZipWriter bad(sink, 131072); }, ErrorKind::kInvalidArgument, "up to 65536");
}

TEST(ZipReader, FindsRecordsByNameNotPosition) {
  const std::string bytes = test::ZipBuilder("anything").add("version", "3\n").add("data.pkl", "x").finish();
  ZipReader reader = read_zip(bytes);
  ASSERT_NE(reader.find("anything/data.pkl"), nullptr);
  EXPECT_EQ(reader.read_all(*reader.find("anything/version"), 16), "3\n");
  EXPECT_EQ(reader.find("anything/missing"), nullptr);
}

TEST(ZipReader, ErrorTooShortForEndRecord) {
  expect_error([] { read_zip("PK\x03\x04"); }, ErrorKind::kCorrupt, "too short to hold an end of central directory record");
}

TEST(ZipReader, ErrorNoEndRecordInTruncatedFile) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  bytes.resize(bytes.size() - 10);
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "failed finding central directory");
}

TEST(ZipReader, ErrorBadCentralDirectorySignature) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  const size_t cd = bytes.find("PK\x01\x02");
  bytes[cd + 2] = 'X';
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "central directory entry 0 at offset 0x");
}

TEST(ZipReader, ErrorLocalHeaderMissing) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  bytes[0] = 'Q';
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "local header of 'archive/data.pkl' expected at offset 0x0");
}

TEST(ZipReader, ErrorCentralDirectoryOutOfRange) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  // Point the zip64 end record's central directory offset past the end
  // (the end record's own says 0xFFFFFFFF: look in the zip64 one).
  const size_t z64 = bytes.find("PK\x06\x06");
  store_le<uint64_t>(reinterpret_cast<std::byte*>(bytes.data() + z64 + 48), 1u << 30);
  store_le<uint32_t>(reinterpret_cast<std::byte*>(bytes.data() + bytes.rfind("PK\x05\x06") + 16), 0xFFFFFFFF);
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "central directory at offset 0x40000000");
}

TEST(ZipReader, ErrorDuplicateRecord) {
  const std::string bytes = test::ZipBuilder().add("data.pkl", "x").add("data.pkl", "y").finish();
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "record 'archive/data.pkl' appears twice");
}

// Issue 66: an archive torch's reader (miniz) could read otherwise than a
// reader of the zip specification is refused (tests/cli/test_zip_differentials.py
// has the attacks, judged by torch).
TEST(ZipReaderAmbiguity, NamesAreFoundIgnoringCaseAndCaseTwinsAreRefused) {
  ZipReader reader = read_zip(test::ZipBuilder().add("data.pkl", "x").add("BYTEORDER", "big").finish());
  ASSERT_NE(reader.find("archive/byteorder"), nullptr);  // as torch finds it
  EXPECT_EQ(reader.find("ARCHIVE/DATA.PKL"), reader.find("archive/data.pkl"));
  expect_error([] { read_zip(test::ZipBuilder().add("data.pkl", "x").add("Data.pkl", "y").finish()); },
               ErrorKind::kCorrupt, "records 'archive/data.pkl' and 'archive/Data.pkl' differ only in case");
}

TEST(ZipReaderAmbiguity, TheEndRecordMustEndTheFileAndBeTheOnlyOne) {
  const std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  // Bytes after the end record (a comment its length does not cover): miniz still takes it.
  expect_error([&] { read_zip(bytes + "junk"); }, ErrorKind::kCorrupt, "says 0 bytes of comment follow it, and 4 do");
  // A second end record signature in the directory (here in a record's name).
  const std::string twice = test::ZipBuilder().add("data.pkl", "x").add_raw("archive/PK\x05\x06", "y").finish();
  expect_error([&] { read_zip(twice); }, ErrorKind::kCorrupt, "a second end of central directory signature");
}

TEST(ZipReaderAmbiguity, TheTwoEndRecordsMustAgree) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  // The end record's entry count is no 0xFFFF, and differs from the zip64 record's.
  store_le<uint16_t>(reinterpret_cast<std::byte*>(bytes.data() + bytes.rfind("PK\x05\x06") + 10), 7);
  expect_error([&] { read_zip(bytes); }, ErrorKind::kCorrupt, "describe different central directories");
}

// `bytes` with `gap` inserted before its central directory, every offset
// to the directory moved along: an archive sound but for those bytes.
std::string with_bytes_before_directory(std::string bytes, const std::string& gap) {
  const size_t cd = bytes.find("PK\x01\x02");
  bytes.insert(cd, gap);
  auto bump64 = [&](size_t at) {
    auto* p = reinterpret_cast<std::byte*>(bytes.data() + at);
    store_le<uint64_t>(p, load_le<uint64_t>(p) + gap.size());
  };
  const size_t z64 = bytes.find("PK\x06\x06", cd + gap.size());
  bump64(z64 + 48);                       // the zip64 end record: where the directory starts
  bump64(bytes.find("PK\x06\x07") + 8);   // the locator: where the zip64 end record is
  auto* offset32 = reinterpret_cast<std::byte*>(bytes.data() + bytes.rfind("PK\x05\x06") + 16);
  if (load_le<uint32_t>(offset32) != 0xFFFFFFFF) store_le<uint32_t>(offset32, load_le<uint32_t>(offset32) + gap.size());
  return bytes;
}

TEST(ZipReaderAmbiguity, RecordsFollowEachOtherWithNothingBetween) {
  const std::string bytes = test::ZipBuilder().add("data.pkl", "x").add("version", "3\n").finish();
  EXPECT_EQ(read_zip(with_bytes_before_directory(bytes, "")).entries().size(), 2u);
  // A local header no directory entry names, before the directory: a streaming reader would find it.
  const std::string hidden = "PK\x03\x04" + std::string(26, '\0') + "archive/evil.pkl";
  expect_error([&] { read_zip(with_bytes_before_directory(bytes, hidden)); }, ErrorKind::kCorrupt,
               "bytes after record 'archive/version' belong to no record");
}

TEST(ZipReaderAmbiguity, FlagsAndDirectoriesTorchNeverWritesAreRefused) {
  std::string bytes = test::ZipBuilder().add("data.pkl", "x").finish();
  std::string flagged = bytes;
  flagged[flagged.find("PK\x01\x02") + 8] |= 0x40;  // strong encryption
  expect_error([&] { read_zip(flagged); }, ErrorKind::kUnsupported, "general purpose flags");
  std::string directory = bytes;
  directory[directory.find("PK\x01\x02") + 38] = 0x10;  // a directory entry: miniz extracts bytes it never wrote
  expect_error([&] { read_zip(directory); }, ErrorKind::kCorrupt, "is no file");
}

// Files larger than InputFile reads whole have their local headers read in
// groups (many small records) and alone (after a large record): the same
// offsets as when the bytes are in memory, and a bad header in the middle
// of a group still named.
class ZipReaderOnDisk : public test::TempDirTest {
 protected:
  std::string many_records() {
    test::ZipBuilder zip;
    for (int i = 0; i < 20000; ++i) zip.add("data/" + std::to_string(i), std::string(static_cast<size_t>(i % 5), 'x'));
    zip.add("data/large", std::string(size_t{9} << 20, 'y'));  // past the size read whole
    for (int i = 0; i < 100; ++i) zip.add("after/" + std::to_string(i), "z");
    return zip.finish();
  }
  std::shared_ptr<const InputFile> on_disk(const std::string& bytes) {
    const auto path = dir_ / "many.pt";
    std::ofstream(path, std::ios::binary) << bytes;
    return InputFile::open(path);
  }
};

TEST_F(ZipReaderOnDisk, LocatesEveryRecordAsInMemory) {
  const std::string bytes = many_records();
  const auto file = on_disk(bytes);
  ASSERT_FALSE(file->in_memory());
  const ZipReader from_disk(file);
  const ZipReader from_memory = read_zip(bytes);
  ASSERT_EQ(from_disk.entries().size(), 20101u);
  for (size_t i = 0; i < from_disk.entries().size(); ++i) {
    EXPECT_EQ(from_disk.entries()[i].data_offset, from_memory.entries()[i].data_offset) << i;
  }
  EXPECT_EQ(from_disk.read_all(*from_disk.find("archive/after/99"), 1), "z");
}

TEST_F(ZipReaderOnDisk, NamesABadLocalHeaderInAGroup) {
  std::string bytes = many_records();
  const std::string name = "archive/data/12345";
  const size_t local = bytes.find(name);  // the first occurrence is the local header's
  bytes[local + name.size() - 1] = '9';
  expect_error([&] { ZipReader bad(on_disk(bytes)); }, ErrorKind::kCorrupt,
               "names 'archive/data/12349' but the central directory says 'archive/data/12345'");
}

}  // namespace
}  // namespace ckptfix
