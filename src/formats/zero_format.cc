// DeepSpeed ZeRO checkpoints (a tag directory that engine.save_checkpoint
// writes) as one state dict: what DeepSpeed's zero_to_fp32.py rebuilds,
// without its losses (docs/formats.md, "DeepSpeed ZeRO").
//
// A tag directory holds, for tensor parallelism 1:
//   mp_rank_00_model_states.pt                    stages 1 and 2: the module's
//                                                 state dict in the training dtype,
//                                                 param_shapes, buffer_names, ...
//   zero_pp_rank_R_mp_rank_00_model_states.pt     stage 3: one per rank (buffers
//                                                 whole, frozen parameters' fragments)
//   [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   one per data-parallel rank:
//                                                 its partitions of the flat fp32
//                                                 master weights, and the Adam moments
// Reading one is three stages, a file each: finding the layout, what each
// file of the tag directory is (zero_layout.*); reading the rank files'
// pickles as data, their partitions and parameter records
// (zero_rank_files.*); and here, reassembling the state dict from them.
//
// Every file is a torch.save zip, opened by ckptfix's own reader (its
// DeepSpeed classes read as data, never called). Only pickles are parsed:
// each trainable parameter becomes a tensor whose bytes are gathered, when
// written, from the byte ranges of the one or more rank partitions that hold
// it (zip/gather_reader.h); the moments are never read.
//
// The state dict, in zero_to_fp32.py's order: buffers (in the dtype they
// were saved with, where zero_to_fp32.py makes them float32), frozen
// parameters (present in every stage, where zero_to_fp32.py drops them from
// a stage 1 checkpoint), the trainable parameters' fp32 master weights, and
// the tied names of `shared_params`, each the very tensor of its target.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "formats/named_files.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/graph_walk.h"
#include "model/torch_objects.h"
#include "formats/zero_layout.h"
#include "formats/zero_rank_files.h"

namespace ckptfix {
namespace {

using namespace zero;

// ---------------------------------------------------------------------------
// Building the state dict.

class Builder {
 public:
  explicit Builder(CheckpointImpl& impl) : impl_(impl), g_(impl.graph) {
    root_ = begin_built_state_dict(impl);
  }
  Value* root() const { return root_; }
  bool has(const std::string& key) const { return index_.count(key) != 0; }
  Value* value_of(const std::string& key) const { return root_->entries()[index_.at(key)].second; }

  // Puts key -> value: replaces an existing key in place (as a Python dict
  // assignment does), else appends.
  void put(const std::string& key, Value* value) {
    if (auto it = index_.find(key); it != index_.end()) {
      root_->entries()[it->second].second = value;
      return;
    }
    index_[key] = root_->entries().size();
    root_->entries().emplace_back(g_.make_str(key), value);
  }

  // A tensor of `f` as it is saved there (a buffer, a frozen parameter):
  // the same view of a copy of its storage (shared by tensors of one storage).
  Value* copied_tensor(const OpenedFile& f, const Tensor& t) {
    auto [it, fresh] = copied_.emplace(std::make_pair(f.input, t.storage), static_cast<int32_t>(impl_.storages.size()));
    if (fresh) {
      Storage copy = f.storage(t);
      copy.input = f.input;
      copy.key = std::to_string(impl_.storages.size());
      copy.source.record = std::filesystem::path(f.name).filename().string() + ": " + copy.source.record;
      impl_.storages.push_back(std::move(copy));
    }
    Value* call = g_.make(ValueKind::kObject);
    make_rebuild_call(g_, *call, impl_.storages, it->second, t.storage_offset, t.shape, t.stride, false,
                      root_->callable());
    return call;
  }

  // A parameter of `shape` whose numel elements are the concatenation of
  // `pieces` (partition, first element in it, count), in order.
  struct Piece {
    const Partition* partition;
    uint64_t first;
    uint64_t count;
  };
  Value* gathered_tensor(const std::string& name, const std::vector<int64_t>& shape, DType dtype,
                         const std::vector<Piece>& pieces) {
    auto plan = std::make_shared<GatherPlan>();
    uint64_t numel = 0;
    for (const Piece& p : pieces) numel += p.count;
    plan->shape = {static_cast<int64_t>(numel)};
    plan->element_size = element_size(dtype);
    plan->what = "parameter '" + name + "'";
    uint64_t at = 0;
    for (const Piece& p : pieces) {
      if (p.count == 0) continue;
      GatherChunk c;
      c.offsets = {static_cast<int64_t>(at)};
      c.sizes = {static_cast<int64_t>(p.count)};
      c.file = p.partition->input;
      c.data_offset = p.partition->record_offset;
      c.data_bytes = p.partition->record_bytes;
      c.crc32 = p.partition->crc32;
      c.storage_offset = static_cast<int64_t>(p.partition->storage_offset + p.first);
      c.strides = {1};
      c.what = p.partition->what + " (elements " + std::to_string(p.first) + " to " + std::to_string(p.first + p.count) +
               " for parameter '" + name + "')";
      plan->chunks.push_back(std::move(c));
      at += p.count;
    }
    Storage s;
    s.key = std::to_string(impl_.storages.size());
    s.dtype = dtype;
    s.untyped = !storage_class_name(dtype);
    s.nbytes = numel * plan->element_size;
    s.numel = s.untyped ? s.nbytes : numel;
    s.location = "cpu";
    s.source.encoding = StorageSource::Encoding::kGathered;
    s.source.length = s.nbytes;
    s.source.record = "parameter '" + name + "' (from " + std::to_string(plan->chunks.size()) + " partition ranges)";
    s.gather = std::move(plan);
    impl_.storages.push_back(std::move(s));
    Value* call = g_.make(ValueKind::kObject);
    make_rebuild_call(g_, *call, impl_.storages, static_cast<int32_t>(impl_.storages.size() - 1), 0, shape,
                      contiguous_strides(shape), false, root_->callable());
    return call;
  }

 private:
  CheckpointImpl& impl_;
  ValueGraph& g_;
  Value* root_ = nullptr;
  std::map<std::string, size_t> index_;
  std::map<std::pair<uint32_t, int32_t>, int32_t> copied_;  // (file, its storage) -> ours
};

}  // namespace

void read_zero_checkpoint(CheckpointImpl& impl) {
  const std::filesystem::path dir = impl.file->path().parent_path();
  const TagFiles files = list_tag_directory(dir.empty() ? "." : dir, std::max<uint64_t>(impl.limits.max_storages, 4096));
  impl.format = CheckpointFormat::kZero;
  OpenOptions options;
  options.limits = impl.limits;
  NamedFiles named(impl.file, "rank file");

  // The model states: rank 0's (this checkpoint's own file) says the layout.
  OpenedFile model0;
  model0.name = impl.file->name();
  model0.checkpoint = open_data_file(impl.file, "model states file", options);
  model0.input = 0;
  const Value* root = model0.root();
  const Value* module = model0.require(root, "module", "model states");
  if (!is_dict_like(*module)) throw model0.error(ErrorKind::kCorrupt, "'module' is not a state dict", "module");
  const std::vector<std::string> buffer_names = str_list(model0, model0.require(root, "buffer_names", "model states"), "buffer_names");
  const std::vector<std::vector<ParamShape>> groups = param_shapes(model0);
  const Value* frozen_shapes = entry(root, "frozen_param_shapes");
  const Value* shared = entry(root, "shared_params");
  const Value* version = entry(root, "ds_version");
  const bool stage3_model = role_of(impl.file->path().filename().string()).role == FileRole::kModelStage3;

  // Every rank's optimizer file: its partitions of the master weights.
  // Salvage: a rank whose file is missing or unreadable loses the
  // parameters that lie (partly) in its partitions; the others are kept.
  SalvageLog* const salvage = impl.salvage;
  if (salvage != nullptr) salvage->found_by = "DeepSpeed model states";
  const auto damage = [](const Error& e) {
    return e.kind() == ErrorKind::kCorrupt || e.kind() == ErrorKind::kNotCheckpoint || e.kind() == ErrorKind::kIo;
  };
  std::error_code ec;
  if (files.optimizer.empty() && std::filesystem::is_directory(dir / "zero", ec)) {
    // ds_to_universal.py's output: each parameter's fp32 weight and moments
    // in files of its own under zero/, beside copies of the model states.
    throw Error(ErrorKind::kUnsupported, "it is a DeepSpeed universal checkpoint (ds_to_universal.py's zero/ folder "
                                         "of per-parameter files), which ckptfix does not read; convert the ZeRO "
                                         "checkpoint it was made from")
        .in_file(dir.string());
  }
  if (files.optimizer.empty() && salvage == nullptr) {
    // Stages 1 and 2 (and DeepSpeed without ZeRO) keep the whole module in
    // the model states; stage 3 keeps empty parameters there.
    const std::string way_out = stage3_model ? "" : ". The model states file holds the module's weights in the training dtype: "
                                                    "convert its dict 'module' alone (`keys` 'module' of '" +
                                                    impl.file->name() + "')";
    throw corrupt("no *_optim_states.pt file: a ZeRO checkpoint keeps its fp32 master weights in the optimizer "
                  "files, and none is here (saved without ZeRO, or without its optimizer?)" + way_out)
        .in_file(dir.string());
  }
  const Value* dp = entry(root, "dp_world_size");
  const bool dp_known = dp != nullptr && dp->kind == ValueKind::kInt && dp->integer > 0 && dp->integer <= 1 << 20;
  const uint32_t world = salvage != nullptr && dp_known ? static_cast<uint32_t>(dp->integer)
                         : files.optimizer.empty()  ? 0
                                                    : std::max(static_cast<uint32_t>(files.optimizer.size()),
                                                               files.optimizer.rbegin()->first + 1);
  if (world == 0) throw corrupt("no *_optim_states.pt file, and no dp_world_size in the model states").in_file(dir.string());
  std::vector<std::string> rank_lost(world);
  for (uint32_t r = 0; r < world; ++r) {
    if (files.optimizer.count(r) != 0) continue;
    rank_lost[r] = "the optimizer file of rank " + std::to_string(r) + " is missing";
    if (salvage == nullptr) {
      throw corrupt(rank_lost[r] + " (" + std::to_string(files.optimizer.size()) + " of " + std::to_string(world) +
                    " ranks' files are here)")
          .in_file(dir.string());
    }
  }
  if (salvage == nullptr && dp_known && dp->integer > static_cast<int64_t>(world) && !files.optimizer.empty()) {
    // Ranks past the last file here: named as DeepSpeed names them, after a file that is.
    const auto& [known_rank, known_name] = *files.optimizer.begin();
    const std::string known = "zero_pp_rank_" + std::to_string(known_rank) + "_";
    const size_t at = known_name.find(known);
    std::string missing = at == std::string::npos ? std::string()
                          : "'" + std::string(known_name).replace(at, known.size(), "zero_pp_rank_" + std::to_string(world) + "_") + "', ";
    throw corrupt("the optimizer file of rank " + std::to_string(world) + " is missing (" + missing + "the model states say " +
                  std::to_string(dp->integer) + " data-parallel ranks, and " + std::to_string(files.optimizer.size()) + " of their files " +
                  (files.optimizer.size() == 1 ? "is" : "are") + " here)")
        .in_file(dir.string());
  }
  if (salvage == nullptr && dp_known && dp->integer != static_cast<int64_t>(world)) {
    throw corrupt("the model states say " + std::to_string(dp->integer) + " data-parallel ranks, and " +
                  std::to_string(world) + " optimizer files are here")
        .in_file(dir.string());
  }
  for (const auto& [r, name] : files.optimizer) {
    if (r >= world) {
      throw corrupt("'" + name + "' is the file of rank " + std::to_string(r) + ", and the model states say " +
                    std::to_string(world) + " ranks: files of two runs?")
          .in_file(dir.string());
    }
  }
  // Salvage: a tensor's bytes are kept when its record's CRC-32 is right.
  auto damaged_record = [&](const OpenedFile& f, const Tensor& t) -> std::string {
    if (salvage == nullptr) return {};
    const Storage& s = f.storage(t);
    const uint32_t crc = input_record_crc(*f.file(), s);
    if (s.source.crc32 == 0 || crc == s.source.crc32) return {};
    return "its record in " + f.name + " is damaged (CRC-32 " + hex_offset(crc) + ", the archive records " +
           hex_offset(s.source.crc32) + ")";
  };
  // Opens rank r's file `name` into `f`, one more input of the checkpoint.
  // With salvage, a file that does not read gives its reason instead.
  auto open_rank_file = [&](OpenedFile& f, const std::string& name, uint32_t r, const std::string& kind) -> std::string {
    const auto& input = named.open(name, "rank " + std::to_string(r));
    try {
      f.checkpoint = open_data_file(input, kind, options);
    } catch (const Error& e) {
      if (salvage == nullptr || !damage(e)) throw;
      return "the " + kind + " of rank " + std::to_string(r) + " does not read: " + e.message();
    }
    impl.shards.push_back(input);
    f.input = static_cast<uint32_t>(impl.shards.size());
    return {};
  };
  std::vector<OpenedFile> optim(world);
  for (uint32_t r = 0; r < world; ++r) {
    const auto found = files.optimizer.find(r);
    optim[r].name = found != files.optimizer.end() ? (dir / found->second).string() : dir.string();
  }
  int64_t stage = 0;
  const char* groups_key = nullptr;
  int first_present = -1;
  std::vector<std::vector<Partition>> partitions(world);  // [rank][group]
  for (uint32_t r = 0; r < world; ++r) {
    if (!rank_lost[r].empty()) continue;
    OpenedFile& f = optim[r];
    rank_lost[r] = open_rank_file(f, files.optimizer.at(r), r, "optimizer file");
    if (!rank_lost[r].empty()) continue;
    const Value* osd = f.require(f.root(), "optimizer_state_dict", "optimizer states");
    // DeepSpeed's BF16_Optimizer (bf16 with ZeRO stage 1) records no stage.
    const Value* stage_value = entry(osd, "zero_stage");
    const int64_t rank_stage = stage_value == nullptr ? 1 : zero_stage(f, stage_value);
    if (first_present < 0) {
      first_present = static_cast<int>(r);
      stage = rank_stage;
      groups_key = stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups";
    } else if (rank_stage != stage) {
      throw f.error(ErrorKind::kCorrupt, "it is a ZeRO stage " + std::to_string(rank_stage) + " file, and rank " +
                                             std::to_string(first_present) + "'s is stage " + std::to_string(stage) +
                                             ": files of two runs?",
                    "optimizer_state_dict/zero_stage");
    }
    if (const Value* count = entry(osd, "partition_count"); count != nullptr) {
      int64_t most = 0;
      if (count->kind == ValueKind::kInt) most = count->integer;
      for (const Value* c : count->items) most = std::max(most, c->kind == ValueKind::kInt ? c->integer : 0);
      if (most != static_cast<int64_t>(world)) {
        throw f.error(ErrorKind::kCorrupt, "it was saved by one of " + std::to_string(most) + " ranks, and " +
                                              std::to_string(world) + (salvage != nullptr ? " ranks are expected" : " optimizer files are here"),
                      "optimizer_state_dict/partition_count");
      }
    }
    const Value* flat = f.require(osd, groups_key, "ZeRO optimizer");
    if (flat->kind != ValueKind::kList && flat->kind != ValueKind::kTuple) {
      throw f.error(ErrorKind::kCorrupt, "expected a list of tensors", std::string("optimizer_state_dict/") + groups_key);
    }
    for (size_t g = 0; g < flat->items.size(); ++g) {
      Partition& p = partitions[r].emplace_back(
          partition(f, flat->items[g], std::string("optimizer_state_dict/") + groups_key + "/" + std::to_string(g)));
      p.lost = damaged_record(f, f.tensor(flat->items[g], p.what));
    }
    if (partitions[r].size() != partitions[first_present].size()) {
      throw f.error(ErrorKind::kCorrupt, "it has " + std::to_string(partitions[r].size()) + " parameter groups, and rank " +
                                             std::to_string(first_present) + "'s has " +
                                             std::to_string(partitions[first_present].size()) + ": files of two runs?",
                    groups_key);
    }
  }
  if (first_present < 0) {
    throw corrupt("no rank's optimizer file reads, so no master weight is there").in_file(dir.string());
  }
  // Salvage: a lost rank's partitions stand in with no bytes, each the size
  // a present rank's says (DeepSpeed's partitions are equal but for the
  // last rank's, short by the group's padding).
  for (uint32_t r = 0; r < world; ++r) {
    if (rank_lost[r].empty()) continue;
    for (size_t g = 0; g < partitions[first_present].size(); ++g) {
      // A size no present rank tells (stages 1 and 2 with no other rank
      // but the last) reaches to the end of the group: what lies after it is
      // lost too, never placed at a guessed offset.
      Partition p;
      p.numel = UINT64_MAX / 4;
      for (uint32_t q = 0; q < world; ++q) {
        if (rank_lost[q].empty() && (q + 1 < world || stage == 3)) p.numel = partitions[q][g].numel;
      }
      if (r + 1 == world && stage != 3) p.numel = UINT64_MAX / 4;
      p.dtype = partitions[first_present][g].dtype;
      p.what = "rank " + std::to_string(r) + "'s partition of group " + std::to_string(g);
      p.lost = rank_lost[r];
      partitions[r].push_back(std::move(p));
    }
  }
  if ((stage == 3) != stage3_model) {
    throw corrupt(stage == 3 ? "the optimizer files are ZeRO stage 3, whose model states are one file per rank "
                               "(zero_pp_rank_0_mp_rank_00_model_states.pt)"
                             : "the optimizer files are ZeRO stage " + std::to_string(stage) +
                                   ", whose model states are mp_rank_00_model_states.pt")
        .in_file(impl.file->name());
  }
  const std::vector<Partition>& first_partitions = partitions[static_cast<size_t>(first_present)];
  const DType master = first_partitions.empty() ? DType::kFloat32 : first_partitions[0].dtype;
  for (const auto& rank : partitions) {
    for (const Partition& p : rank) {
      if (p.file != nullptr && p.dtype != master) {
        throw p.file->error(ErrorKind::kCorrupt, "a partition is " + std::string(dtype_name(p.dtype)) + " and rank " +
                                                     std::to_string(first_present) + "'s first is " +
                                                     std::string(dtype_name(master)),
                            p.what);
      }
    }
  }

  // Stage 3: every rank's model states (its fragments of frozen parameters).
  std::vector<OpenedFile> models3;
  std::vector<std::string> model_lost(world);  // salvage: why a rank's model states are lost
  if (stage == 3) {
    models3.resize(world);
    for (uint32_t r = 0; r < world; ++r) {
      if (r == 0) continue;
      const auto found = files.model_stage3.find(r);
      if (found == files.model_stage3.end()) {
        model_lost[r] = "the model states file of rank " + std::to_string(r) + " is missing";
        if (salvage == nullptr) throw corrupt(model_lost[r]).in_file(dir.string());
        continue;
      }
      models3[r].name = (dir / found->second).string();
      model_lost[r] = open_rank_file(models3[r], found->second, r, "model states file");
    }
  }
  auto lose = [&](const std::string& key, const std::string& needed, uint64_t bytes, const std::string& reason) {
    salvage->lost.push_back({key, needed, bytes, reason});
  };
  // A saved tensor of `f`, kept as it is (unless salvage finds its bytes damaged).
  auto put_copied = [&](Builder& out, const std::string& key, const OpenedFile& f, const Tensor& t) {
    if (const std::string reason = damaged_record(f, t); !reason.empty()) {
      lose(key, f.storage(t).source.record, t.nbytes(), reason);
      return;
    }
    out.put(key, out.copied_tensor(f, t));
  };
  auto model_of = [&](uint32_t r) -> const OpenedFile& { return r == 0 ? model0 : models3[r]; };

  // Each rank's frozen_param_fragments, and the tied names, by name.
  std::vector<std::map<std::string_view, const Value*>> fragments_of(world);
  for (uint32_t r = 0; r < world; ++r) {
    if (r == 0 || (stage == 3 && model_lost[r].empty())) {
      fragments_of[r] = by_name(entry(model_of(r).root(), "frozen_param_fragments"));
    }
  }
  const std::map<std::string_view, const Value*> tied = by_name(shared);
  Builder out(impl);
  // Buffers: as the module saved them, in its order.
  const std::set<std::string> buffers(buffer_names.begin(), buffer_names.end());
  std::set<std::string> trainable;
  for (const auto& group : groups) {
    for (const ParamShape& p : group) {
      if (!trainable.insert(p.name).second) {
        throw model0.error(ErrorKind::kCorrupt, "parameter '" + p.name + "' is in param_shapes twice", "param_shapes");
      }
    }
  }
  for (const auto& [k, v] : module->entries()) {
    if (!k->is_str() || buffers.count(std::string(k->str())) == 0) continue;
    const std::string key(k->str());
    put_copied(out, key, model0, model0.tensor(v, "module/" + key));
  }
  // Frozen parameters.
  if (!is_none(frozen_shapes)) {
    if (!is_dict_like(*frozen_shapes)) throw model0.error(ErrorKind::kCorrupt, "expected a dict of sizes", "frozen_param_shapes");
    for (const auto& [k, v] : frozen_shapes->entries()) {
      if (!k->is_str()) throw model0.error(ErrorKind::kCorrupt, "a parameter name is not a str", "frozen_param_shapes");
      const std::string name(k->str());
      const std::string at = "frozen_param_fragments/" + name;
      const std::vector<int64_t> shape = model0.shape(v, "frozen_param_shapes/" + name);
      const uint64_t numel = checked_numel(shape, model0, "frozen_param_shapes/" + name);
      if (stage != 3) {
        const Tensor& t = model0.tensor(lookup(fragments_of[0], name), at);
        if (t.shape != shape) {
          throw model0.error(ErrorKind::kCorrupt, "the fragment has shape " + shape_text(t.shape) + " and frozen_param_shapes says " +
                                                      shape_text(shape),
                              at);
        }
        put_copied(out, name, model0, t);
        continue;
      }
      // Stage 3: each rank holds ceil(numel / world) elements; concatenated, then cut to numel.
      const uint64_t per_rank = (numel + world - 1) / world;
      std::vector<Partition> fragments(world);
      std::vector<Builder::Piece> pieces;
      DType dtype = DType::kFloat32;
      std::string lost;
      for (uint32_t r = 0; r < world && uint64_t{r} * per_rank < numel; ++r) {
        if (!model_lost[r].empty()) {
          lost = model_lost[r];
          break;
        }
        const OpenedFile& f = model_of(r);
        const Value* fragment = lookup(fragments_of[r], name);
        fragments[r] = partition(f, fragment, at);
        if (lost.empty()) lost = damaged_record(f, f.tensor(fragment, at));
        if (r == 0) dtype = fragments[r].dtype;
        if (fragments[r].dtype != dtype || fragments[r].numel != per_rank) {
          throw f.error(ErrorKind::kCorrupt, "the fragment has " + std::to_string(fragments[r].numel) + " " +
                                                 std::string(dtype_name(fragments[r].dtype)) + " elements, and " +
                                                 std::to_string(per_rank) + " " + std::string(dtype_name(dtype)) +
                                                 " were expected",
                        at);
        }
      }
      if (!lost.empty()) {
        lose(name, "the fragments of '" + name + "' in every rank's model states", numel * element_size(dtype), lost);
        continue;
      }
      for (uint32_t r = 0; r < world; ++r) {
        const uint64_t first = uint64_t{r} * per_rank;
        if (first >= numel) break;
        pieces.push_back({&fragments[r], 0, std::min(per_rank, numel - first)});
      }
      out.put(name, out.gathered_tensor(name, shape, dtype, pieces));
    }
  } else {
    // ZeRO stage 1 records no frozen parameters (zero_to_fp32.py loses
    // them); the module's state dict holds them whole.
    for (const auto& [k, v] : module->entries()) {
      if (!k->is_str()) continue;
      const std::string key(k->str());
      if (buffers.count(key) != 0 || trainable.count(key) != 0) continue;
      if (tied.count(key) != 0) continue;  // a tied name: added below
      put_copied(out, key, model0, model0.tensor(v, "module/" + key));
    }
  }

  // The trainable parameters' master weights; with salvage, one whose bytes
  // lie (partly) in a lost partition is lost.
  auto place = [&](const ParamShape& p, const std::vector<Builder::Piece>& pieces) {
    for (const Builder::Piece& piece : pieces) {
      if (!piece.partition->lost.empty()) {
        // What it needed, one range per parameter (salvage counts each lost range's bytes once).
        lose(p.name, piece.partition->what + " (elements " + std::to_string(piece.first) + " to " +
                         std::to_string(piece.first + piece.count) + ")",
             p.numel * element_size(master), piece.partition->lost);
        return;
      }
    }
    out.put(p.name, out.gathered_tensor(p.name, p.shape, master, pieces));
  };
  bool any_rank_lost = false;
  for (const std::string& reason : rank_lost) any_rank_lost |= !reason.empty();
  if (stage != 3) {
    if (groups.size() != first_partitions.size()) {
      throw model0.error(ErrorKind::kCorrupt, "param_shapes has " + std::to_string(groups.size()) +
                                                  " groups, and the optimizer files have " +
                                                  std::to_string(first_partitions.size()),
                         "param_shapes");
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      // The group's partitions, concatenated in rank order, hold its
      // parameters one after another from the start.
      uint64_t total = 0;
      std::vector<uint64_t> base(world);
      for (uint32_t r = 0; r < world; ++r) {
        base[r] = total;
        total += partitions[r][g].numel;
      }
      uint64_t offset = 0;
      for (const ParamShape& p : groups[g]) {
        if (p.numel > total - offset) {
          throw optim[world - 1].error(ErrorKind::kCorrupt,
                                       "parameter '" + p.name + "' (" + std::to_string(p.numel) + " elements at " +
                                           std::to_string(offset) + ") runs past the end of the partitions of group " +
                                           std::to_string(g) + " (" + std::to_string(total) + " elements in all)",
                                       partitions[world - 1][g].what);
        }
        std::vector<Builder::Piece> pieces;
        for (uint32_t r = 0; r < world; ++r) {
          const uint64_t from = std::max(offset, base[r]);
          const uint64_t to = std::min(offset + p.numel, base[r] + partitions[r][g].numel);
          if (from < to) pieces.push_back({&partitions[r][g], from - base[r], to - from});
        }
        place(p, pieces);
        offset += p.numel;
      }
      // What zero_to_fp32.py checks: the parameters use the partitions up
      // to DeepSpeed's padding (alignment to 2 * ranks).
      const uint64_t align = 2 * uint64_t{world};
      auto aligned = [&](uint64_t x) { return (x + align - 1) / align * align; };
      if (!any_rank_lost && aligned(offset) != aligned(total)) {
        throw optim[0].error(ErrorKind::kCorrupt, "the parameters of group " + std::to_string(g) + " use " + std::to_string(offset) +
                                                      " of the partitions' " + std::to_string(total) +
                                                      " elements: the model states and optimizer files disagree "
                                                      "(files of two runs?)",
                             first_partitions[g].what);
      }
    }
  } else {
    // Stage 3: each parameter is ceil(numel / world) elements of every
    // rank's flat buffer (its groups one after another), at the same offset
    // on every rank; concatenated in rank order, then cut to numel.
    std::vector<uint64_t> group_start{0};
    for (const Partition& p : first_partitions) group_start.push_back(group_start.back() + p.numel);
    for (uint32_t r = 1; r < world; ++r) {
      for (size_t g = 0; g < partitions[r].size(); ++g) {
        if (partitions[r][g].numel != first_partitions[g].numel) {
          throw optim[r].error(ErrorKind::kCorrupt, "its group " + std::to_string(g) + " has " + std::to_string(partitions[r][g].numel) +
                                                        " elements, and rank " + std::to_string(first_present) +
                                                        "'s has " + std::to_string(first_partitions[g].numel),
                               partitions[r][g].what);
        }
      }
    }
    const uint64_t per_rank_total = group_start.back();
    uint64_t offset = 0;
    for (const auto& group : groups) {
      for (const ParamShape& p : group) {
        const uint64_t per_rank = (p.numel + world - 1) / world;
        if (per_rank > per_rank_total - offset) {
          throw optim[0].error(ErrorKind::kCorrupt, "parameter '" + p.name + "' (" + std::to_string(per_rank) +
                                                        " elements per rank at " + std::to_string(offset) +
                                                        ") runs past the end of the flat groups (" +
                                                        std::to_string(per_rank_total) + " elements per rank)",
                               std::string("optimizer_state_dict/") + groups_key);
        }
        std::vector<Builder::Piece> pieces;
        for (uint32_t r = 0; r < world; ++r) {
          const uint64_t first = uint64_t{r} * per_rank;
          if (first >= p.numel) break;
          uint64_t want = std::min(per_rank, p.numel - first);
          uint64_t at = offset;  // in rank r's flat buffer
          for (size_t g = 0; g < partitions[r].size() && want > 0; ++g) {
            if (at >= group_start[g + 1]) continue;
            const uint64_t n = std::min(want, group_start[g + 1] - at);
            pieces.push_back({&partitions[r][g], at - group_start[g], n});
            at += n;
            want -= n;
          }
        }
        place(p, pieces);
        offset += per_rank;
      }
    }
    if (offset != per_rank_total) {
      throw optim[0].error(ErrorKind::kCorrupt, "the parameters use " + std::to_string(offset) + " of the flat groups' " +
                                                    std::to_string(per_rank_total) +
                                                    " elements per rank: the model states and optimizer files "
                                                    "disagree (files of two runs?)",
                           std::string("optimizer_state_dict/") + groups_key);
    }
  }

  // Tied parameters: the name is the very tensor of its target.
  if (!is_none(shared)) {
    if (!is_dict_like(*shared)) throw model0.error(ErrorKind::kCorrupt, "expected a dict of names", "shared_params");
    for (const auto& [k, v] : shared->entries()) {
      if (!k->is_str() || !v->is_str()) throw model0.error(ErrorKind::kCorrupt, "expected a dict of names", "shared_params");
      const std::string target(v->str());
      if (out.has(target)) {
        out.put(std::string(k->str()), out.value_of(target));
      } else if (salvage != nullptr && trainable.count(target) != 0) {
        lose(std::string(k->str()), "parameter '" + target + "'", 0, "it is tied to '" + target + "', which is lost");
      }
    }
  }

  impl.root = out.root();
  ZeroRunInfo& run = impl.zero.emplace();
  run.stage = static_cast<int>(stage);
  run.ranks = world;
  run.bf16_files = files.bf16;
  run.deepspeed_version = version != nullptr && version->is_str() ? std::string(version->str()) : std::string();
  run.tag = dir.filename().string();
  build_tensor_table(impl);
  note_state_dict_globals(impl);
}

}  // namespace ckptfix

