// torch.distributed.checkpoint directories as checkpoints: `.metadata`
// (formats/dcp_metadata.h) says where every chunk of every tensor and every
// other value is; each is a complete torch.save zip inside a .distcp file.
// The checkpoint read is what dcp_to_torch_save builds and saves
// (docs/dcp-format-notes.md (c)): a plain dict, nested along each entry's
// planner path, in state_dict_metadata's order; each tensor whole and
// contiguous, assembled from its chunks while it is written
// (zip/gather_reader.h), so nothing is held in memory; each other value as
// its own pickle describes it, read by ckptfix's unpickler under the usual
// global policy (torch itself unpickles it with weights_only=False).
#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "formats/dcp_metadata.h"
#include "formats/named_files.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

// The .distcp files, opened once each as items name them (through
// NamedFiles: plain names, regular files, neither .metadata itself nor one
// file under two names, so that the overlap check of .metadata, made by
// name, sees every item of a file); each is an input of the checkpoint
// (Storage::input).
class DistcpFiles {
 public:
  explicit DistcpFiles(CheckpointImpl& impl) : impl_(impl), named_(impl.file, "data file") {}

  uint32_t input(const std::string& name, const std::string& entry) {
    if (const auto it = inputs_.find(name); it != inputs_.end()) return it->second;
    impl_.shards.push_back(named_.open(name, entry));
    const auto index = static_cast<uint32_t>(impl_.shards.size());
    inputs_[name] = index;
    return index;
  }
  const std::shared_ptr<const InputFile>& file(uint32_t input) const { return impl_.shards[input - 1]; }

 private:
  CheckpointImpl& impl_;
  NamedFiles named_;
  std::map<std::string, uint32_t> inputs_;
};

// Salvage: a storage of an item is kept only when its bytes match the CRC-32
// its zip records (an intact central directory says nothing of the data).
void check_item_crc(const InputFile& file, const Storage& s, const std::string& what) {
  if (s.source.encoding != StorageSource::Encoding::kStored) return;
  const uint32_t crc = input_record_crc(file, s);
  if (crc != s.source.crc32) {
    throw Error(ErrorKind::kCorrupt, "CRC-32 mismatch (the bytes have " + hex_offset(crc) + ", the archive records " +
                                         hex_offset(s.source.crc32) + ")")
        .in_file(file.name())
        .at(what);
  }
}

// One item (a chunk or a value), read as the torch.save checkpoint it is,
// its storages moved to their place in the .distcp file.
struct Item {
  std::unique_ptr<CheckpointImpl> impl;
  uint32_t input = 0;
};

Item read_item(CheckpointImpl& impl, DistcpFiles& files, const DcpLocation& at, const std::string& what) {
  Item item;
  item.input = files.input(at.file, what);
  const std::shared_ptr<const InputFile>& whole = files.file(item.input);
  const std::string where = what + " (" + std::to_string(at.length) + " bytes at offset " + std::to_string(at.offset) + ")";
  try {
    if (!at.transforms.empty()) {
      throw Error(ErrorKind::kUnsupported, "it is stored through the transform '" + at.transforms.front() +
                                               "' (FileSystemWriter's _extensions), which ckptfix does not read");
    }
    whole->check_range(at.offset, at.length, "the item");  // Error(kCorrupt) when truncated
    if (!looks_like_zip(whole->read_bytes(at.offset, std::min<uint64_t>(at.length, 4), "the item").span())) {
      throw Error(ErrorKind::kUnsupported, "it is not a torch.save zip (was it saved with "
                                           "serialization_format=SAFETENSORS? ckptfix reads the default format)");
    }
    item.impl = std::make_unique<CheckpointImpl>();
    // Named by its place in the .distcp file: offsets in its messages are
    // relative to the item.
    item.impl->file = InputFile::slice(whole, at.offset, at.length,
                                       whole->name() + "[" + std::to_string(at.offset) + ":" +
                                           std::to_string(at.offset + at.length) + "]");
    item.impl->limits = impl.limits;
    read_zip_checkpoint(*item.impl);
    impl.embedded_zips.push_back({item.impl->file, where});
  } catch (Error& e) {
    e.in_file(whole->name());
    throw e.within(where);
  }
  for (Storage& s : item.impl->storages) {
    s.input = item.input;
    s.source.offset += at.offset;
    s.source.record = what + ": " + s.source.record;
    if (impl.salvage != nullptr) check_item_crc(*whole, s, what);
  }
  return item;
}

// A copy of the value graph under `root` into `into`, sharing and cycles
// kept; storage indices mapped by `storage_map`. Iterative: a value's
// pickle may nest deeper than the stack would allow.
Value* copy_graph(const Value* root, ValueGraph& into, const std::vector<int32_t>& storage_map) {
  std::unordered_map<const Value*, Value*> copies;
  std::vector<const Value*> order;
  std::vector<const Value*> stack{root};
  auto visit = [&](const Value* v) {
    if (v != nullptr && copies.count(v) == 0) stack.push_back(v);
  };
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (copies.count(v) != 0) continue;
    copies[v] = into.make(v->kind);
    order.push_back(v);
    for (const Value* item : v->items) visit(item);
    if (v->has_parts()) {
      for (const auto& [k, x] : v->entries()) {
        visit(k);
        visit(x);
      }
      visit(v->callable());
      visit(v->args());
      visit(v->kwargs());
      for (const Value* s : v->states()) visit(s);
      visit(v->pid());
    }
  }
  auto map = [&](const Value* v) { return v == nullptr ? nullptr : copies.at(v); };
  for (const Value* v : order) {
    Value* c = copies.at(v);
    c->boolean = v->boolean;
    c->integer = v->integer;  // or float_bits: the same bits
    c->text = v->text;
    c->storage = v->storage < 0 ? -1 : storage_map.at(static_cast<size_t>(v->storage));
    for (const Value* item : v->items) c->items.push_back(map(item));
    if (v->has_parts()) {
      c->name() = v->name();
      for (const auto& [k, x] : v->entries()) c->entries().emplace_back(map(k), map(x));
      c->creation() = v->creation();
      c->callable() = map(v->callable());
      c->args() = map(v->args());
      c->kwargs() = map(v->kwargs());
      for (const Value* s : v->states()) c->states().push_back(map(s));
      c->pid() = map(v->pid());
    }
  }
  return copies.at(root);
}

// Puts values where dcp_to_torch_save's set_element puts them: along the
// path, a missing container is a dict when the next step is a str and a
// list when it is an int; lists are padded with None. Only containers made
// here are descended, and no place is filled twice.
class Placer {
 public:
  explicit Placer(ValueGraph& g) : g_(g), root_(g.make(ValueKind::kDict)) { made_.insert(root_); }
  Value* root() const { return root_; }

  void place(const std::vector<DcpPathStep>& path, Value* value, const std::string& fqn) {
    Value* container = root_;
    for (size_t i = 0; i < path.size(); ++i) {
      const DcpPathStep& step = path[i];
      const bool last = i + 1 == path.size();
      Value** slot = slot_in(container, step, fqn);
      if (last) {
        if (*slot != nullptr && (*slot)->kind != ValueKind::kNone) collide(fqn);
        *slot = value;
        return;
      }
      if (*slot == nullptr || (*slot)->kind == ValueKind::kNone) {
        *slot = g_.make(path[i + 1].is_int ? ValueKind::kList : ValueKind::kDict);
        made_.insert(*slot);
      } else if (made_.count(*slot) == 0) {
        collide(fqn);
      }
      container = *slot;
    }
  }

 private:
  [[noreturn]] static void collide(const std::string& fqn) {
    throw Error(ErrorKind::kCorrupt, "its planner path leads to a place another entry already fills")
        .at("entry '" + fqn + "'");
  }

  // The slot for `step` in `container`, made (empty) when missing.
  Value** slot_in(Value* container, const DcpPathStep& step, const std::string& fqn) {
    if (container->kind == ValueKind::kList) {
      if (!step.is_int) {
        throw Error(ErrorKind::kCorrupt, "its planner path indexes a list with the str '" + step.key + "'")
            .at("entry '" + fqn + "'");
      }
      std::vector<Value*>& items = container->items;
      const size_t padding = static_cast<size_t>(step.index) + 1 > items.size() ? static_cast<size_t>(step.index) + 1 - items.size() : 0;
      if (padding > kMaxPadding - padded_) {
        throw Error(ErrorKind::kLimit, "planner paths pad lists with more than " + std::to_string(kMaxPadding) +
                                           " Nones (index " + std::to_string(step.index) + ")")
            .at("entry '" + fqn + "'");
      }
      padded_ += padding;
      while (items.size() <= static_cast<size_t>(step.index)) items.push_back(g_.make_none());
      return &items[static_cast<size_t>(step.index)];
    }
    std::string key = (step.is_int ? "i" : "s") + (step.is_int ? std::to_string(step.index) : step.key);
    auto& keys = keys_[container];
    auto& entries = container->entries();
    auto [it, fresh] = keys.emplace(std::move(key), entries.size());
    if (fresh) entries.emplace_back(step.is_int ? g_.make_int(step.index) : g_.make_str(step.key), nullptr);
    return &entries[it->second].second;
  }

  // Nones dcp_to_torch_save would pad lists with, in all: a list index in a
  // path says how many, and real checkpoints need a handful.
  static constexpr size_t kMaxPadding = size_t{1} << 20;

  ValueGraph& g_;
  Value* root_;
  size_t padded_ = 0;
  std::unordered_set<const Value*> made_;
  std::unordered_map<const Value*, std::unordered_map<std::string, size_t>> keys_;
};

// A tensor entry: one storage holding the whole tensor, contiguous. The
// chunk's own storage when one chunk is the whole tensor as it is laid out;
// else assembled from the chunks when written.
int32_t tensor_storage(CheckpointImpl& impl, DistcpFiles& files, const DcpEntry& e) {
  const std::string what = "tensor '" + e.fqn + "'";
  auto plan = std::make_shared<GatherPlan>();
  plan->shape = e.size;
  plan->element_size = element_size(e.dtype);
  plan->what = what;
  plan->tiling_checked = e.chunks.size() <= kMaxPairwiseChunks;
  for (const DcpChunk& c : e.chunks) {
    const std::string chunk_what = "chunk at " + shape_text(c.offsets) + " of " + what;
    Item item = read_item(impl, files, c.location, chunk_what);
    const Tensor* t = item.impl->tensor_of(item.impl->root);
    if (t == nullptr || t->kind != TensorKind::kDense) {
      throw Error(ErrorKind::kCorrupt, "the chunk's pickle is not a plain tensor").in_file(files.file(item.input)->name()).at(chunk_what);
    }
    if (t->dtype != e.dtype || t->shape != c.sizes) {
      throw Error(ErrorKind::kCorrupt, "the chunk holds a " + std::string(dtype_name(t->dtype)) + " tensor of size " +
                                           shape_text(t->shape) + " but .metadata says " +
                                           std::string(dtype_name(e.dtype)) + " " + shape_text(c.sizes))
          .in_file(files.file(item.input)->name())
          .at(chunk_what);
    }
    const Storage& s = item.impl->storages[static_cast<size_t>(t->storage)];
    if (s.source.encoding != StorageSource::Encoding::kStored || s.big_endian) {
      throw Error(ErrorKind::kUnsupported, "the chunk's storage is compressed or big-endian, which torch.save never writes")
          .in_file(files.file(item.input)->name())
          .at(chunk_what);
    }
    // The chunk's view must lie inside its storage, and its elements be no
    // more than the storage's bytes (torch writes them equal): a stride of 0
    // must not make a few bytes of input a huge output.
    std::optional<std::string> problem = tensor_view_problem(*t, s);
    if (!problem && t->nbytes() > s.nbytes) {
      problem = "the chunk's " + std::to_string(t->nbytes()) + " bytes of elements are more than its storage's " +
                std::to_string(s.nbytes) + " (a view repeating elements, which torch never saves)";
    }
    if (problem) throw Error(ErrorKind::kCorrupt, *problem).in_file(files.file(item.input)->name()).at(chunk_what);
    const bool whole = t->shape == e.size && t->storage_offset == 0 && t->stride == contiguous_strides(e.size) &&
                       s.nbytes == t->nbytes();
    if (e.chunks.size() == 1 && whole) {
      Storage own = s;
      own.key = std::to_string(impl.storages.size());
      impl.storages.push_back(std::move(own));
      return static_cast<int32_t>(impl.storages.size() - 1);
    }
    GatherChunk g;
    g.offsets = c.offsets;
    g.sizes = c.sizes;
    g.file = files.file(item.input);
    g.data_offset = s.source.offset;
    g.data_bytes = s.nbytes;
    g.crc32 = s.source.crc32;
    g.storage_offset = t->storage_offset;
    g.strides = t->stride;
    g.what = chunk_what;
    plan->chunks.push_back(std::move(g));
  }
  // Row-major order of offsets: the order the reader meets them.
  std::sort(plan->chunks.begin(), plan->chunks.end(),
            [](const GatherChunk& a, const GatherChunk& b) { return a.offsets < b.offsets; });
  uint64_t numel = 1;
  for (int64_t d : e.size) numel *= static_cast<uint64_t>(d);
  Storage s;
  s.key = std::to_string(impl.storages.size());
  s.dtype = e.dtype;
  s.untyped = !storage_class_name(e.dtype);
  s.nbytes = numel * plan->element_size;
  s.numel = s.untyped ? s.nbytes : numel;
  s.location = "cpu";
  s.source.encoding = StorageSource::Encoding::kGathered;
  s.source.length = s.nbytes;
  s.source.record = what + " (assembled from " + std::to_string(e.chunks.size()) + " chunks)";
  s.gather = std::move(plan);
  impl.storages.push_back(std::move(s));
  return static_cast<int32_t>(impl.storages.size() - 1);
}

// A value entry: the object its torch.save zip holds, grafted into the graph.
Value* bytes_value(CheckpointImpl& impl, DistcpFiles& files, const DcpEntry& e) {
  Item item = read_item(impl, files, e.location, "value '" + e.fqn + "'");
  std::vector<int32_t> storage_map;
  for (Storage& s : item.impl->storages) {
    storage_map.push_back(static_cast<int32_t>(impl.storages.size()));
    s.key = std::to_string(impl.storages.size());
    impl.storages.push_back(std::move(s));
  }
  for (GlobalRef g : item.impl->globals) {
    if (!g.where.empty()) g.where = "value '" + e.fqn + "' " + g.where;
    impl.note_use(g);
  }
  impl.opcodes |= item.impl->opcodes;
  return copy_graph(item.impl->root, impl.graph, storage_map);
}

}  // namespace

void read_dcp_checkpoint(CheckpointImpl& impl) {
  if (impl.file->fd() < 0) {
    throw Error(ErrorKind::kUnsupported, "a distributed checkpoint's .metadata held in memory has no directory to read");
  }
  const DcpMetadata metadata = [&] {
    try {
      const FileBytes metadata = impl.file->read_bytes(0, impl.file->size(), ".metadata");
      return parse_dcp_metadata(metadata.span(), impl.limits);
    } catch (Error& e) {
      throw e.within(".metadata");
    }
  }();
  impl.format = CheckpointFormat::kDcp;
  if (impl.salvage != nullptr) impl.salvage->found_by = ".metadata";
  // Laid out as dcp_to_torch_save's torch.save of a plain dict.
  impl.archive_root = "archive";
  impl.style = ArchiveStyle::newest();
  impl.protocol = 2;
  ValueGraph& g = impl.graph;
  DistcpFiles files(impl);
  Placer placer(g);
  Value* ordered_dict = g.make_global("collections", "OrderedDict");
  for (const DcpEntry& e : metadata.entries) {
    Value* value;
    try {
      if (e.is_tensor) {
        const int32_t storage = tensor_storage(impl, files, e);
        value = g.make(ValueKind::kObject);
        make_rebuild_call(g, *value, impl.storages, storage, 0, e.size, contiguous_strides(e.size), false, ordered_dict);
      } else {
        value = bytes_value(impl, files, e);
      }
    } catch (const Error& error) {
      // Salvage: an entry whose .distcp file is missing, cut or damaged is
      // lost, and left out (as a lost tensor is left out of its dict).
      if (impl.salvage == nullptr || (error.kind() != ErrorKind::kCorrupt && error.kind() != ErrorKind::kIo &&
                                      error.kind() != ErrorKind::kNotCheckpoint)) {
        throw;
      }
      Path path;
      for (const DcpPathStep& step : e.path) path.emplace_back(step.is_int ? PathElement(step.index) : PathElement(step.key));
      uint64_t bytes = e.is_tensor ? element_size(e.dtype) : e.location.length;
      for (int64_t d : e.is_tensor ? e.size : std::vector<int64_t>{}) bytes *= static_cast<uint64_t>(d);
      const std::string file = e.is_tensor ? (e.chunks.empty() ? std::string() : e.chunks.front().location.file) : e.location.file;
      impl.salvage->lost.push_back({path_to_string(path), file, bytes, error.what()});
      continue;
    }
    placer.place(e.path, value, e.fqn);
  }
  impl.root = placer.root();
  build_tensor_table(impl);
  note_state_dict_globals(impl);
}

}  // namespace ckptfix
