// ckptfix layout FILE [--key PATH] [--stage DIR] [--like REF ...]: what one state dict holds
// and where the bytes of its tensors are, as JSON, so that a program maps
// them itself and nothing is unpickled (the Python package's ckptfix.load,
// docs/python.md). Each entry is a tensor, a sparse tensor (made of tensors)
// or a module's extra state as plain data (which may hold tensors); the
// tensors are listed once each, so that entries that are one tensor in the
// pickle (tied weights pickled once and referenced twice) name the same one,
// and a loader gives them as one object, as torch.load does.
//
// A storage whose bytes lie in a file as they are (stored, little-endian,
// at an offset its element size divides) is given as that file and offset;
// any other (deflated, big-endian, a numpy array's text, assembled from a
// distributed checkpoint's chunks, misaligned) is read, converted to
// little-endian, and written into DIR/storages.bin, each at a multiple of
// 64 bytes, which the document then names instead (--stage; without it
// such a storage is an error).
//
// With --like, the state dict is first fitted to the model (fit.h; the
// options of fix --like), so that ckptfix.load(path, like=model) gives
// what the model's load_state_dict takes.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "ckptfix/save.h"
#include "ckptfix/state_dict.h"
#include "ckptfix/passes.h"
#include "cli/commands.h"
#include "cli/like_options.h"
#include "cli/json_report.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct LayoutArgs {
  std::string input;
  std::string key;
  std::string stage;
  LikeArgs like;
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

// The tensors and storages of the document, each once.
class Tensors {
 public:
  Tensors(const Checkpoint& ck, Stage& stage) : ck_(ck), stage_(stage) {}

  /// The index in "tensors" of checkpoint tensor `index`, added with its storage the first time.
  size_t add(size_t index) {
    auto [it, added] = tensor_position_.emplace(index, tensors_.size());
    if (!added) return it->second;
    const TensorInfo& t = ck_.tensors()[index];
    if (t.kind == TensorKind::kQuantized) throw Error(ErrorKind::kUnsupported, "holds a quantized tensor, which is not loaded");
    if (t.kind == TensorKind::kMeta) {  // no bytes: torch.empty_strided on the meta device
      tensors_.push_back({{"tensor", index},
                          {"meta", true},
                          {"dtype", dtype_name(t.dtype)},
                          {"shape", t.shape},
                          {"stride", t.stride},
                          {"storage_offset", t.storage_offset},
                          {"requires_grad", t.requires_grad},
                          {"parameter", t.parameter}});
      return it->second;
    }
    auto [s, fresh] = storage_position_.emplace(t.storage, storages_.size());
    if (fresh) {
      const size_t storage = static_cast<size_t>(t.storage);
      const StorageInfo& info = ck_.storages()[storage];
      std::string file = mappable_file(ck_, storage);
      const bool staged = file.empty();
      const uint64_t offset = staged ? stage_.add(ck_, storage) : info.source.offset;
      storages_.push_back({{"key", info.key},
                           {"dtype", dtype_name(info.dtype)},
                           {"nbytes", info.nbytes},
                           {"location", info.location},
                           {"file", staged ? stage_.path() : file},
                           {"offset", offset},
                           {"staged", staged}});
    }
    nlohmann::json j = {{"tensor", index},
                        {"storage", s->second},
                        {"dtype", dtype_name(t.dtype)},
                        {"shape", t.shape},
                        {"stride", t.stride},
                        {"storage_offset", t.storage_offset},
                        {"requires_grad", t.requires_grad},
                        {"parameter", t.parameter}};
    tensors_.push_back(std::move(j));
    // Attributes may hold tensors of their own: added after this one.
    if (t.python_attributes) tensors_[it->second]["attributes"] = data_json(tensor_attributes(ck_, index));
    return it->second;
  }

  /// Plain data as JSON: null, true/false, str and lists as themselves;
  /// {"int": "decimal"}, {"float": "hex"}, {"bytes": "hex"}, {"tuple": [...]},
  /// {"set": [...]}, {"frozenset": [...]}, {"dict": [[k, v], ...]},
  /// {"ordered_dict": [[k, v], ...]}, {"tensor": index in "tensors"},
  /// {"bytes_io": ["hex", position]}.
  static std::string hex(const std::string& bytes) {
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) out += digits[c >> 4], out += digits[c & 15];
    return out;
  }

  nlohmann::json data_json(const PlainValue& v) {
    using K = PlainValue::Kind;
    auto list = [&](const std::vector<PlainValue>& items) {
      nlohmann::json out = nlohmann::json::array();
      for (const PlainValue& item : items) out.push_back(data_json(item));
      return out;
    };
    auto pairs = [&](const std::vector<PlainValue>& items) {
      nlohmann::json out = nlohmann::json::array();
      for (size_t i = 0; i + 1 < items.size(); i += 2) out.push_back({data_json(items[i]), data_json(items[i + 1])});
      return out;
    };
    switch (v.kind) {
      case K::kNone: return nullptr;
      case K::kBool: return v.boolean;
      case K::kInt: return {{"int", v.integer}};
      case K::kFloat: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%a", v.number);  // exact; Python's float.fromhex reads it, inf and nan too
        return {{"float", buf}};
      }
      case K::kStr: return v.text;
      case K::kBytes: return {{"bytes", hex(v.text)}};
      case K::kBytesIO: return {{"bytes_io", {hex(v.text), {{"int", v.integer}}}}};
      case K::kList: return list(v.items);
      case K::kTuple: return {{"tuple", list(v.items)}};
      case K::kSet: return {{"set", list(v.items)}};
      case K::kFrozenSet: return {{"frozenset", list(v.items)}};
      case K::kDict: return {{"dict", pairs(v.items)}};
      case K::kOrderedDict: return {{"ordered_dict", pairs(v.items)}};
      case K::kTensor: return {{"tensor", add(v.tensor)}};
    }
    return nullptr;
  }

  nlohmann::json& tensors() { return tensors_; }
  nlohmann::json& storages() { return storages_; }

 private:
  const Checkpoint& ck_;
  Stage& stage_;
  nlohmann::json tensors_ = nlohmann::json::array();
  nlohmann::json storages_ = nlohmann::json::array();
  std::map<size_t, size_t> tensor_position_;   // checkpoint tensor -> its place in tensors_
  std::map<int32_t, size_t> storage_position_;  // checkpoint storage -> its place in storages_
};

int run(const LayoutArgs& args) {
  try {
    const OpenOptions open = open_options(args.limits);
    Checkpoint ck = Checkpoint::open(args.input, open);
    // --like: the state dict fitted to the model (fit.h) is the root, in the model's order.
    std::string key = args.key;
    if (!args.like.like.empty()) {
      PassOptions passes;
      if (!key.empty()) passes.keys.push_back(key);
      passes.like = read_like(args.like, open);
      passes.fit = fit_options(args.like);
      apply_passes(ck, passes);
      key.clear();
    }
    // What ckptfix.load hands to a model never carries a call the policy
    // refuses inside an extra state, which the model would unpickle (nested.h).
    refuse_nested_calls(ck, nested_violations(nested_pickles(ck), {}));
    const std::vector<StateDictEntry> entries = select_state_dict(ck, key);
    Stage stage(args.stage);
    Tensors tensors(ck, stage);
    nlohmann::json out_entries = nlohmann::json::array();
    for (const StateDictEntry& e : entries) {
      try {
        nlohmann::json j = {{"key", e.key}};
        switch (e.kind) {
          case StateDictEntry::Kind::kTensor:
            j["kind"] = "tensor";
            j["tensor"] = tensors.add(e.tensor);
            break;
          case StateDictEntry::Kind::kSparseTensor: {
            j["kind"] = "sparse";
            j["layout"] = e.sparse.layout;
            j["size"] = e.sparse.size;
            nlohmann::json parts = nlohmann::json::array();
            for (size_t p : e.sparse.parts) parts.push_back(tensors.add(p));
            j["parts"] = parts;
            j["coalesced"] = e.sparse.coalesced ? nlohmann::json(*e.sparse.coalesced) : nlohmann::json();
            break;
          }
          case StateDictEntry::Kind::kData:
            j["kind"] = "data";
            j["value"] = tensors.data_json(plain_value(ck, key, e));
            break;
        }
        out_entries.push_back(std::move(j));
      } catch (Error& error) {
        if (error.location().empty()) error.at("key '" + e.key + "'");  // plain_value's name it already
        throw;
      }
    }
    stage.finish();
    const nlohmann::json doc = {{"ckptfix", version()},          {"schema", 2},
                                {"command", "layout"},           {"path", args.input},
                                {"entries", out_entries},        {"tensors", tensors.tensors()},
                                {"storages", tensors.storages()}};
    print_out(json_text(doc) + "\n");
    return kExitOk;
  } catch (Error& e) {
    e.in_file(args.input);
    print_error(e);
    // The document a program reads says it too, with the error's kind.
    print_out(json_text({{"ckptfix", version()},
                         {"schema", 2},
                         {"command", "layout"},
                         {"path", args.input},
                         {"status", "failed"},
                         {"error", cli_message(e)},
                         {"error_kind", to_string(e.kind())},
                         {"error_details", detail_lines(e)}}) +
              "\n");
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
  add_like_options(cmd, args->like, true);
  add_limit_option(cmd, args->limits);
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli
