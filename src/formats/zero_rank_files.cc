// Reading a ZeRO tag directory's rank files as data (formats/zero_rank_files.h).
#include "formats/zero_rank_files.h"

#include "io/bytes.h"
#include "model/graph_walk.h"
#include "model/torch_objects.h"

namespace ckptfix::zero {

const Value* entry(const Value* dict, std::string_view key) {
  if (dict == nullptr || !is_dict_like(*dict)) return nullptr;
  for (const auto& [k, v] : dict->entries()) {
    if (k->is_str() && k->str() == key) return v;
  }
  return nullptr;
}

std::map<std::string_view, const Value*> by_name(const Value* dict) {
  std::map<std::string_view, const Value*> out;
  if (dict == nullptr || !is_dict_like(*dict)) return out;
  for (const auto& [k, v] : dict->entries()) {
    if (k->is_str()) out.emplace(k->str(), v);
  }
  return out;
}

const Value* lookup(const std::map<std::string_view, const Value*>& names, const std::string& key) {
  const auto it = names.find(key);
  return it == names.end() ? nullptr : it->second;
}

uint64_t checked_numel(const std::vector<int64_t>& shape, const OpenedFile& f, const std::string& at) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    const auto next = checked_mul(n, static_cast<uint64_t>(d));
    if (!next || *next > (uint64_t{1} << 62)) throw f.error(ErrorKind::kCorrupt, "its shape " + shape_text(shape) + " overflows", at);
    n = *next;
  }
  return n;
}

Partition partition(const OpenedFile& f, const Value* v, const std::string& what) {
  const Tensor& t = f.tensor(v, what);
  const Storage& s = f.storage(t);
  if (t.shape.size() != 1 || (t.shape[0] > 1 && t.stride[0] != 1)) {
    throw f.error(ErrorKind::kCorrupt, "a flat partition is a contiguous 1-D tensor, and this one has shape " +
                                           shape_text(t.shape),
                  what);
  }
  if (s.source.encoding != StorageSource::Encoding::kStored || s.big_endian) {
    throw f.error(ErrorKind::kUnsupported, "the partition's storage is compressed or big-endian, which torch.save never writes", what);
  }
  if (!is_floating(t.dtype)) {
    throw f.error(ErrorKind::kCorrupt, "a partition of master weights is floating point, and this one is " +
                                           std::string(dtype_name(t.dtype)),
                  what);
  }
  Partition p;
  p.file = &f;
  p.input = f.file();
  p.numel = static_cast<uint64_t>(t.shape[0]);
  p.storage_offset = static_cast<uint64_t>(t.storage_offset);
  p.record_offset = s.source.offset;
  p.record_bytes = s.nbytes;
  p.crc32 = s.source.crc32;
  p.dtype = t.dtype;
  p.what = what;
  // Validated views (open_data_file) lie inside their storages.
  return p;
}

std::vector<std::vector<ParamShape>> param_shapes(const OpenedFile& model) {
  const Value* groups = model.require(model.root(), "param_shapes", "model states");
  if (groups->kind != ValueKind::kList && groups->kind != ValueKind::kTuple) {
    throw model.error(ErrorKind::kCorrupt, "param_shapes is not a list", "param_shapes");
  }
  std::vector<std::vector<ParamShape>> out;
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const Value* group = groups->items[g];
    const std::string at = "param_shapes[" + std::to_string(g) + "]";
    if (!is_dict_like(*group)) throw model.error(ErrorKind::kCorrupt, "expected a dict of parameter sizes", at);
    std::vector<ParamShape>& shapes = out.emplace_back();
    for (const auto& [k, v] : group->entries()) {
      if (!k->is_str()) throw model.error(ErrorKind::kCorrupt, "a parameter name is not a str", at);
      ParamShape p;
      p.name = std::string(k->str());
      p.shape = model.shape(v, at + "['" + p.name + "']");
      p.numel = checked_numel(p.shape, model, at + "['" + p.name + "']");
      shapes.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<std::string> str_list(const OpenedFile& f, const Value* v, const std::string& at) {
  std::vector<std::string> out;
  if (is_none(v)) return out;
  if (v->kind != ValueKind::kList && v->kind != ValueKind::kTuple) throw f.error(ErrorKind::kCorrupt, "expected a list of names", at);
  for (const Value* s : v->items) {
    if (!s->is_str()) throw f.error(ErrorKind::kCorrupt, "expected a list of names", at);
    out.emplace_back(s->str());
  }
  return out;
}

int64_t zero_stage(const OpenedFile& f, const Value* v) {
  if (v != nullptr && v->kind == ValueKind::kObject && v->args() != nullptr && v->args()->items.size() == 2 &&
      v->callable() != nullptr &&
      (v->callable()->is_global("builtins", "getattr") || v->callable()->is_global("__builtin__", "getattr")) &&
      v->args()->items[0]->is_global("deepspeed.runtime.zero.config", "ZeroStageEnum") && v->args()->items[1]->is_str()) {
    // DeepSpeed's members: disabled, optimizer_states, gradients, weights (and max_stage, = weights).
    const std::string_view member = v->args()->items[1]->str();
    constexpr std::pair<std::string_view, int64_t> kMembers[] = {
        {"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}, {"max_stage", 3}};
    for (const auto& [name, stage] : kMembers) {
      if (member == name && stage > 0) return stage;
    }
    throw f.error(ErrorKind::kCorrupt, "ZeroStageEnum." + std::string(member) + " is not ZeRO stage 1, 2 or 3",
                  "optimizer_state_dict/zero_stage");
  }
  if (v != nullptr && v->kind == ValueKind::kObject && v->args() != nullptr && v->args()->items.size() == 1) {
    v = v->args()->items[0];
  }
  const int64_t stage = f.integer(v, "optimizer_state_dict/zero_stage");
  if (stage < 1 || stage > 3) throw f.error(ErrorKind::kCorrupt, "ZeRO stage " + std::to_string(stage) + " is not 1, 2 or 3", "optimizer_state_dict/zero_stage");
  return stage;
}

}  // namespace ckptfix::zero
