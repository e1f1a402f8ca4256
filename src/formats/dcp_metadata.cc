#include "formats/dcp_metadata.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "ckptfix/error.h"
#include "io/file_names.h"
#include "pickle/unpickler.h"

namespace ckptfix {
namespace {

constexpr std::string_view kMetadata = "torch.distributed.checkpoint.metadata";
// Dimensions of a tensor.
constexpr size_t kMaxDims = 64;
// A list index in a path: dcp_to_torch_save pads the list with None up to it.
constexpr int64_t kMaxListIndex = int64_t{1} << 20;

// Every global DCP pickles into .metadata (docs/dcp-format-notes.md (a)),
// by exact name: ckptfix calls none of them, it reads their fields. (The
// general policy refuses all of torch.distributed, which holds RPC
// primitives.) Anything else is refused, a known gadget as such.
void check_metadata_global(const std::string& module, const std::string& name, uint64_t /*offset*/) {
  static const std::set<std::pair<std::string_view, std::string_view>> kAllowed = {
      {kMetadata, "Metadata"},
      {kMetadata, "TensorStorageMetadata"},
      {kMetadata, "ChunkStorageMetadata"},
      {kMetadata, "TensorProperties"},
      {kMetadata, "_MEM_FORMAT_ENCODING"},
      {kMetadata, "BytesStorageMetadata"},
      {kMetadata, "MetadataIndex"},
      {kMetadata, "StorageMeta"},
      {"torch.distributed.checkpoint.filesystem", "_StorageInfo"},
      {"torch", "Size"},
      {"torch.serialization", "_get_layout"},
      {"torch", "contiguous_format"},  // TensorProperties of torch <= 2.2 held the memory format itself
      {"torch", "channels_last"},
      {"torch", "channels_last_3d"},
      {"torch", "preserve_format"},
      {"pathlib", "PosixPath"},  // StorageMeta.checkpoint_id: the path the writer was given
      {"pathlib", "WindowsPath"},
      {"pathlib._local", "PosixPath"},
      {"pathlib._local", "WindowsPath"},
  };
  if (kAllowed.count({module, name}) != 0) return;
  if (module == "torch" && dtype_from_torch_attribute(name)) return;
  refuse_dangerous_global(module, name);
  throw Error(ErrorKind::kUnsafe, "the pickle names the global " + module + "." + name +
                                      ", which is not one of the classes torch.distributed.checkpoint writes "
                                      "there; refusing it (torch reads .metadata with pickle.load and would run it)");
}

[[noreturn]] void corrupt(const std::string& message, const std::string& where = {}) {
  Error e(ErrorKind::kCorrupt, message);
  if (!where.empty()) e.at(where);
  throw e;
}

bool is_instance(const Value* v, std::string_view module, std::string_view name) {
  return v != nullptr && v->kind == ValueKind::kObject && v->callable() != nullptr && v->callable()->is_global(module, name);
}

// The BUILD state of a DCP object (a dataclass's __dict__), or null.
const Value* state_of(const Value* object) {
  if (object->states().size() != 1) return nullptr;
  return object->states()[0];
}

// A field of a dataclass: its BUILD dict's entry, or null when absent (the
// class default then applies: torch 2.6 pickles no Metadata.version).
const Value* field(const Value* object, std::string_view key) {
  const Value* state = state_of(object);
  if (state == nullptr || state->kind != ValueKind::kDict) return nullptr;
  for (const auto& [k, v] : state->entries()) {
    if (k->is_str() && k->text == key) return v;
  }
  return nullptr;
}

const Value* object_of(const Value* v, std::string_view module, std::string_view name, const std::string& where) {
  if (!is_instance(v, module, name)) corrupt("expected a " + std::string(name), where);
  return v;
}

std::string str_of(const Value* v, const std::string& what, const std::string& where) {
  if (v == nullptr || !v->is_str()) corrupt(what + " is not a str", where);
  return v->text;
}

int64_t int_of(const Value* v, const std::string& what, const std::string& where) {
  if (v == nullptr || v->kind != ValueKind::kInt) corrupt(what + " is not an int", where);
  return v->integer;
}

// torch.Size((d0, d1, ...)): REDUCE of the global with a tuple of ints.
std::vector<int64_t> size_of(const Value* v, const std::string& what, const std::string& where) {
  if (!is_instance(v, "torch", "Size") || v->args() == nullptr || v->args()->items.size() != 1 ||
      v->args()->items[0]->kind != ValueKind::kTuple) {
    corrupt(what + " is not a torch.Size", where);
  }
  const std::vector<Value*>& dims = v->args()->items[0]->items;
  if (dims.size() > kMaxDims) corrupt(what + " has " + std::to_string(dims.size()) + " dimensions", where);
  std::vector<int64_t> out;
  for (const Value* d : dims) {
    const int64_t n = int_of(d, what, where);
    if (n < 0) corrupt(what + " has a negative dimension", where);
    out.push_back(n);
  }
  return out;
}

DcpLocation location_of(const Value* info, const std::string& where) {
  object_of(info, "torch.distributed.checkpoint.filesystem", "_StorageInfo", where);
  DcpLocation loc;
  loc.file = str_of(field(info, "relative_path"), "_StorageInfo.relative_path", where);
  const int64_t offset = int_of(field(info, "offset"), "_StorageInfo.offset", where);
  const int64_t length = int_of(field(info, "length"), "_StorageInfo.length", where);
  if (offset < 0 || length < 0) corrupt("_StorageInfo has a negative offset or length", where);
  loc.offset = static_cast<uint64_t>(offset);
  loc.length = static_cast<uint64_t>(length);
  // Items are files in the checkpoint's directory, never paths: .metadata
  // must not make ckptfix open files elsewhere.
  if (!is_plain_file_name(loc.file)) {
    throw Error(ErrorKind::kUnsafe, "an item is stored in '" + loc.file +
                                        "', which is not a file name in the checkpoint's directory")
        .at(where);
  }
  if (const Value* t = field(info, "transform_descriptors"); t != nullptr && t->kind != ValueKind::kNone) {
    if (t->kind != ValueKind::kList) corrupt("_StorageInfo.transform_descriptors is not a list", where);
    for (const Value* d : t->items) loc.transforms.push_back(str_of(d, "a transform descriptor", where));
  }
  return loc;
}

// storage_data's key: a MetadataIndex's fqn and offset (what its equality
// compares; `index` is only a hint).
std::string storage_key(const std::string& fqn, const std::optional<std::vector<int64_t>>& offset) {
  return fqn + '\0' + (offset ? shape_text(*offset) : "None");
}

std::vector<DcpPathStep> path_of(const Value* planned, const std::string& fqn, uint64_t max_depth) {
  const std::string where = "planner_data entry '" + fqn + "'";
  if (planned == nullptr) return {DcpPathStep{false, fqn, 0}};
  if (planned->kind != ValueKind::kTuple || planned->items.empty()) corrupt("the path is not a tuple of keys", where);
  if (planned->items.size() > max_depth) {
    throw Error(ErrorKind::kLimit, "the path has " + std::to_string(planned->items.size()) +
                                       " steps, more than max_depth (" + std::to_string(max_depth) + ")")
        .at(where);
  }
  std::vector<DcpPathStep> path;
  for (const Value* step : planned->items) {
    if (step->is_str()) {
      path.push_back({false, step->text, 0});
    } else if (step->kind == ValueKind::kInt && step->integer >= 0 && step->integer <= kMaxListIndex) {
      path.push_back({true, {}, step->integer});
    } else {
      corrupt("the path holds a step that is neither a str nor a list index up to " + std::to_string(kMaxListIndex), where);
    }
  }
  return path;
}

void check_chunks(const DcpEntry& e, const std::string& where) {
  // Its volume, and the product of its non-zero sizes (the contiguous
  // strides of its output), fit in 62 bits.
  uint64_t volume = 1;
  uint64_t span = 1;
  for (int64_t d : e.size) {
    const uint64_t extent = static_cast<uint64_t>(std::max<int64_t>(d, 1));
    if (span > (uint64_t{1} << 62) / extent) corrupt("the tensor's size is too large", where);
    span *= extent;
    volume *= static_cast<uint64_t>(d);
  }
  uint64_t covered = 0;
  for (const DcpChunk& c : e.chunks) {
    const std::string at = where + ", chunk at " + shape_text(c.offsets);
    if (c.offsets.size() != e.size.size() || c.sizes.size() != e.size.size()) {
      corrupt("the chunk has " + std::to_string(c.sizes.size()) + " dimensions, the tensor " + std::to_string(e.size.size()), at);
    }
    uint64_t chunk_volume = 1;
    for (size_t d = 0; d < e.size.size(); ++d) {
      if (c.offsets[d] > e.size[d] || c.sizes[d] > e.size[d] - c.offsets[d]) {
        corrupt("the chunk " + shape_text(c.offsets) + " + " + shape_text(c.sizes) + " is outside the tensor's size " +
                    shape_text(e.size), at);
      }
      chunk_volume *= static_cast<uint64_t>(c.sizes[d]);
    }
    covered += chunk_volume;  // each <= volume < 2^62, and there are fewer than 2^18 chunks
  }
  if (covered != volume) {
    corrupt("the chunks hold " + std::to_string(covered) + " elements of the tensor's " + std::to_string(volume) +
                (covered < volume ? ": some are missing" : ": some overlap"), where);
  }
  if (e.chunks.size() > kMaxPairwiseChunks) return;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    for (size_t j = i + 1; j < e.chunks.size(); ++j) {
      const DcpChunk& a = e.chunks[i];
      const DcpChunk& b = e.chunks[j];
      bool overlap = true;
      for (size_t d = 0; d < e.size.size() && overlap; ++d) {
        overlap = std::max(a.offsets[d], b.offsets[d]) < std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
      }
      if (overlap) {
        corrupt("the chunks at " + shape_text(a.offsets) + " and " + shape_text(b.offsets) + " overlap", where);
      }
    }
  }
}

}  // namespace

DcpMetadata parse_dcp_metadata(std::span<const std::byte> pickle, const ReadLimits& limits) {
  if (pickle.size() > limits.max_pickle_bytes) {
    throw Error(ErrorKind::kLimit, "it is " + std::to_string(pickle.size()) + " bytes, more than max_pickle_bytes (" +
                                       std::to_string(limits.max_pickle_bytes) + ")");
  }
  ValueGraph graph;
  UnpickleOptions options;
  options.max_values = limits.max_pickle_values != 0 ? limits.max_pickle_values : 2 * pickle.size() + (uint64_t{1} << 20);
  options.max_name_bytes = limits.max_name_bytes;
  options.on_global = check_metadata_global;
  const Value* root = unpickle(pickle, graph, options).root;

  const Value* metadata = object_of(root, kMetadata, "Metadata", "the pickle's root");
  DcpMetadata out;
  if (const Value* version = field(metadata, "version"); version != nullptr && version->is_str()) out.version = version->text;
  const Value* sd = field(metadata, "state_dict_metadata");
  if (sd == nullptr || sd->kind != ValueKind::kDict) corrupt("Metadata.state_dict_metadata is not a dict");
  const Value* planner = field(metadata, "planner_data");
  if (planner != nullptr && planner->kind != ValueKind::kNone && planner->kind != ValueKind::kDict) {
    corrupt("Metadata.planner_data is not a dict");
  }
  std::map<std::string, const Value*> planned;
  if (planner != nullptr && planner->kind == ValueKind::kDict) {
    for (const auto& [k, v] : planner->entries()) planned[str_of(k, "a planner_data key", "planner_data")] = v;
  }

  // storage_data: (fqn, chunk offset) -> where the item is.
  const Value* storage = field(metadata, "storage_data");
  if (storage == nullptr || storage->kind != ValueKind::kDict) corrupt("Metadata.storage_data is not a dict");
  if (storage->entries().size() > limits.max_storages) {
    throw Error(ErrorKind::kLimit, "storage_data lists " + std::to_string(storage->entries().size()) +
                                       " items, more than max_storages (" + std::to_string(limits.max_storages) + ")");
  }
  std::map<std::string, std::pair<DcpLocation, bool>> located;  // key -> (location, used)
  for (const auto& [k, v] : storage->entries()) {
    object_of(k, kMetadata, "MetadataIndex", "a storage_data key");
    const std::string fqn = str_of(field(k, "fqn"), "MetadataIndex.fqn", "storage_data");
    const std::string where = "storage_data entry '" + fqn + "'";
    std::optional<std::vector<int64_t>> offset;
    if (const Value* o = field(k, "offset"); o != nullptr && o->kind != ValueKind::kNone) {
      offset = size_of(o, "MetadataIndex.offset", where);
    }
    const std::string key = storage_key(fqn, offset);
    if (!located.emplace(key, std::make_pair(location_of(v, where), false)).second) {
      corrupt("the item is listed twice", where + (offset ? " at " + shape_text(*offset) : ""));
    }
  }

  if (sd->entries().size() > limits.max_storages) {
    throw Error(ErrorKind::kLimit, "state_dict_metadata lists " + std::to_string(sd->entries().size()) +
                                       " entries, more than max_storages (" + std::to_string(limits.max_storages) + ")");
  }
  std::set<std::string> seen;
  for (const auto& [k, v] : sd->entries()) {
    DcpEntry e;
    e.fqn = str_of(k, "a state_dict_metadata key", "state_dict_metadata");
    const std::string where = "entry '" + e.fqn + "'";
    if (!seen.insert(e.fqn).second) corrupt("state_dict_metadata lists it twice", where);
    const auto planned_at = planned.find(e.fqn);
    e.path = path_of(planned_at == planned.end() ? nullptr : planned_at->second, e.fqn, limits.max_depth);
    auto take = [&](const std::optional<std::vector<int64_t>>& offset) -> DcpLocation {
      const auto it = located.find(storage_key(e.fqn, offset));
      if (it == located.end()) {
        corrupt("storage_data does not say where " + (offset ? "the chunk at " + shape_text(*offset) : "its bytes") +
                    " are", where);
      }
      it->second.second = true;
      return it->second.first;
    };
    if (is_instance(v, kMetadata, "BytesStorageMetadata")) {
      e.location = take(std::nullopt);
    } else if (is_instance(v, kMetadata, "TensorStorageMetadata")) {
      e.is_tensor = true;
      const Value* props = object_of(field(v, "properties"), kMetadata, "TensorProperties", where);
      // torch >= 2.3: BUILD (dtype, layout, requires_grad, memory format, pin_memory); before, a dict.
      const Value* state = state_of(props);
      const Value* dtype = nullptr;
      const Value* layout = nullptr;
      if (state != nullptr && state->kind == ValueKind::kTuple && state->items.size() >= 2) {
        dtype = state->items[0];
        layout = state->items[1];
      } else {
        dtype = field(props, "dtype");
        layout = field(props, "layout");
      }
      const auto parsed = dtype != nullptr && dtype->kind == ValueKind::kGlobal && dtype->text == "torch"
                              ? dtype_from_torch_attribute(dtype->name())
                              : std::nullopt;
      if (!parsed) corrupt("TensorProperties.dtype is not a torch dtype", where);
      e.dtype = *parsed;
      if (layout != nullptr && layout->kind != ValueKind::kNone) {
        const bool strided = is_instance(layout, "torch.serialization", "_get_layout") && layout->args() != nullptr &&
                             layout->args()->items.size() == 1 && layout->args()->items[0]->is_str() &&
                             layout->args()->items[0]->text == "torch.strided";
        if (!strided) throw Error(ErrorKind::kUnsupported, "the tensor's layout is not torch.strided").at(where);
      }
      e.size = size_of(field(v, "size"), "TensorStorageMetadata.size", where);
      const Value* chunks = field(v, "chunks");
      if (chunks == nullptr || chunks->kind != ValueKind::kList) corrupt("TensorStorageMetadata.chunks is not a list", where);
      for (const Value* c : chunks->items) {
        object_of(c, kMetadata, "ChunkStorageMetadata", where);
        DcpChunk chunk;
        chunk.offsets = size_of(field(c, "offsets"), "a chunk's offsets", where);
        chunk.sizes = size_of(field(c, "sizes"), "a chunk's sizes", where);
        chunk.location = take(chunk.offsets);
        e.chunks.push_back(std::move(chunk));
      }
      check_chunks(e, where);
    } else {
      corrupt("its metadata is neither a TensorStorageMetadata nor a BytesStorageMetadata", where);
    }
    out.entries.push_back(std::move(e));
  }
  // Items are written one after another: no two share bytes. (Else a few
  // bytes named by many keys could make an output of any size.)
  std::vector<std::pair<const DcpLocation*, const std::string*>> spans;
  for (const auto& [key, item] : located) spans.emplace_back(&item.first, &key);
  std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->file, a.first->offset) < std::tie(b.first->file, b.first->offset);
  });
  for (size_t i = 1; i < spans.size(); ++i) {
    const DcpLocation& prev = *spans[i - 1].first;
    const DcpLocation& next = *spans[i].first;
    if (prev.file == next.file && next.offset - prev.offset < prev.length) {
      const auto fqn = [](const std::string* key) { return key->substr(0, key->find('\0')); };
      corrupt("items of '" + fqn(spans[i - 1].second) + "' and '" + fqn(spans[i].second) + "' overlap in '" +
              next.file + "' at offset " + std::to_string(next.offset));
    }
  }
  for (const auto& [key, item] : located) {
    if (!item.second) {
      corrupt("storage_data lists an item of '" + key.substr(0, key.find('\0')) +
              "' that state_dict_metadata does not describe");
    }
  }
  return out;
}

}  // namespace ckptfix
