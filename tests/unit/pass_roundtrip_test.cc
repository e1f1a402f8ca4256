// Every pass of include/ckptfix/passes.h, end to end through the library:
// build a checkpoint in memory (builder.h) from bytes the test owns, apply
// the pass, save it (save.h, verified), open the file again, and compare
// with what the test computes on its own: keys in order, dtypes, shapes,
// strides, offsets, locations, which tensors share a storage, and the
// bytes. Casts are checked against known bit patterns (float32 1.0f is
// float16 0x3C00 and bfloat16 0x3F80). Torch judges the same passes on real
// files in tests/interop/test_passes.py and test_casts.py; this test pins
// the library's own contract, with only the public, stable API: builder,
// passes, save, Checkpoint::open, select_state_dict, the const tensor and
// storage tables and read_storage.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/builder.h"
#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "ckptfix/save.h"
#include "ckptfix/state_dict.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

template <typename T>
Bytes bytes_of(const std::vector<T>& values) {
  Bytes out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

Bytes u16_bytes(const std::vector<uint16_t>& bits) { return bytes_of(bits); }

// A storage the test owns: its bytes stay alive until the checkpoint is saved.
struct OwnedStorage {
  Bytes bytes;
  DType dtype;
  std::string location = "cpu";
};

std::vector<StorageSpec> specs_of(const std::vector<OwnedStorage>& storages) {
  std::vector<StorageSpec> specs;
  for (const OwnedStorage& s : storages) specs.push_back({s.bytes.data(), s.bytes.size(), s.dtype, s.location});
  return specs;
}

// What a tensor of the output must be. `storage` names an ExpectedStorage:
// tensors with the same name must share one storage of the output, tensors
// with different names must not.
struct ExpectedTensor {
  std::string key;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  int64_t storage_offset = 0;
  std::string storage;
  bool requires_grad = false;
};

struct ExpectedStorage {
  DType dtype;
  std::string location;
  Bytes bytes;
};

// A directory under the system's temporary directory, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "ckptfix-pass-roundtrip-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Saves `checkpoint` (verified) and opens the file written.
Checkpoint save_and_open(const Checkpoint& checkpoint, const TempDir& dir, bool libtorch_pickle = false) {
  const fs::path path = dir / "out.pt";
  SaveOptions options;
  options.libtorch_pickle = libtorch_pickle;
  const SaveResult saved = save(checkpoint, path, options);
  EXPECT_TRUE(saved.verification.has_value());
  Checkpoint reopened = Checkpoint::open(path);
  EXPECT_EQ(reopened.file_size(), saved.bytes);
  EXPECT_EQ(reopened.file_size(), fs::file_size(path));
  return reopened;
}

Bytes read_all(const Checkpoint& checkpoint, size_t storage) {
  Bytes out(checkpoint.storages()[storage].nbytes);
  checkpoint.read_storage(storage, 0, out);
  return out;
}

std::string hex(const Bytes& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += digits[static_cast<unsigned>(b) >> 4];
    out += digits[static_cast<unsigned>(b) & 15];
  }
  return out;
}

// Compares one tensor of the output (and its storage) with what is expected;
// `placed` records which output storage each expected storage became.
void expect_tensor(const Checkpoint& out, size_t index, const ExpectedTensor& want,
                   const std::map<std::string, ExpectedStorage>& storages, std::map<std::string, size_t>& placed) {
  SCOPED_TRACE("tensor '" + want.key + "'");
  ASSERT_LT(index, out.tensors().size());
  const TensorInfo& t = out.tensors()[index];
  EXPECT_EQ(dtype_name(t.dtype), dtype_name(want.dtype));
  EXPECT_EQ(t.shape, want.shape);
  EXPECT_EQ(t.stride, want.stride);
  EXPECT_EQ(t.storage_offset, want.storage_offset);
  EXPECT_EQ(t.requires_grad, want.requires_grad);
  ASSERT_GE(t.storage, 0);
  const size_t s = static_cast<size_t>(t.storage);
  ASSERT_LT(s, out.storages().size());

  auto [it, first] = placed.emplace(want.storage, s);
  EXPECT_EQ(it->second, s) << "tensors of storage '" << want.storage << "' do not share one storage any more";
  if (!first) return;
  for (const auto& [name, other] : placed) {
    if (name != want.storage) {
      EXPECT_NE(other, s) << "storages '" << name << "' and '" << want.storage << "' merged";
    }
  }
  const ExpectedStorage& ws = storages.at(want.storage);
  const StorageInfo& got = out.storages()[s];
  EXPECT_EQ(dtype_name(got.dtype), dtype_name(ws.dtype)) << "storage '" << want.storage << "'";
  EXPECT_EQ(got.location, ws.location) << "storage '" << want.storage << "'";
  EXPECT_EQ(got.nbytes, ws.bytes.size()) << "storage '" << want.storage << "'";
  EXPECT_EQ(got.numel, ws.bytes.size() / element_size(ws.dtype)) << "storage '" << want.storage << "'";
  EXPECT_EQ(hex(read_all(out, s)), hex(ws.bytes)) << "bytes of storage '" << want.storage << "'";
}

// The output's state dict is exactly `tensors`, in order, over exactly `storages`.
void expect_state_dict(const Checkpoint& out, const std::vector<ExpectedTensor>& tensors,
                       const std::map<std::string, ExpectedStorage>& storages) {
  const std::vector<StateDictEntry> entries = select_state_dict(out);
  std::vector<std::string> keys, want_keys;
  for (const StateDictEntry& e : entries) keys.push_back(e.key);
  for (const ExpectedTensor& t : tensors) want_keys.push_back(t.key);
  ASSERT_EQ(keys, want_keys);
  EXPECT_EQ(out.tensors().size(), tensors.size());
  EXPECT_EQ(out.storages().size(), storages.size()) << "storages written";
  std::map<std::string, size_t> placed;
  for (size_t i = 0; i < entries.size(); ++i) expect_tensor(out, entries[i].tensor, tensors[i], storages, placed);
}

// -- the inputs -------------------------------------------------------------

// float32 values with known float16 and bfloat16 bit patterns (exact in both,
// or rounding the same way in both): 1, -2, 0.5, 0.
const std::vector<float> kFloats = {1.0f, -2.0f, 0.5f, 0.0f};
const std::vector<uint16_t> kFloatsAsHalf = {0x3C00, 0xC000, 0x3800, 0x0000};
const std::vector<uint16_t> kFloatsAsBFloat16 = {0x3F80, 0xC000, 0x3F00, 0x0000};

// A small model: a 2x3 weight and its transpose view (one storage, shared),
// a bias at offset 1 of a longer storage, an int64 counter, a float64 and a
// float16 buffer, on a few devices, one tensor requiring grad.
struct Model {
  std::vector<OwnedStorage> storages;
  std::vector<TensorSpec> tensors;

  Model() {
    storages.push_back({bytes_of<float>({1, 2, 3, 4, 5, 6}), DType::kFloat32, "cuda:0"});   // 0: weight
    storages.push_back({bytes_of<float>({9, 1.0f, -2.0f, 0.5f}), DType::kFloat32, "cpu"});  // 1: bias at offset 1
    storages.push_back({bytes_of<int64_t>({42}), DType::kInt64, "cuda:1"});                 // 2: counter
    storages.push_back({bytes_of<double>({1.0, -2.0}), DType::kFloat64, "cpu"});            // 3: float64
    storages.push_back({u16_bytes({0x3C00, 0x4000}), DType::kFloat16, "cuda:1"});           // 4: float16
  }

  Checkpoint build(const std::vector<std::string>& keys) {
    tensors = {
        {keys[0], 0, 0, {2, 3}, {3, 1}, true},
        {keys[1], 0, 0, {3, 2}, {1, 3}, false},
        {keys[2], 1, 1, {3}, {1}, false},
        {keys[3], 2, 0, {}, {}, false},
        {keys[4], 3, 0, {2}, {1}, false},
        {keys[5], 4, 0, {2}, {1}, false},
    };
    return make_state_dict_checkpoint(specs_of(storages), tensors);
  }

  // The expectation for an unchanged model under `keys`.
  std::vector<ExpectedTensor> expected_tensors(const std::vector<std::string>& keys) const {
    return {
        {keys[0], DType::kFloat32, {2, 3}, {3, 1}, 0, "weight", true},
        {keys[1], DType::kFloat32, {3, 2}, {1, 3}, 0, "weight", false},
        {keys[2], DType::kFloat32, {3}, {1}, 1, "bias", false},
        {keys[3], DType::kInt64, {}, {}, 0, "counter", false},
        {keys[4], DType::kFloat64, {2}, {1}, 0, "double", false},
        {keys[5], DType::kFloat16, {2}, {1}, 0, "half", false},
    };
  }
  std::map<std::string, ExpectedStorage> expected_storages() const {
    return {{"weight", {DType::kFloat32, "cuda:0", storages[0].bytes}},
            {"bias", {DType::kFloat32, "cpu", storages[1].bytes}},
            {"counter", {DType::kInt64, "cuda:1", storages[2].bytes}},
            {"double", {DType::kFloat64, "cpu", storages[3].bytes}},
            {"half", {DType::kFloat16, "cuda:1", storages[4].bytes}}};
  }
};

const std::vector<std::string> kKeys = {"fc.weight", "fc.weight_t", "fc.bias", "bn.num_batches_tracked",
                                        "ema.double", "ema.half"};

std::vector<std::string> with_prefix(const std::string& prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const std::string& k : keys) out.push_back(prefix + k);
  return out;
}

// -- the passes -------------------------------------------------------------

TEST(PassRoundTrip, NoPassWritesTheSameStateDict) {
  Model model;
  Checkpoint checkpoint = model.build(kKeys);
  const PassReport report = apply_passes(checkpoint, {});
  EXPECT_FALSE(report.changed());
  TempDir dir;
  const Checkpoint out = save_and_open(checkpoint, dir);
  expect_state_dict(out, model.expected_tensors(kKeys), model.expected_storages());
}

TEST(PassRoundTrip, ExtractKeepsOneTensorAndDropsTheOtherStorages) {
  Model model;
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.extract = "fc.bias";
  const PassReport report = apply_passes(checkpoint, options);
  ASSERT_TRUE(report.extracted.has_value());
  EXPECT_EQ(*report.extracted, "fc.bias");
  TempDir dir;
  const Checkpoint out = save_and_open(checkpoint, dir);
  // The root is the tensor itself: there is no state dict any more.
  EXPECT_THROW(select_state_dict(out), Error);
  ASSERT_EQ(out.tensors().size(), 1u);
  ASSERT_EQ(out.storages().size(), 1u);
  const TensorInfo& t = out.tensors()[0];
  EXPECT_EQ(t.dtype, DType::kFloat32);
  EXPECT_EQ(t.shape, std::vector<int64_t>{3});
  EXPECT_EQ(t.stride, std::vector<int64_t>{1});
  EXPECT_EQ(t.storage_offset, 1);
  EXPECT_EQ(t.storage, 0);
  EXPECT_EQ(out.storages()[0].location, "cpu");
  EXPECT_EQ(out.storages()[0].numel, 4u);
  EXPECT_EQ(hex(read_all(out, 0)), hex(model.storages[1].bytes));
}

TEST(PassRoundTrip, StripPrefixesRenamesOnlyTheKeysThatHaveThem) {
  Model model;
  std::vector<std::string> in = with_prefix("module.", kKeys);
  in[3] = "bn.num_batches_tracked";  // without the prefix: left alone
  Checkpoint checkpoint = model.build(in);
  PassOptions options;
  options.strip_prefixes = {"module."};
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.renames.size(), 5u);
  // As torch's consume_prefix_in_state_dict_if_present (pop, then insert):
  // the renamed keys go last, in their order; the others come first.
  std::vector<ExpectedTensor> tensors = model.expected_tensors(kKeys);
  const ExpectedTensor unprefixed = tensors[3];
  tensors.erase(tensors.begin() + 3);
  tensors.insert(tensors.begin(), unprefixed);
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), tensors, model.expected_storages());
}

TEST(PassRoundTrip, AutoStripRemovesEveryWrapperPrefixAllKeysShare) {
  Model model;
  Checkpoint checkpoint = model.build(with_prefix("module._orig_mod.", kKeys));
  PassOptions options;
  options.auto_strip = true;
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.auto_stripped, std::vector<std::string>{"<root>: module._orig_mod."});
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), model.expected_tensors(kKeys), model.expected_storages());
}

TEST(PassRoundTrip, AddPrefixSkipsKeysThatAlreadyHaveIt) {
  Model model;
  std::vector<std::string> in = kKeys;
  in[2] = "module.fc.bias";
  Checkpoint checkpoint = model.build(in);
  PassOptions options;
  options.add_prefix = "module.";
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.renames.size(), 5u);
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), model.expected_tensors(with_prefix("module.", kKeys)),
                    model.expected_storages());
}

TEST(PassRoundTrip, ToDeviceRetagsEveryStorage) {
  Model model;
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.to_device = "cpu";
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.storages_retagged, 3u);  // cuda:0 once, cuda:1 twice; the cpu ones stay
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  for (auto& [name, s] : storages) s.location = "cpu";
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), model.expected_tensors(kKeys), storages);
}

TEST(PassRoundTrip, DeviceMapRetagsOnlyMatchingLocations) {
  Model model;
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.device_map = {{"cuda:1", "cuda:0"}};
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.storages_retagged, 2u);
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  storages.at("counter").location = "cuda:0";
  storages.at("half").location = "cuda:0";
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), model.expected_tensors(kKeys), storages);
}

TEST(PassRoundTrip, CastToFloat16ConvertsEveryFloatStorageToKnownBits) {
  Model model;
  // The weight storage holds exactly representable values with known bits.
  model.storages[0].bytes = bytes_of<float>({1.0f, -2.0f, 0.5f, 0.0f, 65504.0f, 1.0e6f});
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.cast_to = DType::kFloat16;
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.storages_cast, 3u);  // weight, bias, double; the half one already is
  EXPECT_EQ(report.tensors_cast, 4u);
  std::vector<ExpectedTensor> tensors = model.expected_tensors(kKeys);
  for (ExpectedTensor& t : tensors) {
    if (t.dtype == DType::kFloat32 || t.dtype == DType::kFloat64) t.dtype = DType::kFloat16;
  }
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  // 65504 is float16's largest finite value; 1e6 overflows to +inf (0x7C00).
  storages.at("weight") = {DType::kFloat16, "cuda:0", u16_bytes({0x3C00, 0xC000, 0x3800, 0x0000, 0x7BFF, 0x7C00})};
  storages.at("bias") = {DType::kFloat16, "cpu", u16_bytes({0x4880, 0x3C00, 0xC000, 0x3800})};  // 9 = 0x4880
  storages.at("double") = {DType::kFloat16, "cpu", u16_bytes({0x3C00, 0xC000})};
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), tensors, storages);
}

TEST(PassRoundTrip, CastToBFloat16OnlyFromFloat32AndKeepsGlobMatches) {
  Model model;
  model.storages[0].bytes = bytes_of<float>({1.0f, -2.0f, 0.5f, 0.0f, 1.0f, 1.0f});
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.cast_to = DType::kBFloat16;
  options.cast_from = {DType::kFloat32};  // the float64 and float16 buffers stay
  options.keep = {"*.bias"};              // and so does fc.bias
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_EQ(report.storages_cast, 1u);
  EXPECT_EQ(report.tensors_cast, 2u);
  EXPECT_EQ(report.tensors_kept, 1u);
  std::vector<ExpectedTensor> tensors = model.expected_tensors(kKeys);
  tensors[0].dtype = tensors[1].dtype = DType::kBFloat16;
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  storages.at("weight") = {DType::kBFloat16, "cuda:0", u16_bytes({0x3F80, 0xC000, 0x3F00, 0x0000, 0x3F80, 0x3F80})};
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), tensors, storages);
}

TEST(PassRoundTrip, CastKnownBitPatterns) {
  // One storage per target, the same float32 input.
  for (const auto& [target, bits] : std::vector<std::pair<DType, std::vector<uint16_t>>>{
           {DType::kFloat16, kFloatsAsHalf}, {DType::kBFloat16, kFloatsAsBFloat16}}) {
    SCOPED_TRACE(std::string(dtype_name(target)));
    const Bytes input = bytes_of(kFloats);
    Checkpoint checkpoint =
        make_state_dict_checkpoint({{input.data(), input.size(), DType::kFloat32, "cpu"}}, {{"w", 0, 0, {4}, {1}, false}});
    PassOptions options;
    options.cast_to = target;
    apply_passes(checkpoint, options);
    TempDir dir;
    expect_state_dict(save_and_open(checkpoint, dir), {{"w", target, {4}, {1}, 0, "w"}},
                      {{"w", {target, "cpu", u16_bytes(bits)}}});
  }
}

TEST(PassRoundTrip, ForLibTorchWritesAPlainDictOnTheCpu) {
  Model model;
  Checkpoint checkpoint = model.build(kKeys);
  PassOptions options;
  options.for_libtorch = true;
  const PassReport report = apply_passes(checkpoint, options);
  EXPECT_TRUE(report.for_libtorch);
  EXPECT_EQ(report.storages_retagged, 3u);
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  for (auto& [name, s] : storages) s.location = "cpu";
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir, /*libtorch_pickle=*/true), model.expected_tensors(kKeys), storages);
}

TEST(PassRoundTrip, AllPassesInTheirOrder) {
  // strip, then add, then remap, then cast with --keep matching the new names.
  Model model;
  Checkpoint checkpoint = model.build(with_prefix("module.", kKeys));
  PassOptions options;
  options.strip_prefixes = {"module."};
  options.add_prefix = "model.";
  options.device_map = {{"cuda:0", "cpu"}};
  options.cast_to = DType::kFloat16;
  options.keep = {"model.ema.*"};
  apply_passes(checkpoint, options);
  std::vector<ExpectedTensor> tensors = model.expected_tensors(with_prefix("model.", kKeys));
  tensors[0].dtype = tensors[1].dtype = tensors[2].dtype = DType::kFloat16;
  std::map<std::string, ExpectedStorage> storages = model.expected_storages();
  // 1..6 and 9, 1, -2, 0.5 as float16.
  storages.at("weight") = {DType::kFloat16, "cpu", u16_bytes({0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600})};
  storages.at("bias") = {DType::kFloat16, "cpu", u16_bytes({0x4880, 0x3C00, 0xC000, 0x3800})};
  TempDir dir;
  expect_state_dict(save_and_open(checkpoint, dir), tensors, storages);
}

}  // namespace
}  // namespace ckptfix
