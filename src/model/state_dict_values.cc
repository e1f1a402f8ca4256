#include "model/state_dict_values.h"

#include <algorithm>

#include "model/graph_walk.h"

namespace ckptfix {
namespace {

constexpr std::string_view kExtraState = "_extra_state";

// torch's layout names, as torch.serialization._get_layout takes them.
constexpr std::string_view kLayouts[] = {"sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc"};

// The layout a pickle names: _get_layout('torch.sparse_coo') (what
// torch.layout's __reduce__ gives), or the bare global torch.sparse_coo.
std::optional<std::string> layout_of(const Value& v) {
  std::string name;
  if (v.is_call_to("torch.serialization", "_get_layout") && v.args() != nullptr && v.args()->items.size() == 1 &&
      v.args()->items[0]->is_str()) {
    name = v.args()->items[0]->text;
    if (name.rfind("torch.", 0) != 0) return std::nullopt;
    name.erase(0, 6);
  } else if (v.kind == ValueKind::kGlobal && v.text == "torch") {
    name = v.name();
  } else {
    return std::nullopt;
  }
  for (std::string_view known : kLayouts) {
    if (name == known) return name;
  }
  return std::nullopt;
}

// torch.Size((3, 4)), or a plain tuple of ints.
std::optional<std::vector<int64_t>> size_of(const Value& v) {
  const Value* items = &v;
  if (v.is_call_to("torch", "Size")) {
    if (v.args() == nullptr || v.args()->items.size() != 1) return std::nullopt;
    items = v.args()->items[0];
  }
  if (items->kind != ValueKind::kTuple && items->kind != ValueKind::kList) return std::nullopt;
  std::vector<int64_t> out;
  for (const Value* d : items->items) {
    if (d->kind != ValueKind::kInt || d->integer < 0) return std::nullopt;
    out.push_back(d->integer);
  }
  return out;
}

const char* article(std::string_view noun) {
  return noun.empty() || std::string_view("aeiou").find(noun[0]) == std::string_view::npos ? "a " : "an ";
}

}  // namespace

bool is_extra_state_key(std::string_view key) {
  if (key.size() < kExtraState.size() || key.substr(key.size() - kExtraState.size()) != kExtraState) return false;
  return key.size() == kExtraState.size() || key[key.size() - kExtraState.size() - 1] == '.';
}

std::optional<SparseTensorInfo> parse_sparse_tensor(const CheckpointImpl& checkpoint, const Value& v) {
  // _rebuild_sparse_tensor(layout, data): data is (indices, values, size[,
  // is_coalesced]) for sparse_coo, (compressed, plain, values, size) for the
  // compressed layouts; torch 1.x saved sparse_csr with
  // _rebuild_sparse_csr_tensor(layout, (crow, col, values, size)).
  const bool csr_v1 = v.is_call_to("torch._utils", "_rebuild_sparse_csr_tensor");
  if (!v.is_call_to("torch._utils", "_rebuild_sparse_tensor") && !csr_v1) return std::nullopt;
  if (v.args() == nullptr || v.args()->items.size() != 2) return std::nullopt;
  const std::optional<std::string> layout = layout_of(*v.args()->items[0]);
  const Value& data = *v.args()->items[1];
  if (!layout || data.kind != ValueKind::kTuple || (csr_v1 && *layout != "sparse_csr")) return std::nullopt;
  const bool coo = *layout == "sparse_coo";
  const size_t parts = coo ? 2 : 3;
  if (data.items.size() != parts + 1 && !(coo && data.items.size() == parts + 2)) return std::nullopt;
  SparseTensorInfo out;
  out.layout = *layout;
  for (size_t i = 0; i < parts; ++i) {
    const Tensor* t = checkpoint.tensor_of(data.items[i]);
    if (t == nullptr) return std::nullopt;
    out.parts.push_back(static_cast<size_t>(t - checkpoint.tensors.data()));
  }
  std::optional<std::vector<int64_t>> size = size_of(*data.items[parts]);
  if (!size) return std::nullopt;
  out.size = std::move(*size);
  if (data.items.size() == parts + 2) {
    const Value& c = *data.items[parts + 1];
    if (c.kind == ValueKind::kBool) out.coalesced = c.boolean;
    else if (c.kind != ValueKind::kNone) return std::nullopt;
  }
  return out;
}

EntryKind entry_kind(const CheckpointImpl& checkpoint, const Value& key, const Value& value) {
  if (checkpoint.tensor_of(&value) != nullptr) return EntryKind::kTensor;
  if (parse_sparse_tensor(checkpoint, value)) return EntryKind::kSparse;
  if (key.is_str() && is_extra_state_key(key.text)) return EntryKind::kExtraState;
  return EntryKind::kOther;
}

std::optional<std::string> state_dict_problem(const CheckpointImpl& checkpoint, const Value& dict) {
  if (dict.entries().empty()) return "it is empty";
  bool tensors = false;
  for (const auto& [k, v] : dict.entries()) {
    if (!k->is_str()) return "its key " + path_to_string({key_to_path_element(*k)}) + " is " + describe_value(*k) + ", not a str";
    switch (entry_kind(checkpoint, *k, *v)) {
      case EntryKind::kTensor:
      case EntryKind::kSparse: tensors = true; break;
      case EntryKind::kExtraState: break;
      case EntryKind::kOther: return "its entry '" + k->text + "' is " + describe_value(*v) + ", not a tensor";
    }
  }
  if (!tensors) return "it holds no tensor";
  return std::nullopt;
}

std::string NotAStateDict::reason() const {
  return "; the dict '" + (path.empty() ? std::string("<root>") : path) + "' holds tensors but is not one: " + problem;
}

std::vector<NotAStateDict> dicts_of_tensors_not_state_dicts(const CheckpointImpl& checkpoint) {
  std::vector<NotAStateDict> found;
  walk_checkpoint(checkpoint, checkpoint.root, [&](Value& v, const Path& path) {
    if (checkpoint.tensor_of(&v) != nullptr) return false;
    if (!is_dict_like(v)) return true;
    if (is_optimizer_state(v)) return false;
    const bool holds_tensors = std::any_of(v.entries().begin(), v.entries().end(), [&](const auto& entry) {
      return entry.first->is_str() && checkpoint.tensor_of(entry.second) != nullptr;
    });
    if (holds_tensors) {
      if (auto problem = state_dict_problem(checkpoint, v)) {
        found.push_back(NotAStateDict{&v, path_to_string(path), std::move(*problem)});
        return false;
      }
    }
    return true;
  });
  return found;
}

std::string describe_value(const Value& v) {
  switch (v.kind) {
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return "a bool";
    case ValueKind::kInt:
    case ValueKind::kBigInt: return "an int";
    case ValueKind::kFloat: return "a float";
    case ValueKind::kStr: return "a str";
    case ValueKind::kPyStr:
    case ValueKind::kBytes: return "a bytes";
    case ValueKind::kByteArray: return "a bytearray";
    case ValueKind::kTuple: return "a tuple";
    case ValueKind::kList: return "a list";
    case ValueKind::kDict: return "a dict";
    case ValueKind::kSet: return "a set";
    case ValueKind::kFrozenSet: return "a frozenset";
    case ValueKind::kGlobal: return "the global '" + v.dotted() + "'";
    case ValueKind::kPersistentId: return "a storage";
    case ValueKind::kObject: {
      if (is_dict_like(v)) return "an OrderedDict";
      if (v.callable() != nullptr && v.callable()->kind == ValueKind::kGlobal) {
        const std::string name = v.callable()->dotted();
        return std::string(article(name)) + "'" + name + "' object";
      }
      return "an object";
    }
  }
  return "a value";
}

}  // namespace ckptfix
