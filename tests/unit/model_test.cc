// The checkpoint model: storages and tensors recognised from real torch
// files, state dicts and paths, and one test per model-level error.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "ckptfix/checkpoint.h"
#include "ckptfix/prefixes.h"
#include "ckptfix/save.h"
#include "model/torch_objects.h"
#include "pickle/pickler.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;
using test::PickleBytes;
using test::ZipBuilder;

Checkpoint open_fixture(const std::string& name) { return Checkpoint::open(test::fixture_path(name)); }

const TensorInfo& tensor_at(const Checkpoint& ck, const std::string& path) {
  for (const TensorPosition& p : ck.tensor_positions()) {
    if (path_to_string(p.path) == path) return ck.tensors()[p.tensor];
  }
  throw std::runtime_error("no tensor at " + path);
}

TEST(Model, ViewsAndTiedWeightsShareStorages) {
  Checkpoint ck = open_fixture("views_tied.pt");
  const TensorInfo& base = tensor_at(ck, "base");
  const TensorInfo& strided = tensor_at(ck, "strided");
  const TensorInfo& transposed = tensor_at(ck, "transposed");
  EXPECT_EQ(base.storage, strided.storage);
  EXPECT_EQ(base.storage, transposed.storage);
  EXPECT_EQ(strided.storage_offset, 4);
  EXPECT_EQ(strided.stride, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(transposed.stride, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(ck.storages()[static_cast<size_t>(base.storage)].nbytes, 48u);
}

TEST(Model, StateDictsAreFoundOutsideOptimizerStates) {
  Checkpoint ck = open_fixture("training.pt");
  std::vector<std::string> found;
  for (const StateDictInfo& sd : ck.state_dicts()) {
    if (!sd.in_optimizer) found.push_back(path_to_string(sd.path));
  }
  EXPECT_EQ(found, (std::vector<std::string>{"state_dict", "ema"}));
}

TEST(Model, WrapperPrefixesAreRecognisedInOrder) {
  Checkpoint ck = open_fixture("compiled_dataparallel.pt");
  const auto sds = ck.state_dicts();
  ASSERT_EQ(sds.size(), 1u);
  const auto& keys = sds[0].keys;
  EXPECT_EQ(shared_wrapper_prefix(keys), "_orig_mod.module.");
  const std::vector<std::string> not_wrapped = {"submodule.a", "submodule.b"};
  EXPECT_EQ(shared_wrapper_prefix(not_wrapped), "");
}

TEST(Model, ParametersAreOneTensorWithTheirFlag) {
  Checkpoint ck = open_fixture("nested_params.pt");
  const TensorInfo& p = tensor_at(ck, "dict/inner/p");
  EXPECT_TRUE(p.parameter);
  EXPECT_TRUE(tensor_at(ck, "list/1").requires_grad);
  EXPECT_FALSE(tensor_at(ck, "list/1").parameter);
}

TEST(Model, LegacyAndBigEndianFilesExposeLittleEndianBytes) {
  Checkpoint big = open_fixture("big_endian.pt");
  Checkpoint ref = open_fixture("big_endian_reference.pt");
  ASSERT_TRUE(big.big_endian());
  ASSERT_EQ(big.storages().size(), ref.storages().size());
  for (size_t i = 0; i < big.storages().size(); ++i) {
    std::string a(big.storages()[i].nbytes, '\0'), b(ref.storages()[i].nbytes, '\0');
    big.read_storage(i, 0, std::as_writable_bytes(std::span(a)));
    ref.read_storage(i, 0, std::as_writable_bytes(std::span(b)));
    EXPECT_EQ(a, b) << "storage " << i;
  }
  EXPECT_TRUE(big.map_storage(0).empty());  // needs swapping: no zero-copy view
  EXPECT_EQ(open_fixture("legacy_state_dict.pt").format(), CheckpointFormat::kLegacy);
}

std::string checkpoint_with(const std::string& pickle, const std::string& data0) {
  return ZipBuilder().add("data.pkl", pickle).add("data/0", data0).add("version", "3\n").finish();
}

TEST(Model, OpensAHandBuiltCheckpoint) {
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("FloatStorage", "0", 4, 0, {2, 2}, {2, 1}).raw("s.");
  Checkpoint ck = Checkpoint::from_bytes(checkpoint_with(p.str(), test::floats({1, 2, 3, 4})), "mem.pt");
  ASSERT_EQ(ck.tensors().size(), 1u);
  EXPECT_EQ(ck.tensors()[0].shape, (std::vector<int64_t>{2, 2}));
  ASSERT_FALSE(ck.map_storage(0).empty());
  EXPECT_EQ(ck.map_storage(0).size(), 16u);
}

// torch's numbered keys are found by number (model/torch_objects.h,
// storage_number); "01" and "x" are other keys, found by name, and a key
// met twice is one storage.
TEST(Model, StorageKeysNumberedOrNotFindTheirRecords) {
  EXPECT_EQ(storage_number("0", 1), 0u);
  EXPECT_EQ(storage_number("12", 13), 12u);
  EXPECT_EQ(storage_number("12", 12), std::nullopt);  // not below the bound
  for (const char* other : {"", "01", "00", "-1", "1x", "x", "1234567890"}) {
    EXPECT_EQ(storage_number(other, 1u << 31), std::nullopt) << other;
  }
  PickleBytes p;
  p.proto().raw("}(").unicode("a").tensor("FloatStorage", "1", 1, 0, {1}, {1});
  p.unicode("b").tensor("FloatStorage", "01", 1, 0, {1}, {1});
  p.unicode("c").tensor("FloatStorage", "x", 1, 0, {1}, {1});
  p.unicode("d").tensor("FloatStorage", "1", 1, 0, {1}, {1}).raw("u").stop();
  const std::string file = ZipBuilder()
                               .add("data.pkl", p.str())
                               .add("data/1", test::floats({1}))
                               .add("data/01", test::floats({2}))
                               .add("data/x", test::floats({3}))
                               .finish();
  Checkpoint ck = Checkpoint::from_bytes(file, "mem.pt");
  ASSERT_EQ(ck.storages().size(), 3u);
  EXPECT_EQ(ck.storages()[0].source.record, "archive/data/1");
  EXPECT_EQ(ck.storages()[1].source.record, "archive/data/01");
  EXPECT_EQ(ck.storages()[2].source.record, "archive/data/x");
  EXPECT_EQ(tensor_at(ck, "a").storage, tensor_at(ck, "d").storage);
}

TEST(Model, ErrorTensorViewPastTheEndOfItsStorage) {
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("FloatStorage", "0", 4, 1, {4}, {1}).raw("s.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(p.str(), test::floats({1, 2, 3, 4})), "mem.pt"); },
               ErrorKind::kCorrupt, "'mem.pt': key 'w': tensor view (offset 1, shape 1-d) needs element 4 but storage '0' has only 4 elements");
}

TEST(Model, ErrorRecordShorterThanItsStorage) {
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("FloatStorage", "0", 4, 0, {4}, {1}).raw("s.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(p.str(), test::floats({1, 2, 3})), "mem.pt"); },
               ErrorKind::kCorrupt, "archive/data/0: storage '0' needs 16 bytes (4 x float32) but its data has 12 bytes");
}

TEST(Model, ErrorMissingStorageRecord) {
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("FloatStorage", "7", 4, 0, {4}, {1}).raw("s.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(p.str(), ""), "mem.pt"); }, ErrorKind::kCorrupt,
               "storage '7' is used by the pickle but record 'archive/data/7' is missing");
}

TEST(Model, ErrorUnknownStorageClass) {
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("WeirdStorage", "0", 4, 0, {4}, {1}).raw("s.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(p.str(), "0123"), "mem.pt"); }, ErrorKind::kUnsupported,
               "unknown storage class 'torch.WeirdStorage'");
}

TEST(Model, PackedQuantizedViewsCountValues) {
  // quint2x4 packs four 2-bit values into a byte: 6 values need 2 bytes.
  PickleBytes p;
  p.proto().raw("}").unicode("w").tensor("QUInt2x4Storage", "0", 2, 0, {6}, {1}).raw("s.");
  Checkpoint ck = Checkpoint::from_bytes(checkpoint_with(p.str(), "ab"), "mem.pt");
  EXPECT_EQ(ck.tensors()[0].nbytes(), 2u);
  PickleBytes q;
  q.proto().raw("}").unicode("w").tensor("QUInt2x4Storage", "0", 2, 0, {9}, {1}).raw("s.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(q.str(), "ab"), "mem.pt"); }, ErrorKind::kCorrupt,
               "needs element 8 but storage '0' has only 8 elements");
}

TEST(DType, StorageClassesAsPythonAndLibTorchSpellThem) {
  EXPECT_EQ(storage_class_name(DType::kFloat32), "FloatStorage");
  // torch 2.x saves these as UntypedStorage + dtype: Python has no class for them.
  EXPECT_FALSE(storage_class_name(DType::kComplex32));
  EXPECT_FALSE(storage_class_name(DType::kFloat8E4M3Fn));
  EXPECT_FALSE(storage_class_name(DType::kBComplex32));
  // LibTorch's pickler spells every dtype <c10::ScalarType>Storage.
  EXPECT_EQ(libtorch_storage_class(DType::kComplex32), "ComplexHalfStorage");
  EXPECT_EQ(dtype_from_storage_class("ComplexHalfStorage"), DType::kComplex32);
  EXPECT_EQ(dtype_from_storage_class("Float8_e4m3fnStorage"), DType::kFloat8E4M3Fn);
  EXPECT_EQ(dtype_from_storage_class("HalfStorage"), DType::kFloat16);
  EXPECT_EQ(dtype_from_torch_attribute("bcomplex32"), DType::kBComplex32);
  EXPECT_EQ(packed_values(DType::kQUInt4x2), 2u);
  EXPECT_EQ(packed_values(DType::kFloat4E2M1FnX2), 1u);
}

TEST(Model, ErrorNoDataPickle) {
  const std::string bytes = ZipBuilder().add("version", "3\n").finish();
  expect_error([&] { Checkpoint::from_bytes(bytes, "mem.pt"); }, ErrorKind::kNotCheckpoint,
               "no record 'archive/data.pkl'");
}

TEST(Model, ErrorRecordsNotInASubdirectory) {
  MemorySink sink;
  ZipWriter zip(sink);
  zip.add("data.pkl", as_bytes("x"));
  zip.finish();
  expect_error([&] { Checkpoint::from_bytes(sink.bytes(), "mem.pt"); }, ErrorKind::kNotCheckpoint,
               "first record 'data.pkl' is not in a subdirectory");
}

TEST(Model, ErrorTorchScriptArchive) {
  const std::string bytes = ZipBuilder("m").add("data.pkl", "x").add("constants.pkl", "x").finish();
  expect_error([&] { Checkpoint::from_bytes(bytes, "mem.pt"); }, ErrorKind::kUnsupported,
               "this is a TorchScript archive (torch.jit.save)");
}

TEST(Model, ErrorBadByteOrderRecord) {
  const std::string bytes = ZipBuilder().add("data.pkl", "\x80\x02N.").add("byteorder", "middle").finish();
  expect_error([&] { Checkpoint::from_bytes(bytes, "mem.pt"); }, ErrorKind::kCorrupt,
               "archive/byteorder: byteorder record says 'middle'");
}

TEST(Model, ErrorNotACheckpoint) {
  expect_error([&] { Checkpoint::from_bytes("hello world", "notes.txt"); }, ErrorKind::kNotCheckpoint,
               "'notes.txt': not a PyTorch checkpoint: it starts with bytes 68 65 6c 6c 6f 20 77 6f");
  expect_error([&] { Checkpoint::from_bytes("", "empty.pt"); }, ErrorKind::kNotCheckpoint, "'empty.pt': file is empty");
}

TEST(Model, ErrorPlainPickleIsNotACheckpoint) {
  expect_error([&] { Checkpoint::from_bytes(PickleBytes().proto().int1(5).stop().str(), "p.pkl"); },
               ErrorKind::kNotCheckpoint, "legacy magic number is missing");
}

TEST(Model, ErrorDangerousGlobalInDataPickle) {
  PickleBytes p;
  p.proto().global("subprocess", "check_output").raw("(").unicode("id").raw("tR.");
  expect_error([&] { Checkpoint::from_bytes(checkpoint_with(p.str(), ""), "evil.pt"); }, ErrorKind::kUnsafe,
               "'evil.pt': archive/data.pkl+0x2: refusing to load: the pickle references the dangerous global 'subprocess.check_output'");
}

class ValuesAheadTest : public test::TempDirTest {};

TEST_F(ValuesAheadTest, ALargePickleOpensTheSameWithItsValuesMadeAheadOrNot) {
  // A data.pkl of more than 1 MiB, where opening makes its values' memory
  // on a second thread (OpenOptions::make_values_ahead): saved again, the
  // checkpoint is byte for byte the one opened without.
  ValueGraph source;
  Value* root = source.make(ValueKind::kDict);
  for (int i = 0; i < 60000; ++i) {
    root->entries().emplace_back(source.make_str("layers." + std::to_string(i) + ".scale"),
                                 source.make_tuple({source.make_int(i), source.make_str("cpu")}));
  }
  const std::string pickle = pickle_protocol2(root);
  ASSERT_GT(pickle.size(), size_t{1} << 20);
  const std::filesystem::path in = dir_ / "large.pt";
  {
    std::ofstream(in, std::ios::binary) << ZipBuilder().add("data.pkl", pickle).add("version", "3\n").finish();
  }
  std::string saved[2];
  for (const bool ahead : {true, false}) {
    OpenOptions options;
    options.make_values_ahead = ahead;
    const std::filesystem::path out = dir_ / (ahead ? "ahead.pt" : "plain.pt");
    save(Checkpoint::open(in, options), out);
    std::ifstream file(out, std::ios::binary);
    saved[ahead] = std::string(std::istreambuf_iterator<char>(file), {});
  }
  EXPECT_GT(saved[1].size(), pickle.size());
  EXPECT_EQ(saved[1], saved[0]);
}

}  // namespace
}  // namespace ckptfix
