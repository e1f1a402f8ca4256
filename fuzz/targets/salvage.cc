// The salvage readers (include/ckptfix/salvage.h) on damaged files: the
// fuzz input is written to a scratch file (salvage reads a path) and
// salvaged. Invariants beyond "no crash, no hang, only ckptfix::Error": every
// storage salvage keeps reads back whole (it was checked complete and, in a
// zip, against its CRC-32), and the salvaged checkpoint, saved, verifies:
// salvage never hands on bytes it did not check.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptfix/salvage.h"
#include "ckptfix/save.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {
namespace {

namespace fs = std::filesystem;

// This process's scratch directory (in memory where /dev/shm is there).
const fs::path& scratch() {
  static const fs::path dir = [] {
    const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : fs::temp_directory_path().string();
    std::string templ = base + "/ckptfix-fuzz-salvage-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) std::abort();
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(scratch(), ec);
    });
    return fs::path(templ);
  }();
  return dir;
}

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "salvage invariant broken: %s\n", what.c_str());
  std::abort();
}

}  // namespace

void salvage(const uint8_t* data, size_t size) {
  const fs::path in = scratch() / "damaged.pt";
  const fs::path out = scratch() / "salvaged.pt";
  {
    std::FILE* f = std::fopen(in.c_str(), "wb");
    if (f == nullptr || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) std::abort();
  }
  std::error_code ec;
  fs::remove(out, ec);
  expect_clean([&] {
    Salvaged salvaged = salvage_checkpoint(in);
    const Checkpoint& ck = salvaged.checkpoint;
    (void)ck.tensor_positions();
    std::vector<std::byte> chunk(size_t{1} << 16);
    for (size_t i = 0; i < ck.storages().size(); ++i) {
      const uint64_t n = std::min<uint64_t>(ck.storages()[i].nbytes, chunk.size());
      try {
        ck.read_storage(i, 0, std::span<std::byte>(chunk.data(), n));
      } catch (const Error& e) {
        broken("a kept storage does not read back: " + std::string(e.what()));
      }
    }
    SaveOptions options;
    options.overwrite = true;
    options.verify_options.gpu = GpuMode::kOff;
    try {
      (void)save(ck, out, options);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::kVerification) broken("the salvaged checkpoint does not verify: " + std::string(e.what()));
    }
  });
}

}  // namespace ckptfix::fuzz
