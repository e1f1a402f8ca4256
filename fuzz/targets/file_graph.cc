// Inputs that name other files, fuzzed together with the files they name:
// the fuzz input is a small directory (fuzz/targets/targets.h: file_graph's
// layout), written into a scratch directory and opened with every reader:
// the directory itself (a distributed checkpoint when it holds .metadata)
// and each of its entries by name (an index, a .metadata, a shard, a link, a
// FIFO). Each checkpoint that opens is then walked, read and verified as
// inspect and verify do. Invariants: no crash or hang (a FIFO opened for
// reading would block forever, a cycle of indexes would recurse without
// end), and nothing outside the scratch directory is opened (names are
// sanitised here, and the readers refuse paths).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/verify.h"
#include "targets/fuzz_support.h"
#include "targets/targets.h"

namespace ckptfix::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxEntries = 8;

enum class EntryKind : uint8_t { kFile, kSymlink, kHardLink, kFifo, kDirectory, kCount };

// A name made safe to create in the scratch directory: the characters of
// file names checkpoints use, never "." or "..", never empty.
std::string sanitised(std::string name) {
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) c = '_';
  }
  if (name.empty() || name == "." || name == "..") name = "_" + name;
  return name;
}

// The scratch directory of this process, emptied before each input (in
// memory where /dev/shm is there: many inputs a second) and removed when the
// process ends.
class Scratch {
 public:
  Scratch() {
    const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : fs::temp_directory_path().string();
    std::string templ = base + "/ckptfix-fuzz-graph-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) std::abort();
    dir_ = templ;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

const fs::path& scratch() {
  static const Scratch scratch;
  return scratch.dir();
}

void empty_scratch() {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(scratch(), ec)) fs::remove_all(e.path(), ec);
}

struct Reader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool done() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(byte()) << (8 * i);
    return v;
  }
  std::string bytes(size_t n) {
    n = std::min(n, size - std::min(size, at));
    std::string out(reinterpret_cast<const char*>(data + at), n);
    at += n;
    return out;
  }
};

// Writes the entries the input describes; returns their names.
std::vector<std::string> build_directory(const uint8_t* data, size_t size) {
  Reader in{data, size};
  std::vector<std::string> names;
  while (!in.done() && names.size() < kMaxEntries) {
    const auto kind = static_cast<EntryKind>(in.byte() % static_cast<uint8_t>(EntryKind::kCount));
    const std::string name = sanitised(in.bytes(in.byte()));
    const std::string content = in.bytes(in.u32());
    const fs::path path = scratch() / name;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(path, ec))) continue;  // a name given twice: the first wins
    switch (kind) {
      case EntryKind::kFile: {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) continue;
        const bool written = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
        ::close(fd);
        if (!written) std::abort();
        break;
      }
      case EntryKind::kSymlink: fs::create_symlink(sanitised(content), path, ec); break;  // may dangle
      case EntryKind::kHardLink: fs::create_hard_link(scratch() / sanitised(content), path, ec); break;
      case EntryKind::kFifo: ::mkfifo(path.c_str(), 0600); break;
      case EntryKind::kDirectory: fs::create_directory(path, ec); break;
      case EntryKind::kCount: break;
    }
    names.push_back(name);
  }
  return names;
}

// What inspect and verify do with an opened checkpoint.
void use(const fs::path& path) {
  OpenOptions open;
  open.limits.max_pickle_values = 1 << 20;
  expect_clean([&] {
    Checkpoint ck = Checkpoint::open(path, open);
    (void)ck.tensor_positions();
    (void)ck.state_dicts();
    (void)ck.reachable_globals();
    std::vector<std::byte> chunk(4096);
    for (size_t i = 0; i < ck.storages().size(); ++i) {
      const StorageInfo& s = ck.storages()[i];
      const uint64_t unit = std::max<uint64_t>(1, element_size(s.dtype));
      const uint64_t end = std::min<uint64_t>(s.nbytes, uint64_t{1} << 16) / unit * unit;
      for (uint64_t at = 0; at < end;) {
        const uint64_t n = std::min<uint64_t>(end - at, chunk.size() / unit * unit);
        ck.read_storage(i, at, std::span<std::byte>(chunk.data(), n));
        at += n;
      }
    }
  });
  expect_clean([&] {
    VerifyOptions verify;
    verify.gpu = GpuMode::kOff;
    verify.open = open;
    (void)verify_file(path, verify);
  });
}

}  // namespace

void file_graph(const uint8_t* data, size_t size) {
  empty_scratch();
  const std::vector<std::string> names = build_directory(data, size);
  use(scratch());
  for (const std::string& name : names) use(scratch() / name);
  empty_scratch();
}

}  // namespace ckptfix::fuzz
