#include "write/dcp_metadata_pickle.h"

#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <unordered_map>

#include "pickle/pickler.h"
#include "pickle/value.h"

namespace ckptfix {
namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";

// Builds the dataclass objects as CPython pickles them: a dataclass is
// `cls.__new__(cls)` (NEWOBJ of an empty tuple) then BUILD with its
// __dict__; TensorProperties BUILDs the tuple its __getstate__ returns; an
// Enum member and torch.Size are REDUCEd from their class and value.
class MetadataGraph {
 public:
  Value* str(const std::string& s) { return g_.make_str(s); }
  // A field name or constant: one value, so that the pickle writes it once
  // and refers back to it (CPython's memo does the same for the interned
  // names of a dataclass's __dict__, and for torch.strided and the Enum
  // member, which are single objects).
  Value* shared(const std::string& s) {
    Value*& v = names_[s];
    if (v == nullptr) v = g_.make_str(s);
    return v;
  }
  Value* once(const std::string& key, const std::function<Value*()>& make) {
    Value*& v = constants_[key];
    if (v == nullptr) v = make();
    return v;
  }
  Value* integer(int64_t i) { return g_.make_int(i); }

  Value* dict(std::vector<std::pair<Value*, Value*>> entries) {
    Value* d = g_.make(ValueKind::kDict);
    d->entries() = std::move(entries);
    return d;
  }
  Value* tuple(std::vector<Value*> items) { return g_.make_tuple(std::move(items)); }
  Value* list(std::vector<Value*> items) {
    Value* l = g_.make(ValueKind::kList);
    l->items = std::move(items);
    return l;
  }

  // cls.__new__(cls), then BUILD `state` (none: no BUILD, as for a
  // dataclass without fields).
  Value* object(const std::string& module, const std::string& name, Value* state) {
    Value* o = g_.make(ValueKind::kObject);
    o->creation() = ObjectCreation::kNewObj;
    o->callable() = global(module, name);
    o->args() = g_.make_tuple({});
    if (state != nullptr) o->states().push_back(state);
    return o;
  }
  Value* dataclass(const std::string& name, std::vector<std::pair<Value*, Value*>> fields) {
    return object(kMetadataModule, name, dict(std::move(fields)));
  }

  // callable(*args)
  Value* call(const std::string& module, const std::string& name, std::vector<Value*> args) {
    Value* o = g_.make(ValueKind::kObject);
    o->creation() = ObjectCreation::kReduce;
    o->callable() = global(module, name);
    o->args() = g_.make_tuple(std::move(args));
    return o;
  }

  Value* size(const std::vector<int64_t>& dims) {
    std::vector<Value*> items;
    for (int64_t d : dims) items.push_back(integer(d));
    return call("torch", "Size", {g_.make_tuple(std::move(items))});
  }

  // One Value a global, so that the pickle names each once and refers back.
  Value* global(const std::string& module, const std::string& name) {
    Value*& v = globals_[{module, name}];
    if (v == nullptr) v = g_.make_global(module, name);
    return v;
  }

  Value* none() { return g_.make_none(); }
  Value* boolean(bool b) { return g_.make_bool(b); }

 private:
  ValueGraph g_;
  std::map<std::pair<std::string, std::string>, Value*> globals_;
  std::unordered_map<std::string, Value*> names_, constants_;
};

Value* storage_info(MetadataGraph& m, const DcpLocation& at) {
  return m.object("torch.distributed.checkpoint.filesystem", "_StorageInfo",
                  m.dict({{m.shared("relative_path"), m.shared(at.file)},
                          {m.shared("offset"), m.integer(static_cast<int64_t>(at.offset))},
                          {m.shared("length"), m.integer(static_cast<int64_t>(at.length))}}));
}

Value* tensor_metadata(MetadataGraph& m, const DcpEntry& e) {
  // TensorProperties.__getstate__: (dtype, layout, requires_grad,
  // _MEM_FORMAT_ENCODING, pin_memory); the layout through torch's reducer
  // of torch.layout, the memory format contiguous (encoded 0).
  Value* properties =
      m.object(kMetadataModule, "TensorProperties",
               m.tuple({m.global("torch", std::string(dtype_name(e.dtype))),
                        m.once("layout", [&] { return m.call("torch.serialization", "_get_layout", {m.str("torch.strided")}); }),
                        m.boolean(false),
                        m.once("contiguous", [&] { return m.call(kMetadataModule, "_MEM_FORMAT_ENCODING", {m.integer(0)}); }),
                        m.boolean(false)}));
  std::vector<Value*> chunks;
  for (const DcpChunk& c : e.chunks) {
    chunks.push_back(m.dataclass("ChunkStorageMetadata", {{m.shared("offsets"), m.size(c.offsets)}, {m.shared("sizes"), m.size(c.sizes)}}));
  }
  return m.dataclass("TensorStorageMetadata", {{m.shared("properties"), properties},
                                               {m.shared("size"), m.size(e.size)},
                                               {m.shared("chunks"), m.list(std::move(chunks))}});
}

}  // namespace

std::string dcp_metadata_pickle(const std::vector<DcpEntry>& entries, const std::string& checkpoint_id,
                                const std::string& save_id) {
  MetadataGraph m;
  std::vector<std::pair<Value*, Value*>> state_dict_metadata, planner_data, storage_data;
  for (const DcpEntry& e : entries) {
    Value* fqn = m.shared(e.fqn);  // the pickle refers back to it, as CPython's memo does
    std::vector<Value*> path;
    for (const DcpPathStep& step : e.path) path.push_back(step.is_int ? m.integer(step.index) : m.shared(step.key));
    planner_data.emplace_back(fqn, m.tuple(std::move(path)));
    if (e.is_tensor) {
      state_dict_metadata.emplace_back(fqn, tensor_metadata(m, e));
      for (size_t i = 0; i < e.chunks.size(); ++i) {
        Value* index = m.dataclass("MetadataIndex", {{m.shared("fqn"), fqn},
                                                     {m.shared("offset"), m.size(e.chunks[i].offsets)},
                                                     {m.shared("index"), m.integer(static_cast<int64_t>(i))}});
        storage_data.emplace_back(index, storage_info(m, e.chunks[i].location));
      }
    } else {
      state_dict_metadata.emplace_back(fqn, m.object(kMetadataModule, "BytesStorageMetadata", nullptr));
      // A bytes item's offset is the class default, None: torch leaves it out.
      Value* index = m.dataclass("MetadataIndex", {{m.shared("fqn"), fqn}, {m.shared("index"), m.none()}});
      storage_data.emplace_back(index, storage_info(m, e.location));
    }
  }
  Value* storage_meta = m.dataclass("StorageMeta", {{m.shared("checkpoint_id"), m.str(checkpoint_id)},
                                                    {m.shared("save_id"), m.str(save_id)},
                                                    {m.shared("load_id"), m.none()},
                                                    {m.shared("modules"), m.list({})}});
  Value* metadata = m.dataclass("Metadata", {{m.shared("state_dict_metadata"), m.dict(std::move(state_dict_metadata))},
                                             {m.shared("planner_data"), m.dict(std::move(planner_data))},
                                             {m.shared("storage_data"), m.dict(std::move(storage_data))},
                                             {m.shared("storage_meta"), storage_meta},
                                             {m.shared("version"), m.str("1.0.0")}});
  return pickle_protocol2(metadata);
}

std::string random_uuid4() {
  std::random_device device;
  unsigned char b[16];
  for (size_t i = 0; i < 16; i += 4) {
    const uint32_t r = device();
    for (size_t k = 0; k < 4; ++k) b[i + k] = static_cast<unsigned char>(r >> (8 * k));
  }
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  char text[37];
  std::snprintf(text, sizeof text, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

}  // namespace ckptfix
