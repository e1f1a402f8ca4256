// Large str and bytes payloads left in the input file: the unpickler only
// locates them, the latin-1 text reader decodes them as they stream, and
// apply_passes reads in every one still in the graph (model/payloads.h).
// CPython and torch judge the whole path in tests/interop/test_weights_only.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ckptfix/passes.h"
#include "ckptfix/save.h"
#include "io/latin1_text_reader.h"
#include "model/checkpoint_impl.h"
#include "pickle/unpickler.h"
#include "test_support.h"
#include "zip/record_reader.h"

namespace ckptfix {
namespace {

using test::expect_error;
using test::PickleBytes;
using namespace std::string_literals;

// The UTF-8 of the str whose code points are `bytes` (what protocol 2 pickles).
std::string latin1_text(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::string decode_all(const std::string& text, size_t chunk) {
  auto file = InputFile::from_memory(text, "text");
  Latin1TextReader reader(*file, 0, text.size(), "text");
  std::string out;
  std::string buffer(chunk, '\0');
  while (true) {
    const uint64_t n = reader.read(std::as_writable_bytes(std::span(buffer)));
    out.append(buffer, 0, n);
    if (n < chunk) break;
  }
  EXPECT_TRUE(reader.done());
  return out;
}

TEST(Latin1TextReader, DecodesEveryByteAcrossBufferAndReadBoundaries) {
  std::string bytes;
  for (int i = 0; i < (3 << 20) / 2; ++i) bytes += static_cast<char>((i * 7) % 256);
  // Prefixes of 0 to 2 ASCII bytes put a two-byte sequence across the
  // reader's buffer boundary in one of them; odd read sizes cut reads anywhere.
  for (const std::string prefix : {""s, "A"s, "AB"s}) {
    for (size_t chunk : {size_t{1} << 20, size_t{7777}, size_t{3}}) {
      if (chunk == 3 && !prefix.empty()) continue;  // slow, and covered once
      EXPECT_EQ(decode_all(latin1_text(prefix + bytes), chunk), prefix + bytes) << prefix.size() << " " << chunk;
    }
  }
}

TEST(Latin1TextReader, RefusesWhatIsNotALatin1Byte) {
  auto fails = [](const std::string& text, const std::string& message) {
    expect_error([&] { decode_all(text, 64); }, ErrorKind::kCorrupt, message);
  };
  fails("ab\xc4\x80"s, "byte 0xc4 at text offset 0x2 starts a code point above 255");
  fails("ab\xe2\x82\xac"s, "byte 0xe2 at text offset 0x2 starts a code point above 255");
  fails("a\x80"s, "byte 0x80 at text offset 0x1 is not UTF-8 here");
  fails("a\xc0\x80"s, "byte 0xc0 at text offset 0x1 is not UTF-8 here");
  fails("a\xc3\x41"s, "byte 0x41 at text offset 0x2 should continue a UTF-8 sequence");
  fails("ab\xc3"s, "byte 0xc3 at text offset 0x2 starts a UTF-8 sequence that the text ends in");
}

TEST(RecordReader, Latin1TextMustGiveExactlyTheRecordsSize) {
  const std::string text = latin1_text("\x01\xff\x80xyz"s);  // 6 bytes
  auto file = InputFile::from_memory(text, "model.pt");
  auto read = [&](uint64_t size) {
    RecordReader reader(*file, 0, text.size(), RecordEncoding::kLatin1Text, size, "archive/data.pkl+0x10");
    std::string out(size, '\0');
    reader.read(std::as_writable_bytes(std::span(out)));
    return out;
  };
  EXPECT_EQ(read(6), "\x01\xff\x80xyz"s);
  expect_error([&] { read(5); }, ErrorKind::kCorrupt,
               "'model.pt': archive/data.pkl+0x10: the latin-1 text gives more than the 5 bytes it should hold");
  expect_error([&] { read(7); }, ErrorKind::kCorrupt, "the latin-1 text gives fewer than the 7 bytes it should hold");
}

TEST(Unpickler, LeavesLargePayloadsInTheFile) {
  const std::string big(100, 'x');
  PickleBytes p;
  p.proto(4).raw("(").unicode(big).unicode("small").raw("B").raw("\x64\x00\x00\x00"s).raw(big);
  p.raw("t").stop();
  ValueGraph graph;
  UnpickleOptions options;
  options.leave_in_file_from = 11;
  options.file_offset = 1000;
  const Value* root = unpickle(p.span(), graph, options).root;
  ASSERT_EQ(root->items.size(), 3u);
  const Value* str = root->items[0];
  EXPECT_TRUE(str->is_str() && str->in_file() && str->text.empty());
  EXPECT_EQ(str->in_file_offset(), 1000u + 3 + 5);  // PROTO 4, MARK, BINUNICODE and its length
  EXPECT_EQ(str->in_file_length(), 100u);
  EXPECT_FALSE(root->items[1]->in_file());
  EXPECT_EQ(root->items[1]->text, "small");
  const Value* bytes = root->items[2];
  EXPECT_TRUE(bytes->is(ValueKind::kBytes) && bytes->in_file());
  EXPECT_EQ(p.str().substr(bytes->in_file_offset() - 1000, bytes->in_file_length()), big);
}

TEST(Unpickler, MaxHeldBytesCountsAllButThePayloadsLeftInTheFile) {
  PickleBytes p;
  p.proto(4).unicode(std::string(100, 'x')).stop();
  ValueGraph graph;
  UnpickleOptions options;
  options.max_held_bytes = 20;
  options.leave_in_file_from = 50;
  EXPECT_TRUE(unpickle(p.span(), graph, options).root->in_file());
  options.leave_in_file_from = 0;  // copied: the 100 bytes count
  expect_error([&] { unpickle(p.span(), graph, options); }, ErrorKind::kLimit, "(limit max_pickle_bytes = 20)");
}

TEST(Unpickler, RefusesAStackGlobalOperandLeftInTheFileUnread) {
  PickleBytes p;
  p.proto(4).unicode(std::string(100, 'x')).unicode("OrderedDict").raw("\x93").stop();
  ValueGraph graph;
  UnpickleOptions options;
  options.leave_in_file_from = 50;  // the module's 100 bytes stay in the file, within max_name_bytes
  expect_error([&] { unpickle(p.span(), graph, options); }, ErrorKind::kLimit,
               "global module is 100 bytes long (limit max_name_bytes = 1024)");
}

// A zip checkpoint whose data.pkl is {'s': <2 MiB str>, 'b': <2 MiB bytes>}.
std::string checkpoint_with_large_payloads(std::string& str, std::string& bytes) {
  str.assign(2 << 20, 's');
  bytes.assign(2 << 20, '\xfe');
  PickleBytes p;
  std::string length;  // BINBYTES8's
  append_le<uint64_t>(length, bytes.size());
  p.proto(4).raw("}(").unicode("s").unicode(str).unicode("b").raw("\x8e"s).raw(length).raw(bytes).raw("u").stop();
  return test::ZipBuilder().add("data.pkl", p.str()).add("version", "3\n").finish();
}

TEST(Payloads, ApplyPassesReadsInEveryPayloadLeftInTheFile) {
  for (bool weights_only : {false, true}) {
    std::string str, bytes;
    OpenOptions open;
    open.leave_payloads_in_file = true;
    Checkpoint ck = Checkpoint::from_bytes(checkpoint_with_large_payloads(str, bytes), "model.pt", open);
    const Value* root = impl_of(ck).root;
    ASSERT_EQ(root->entries().size(), 2u);
    EXPECT_TRUE(root->entries()[0].second->in_file());
    EXPECT_TRUE(root->entries()[1].second->in_file());
    PassOptions passes;
    passes.weights_only = weights_only;
    apply_passes(ck, passes);
    EXPECT_FALSE(root->entries()[0].second->in_file());
    EXPECT_EQ(root->entries()[0].second->text, str);
    EXPECT_FALSE(root->entries()[1].second->in_file());
    EXPECT_EQ(root->entries()[1].second->text, bytes);
  }
}

TEST(Payloads, PayloadsReadInCountAgainstMaxPickleBytes) {
  for (bool weights_only : {false, true}) {
    std::string str, bytes;
    OpenOptions open;
    open.leave_payloads_in_file = true;
    open.limits.max_pickle_bytes = 3 << 20;  // one 2 MiB payload fits, not two
    Checkpoint ck = Checkpoint::from_bytes(checkpoint_with_large_payloads(str, bytes), "model.pt", open);
    PassOptions passes;
    passes.weights_only = weights_only;
    expect_error([&] { apply_passes(ck, passes); }, ErrorKind::kLimit,
                 "'model.pt': archive/data.pkl: the object pickle holds more than 3145728 bytes in memory once its "
                 "2097152-byte str or bytes payload is read in (limit max_pickle_bytes = 3145728)");
    open.limits.max_pickle_bytes = 5 << 20;
    Checkpoint fits = Checkpoint::from_bytes(checkpoint_with_large_payloads(str, bytes), "model.pt", open);
    apply_passes(fits, passes);
    EXPECT_TRUE(impl_of(fits).root->entries()[1].second->text == bytes);
  }
}

TEST(Payloads, SaveWithoutApplyPassesWritesTheRealText) {
  std::string str, bytes;
  OpenOptions open;
  open.leave_payloads_in_file = true;
  Checkpoint ck = Checkpoint::from_bytes(checkpoint_with_large_payloads(str, bytes), "model.pt", open);
  const auto out = std::filesystem::temp_directory_path() / ("ckptfix-payloads-" + std::to_string(::getpid()) + ".pt");
  save(ck, out);
  const Checkpoint back = Checkpoint::open(out);
  std::filesystem::remove(out);
  ASSERT_EQ(impl_of(back).root->entries().size(), 2u);
  EXPECT_TRUE(impl_of(back).root->entries()[0].second->text == str);
  const Value& b = *impl_of(back).root->entries()[1].second;  // protocol 2: _codecs.encode(latin-1 str, 'latin1')
  ASSERT_TRUE(b.is_call_to("_codecs", "encode"));
  EXPECT_TRUE(b.args()->items[0]->text == latin1_text(bytes));
}

// A storage key or location of 1 MiB or more is left in the file: refused,
// not read as "" (two such keys would be one storage).
TEST(Payloads, AStoragePersistentIdWithAKeyOrLocationLeftInTheFileIsRefused) {
  OpenOptions open;
  open.leave_payloads_in_file = true;
  const std::string huge(2 << 20, 'k');
  auto checkpoint = [&](const std::string& key, const std::string& location) {
    PickleBytes p;
    p.proto(2).raw("(");
    p.global("torch._utils", "_rebuild_tensor_v2").raw("(").storage("FloatStorage", key, location, 1).int1(0);
    p.raw("(K\x01t(K\x01t\x89").global("collections", "OrderedDict").raw(")RtR");
    p.raw("l").stop();
    return test::ZipBuilder().add("data.pkl", p.str()).add("data/0", "\0\0\0\0"s).add("version", "3\n").finish();
  };
  expect_error([&] { Checkpoint::from_bytes(checkpoint(huge, "cpu"), "model.pt", open); }, ErrorKind::kCorrupt,
               "storage persistent id: key of 2097152 bytes");
  expect_error([&] { Checkpoint::from_bytes(checkpoint("0", huge), "model.pt", open); }, ErrorKind::kCorrupt,
               "storage persistent id: location of 2097152 bytes");
}

// A numpy array's latin-1 text that the pickle also hands to another rule
// (here an enum member's value, through the memo) is read in for it: that
// rule copies its text, which must not be "".
TEST(Payloads, ANumpyPayloadSharedWithAnotherValueIsReadIn) {
  const std::string text(2 << 20, 'a');
  std::string n;
  append_le<uint32_t>(n, static_cast<uint32_t>(text.size()));
  PickleBytes p;
  p.proto(2).raw("}(").unicode("array");
  p.global("numpy.core.multiarray", "_reconstruct").raw("(").global("numpy", "ndarray").raw("(").int1(0).raw("t").unicode("b");
  p.raw("tR(K\x01(J").raw(n).raw("t").global("numpy", "dtype").raw("(").unicode("u1").raw("\x89\x88tR\x89");
  p.global("_codecs", "encode").raw("(").unicode(text).raw("q\x01").unicode("latin1").raw("tRtb");
  p.unicode("member").global("colors", "Color").raw("(h\x01tR").raw("u").stop();
  OpenOptions open;
  open.leave_payloads_in_file = true;
  Checkpoint ck = Checkpoint::from_bytes(test::ZipBuilder().add("data.pkl", p.str()).add("version", "3\n").finish(),
                                         "model.pt", open);
  PassOptions passes;
  passes.weights_only = true;
  apply_passes(ck, passes);
  const Value* root = impl_of(ck).root;
  ASSERT_EQ(root->entries().size(), 2u);
  EXPECT_NE(impl_of(ck).tensor_of(root->entries()[0].second), nullptr);
  const Value* member = root->entries()[1].second;
  EXPECT_TRUE(member->is_str());
  EXPECT_TRUE(member->text == text) << member->text.size();
}

TEST(Payloads, WithoutTheOptionEveryPayloadIsCopied) {
  std::string str, bytes;
  Checkpoint ck = Checkpoint::from_bytes(checkpoint_with_large_payloads(str, bytes), "model.pt");
  EXPECT_FALSE(impl_of(ck).root->entries()[0].second->in_file());
  EXPECT_EQ(impl_of(ck).root->entries()[0].second->text, str);
}

}  // namespace
}  // namespace ckptfix
