// The JSON reader and the safetensors header: what is accepted, what is
// refused and how, and that a header written is read back the same. The
// bytes the writer produces are judged by the real safetensors library in
// tests/interop/test_safetensors.py, not here.
#include <gtest/gtest.h>

#include "ckptfix/checkpoint.h"
#include "io/bytes.h"
#include "json/json.h"
#include "safetensors/header.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;

std::string file_with(const std::string& json, size_t data_bytes) {
  std::string out;
  append_le<uint64_t>(out, json.size());
  return out + json + std::string(data_bytes, '\x01');
}

SafetensorsHeader parse(const std::string& file) { return parse_safetensors_header(as_bytes(file)); }

TEST(Json, ParsesStrictJsonInOrder) {
  const JsonValue v = parse_json(R"( {"b": [1, 2.5, -3e2, true, null], "a": "x\u00e9\ud83d\ude00\n"} )");
  ASSERT_EQ(v.kind, JsonValue::Kind::kObject);
  EXPECT_EQ(v.members[0].key, "b");
  EXPECT_EQ(v.members[1].value.text, "x\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_EQ(v.find("b")->items[0].as_uint(), 1u);
  EXPECT_FALSE(v.find("b")->items[1].as_uint());
  EXPECT_EQ(parse_json("18446744073709551615").as_uint(), UINT64_MAX);
  EXPECT_FALSE(parse_json("18446744073709551616").as_uint());
}

TEST(Json, RefusesWhatTheRfcRefusesAndDuplicateKeys) {
  for (const char* bad : {"{\"a\":1,}", "[1,]", "{'a':1}", "01", "1.", "-", "NaN", "\"\\ud800\"", "\"\\udc00x\"",
                          "\"a\nb\"", "\"\xff\"", "\"\xc0\xaf\"", "{} x", "", "[", "\"\\x\""}) {
    expect_error([&] { parse_json(bad); }, ErrorKind::kCorrupt, "invalid JSON at byte");
  }
  expect_error([] { parse_json(R"({"a":1,"a":2})"); }, ErrorKind::kCorrupt, "key 'a' appears twice");
  expect_error([] { parse_json(std::string(100, '[') + std::string(100, ']')); }, ErrorKind::kCorrupt,
               "nested deeper than 64 levels");
}

TEST(Json, QuotesAsSerdeJson) {
  EXPECT_EQ(json_quote("a\"\\\n\x01\x7f/\xc3\xa9"), "\"a\\\"\\\\\\n\\u0001\x7f/\xc3\xa9\"");
}

TEST(Json, QuotesAsPythonJsonDumps) {  // ensure_ascii, as transformers writes an index
  EXPECT_EQ(json_quote_ascii("a\"\\\n\x01\x7f/\xc3\xa9\xf0\x9f\x98\x80"),
            "\"a\\\"\\\\\\n\\u0001\\u007f/\\u00e9\\ud83d\\ude00\"");
}

TEST(SafetensorsHeader, WrittenHeaderReadsBackAndIsPadded) {
  std::vector<SafetensorsEntry> entries = {{"w", DType::kFloat32, {2, 2}, 0, 16},
                                           {"f4", DType::kFloat4E2M1FnX2, {1, 4}, 16, 18},
                                           {"s", DType::kBool, {}, 18, 19}};
  const std::string header = encode_safetensors_header(entries, SafetensorsMetadata{{"format", "pt"}});
  EXPECT_EQ(header.size() % 8, 0u);
  const std::string start = R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)";
  EXPECT_EQ(header.substr(8, start.size()), start);
  const SafetensorsHeader back = parse(header + std::string(19, '\0'));
  ASSERT_EQ(back.entries.size(), 3u);
  EXPECT_EQ(back.entries[1].shape, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(back.entries[1].dtype, DType::kFloat4E2M1FnX2);
  EXPECT_EQ(back.metadata, (SafetensorsMetadata{{"format", "pt"}}));
  EXPECT_EQ(back.data_start, header.size());
  EXPECT_EQ(encode_safetensors_header({}, std::nullopt), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
}

TEST(SafetensorsHeader, RefusesEveryBrokenRule) {
  const std::string f32 = R"("dtype":"F32","shape":[2])";
  struct Case {
    std::string json;
    size_t data;
    ErrorKind kind;
    std::string text;
  };
  const Case cases[] = {
      {"{\"a\":{" + f32 + ",\"data_offsets\":[0,8]}}", 4, ErrorKind::kCorrupt, "need 8 bytes of data but the file holds 4"},
      {"{\"a\":{" + f32 + ",\"data_offsets\":[0,8]}}", 9, ErrorKind::kCorrupt, "1 bytes of data after the last tensor"},
      {"{\"a\":{" + f32 + ",\"data_offsets\":[0,8]},\"b\":{" + f32 + ",\"data_offsets\":[4,12]}}", 12,
       ErrorKind::kCorrupt, "overlaps the tensor before it"},
      {"{\"a\":{" + f32 + ",\"data_offsets\":[0,8]},\"b\":{" + f32 + ",\"data_offsets\":[12,20]}}", 20,
       ErrorKind::kCorrupt, "a hole of 4 bytes"},
      {"{\"a\":{" + f32 + ",\"data_offsets\":[0,12]}}", 12, ErrorKind::kCorrupt, "needs 8 bytes but data_offsets [0, 12] hold 12"},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,0]}})", 0, ErrorKind::kCorrupt, "overflows"},
      {R"({"a":{"dtype":"X9","shape":[],"data_offsets":[0,0]}})", 0, ErrorKind::kCorrupt, "unknown dtype 'X9'"},
      {R"({"a":{"dtype":"F6_E2M3","shape":[],"data_offsets":[0,0]}})", 0, ErrorKind::kUnsupported, "has no torch type"},
      {R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1, ErrorKind::kUnsupported, "even last dimension"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, ErrorKind::kCorrupt, "other than a size"},
      {R"({"a":{"dtype":"F32","shape":[1]}})", 0, ErrorKind::kCorrupt, "missing 'data_offsets'"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 0, ErrorKind::kCorrupt, "end before they begin"},
      {R"({"__metadata__":{"k":1}})", 0, ErrorKind::kCorrupt, "value of 'k' is a number, not a string"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
       8, ErrorKind::kCorrupt, "appears twice"},
      {"[]", 0, ErrorKind::kCorrupt, "not a JSON object"},
      {"{", 0, ErrorKind::kCorrupt, "invalid JSON"},
  };
  for (const Case& c : cases) {
    expect_error([&] { parse(file_with(c.json, c.data)); }, c.kind, c.text);
  }
  std::string huge;
  append_le<uint64_t>(huge, kMaxSafetensorsHeader + 1);
  expect_error([&] { parse(huge + "{}"); }, ErrorKind::kCorrupt, "exceeds the format's limit");
  std::string past;
  append_le<uint64_t>(past, 64);
  expect_error([&] { parse(past + "{}"); }, ErrorKind::kCorrupt, "runs past the end of the file");
}

TEST(SafetensorsHeader, OpensAsAnOrderedDictInHeaderOrder) {
  const std::string json = R"({"z":{"dtype":"I16","shape":[2],"data_offsets":[4,8]},"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})";
  const Checkpoint ck = Checkpoint::from_bytes(file_with(json, 8), "mem.safetensors");
  EXPECT_EQ(ck.format(), CheckpointFormat::kSafetensors);
  ASSERT_EQ(ck.state_dicts().size(), 1u);
  EXPECT_EQ(ck.state_dicts()[0].keys, (std::vector<std::string>{"z", "a"}));
  EXPECT_EQ(ck.tensors()[1].dtype, DType::kUInt16);
  EXPECT_TRUE(ck.storages()[1].untyped);  // torch 2.x saves uint16 as an UntypedStorage
}

}  // namespace
}  // namespace ckptfix
