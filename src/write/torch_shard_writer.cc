// A Hugging Face torch shard set (pytorch_model-0000k-of-0000n.bin and
// pytorch_model.bin.index.json), as transformers' save_pretrained writes it
// with safe_serialization=False (issue 52).
//
// Each shard is an ordinary verified torch.save file of part of the state
// dict. It is written from a copy of the checkpoint of its own (the caller's
// `reopen`: the input read again, the same passes applied) with the other
// keys taken out of the root dict, so that the writer, which writes only the
// storages the pickle reaches, writes only that shard's bytes; nothing is
// held but one shard's graph at a time. The files are committed together,
// the index last, as the safetensors shard sets are.
#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <span>

#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "ckptfix/state_dict.h"
#include "error_boundary.h"
#include "io/atomic_file.h"
#include "model/checkpoint_impl.h"
#include "model/dict_selection.h"
#include "write/checkpoint_writer.h"
#include "write/commit_outputs.h"
#include "write/save_seams.h"
#include "write/shard_plan.h"

namespace ckptfix {
namespace {

std::vector<StateDictEntry> root_entries_or_refuse(const Checkpoint& checkpoint) {
  auto entries = root_state_dict_entries(checkpoint);
  if (!entries) {
    throw Error(ErrorKind::kInvalidArgument,
                "a shard set holds one state dict and the root of this checkpoint is not one; choose one with `extract`");
  }
  return std::move(*entries);
}

// Leaves in `part`'s root dict the entries of `keys` alone, in that order
// (transformers' shard order: ties after the rest), and checks that each is
// there: the checkpoint read again is the one planned from.
void keep_only(Checkpoint& part, const std::vector<std::string>& keys) {
  Value* root = impl_of(part).root;
  std::map<std::string, std::pair<Value*, Value*>> by_key;
  for (const auto& e : root->entries()) {
    if (e.first->is_str()) by_key.emplace(e.first->text, e);
  }
  std::vector<std::pair<Value*, Value*>> kept;
  for (const std::string& key : keys) {
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      throw Error(ErrorKind::kConflict, "the checkpoint read again for a shard has no key '" + key +
                                            "' (did the input change?); nothing was written");
    }
    kept.push_back(it->second);
  }
  root->entries() = std::move(kept);
}

}  // namespace

TorchShardSetResult save_torch_shard_set(const Checkpoint& checkpoint, const std::function<Checkpoint()>& reopen,
                                         const std::filesystem::path& path, const SaveOptions& options,
                                         uint64_t max_shard_size) {
  return error_boundary(path.string(), [&] {
    const std::vector<StateDictEntry> entries = root_entries_or_refuse(checkpoint);
    const CheckpointImpl& impl = impl_of(checkpoint);
    std::vector<ShardItem> items;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].kind == StateDictEntry::Kind::kTensor) {
        const TensorInfo& t = impl.tensors[entries[i].tensor];
        items.push_back({t.storage, impl.storages[static_cast<size_t>(t.storage)].output_nbytes()});
      } else {
        // Sparse tensors and data: no storage of their own to share; they
        // go with the keys around them.
        uint64_t bytes = 0;
        for (size_t part : entries[i].sparse.parts) {
          bytes += impl.storages[static_cast<size_t>(impl.tensors[part].storage)].output_nbytes();
        }
        items.push_back({-2 - static_cast<int32_t>(i), bytes});
      }
    }
    const std::vector<std::vector<size_t>> shards =
        split_into_shards(items, max_shard_size == 0 ? UINT64_MAX : max_shard_size);

    TorchShardSetResult result;
    result.tensors = entries.size();
    if (shards.size() == 1) {  // one file, no index: what transformers writes then
      SaveResult saved = save(checkpoint, path, options);
      result.files.push_back(path.string());
      result.bytes = saved.bytes;
      if (saved.verification) result.verifications.push_back(*saved.verification);
      return result;
    }
    const std::string file_name = path.filename().string();
    if (file_name.size() <= 4 || !file_name.ends_with(".bin")) {
      throw Error(ErrorKind::kInvalidArgument, "a torch shard set is named after its output, which must end in .bin "
                                               "(e.g. pytorch_model.bin), not '" + file_name + "'");
    }
    const std::string stem = file_name.substr(0, file_name.size() - 4);
    refuse_unknown_calls(checkpoint, options.allow_globals);
    if (options.verify) require_gpu_if_asked(options.verify_options.gpu);

    std::map<std::string, std::string> weight_map;
    std::set<int32_t> counted;
    uint64_t total_size = 0;
    std::vector<std::unique_ptr<AtomicFile>> outs;  // committed together at the end
    OutputPolicy policy = options.policy;
    policy.keep_identical = false;  // one file only (outputs.h)
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::filesystem::path shard = path.parent_path() / shard_file_name(stem, k, shards.size(), ".bin");
      std::vector<std::string> keys;
      for (size_t i : shards[k]) {
        keys.push_back(entries[i].key);
        weight_map[entries[i].key] = shard.filename().string();
        if (items[i].storage < 0 || counted.insert(items[i].storage).second) total_size += items[i].storage_bytes;
      }
      Checkpoint part = reopen();
      keep_only(part, keys);
      outs.push_back(std::make_unique<AtomicFile>(shard, options.overwrite, &policy));
      SaveResult saved = write_verified(part, *outs.back(), options, SaveSeams{});
      result.files.push_back(shard.string());
      result.bytes += saved.bytes;
      if (saved.verification) result.verifications.push_back(*saved.verification);
    }
    const std::filesystem::path index = path.parent_path() / (file_name + ".index.json");
    const std::string text = shard_index_json(total_size, weight_map);
    outs.push_back(std::make_unique<AtomicFile>(index, options.overwrite, &policy));
    outs.back()->sink().write(std::as_bytes(std::span<const char>(text.data(), text.size())));
    outs.back()->flush();
    result.files.push_back(index.string());
    result.bytes += text.size();
    std::vector<AtomicFile*> files;
    for (auto& out : outs) files.push_back(out.get());
    commit_outputs(files, impl, policy, options.sync);  // the index last: a set is complete once it is there
    return result;
  });
}

}  // namespace ckptfix
