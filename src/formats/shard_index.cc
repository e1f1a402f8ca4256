// Hugging Face shard sets: an index file (`model.safetensors.index.json`,
// `pytorch_model.bin.index.json`) naming, for every tensor, the shard file
// beside it that holds it:
//
//   {"metadata": {"total_size": N, ...}, "weight_map": {"tensor": "model-00001-of-00002.safetensors", ...}}
//
// Each shard is opened as the checkpoint it is (safetensors or torch.save of
// a state dict); the set reads as one OrderedDict: shards in the order of
// their names, each shard's tensors in its own order. The set must be
// consistent, since a loader given a damaged set silently loads zeros or
// stale tensors: every shard exists and opens, every tensor is in the shard
// the index names and in no other, none is missing from the index, and
// total_size (when given) is the bytes the shards hold. Shards are opened
// through NamedFiles (formats/named_files.h): each once, a regular file, not
// the index itself nor another shard under a second name, and a file of
// tensors by its content (an index naming an index is refused).
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "formats/named_files.h"
#include "formats/registry.h"
#include "formats/shard_index.h"
#include "io/bytes.h"
#include "io/file_names.h"
#include "json/json.h"
#include "model/dict_selection.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;

Error index_error(const std::string& message) { return std::move(Error(ErrorKind::kCorrupt, message).at("shard index")); }

// A shard is a file beside the index, never a path: an index must not make
// ckptfix open files elsewhere.
void check_shard_name(const std::string& tensor, const std::string& shard) {
  if (!is_plain_file_name(shard)) {
    throw Error(ErrorKind::kUnsafe, "the index places tensor '" + tensor + "' in '" + shard +
                                        "', which is not a file name beside the index (shards are never opened by path)")
        .at("shard index");
  }
}

}  // namespace

bool is_shard_index(std::span<const std::byte> file) {
  const std::string_view text = as_chars(file.first(std::min<size_t>(file.size(), kMaxIndexBytes)));
  // Any JSON object: one without a weight_map is then refused as an index
  // that lacks it, which says more than "not a checkpoint".
  const size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

ShardIndex parse_shard_index(std::string_view text, uint64_t max_tensors) {
  if (text.size() > kMaxIndexBytes) {
    throw Error(ErrorKind::kLimit, "the index is " + std::to_string(text.size()) + " bytes, more than " +
                                       std::to_string(kMaxIndexBytes));
  }
  JsonValue root;
  try {
    root = parse_json(text, 16);
  } catch (Error& e) {
    throw e.at("shard index");
  }
  const JsonValue* weight_map = root.kind == JsonValue::Kind::kObject ? root.find("weight_map") : nullptr;
  if (weight_map == nullptr || weight_map->kind != JsonValue::Kind::kObject) {
    throw index_error("a JSON file without a weight_map object, so not a shard index");
  }
  std::optional<uint64_t> total_size;
  if (const JsonValue* metadata = root.find("metadata"); metadata != nullptr && metadata->kind == JsonValue::Kind::kObject) {
    if (const JsonValue* total = metadata->find("total_size"); total != nullptr) {
      total_size = total->as_uint();
      if (!total_size) throw index_error("metadata.total_size is not a byte count");
    }
  }
  if (weight_map->members.size() > max_tensors) {
    throw Error(ErrorKind::kLimit, "the index lists " + std::to_string(weight_map->members.size()) +
                                       " tensors, more than the limit of " + std::to_string(max_tensors));
  }
  ShardIndex index;
  index.total_size = total_size;
  for (const auto& [tensor, shard] : weight_map->members) {
    if (shard.kind != JsonValue::Kind::kString) throw index_error("weight_map entry '" + tensor + "' is not a file name");
    check_shard_name(tensor, shard.text);
    index.shard_of[tensor] = shard.text;
    index.shards.insert(shard.text);
  }
  return index;
}

void read_shard_index(CheckpointImpl& impl) {
  if (impl.file->fd() < 0) {
    throw Error(ErrorKind::kUnsupported, "a shard index held in memory has no directory to find its shards in");
  }
  if (impl.file->size() > kMaxIndexBytes) {
    throw Error(ErrorKind::kLimit, "the index is " + std::to_string(impl.file->size()) + " bytes, more than " +
                                       std::to_string(kMaxIndexBytes));
  }
  const FileBytes text = impl.file->read_bytes(0, impl.file->size(), "shard index");
  const ShardIndex index = parse_shard_index(as_chars(text.span()), impl.limits.max_storages);
  const std::map<std::string, std::string>& shard_of = index.shard_of;
  const std::set<std::string>& shard_names = index.shards;
  const std::optional<uint64_t>& total_size = index.total_size;

  impl.format = CheckpointFormat::kShardIndex;
  Value* root_dict = begin_built_state_dict(impl);
  ValueGraph& g = impl.graph;
  std::map<std::string, std::string> found_in;  // tensor -> the shard it was found in
  uint64_t held = 0;       // bytes of the distinct storages (transformers >= 4.40 counts these)
  uint64_t key_bytes = 0;  // bytes of each key's tensor (older transformers: a view counts its own bytes)
  const std::filesystem::path dir = impl.file->path().parent_path();
  OpenOptions options;
  options.limits = impl.limits;
  // Every shard is resolved (and the links, FIFOs and self-references of
  // the set refused) before any is read.
  NamedFiles files(impl.file, "shard");
  std::map<std::string, const std::string*> first_tensor_in;  // a shard -> the first tensor placed in it, for errors
  for (const auto& [tensor, shard] : shard_of) first_tensor_in.emplace(shard, &tensor);
  const auto entry_of = [&](const std::string& name) { return "tensor '" + *first_tensor_in.at(name) + "'"; };
  // Salvage: a shard that is missing or beyond salvage loses its tensors;
  // what a damaged shard still holds is kept. Breaking the rules of named
  // files is refused as always.
  SalvageLog* const salvage = impl.salvage;
  if (salvage != nullptr) salvage->found_by = "shard index";
  std::set<std::string> lost_shards;
  const auto lose_shard = [&](const std::string& name, const std::string& reason) {
    lost_shards.insert(name);
    for (const auto& [tensor, shard] : shard_of) {
      if (shard == name) salvage->lost.push_back({tensor, name, 0, reason});
    }
  };
  for (const std::string& name : shard_names) {
    std::error_code ec;
    if (salvage != nullptr && is_plain_file_name(name) && !std::filesystem::exists(dir / name, ec)) {
      lose_shard(name, "shard '" + name + "': file missing");
      continue;
    }
    files.open(name, entry_of(name));
  }
  for (const std::string& name : shard_names) {
    if (lost_shards.count(name) != 0) continue;
    const std::filesystem::path path = dir / name;
    const std::string entry = entry_of(name);
    SalvageLog shard_log;
    std::optional<Checkpoint> opened;
    try {
      opened = open_named_file(files.open(name, entry), "shard", options, salvage != nullptr ? &shard_log : nullptr);
    } catch (Error& e) {
      if (salvage != nullptr && (e.kind() == ErrorKind::kCorrupt || e.kind() == ErrorKind::kNotCheckpoint)) {
        lose_shard(name, "shard '" + name + "': " + e.message());
        continue;
      }
      throw e.at(entry).note("a shard named by the index '" + impl.file->name() + "'");
    }
    if (salvage != nullptr) {
      for (SalvageLog::Lost& l : shard_log.lost) {
        salvage->lost.push_back({l.key, name + ": " + l.storage, l.bytes, "shard '" + name + "': " + l.reason});
      }
      for (const std::string& note : shard_log.notes) salvage->notes.push_back("shard '" + name + "': " + note);
    }
    Checkpoint& shard = *opened;
    const CheckpointImpl& s = impl_of(shard);
    const auto root_entries = root_state_dict_entries(shard);
    if (!root_entries) throw Error(ErrorKind::kCorrupt, "the shard is not a state dict").in_file(path.string());
    const std::vector<StateDictEntry>& entries = *root_entries;
    impl.shards.push_back(s.file);
    const auto input = static_cast<uint32_t>(impl.shards.size());
    std::map<int32_t, int32_t> storage_map;  // the shard's storage -> ours
    for (const StateDictEntry& e : entries) {
      const auto where = [&] { return "tensor '" + e.key + "'"; };
      if (e.kind != StateDictEntry::Kind::kTensor) {
        throw Error(ErrorKind::kUnsupported, "a shard of a shard set holds dense tensors, and this entry is not one")
            .in_file(path.string()).at(where());
      }
      const auto placed = shard_of.find(e.key);
      if (placed == shard_of.end()) {
        throw Error(ErrorKind::kCorrupt, "the shard holds it but the index's weight_map does not list it")
            .in_file(path.string()).at(where());
      }
      if (const auto seen = found_in.find(e.key); seen != found_in.end()) {
        throw Error(ErrorKind::kCorrupt, "it is in two shards, '" + seen->second + "' and '" + name + "'")
            .in_file(path.string()).at(where());
      }
      if (placed->second != name) {
        throw Error(ErrorKind::kCorrupt, "the shard holds it but the index places it in '" + placed->second + "'")
            .in_file(path.string()).at(where());
      }
      found_in[e.key] = name;
      const Tensor& t = s.tensors[e.tensor];
      if (t.storage < 0) {
        throw Error(ErrorKind::kUnsupported, "a shard of a shard set holds tensors with data, and this one is a meta "
                                             "tensor").in_file(path.string()).at(where());
      }
      key_bytes += t.nbytes();
      auto [it, fresh] = storage_map.emplace(t.storage, static_cast<int32_t>(impl.storages.size()));
      if (fresh) {
        Storage copy = s.storages[static_cast<size_t>(t.storage)];
        copy.input = input;
        copy.key = std::to_string(impl.storages.size());
        copy.source.record = name + ": " + copy.source.record;
        held += copy.nbytes;
        impl.storages.push_back(std::move(copy));
      }
      Value* call = g.make(ValueKind::kObject);
      make_rebuild_call(g, *call, impl.storages, it->second, t.storage_offset, t.shape, t.stride, t.requires_grad,
                        root_dict->callable());
      root_dict->entries().emplace_back(g.make_str(e.key), call);
    }
  }
  std::set<std::string> logged_lost;
  if (salvage != nullptr) {
    for (const SalvageLog::Lost& l : salvage->lost) logged_lost.insert(l.key);
  }
  for (const auto& [tensor, shard] : shard_of) {
    if (found_in.count(tensor) == 0) {
      if (salvage != nullptr) {
        if (logged_lost.count(tensor) == 0) {
          salvage->lost.push_back({tensor, shard, 0, "the index places it in '" + shard + "', which does not hold it"});
        }
        continue;
      }
      throw Error(ErrorKind::kCorrupt, "the index places it in '" + shard + "', which does not hold it")
          .in_file((dir / shard).string())
          .at("tensor '" + tensor + "'");
    }
  }
  if (salvage == nullptr && total_size && *total_size != held && *total_size != key_bytes) {
    throw index_error("metadata.total_size is " + std::to_string(*total_size) + " but the shards hold " +
                      std::to_string(held) + " bytes of tensors" +
                      (key_bytes != held ? " (" + std::to_string(key_bytes) + " counting each key's own bytes)" : ""));
  }
  impl.root = root_dict;
  build_tensor_table(impl);
  note_state_dict_globals(impl);
}

}  // namespace ckptfix
