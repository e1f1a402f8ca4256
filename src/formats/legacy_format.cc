// torch < 1.6 stream checkpoints. Five pickles back to back, then the data:
//   1. magic number 0x1950a86a20f9469cfc6c   2. protocol version 1001
//   3. sys_info {'protocol_version', 'little_endian', 'type_sizes'}
//   4. the object, whose storages are persistent ids
//      ('storage', <class>, key, location, numel, view_metadata)
//   5. the storage keys, sorted
// then, for each key in that order, an int64 little-endian element count and
// the raw little-endian bytes. See docs/format.md.
#include <unordered_map>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/prune_lost.h"
#include "model/torch_objects.h"
#include "pickle/unpickler.h"

namespace ckptfix {
namespace {

// 0x1950a86a20f9469cfc6c as pickle's LONG1 stores it: little-endian.
constexpr unsigned char kMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kProtocolVersion = 1001;

struct LegacyData {
  uint64_t offset = 0;  // first data byte
  uint64_t count = 0;   // elements, from the file
};

// Reads the legacy file whose whole bytes are `bytes`.
void read_legacy_bytes(CheckpointImpl& impl, std::span<const std::byte> bytes) {
  impl.format = CheckpointFormat::kLegacy;
  const InputFile& file = *impl.file;
  uint64_t pos = 0;
  ValueGraph scratch;  // the header pickles are not part of the checkpoint

  UnpickleOptions options;
  options.max_values = impl.pickle_values();
  options.max_name_bytes = impl.limits.max_name_bytes;
  const char* pickle_name = "";
  // The place of an offset in the pickle being read, as errors name it.
  auto place = [&pickle_name](uint64_t offset) {
    return "offset " + hex_offset(offset) + " (legacy " + pickle_name + " pickle)";
  };
  options.on_global = [&impl, &place](const std::string& module, const std::string& name, uint64_t offset) {
    if (GlobalRef* first = impl.note_global(module, name)) first->where = place(offset);
  };
  auto next_pickle = [&](ValueGraph& graph, const char* what) -> Value* {
    options.base_offset = pos;
    pickle_name = what;
    try {
      UnpickleResult r = unpickle(bytes.subspan(pos), graph, options);
      impl.note_usages(r.globals, place);
      pos += r.length;
      impl.opcodes |= r.opcodes;  // torch's weights_only reader reads all five pickles
      if (&graph == &impl.graph) impl.protocol = r.protocol;
      return r.root;
    } catch (Error& e) {
      // The unpickler reports "+<file offset>"; say which pickle it was in.
      const std::string& at = e.location();
      e.set_location(at.empty() || at[0] != '+' ? std::string("legacy ") + what + " pickle: " + at
                                                : "offset " + at.substr(1) + " (legacy " + what + " pickle)");
      throw;
    }
  };

  const Value* magic = next_pickle(scratch, "magic number");
  if (magic->kind != ValueKind::kBigInt || magic->text != std::string(reinterpret_cast<const char*>(kMagic), sizeof kMagic)) {
    throw Error(ErrorKind::kNotCheckpoint,
                "file is a pickle but not a torch.save checkpoint (the legacy magic number is missing)");
  }
  const Value* version = next_pickle(scratch, "protocol version");
  if (version->kind != ValueKind::kInt || version->integer != kProtocolVersion) {
    throw Error(ErrorKind::kUnsupported, "legacy protocol version is not 1001");
  }
  next_pickle(scratch, "sys_info");  // byte order of the data is little-endian regardless
  impl.root = next_pickle(impl.graph, "object");
  const Value* keys = next_pickle(scratch, "storage key list");
  if (keys->kind != ValueKind::kList) throw Error(ErrorKind::kCorrupt, "legacy storage key list is not a list");
  if (keys->items.size() > impl.limits.max_storages) {
    throw Error(ErrorKind::kLimit, "the file has " + std::to_string(keys->items.size()) +
                                       " storages (limit max_storages = " + std::to_string(impl.limits.max_storages) +
                                       ")")
        .at("legacy storage key list");
  }

  // Element sizes come from the persistent ids; the data section has only counts.
  std::unordered_map<std::string, uint32_t> element_sizes;
  impl.graph.for_each([&](Value& v) {
    if (v.kind != ValueKind::kPersistentId || v.pid() == nullptr) return;
    if (auto pid = parse_storage_pid(*v.pid())) element_sizes.emplace(pid->key, storage_element_size(*pid));
  });

  std::unordered_map<std::string, LegacyData> data;
  // Salvage (impl.salvage set): why the storages from the first one cut on are lost.
  std::string lost_from_here;
  for (const Value* key : keys->items) {
    if (!key->is_str() && key->kind != ValueKind::kPyStr) {
      throw Error(ErrorKind::kCorrupt, "legacy storage key list holds a non-string key");
    }
    auto size = element_sizes.find(key->text);
    if (size == element_sizes.end()) {
      throw Error(ErrorKind::kCorrupt, "legacy storage key list names '" + key->text + "', which the pickle never uses");
    }
    const std::string what = "storage '" + key->text + "' data";
    if (!lost_from_here.empty()) {  // salvage: after a cut, every later storage is lost too
      impl.salvage->lost_storages.emplace(key->text, lost_from_here);
      continue;
    }
    if (impl.salvage != nullptr && file.size() < pos + 8) {
      lost_from_here = "cut at offset " + hex_offset(file.size()) + " (the file ends there)";
      impl.salvage->lost_storages.emplace(key->text, lost_from_here);
      continue;
    }
    const FileBytes header = file.read_bytes(pos, 8, what + " header");
    LegacyData d;
    d.count = load_le<uint64_t>(header.data());
    d.offset = pos + 8;
    const auto length = checked_mul(d.count, size->second);
    if (impl.salvage != nullptr && (!length || *length > file.size() - d.offset)) {
      lost_from_here = length ? "cut at offset " + hex_offset(file.size()) + " (the file ends there)"
                              : "its element count at offset " + hex_offset(pos) + " is absurd (damaged)";
      impl.salvage->lost_storages.emplace(key->text, lost_from_here);
      continue;
    }
    if (!length) throw Error(ErrorKind::kCorrupt, what + " at offset " + hex_offset(pos) + " has an absurd element count");
    file.check_range(d.offset, *length, what);  // throws if truncated
    pos = d.offset + *length;
    data.emplace(key->text, d);
  }

  // Legacy files refer to nn.Module classes by ('module', cls, file, source)
  // persistent ids; torch's loader returns cls. Zip files have no such ids,
  // so make each one the class itself.
  impl.graph.for_each([](Value& v) {
    if (v.kind != ValueKind::kPersistentId || v.pid() == nullptr || v.pid()->kind != ValueKind::kTuple) return;
    const auto& items = v.pid()->items;
    if (items.size() >= 2 && items[0]->is_str() && items[0]->text == "module" && items[1]->kind == ValueKind::kGlobal) {
      const Value* cls = items[1];
      v.kind = ValueKind::kGlobal;
      v.text = cls->text;
      v.name() = cls->name();
      v.pid() = nullptr;
    }
  });

  if (impl.salvage != nullptr) {
    impl.salvage->found_by = "legacy storage section";
    prune_lost_tensors(impl);
  }
  build_storage_table(impl, [&](const std::string& key) {
    auto it = data.find(key);
    if (it == data.end()) {
      throw Error(ErrorKind::kCorrupt, "storage '" + key + "' is used by the pickle but has no data in the file");
    }
    LocatedData located;
    located.source.encoding = StorageSource::Encoding::kStored;
    located.source.offset = it->second.offset;
    located.source.record = "storage '" + key + "' data";
    const uint32_t elem = element_sizes.at(key);
    located.source.length = it->second.count * elem;
    located.available = located.source.length;
    return located;
  });
  build_tensor_table(impl);
}

}  // namespace

void read_legacy_checkpoint(CheckpointImpl& impl) {
  // The five pickles are parsed where they lie, at the start of the file;
  // the mapping goes when the reading is done, and the storages' data is
  // never touched through it. A file that shrinks meanwhile is reported as
  // such, not as whatever its lost bytes (read as zeros) look like.
  const MappedRange mapped = impl.file->map_range(0, impl.file->size(), "legacy pickles");
  try {
    read_legacy_bytes(impl, mapped.span());
  } catch (...) {
    mapped.check_intact();
    throw;
  }
  mapped.check_intact();
}

}  // namespace ckptfix
