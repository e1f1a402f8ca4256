// The parse of data.pkl a save begins while it writes the rest of the file
// (verify/early_reparse.h) is taken by the re-read only for the very record
// it parsed; anything else is parsed again, with the reader's own words
// for what is wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "ckptfix/checkpoint.h"
#include "ckptfix/save.h"
#include "formats/registry.h"
#include "formats/torch_zip_parts.h"
#include "model/checkpoint_impl.h"
#include "test_support.h"
#include "verify/early_reparse.h"
#include "zip/zip_reader.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::PickleBytes;

// The source of a parse made already.
PreparsedPickleSource given(std::unique_ptr<PreparsedPickle> parsed) {
  auto held = std::make_shared<std::unique_ptr<PreparsedPickle>>(std::move(parsed));
  return [held] { return std::move(*held); };
}

class EarlyReparseTest : public test::TempDirTest {
 protected:
  // A file as save() writes it, and its data.pkl as the zip writer wrote it.
  fs::path saved(WrittenRecord& pickle) {
    const fs::path out = dir_ / "out.pt";
    SaveOptions options;
    options.verify = false;
    save(Checkpoint::open(test::fixture_path("views_tied.pt")), out, options);
    const ZipReader zip(InputFile::open(out));
    const ZipEntry& e = zip.entries().front();  // data.pkl, first as torch writes it
    EXPECT_TRUE(e.name.ends_with("/data.pkl")) << e.name;
    pickle.name = e.name;
    pickle.header_offset = e.header_offset;
    pickle.data_offset = e.data_offset;
    pickle.size = e.size;
    pickle.crc32 = e.crc32;
    return out;
  }
  static size_t positions(const Checkpoint& ck) { return ck.tensor_positions().size(); }
  // Marks a parse: its first key is renamed in its graph, so a checkpoint
  // made of that graph shows it, and one parsed anew does not.
  static void mark(PreparsedPickle& parsed) {
    Value& key = *parsed.parsed.root->entries().at(0).first;
    key.text = "marked." + key.text;
  }
  static bool marked(const Checkpoint& ck) {
    return path_to_string(ck.tensor_positions().at(0).path).starts_with("marked.");
  }
};

TEST_F(EarlyReparseTest, TheReReadTakesTheParseOfItsVeryRecord) {
  WrittenRecord pickle;
  const fs::path out = saved(pickle);
  EarlyReparse early(out, ReadLimits{});
  early.start(pickle);
  std::unique_ptr<PreparsedPickle> parsed = early.take();
  ASSERT_NE(parsed, nullptr);
  mark(*parsed);
  const Checkpoint taken = open_written_checkpoint(out, {}, given(std::move(parsed)));
  EXPECT_TRUE(marked(taken));  // adopted, not parsed again
  const Checkpoint plain = Checkpoint::open(out);
  EXPECT_FALSE(marked(plain));
  EXPECT_EQ(positions(taken), positions(plain));
  EXPECT_EQ(taken.tensors().size(), plain.tensors().size());
  EXPECT_EQ(taken.globals().size(), plain.globals().size());
  EXPECT_EQ(early.take(), nullptr);  // taken once
}

TEST_F(EarlyReparseTest, RoomMadeAheadHoldsTheParseAndWhatIsLeftIsFreed) {
  WrittenRecord pickle;
  const fs::path out = saved(pickle);
  for (const size_t expected_values : {size_t{5}, size_t{100000}}) {
    EarlyReparse early(out, ReadLimits{}, expected_values);
    if (expected_values > 5) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // room made meanwhile
    early.start(pickle);
    std::unique_ptr<PreparsedPickle> parsed = early.take();
    ASSERT_NE(parsed, nullptr);
    EXPECT_LT(parsed->graph.room(), 1024u);  // the room not used is freed
    const Checkpoint taken = open_written_checkpoint(out, {}, given(std::move(parsed)));
    const Checkpoint plain = Checkpoint::open(out);
    ASSERT_EQ(positions(taken), positions(plain));
    for (size_t i = 0; i < positions(plain); ++i) {
      EXPECT_EQ(path_to_string(taken.tensor_positions()[i].path), path_to_string(plain.tensor_positions()[i].path));
    }
    EXPECT_EQ(taken.tensors().size(), plain.tensors().size());
  }
}

TEST_F(EarlyReparseTest, BytesThatAreNotThoseWrittenAreNotParsed) {
  WrittenRecord pickle;
  const fs::path out = saved(pickle);
  pickle.crc32 ^= 1;  // what the writer meant is not what the file holds
  EarlyReparse early(out, ReadLimits{});
  early.start(pickle);
  EXPECT_EQ(early.take(), nullptr);
}

TEST_F(EarlyReparseTest, AParseOfAnotherRecordIsParsedAgain) {
  WrittenRecord pickle;
  const fs::path out = saved(pickle);
  std::ifstream in(out, std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto bytes = as_bytes(std::string_view(file).substr(pickle.data_offset, pickle.size));
  for (int field = 0; field < 3; ++field) {
    auto parsed = preparse_pickle(bytes, field == 0 ? "archive/other.pkl" : pickle.name,
                                  pickle.data_offset + (field == 1 ? 64 : 0), pickle.crc32 ^ (field == 2 ? 1 : 0),
                                  ReadLimits{}, file.size());
    mark(*parsed);
    const Checkpoint ck = open_written_checkpoint(out, {}, given(std::move(parsed)));
    EXPECT_FALSE(marked(ck)) << field;
    EXPECT_EQ(positions(ck), positions(Checkpoint::open(out))) << field;
  }
}

TEST_F(EarlyReparseTest, AGadgetIsRefusedInTheReadersWords) {
  PickleBytes p;
  p.proto().global("subprocess", "check_output").raw("(").unicode("id").raw("tR.");
  const fs::path out = dir_ / "evil.pt";
  std::ofstream(out, std::ios::binary) << test::ZipBuilder().add("data.pkl", p.str()).finish();
  const ZipReader zip(InputFile::open(out));
  const ZipEntry& e = *zip.find("archive/data.pkl");
  const std::string expected = "archive/data.pkl+0x2: refusing to load: the pickle references the dangerous global "
                               "'subprocess.check_output'";
  expect_error([&] { Checkpoint::open(out); }, ErrorKind::kUnsafe, expected);
  expect_error(
      [&] {
        const auto file = InputFile::open(out);  // the bytes are a view of it
        const FileBytes bytes = file->read_bytes(e.data_offset, e.size, "data.pkl");
        open_written_checkpoint(out, {},
                                given(preparse_pickle({bytes.data(), bytes.size()}, e.name, e.data_offset, e.crc32,
                                                      ReadLimits{}, fs::file_size(out))));
      },
      ErrorKind::kUnsafe, expected);
}

}  // namespace
}  // namespace ckptfix
