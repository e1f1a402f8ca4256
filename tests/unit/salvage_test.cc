// salvage_checkpoint on fixtures torch wrote, cut at every byte and with a
// byte flipped at every place: it either refuses with a ckptfix::Error, or
// gives a checkpoint whose tensors are exactly those of the intact file that
// it reports recovered, with their bytes, and names every other tensor
// lost. (What torch makes of the salvaged files is judged in
// tests/interop/test_salvage.py.)
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "ckptfix/checkpoint.h"
#include "ckptfix/salvage.h"
#include "test_support.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

// Each tensor position's path -> the bytes of its storage.
std::map<std::string, std::string> tensor_bytes(const Checkpoint& ck) {
  std::map<std::string, std::string> out;
  for (const TensorPosition& p : ck.tensor_positions()) {
    const TensorInfo& t = ck.tensors()[p.tensor];
    const StorageInfo& s = ck.storages()[static_cast<size_t>(t.storage)];
    std::string bytes(s.nbytes, '\0');
    ck.read_storage(static_cast<size_t>(t.storage), 0,
                    std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()), bytes.size()));
    out[p.path.empty() ? "<root>" : path_to_string(p.path)] = bytes;
  }
  return out;
}

class SalvageTest : public test::TempDirTest {
 protected:
  fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::FILE* f = std::fopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return p;
  }

  // Every salvage of `damaged` is consistent with the intact checkpoint.
  void expect_consistent(const fs::path& damaged, const std::map<std::string, std::string>& intact,
                         const std::string& what, size_t& recovered_somewhere) {
    try {
      const Salvaged s = salvage_checkpoint(damaged);
      const auto got = tensor_bytes(s.checkpoint);
      std::set<std::string> named(s.report.recovered.begin(), s.report.recovered.end());
      for (const auto& [path, bytes] : got) {
        ASSERT_TRUE(intact.count(path)) << what << ": '" << path << "' is not a tensor of the intact file";
        EXPECT_EQ(bytes, intact.at(path)) << what << ": '" << path << "' differs from the intact file";
        EXPECT_TRUE(named.count(path)) << what << ": '" << path << "' kept but not reported recovered";
      }
      std::set<std::string> lost;
      for (const LostTensor& l : s.report.lost) {
        lost.insert(l.key);
        EXPECT_FALSE(l.reason.empty()) << what << ": '" << l.key << "' lost without a reason";
      }
      for (const auto& [path, bytes] : intact) {
        EXPECT_TRUE(got.count(path) || lost.count(path)) << what << ": '" << path << "' neither kept nor named lost";
      }
      recovered_somewhere += got.size();
    } catch (const Error&) {
      // Refused cleanly: nothing recoverable (or not recognisable at all).
    }
  }
};

TEST_F(SalvageTest, EveryCutOfTorchFiles) {
  for (const char* name : {"plain_state_dict.pt", "legacy_state_dict.pt", "torch2.14/plain_state_dict.pt",
                           "torch2.14/views_tied.pt"}) {
    const std::string path = test::fixture_path(name);
    const std::string data = test::read_file(path);
    const auto intact = tensor_bytes(Checkpoint::open(path));
    ASSERT_FALSE(intact.empty()) << name;
    size_t recovered = 0;
    for (size_t cut = 1; cut < data.size(); ++cut) {
      expect_consistent(write("cut.pt", data.substr(0, cut)), intact, std::string(name) + " cut at " + std::to_string(cut),
                        recovered);
    }
    EXPECT_GT(recovered, 0u) << name << ": no cut recovered anything";
    // Whole, everything comes back.
    const Salvaged whole = salvage_checkpoint(path);
    EXPECT_TRUE(whole.report.complete()) << name;
    EXPECT_EQ(whole.report.recovered.size(), intact.size()) << name;
  }
}

TEST_F(SalvageTest, EveryFlippedByteOfATorchZip) {
  // 0x04 turns a key's digit into another digit ('1' -> '5'): a damaged
  // record name that makes one storage's record pass for another's.
  for (const char* name : {"plain_state_dict.pt", "torch2.14/plain_state_dict.pt", "torch2.14/views_tied.pt"}) {
    const std::string path = test::fixture_path(name);
    const std::string data = test::read_file(path);
    const auto intact = tensor_bytes(Checkpoint::open(path));
    size_t recovered = 0;
    for (size_t at = 0; at < data.size(); ++at) {
      for (const int bit : {0x04, 0x80}) {
        std::string flipped = data;
        flipped[at] = static_cast<char>(flipped[at] ^ bit);
        expect_consistent(write("flipped.pt", flipped), intact,
                          std::string(name) + ": byte " + std::to_string(at) + " flipped", recovered);
      }
    }
    EXPECT_GT(recovered, 0u) << name;
  }
}

TEST_F(SalvageTest, CommittedDamagedFixtures) {
  // The directory cut off: every record is found from its local header.
  const Salvaged whole = salvage_checkpoint(test::fixture_path("truncated_central_dir.pt"));
  EXPECT_EQ(whole.report.found_by, "local headers");
  EXPECT_TRUE(whole.report.complete());
  // Half the file: what comes before the cut.
  const Salvaged half = salvage_checkpoint(test::fixture_path("truncated_half.pt"));
  EXPECT_FALSE(half.report.complete());
  EXPECT_FALSE(half.report.recovered.empty());
  for (const LostTensor& l : half.report.lost) EXPECT_NE(l.reason.find("cut at offset"), std::string::npos) << l.reason;
  const Salvaged legacy = salvage_checkpoint(test::fixture_path("legacy_truncated.pt"));
  EXPECT_EQ(legacy.report.found_by, "legacy storage section");
  EXPECT_FALSE(legacy.report.lost.empty());
  EXPECT_EQ(salvage_hint(test::fixture_path("truncated_half.pt")),
            "ckptfix salvage can recover " + std::to_string(half.report.recovered.size()) + " of " +
                std::to_string(half.report.recovered.size() + half.report.lost.size()) + " tensors");
  EXPECT_EQ(salvage_hint(test::fixture_path("not_a_checkpoint.txt")), "");
}

TEST_F(SalvageTest, CutInsideDataPklRecoversNothing) {
  const std::string data = test::read_file(test::fixture_path("plain_state_dict.pt"));
  test::expect_error([&] { salvage_checkpoint(write("cut.pt", data.substr(0, 200))); }, ErrorKind::kCorrupt,
                     "nothing can be recovered");
}

}  // namespace
}  // namespace ckptfix
