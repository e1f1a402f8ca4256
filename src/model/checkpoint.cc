#include <algorithm>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "io/bytes.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"
#include "pickle/global_policy.h"
#include "pickle/unpickler.h"

namespace ckptfix {

std::string_view format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kZip: return "zip";
    case CheckpointFormat::kLegacy: return "legacy";
    case CheckpointFormat::kSafetensors: return "safetensors";
    case CheckpointFormat::kShardIndex: return "shard index";
    case CheckpointFormat::kDcp: return "distributed (DCP)";
    case CheckpointFormat::kZero: return "DeepSpeed ZeRO";
  }
  return "?";
}

namespace {

// Pickles name the same global many times; each is recorded once. The key
// is unambiguous ("a.b" + "c" and "a" + "b.c" differ).
std::string global_key(const std::string& module, const std::string& name) {
  return std::to_string(module.size()) + ":" + module + name;
}

}  // namespace

GlobalRef* CheckpointImpl::note_global(const std::string& module, const std::string& name) {
  std::string key = global_key(module, name);
  if (global_index.count(key) != 0) return nullptr;
  const GlobalClass c = classify_global(module, name);
  if (c.kind == GlobalKind::kGadget && !gadgets_as_data) throw dangerous_global_error(module, name, c.matched);
  global_index.emplace(std::move(key), globals.size());
  globals.push_back(judged_global(module, name));
  return &globals.back();
}

GlobalRef judged_global(const std::string& module, const std::string& name) {
  const GlobalClass c = classify_global(module, name);
  GlobalRef g;
  g.module = module;
  g.name = name;
  g.kind = c.kind;
  g.allowed_since = c.allowed_since;
  g.exists_in_torch_1_13 = exists_in_torch_1_13(module, name);
  return g;
}

void CheckpointImpl::note_use(const GlobalRef& used) {
  note_global(used.module, used.name);
  GlobalRef& g = globals[global_index.at(global_key(used.module, used.name))];
  if (used.use < g.use || (used.use == g.use && !g.where.empty())) return;  // the first place of the strongest use
  g.use = used.use;
  g.where = used.where;
  g.how = used.how;
}

void CheckpointImpl::note_usages(const std::vector<GlobalUsage>& usages,
                                 const std::function<std::string(uint64_t)>& place) {
  for (const GlobalUsage& u : usages) {
    GlobalRef used;
    used.module = u.module;
    used.name = u.name;
    used.use = u.use;
    used.where = place(u.offset);
    used.how = u.how;
    note_use(used);
  }
}

std::string CheckpointImpl::pickle_place(uint64_t offset) const {
  if (offset == kNoOffset) return "";
  if (format == CheckpointFormat::kLegacy) return "offset " + hex_offset(offset) + " (legacy object pickle)";
  return pickle_record + "+" + hex_offset(offset);
}

uint64_t CheckpointImpl::walk_steps() const {
  if (limits.max_walk_steps != 0) return limits.max_walk_steps;
  return (uint64_t{1} << 21) + 16 * static_cast<uint64_t>(graph.size());
}

uint64_t max_pickle_values(const ReadLimits& limits, uint64_t file_size) {
  if (limits.max_pickle_values != 0) return limits.max_pickle_values;
  return (uint64_t{1} << 20) + 2 * file_size;
}

uint64_t CheckpointImpl::pickle_values() const { return max_pickle_values(limits, file->size()); }

namespace {

struct LimitField {
  std::string_view name;
  uint64_t ReadLimits::*field;
};

constexpr LimitField kLimitFields[] = {
    {"max_pickle_bytes", &ReadLimits::max_pickle_bytes},
    {"max_pickle_values", &ReadLimits::max_pickle_values},
    {"max_depth", &ReadLimits::max_depth},
    {"max_name_bytes", &ReadLimits::max_name_bytes},
    {"max_walk_steps", &ReadLimits::max_walk_steps},
    {"max_inflate_ratio", &ReadLimits::max_inflate_ratio},
    {"inflate_allowance_bytes", &ReadLimits::inflate_allowance_bytes},
    {"max_inflated_bytes", &ReadLimits::max_inflated_bytes},
    {"max_storages", &ReadLimits::max_storages},
};

}  // namespace

bool ReadLimits::set(std::string_view name, uint64_t value) {
  for (const LimitField& f : kLimitFields) {
    if (f.name == name) {
      this->*f.field = value;
      return true;
    }
  }
  return false;
}

std::vector<std::string_view> ReadLimits::names() {
  std::vector<std::string_view> out;
  for (const LimitField& f : kLimitFields) out.push_back(f.name);
  return out;
}

Checkpoint::Checkpoint(std::unique_ptr<CheckpointImpl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::file_name() const { return impl_->file->name(); }
const ReadLimits& Checkpoint::read_limits() const { return impl_->limits; }
uint64_t Checkpoint::file_size() const { return impl_->file->size(); }

std::vector<std::string> Checkpoint::shard_files() const {
  std::vector<std::string> out;
  for (const auto& f : impl_->shards) out.push_back(f->name());
  return out;
}

const std::optional<ZeroRunInfo>& Checkpoint::zero_run() const { return impl_->zero; }

const std::optional<std::vector<std::pair<std::string, std::string>>>& Checkpoint::safetensors_metadata() const {
  return impl_->safetensors_metadata;
}
CheckpointFormat Checkpoint::format() const { return impl_->format; }
const std::string& Checkpoint::archive_root() const { return impl_->archive_root; }
bool Checkpoint::big_endian() const { return impl_->big_endian; }
int Checkpoint::pickle_protocol() const { return impl_->protocol; }

namespace {

template <typename Row, typename View>
const View& row_at(const void* table, size_t i) {
  return (*static_cast<const std::vector<Row>*>(table))[i];
}

}  // namespace

TableView<StorageInfo> Checkpoint::storages() const {
  return {&impl_->storages, impl_->storages.size(), &row_at<Storage, StorageInfo>};
}
TableView<TensorInfo> Checkpoint::tensors() const {
  return {&impl_->tensors, impl_->tensors.size(), &row_at<Tensor, TensorInfo>};
}
const std::vector<GlobalRef>& Checkpoint::globals() const { return impl_->globals; }
const OpcodeSet& Checkpoint::pickle_opcodes() const { return impl_->opcodes; }

const Tensor* CheckpointImpl::tensor_of(const Value* v) const {
  const size_t* index = tensor_by_value.find(v);
  return index == nullptr ? nullptr : &tensors[*index];
}

std::vector<std::string> Checkpoint::record_names() const {
  std::vector<std::string> names;
  if (impl_->zip) {
    for (const ZipEntry& e : impl_->zip->entries()) names.push_back(e.name);
  }
  return names;
}

}  // namespace ckptfix
