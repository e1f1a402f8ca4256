// ckptfix layout FILE [--key PATH] [--stage DIR]: where the bytes of every
// tensor of one state dict are, as JSON, so that a program maps them itself
// and nothing is unpickled (the Python package's ckptfix.load, docs/python.md).
// Entries that are one tensor in the pickle (tied weights pickled once and
// referenced twice) have the same "tensor" number, so that a loader can
// give them as one object, as torch.load does.
//
// A storage whose bytes lie in a file as they are (stored, little-endian,
// at an offset its element size divides) is given as that file and offset;
// any other (deflated, big-endian, a numpy array's text, assembled from a
// distributed checkpoint's chunks, misaligned) is read, converted to
// little-endian, and written into DIR/storages.bin, each at a multiple of
// 64 bytes, which the document then names instead (--stage; without it
// such a storage is an error).
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct LayoutArgs {
  std::string input;
  std::string key;
  std::string stage;
  std::vector<std::string> limits;
};

constexpr uint64_t kStageAlignment = 64;

// Storages that are not mappable where they lie, written one after another.
class Stage {
 public:
  explicit Stage(const std::string& dir) : path_(dir.empty() ? "" : dir + "/storages.bin") {}

  /// Writes storage `index`'s bytes; returns their offset in the stage file.
  uint64_t add(const Checkpoint& ck, size_t index) {
    const StorageInfo& s = ck.storages()[index];
    if (path_.empty()) {
      throw Error(ErrorKind::kUnsupported, "storage '" + s.key +
                                               "' cannot be mapped where it lies (it is not stored little-endian "
                                               "and aligned in one file); give `stage` to have it copied");
    }
    if (!out_.is_open()) {
      out_.open(path_, std::ios::binary | std::ios::trunc);
      if (!out_) throw Error(ErrorKind::kIo, "cannot create '" + path_ + "'");
    }
    const uint64_t offset = (size_ + kStageAlignment - 1) / kStageAlignment * kStageAlignment;
    buffer_.assign(offset - size_, std::byte{0});
    write(buffer_.data(), buffer_.size());
    constexpr uint64_t kChunk = uint64_t{8} << 20;  // memory stays flat whatever the storage's size
    for (uint64_t done = 0; done < s.nbytes; done += kChunk) {
      buffer_.resize(static_cast<size_t>(std::min(kChunk, s.nbytes - done)));
      ck.read_storage(index, done, buffer_);
      write(buffer_.data(), buffer_.size());
    }
    return offset;
  }

  const std::string& path() const { return path_; }

  void finish() {
    if (!out_.is_open()) return;
    out_.close();
    if (!out_) throw Error(ErrorKind::kIo, "writing '" + path_ + "' failed");
  }

 private:
  void write(const std::byte* p, size_t n) {
    out_.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
    if (!out_) throw Error(ErrorKind::kIo, "writing '" + path_ + "' failed");
    size_ += n;
  }

  std::string path_;
  std::ofstream out_;
  uint64_t size_ = 0;
  std::vector<std::byte> buffer_;
};

// Where storage `index` can be mapped as it is: its file, or empty. Its
// offset must suit any element type a tensor may view it as (an untyped
// storage holds bytes): a zip's records are 64-aligned, a legacy file's
// storages lie wherever they fall.
std::string mappable_file(const Checkpoint& ck, size_t index) {
  const StorageInfo& s = ck.storages()[index];
  if (s.source.encoding != StorageSource::Encoding::kStored || s.big_endian) return "";
  if (s.source.offset % 8 != 0) return "";
  return ck.storage_file(index);
}

int run(const LayoutArgs& args) {
  try {
    const Checkpoint ck = Checkpoint::open(args.input, open_options(args.limits));
    const std::vector<StateDictEntry> entries = select_state_dict(ck, args.key);
    Stage stage(args.stage);
    nlohmann::json tensors = nlohmann::json::array();
    nlohmann::json storages = nlohmann::json::array();
    std::map<int32_t, size_t> position;  // storage index -> its place in `storages`
    for (const StateDictEntry& e : entries) {
      const TensorInfo& t = ck.tensors()[e.tensor];
      if (t.kind != TensorKind::kDense) {
        throw Error(ErrorKind::kUnsupported, "key '" + e.key + "' holds a quantized tensor, which is not loaded");
      }
      auto [it, added] = position.emplace(t.storage, storages.size());
      if (added) {
        const size_t index = static_cast<size_t>(t.storage);
        const StorageInfo& s = ck.storages()[index];
        std::string file = mappable_file(ck, index);
        const bool staged = file.empty();
        const uint64_t offset = staged ? stage.add(ck, index) : s.source.offset;
        storages.push_back({{"key", s.key},
                            {"dtype", dtype_name(s.dtype)},
                            {"nbytes", s.nbytes},
                            {"location", s.location},
                            {"file", staged ? stage.path() : file},
                            {"offset", offset},
                            {"staged", staged}});
      }
      tensors.push_back({{"key", e.key},
                         {"tensor", e.tensor},
                         {"storage", it->second},
                         {"dtype", dtype_name(t.dtype)},
                         {"shape", t.shape},
                         {"stride", t.stride},
                         {"storage_offset", t.storage_offset},
                         {"requires_grad", t.requires_grad},
                         {"parameter", t.parameter}});
    }
    stage.finish();
    const nlohmann::json doc = {{"ckptfix", version()}, {"schema", 1},          {"command", "layout"},
                                {"path", args.input},   {"tensors", tensors}, {"storages", storages}};
    std::cout << json_text(doc) << std::endl;
    return kExitOk;
  } catch (Error& e) {
    e.in_file(args.input);
    print_error(e);
    return exit_code_for(e);
  }
}

}  // namespace

CommandRun register_layout(CLI::App& app) {
  auto args = std::make_shared<LayoutArgs>();
  CLI::App* cmd = app.add_subcommand(
      "layout", "For programs: where each tensor of a state dict lies in the file(s), as JSON (docs/python.md)");
  cmd->add_option("FILE", args->input, "Checkpoint")->required();
  cmd->add_option("--key", args->key,
                  "The state dict at this '/'-separated path (default: the root, or the only state dict)");
  cmd->add_option("--stage", args->stage,
                  "Directory to copy storages that cannot be mapped where they lie into (DIR/storages.bin)");
  add_limit_option(cmd, args->limits);
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli
