#include "ckptfix/state_dict.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/bytes_values.h"
#include "model/graph_walk.h"
#include "model/checkpoint_impl.h"
#include "model/dict_selection.h"
#include "model/payloads.h"
#include "model/state_dict_values.h"

namespace ckptfix {

namespace {

std::vector<StateDictEntry> find_state_dict(const CheckpointImpl& checkpoint, const std::string& key) {
  std::string name = key.empty() ? "<root>" : key;
  const Value* dict = nullptr;
  if (!key.empty()) {
    dict = select_dicts(checkpoint, {key}).front().dict;
  } else {
    const std::vector<StateDict> candidates = default_state_dicts(checkpoint);
    if (candidates.empty()) {
      const auto not_ones = dicts_of_tensors_not_state_dicts(checkpoint);
      throw Error(ErrorKind::kConflict,
                  "the checkpoint holds no state dict" + (not_ones.empty() ? "" : not_ones.front().reason()));
    }
    if (candidates.size() > 1) {
      std::string names;
      for (const StateDict& sd : candidates) names += (names.empty() ? "'" : ", '") + path_to_string(sd.path) + "'";
      throw Error(ErrorKind::kConflict, "the checkpoint holds several state dicts (" + names + "); choose one by its key");
    }
    dict = candidates.front().dict;
    if (!candidates.front().path.empty()) name = path_to_string(candidates.front().path);
  }
  if (const auto problem = state_dict_problem(checkpoint, *dict)) {
    throw Error(ErrorKind::kConflict, "'" + name + "' is not a state dict: " + *problem);
  }
  std::vector<StateDictEntry> entries;
  for (const auto& [k, v] : dict->entries()) {
    StateDictEntry e;
    e.key = k->text;
    switch (entry_kind(checkpoint, *k, *v)) {
      case EntryKind::kTensor:
        e.tensor = static_cast<size_t>(checkpoint.tensor_of(v) - checkpoint.tensors.data());
        break;
      case EntryKind::kSparse:
        e.kind = StateDictEntry::Kind::kSparseTensor;
        e.sparse = *parse_sparse_tensor(checkpoint, *v);
        break;
      default:
        e.kind = StateDictEntry::Kind::kData;
        e.holds = describe_value(*v);
        break;
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// The decimal text of a Python int pickled as LONG1/LONG4: little-endian
// two's complement bytes.
std::string big_int_decimal(const std::string& bytes) {
  std::vector<uint8_t> magnitude(bytes.begin(), bytes.end());
  const bool negative = !magnitude.empty() && (magnitude.back() & 0x80) != 0;
  if (negative) {  // two's complement: invert and add one
    bool carry = true;
    for (uint8_t& b : magnitude) {
      b = static_cast<uint8_t>(~b);
      if (carry) carry = ++b == 0;
    }
  }
  std::string digits;
  // Repeated division by 10 of the little-endian magnitude.
  while (std::any_of(magnitude.begin(), magnitude.end(), [](uint8_t b) { return b != 0; })) {
    unsigned remainder = 0;
    for (size_t i = magnitude.size(); i-- > 0;) {
      const unsigned current = (remainder << 8) | magnitude[i];
      magnitude[i] = static_cast<uint8_t>(current / 10);
      remainder = current % 10;
    }
    digits.push_back(static_cast<char>('0' + remainder));
  }
  if (digits.empty()) digits = "0";
  if (negative) digits.push_back('-');
  return std::string(digits.rbegin(), digits.rend());
}

// The value of `dict`'s entry `key`.
const Value* entry_value(const Value& dict, const std::string& key) {
  for (const auto& [k, v] : dict.entries()) {
    if (k->is_str() && k->text == key) return v;
  }
  return nullptr;
}

// Plain data, built without recursion on the stack (a file decides how
// deep its values go): each Value becomes a PlainValue in place, its
// children queued below it.
PlainValue to_plain(const CheckpointImpl& checkpoint, const Value& root, const std::string& where) {
  auto unsupported = [&](const Value& v) {
    return Error(ErrorKind::kUnsupported, "holds " + describe_value(v) +
                                              ", which is not plain data (None, bool, int, float, str, bytes, list, "
                                              "tuple, dict, set, tensors): it is not loaded, since loading it would "
                                              "run its class's code")
        .at(where);
  };
  PlainValue out;
  struct Work {
    const Value* value;
    PlainValue* into;
    size_t depth;
  };
  std::vector<Work> stack{{&root, &out, 0}};
  std::vector<const Value*> on_path;  // cycles (a list holding itself) are refused
  const uint64_t max_depth = checkpoint.limits.max_depth;
  uint64_t steps = 0;
  const uint64_t max_steps = checkpoint.walk_steps();
  while (!stack.empty()) {
    const Work w = stack.back();
    stack.pop_back();
    const Value& v = *w.value;
    PlainValue& p = *w.into;
    if (w.depth > max_depth || (max_steps != 0 && ++steps > max_steps)) {
      throw Error(ErrorKind::kLimit, "'" + where + "' is nested more than " + std::to_string(max_depth) +
                                         " levels deep or holds too many values (limits max_depth, max_walk_steps)");
    }
    if (const Tensor* t = checkpoint.tensor_of(&v)) {
      p.kind = PlainValue::Kind::kTensor;
      p.tensor = static_cast<size_t>(t - checkpoint.tensors.data());
      continue;
    }
    std::vector<const Value*> children;
    switch (v.kind) {
      case ValueKind::kNone: p.kind = PlainValue::Kind::kNone; break;
      case ValueKind::kBool: p.kind = PlainValue::Kind::kBool, p.boolean = v.boolean; break;
      case ValueKind::kInt: p.kind = PlainValue::Kind::kInt, p.integer = std::to_string(v.integer); break;
      case ValueKind::kBigInt: p.kind = PlainValue::Kind::kInt, p.integer = big_int_decimal(v.text); break;
      case ValueKind::kFloat: {
        p.kind = PlainValue::Kind::kFloat;
        std::memcpy(&p.number, &v.float_bits, sizeof p.number);
        break;
      }
      case ValueKind::kStr: p.kind = PlainValue::Kind::kStr, p.text = v.text; break;
      case ValueKind::kPyStr:
      case ValueKind::kBytes:
      case ValueKind::kByteArray: p.kind = PlainValue::Kind::kBytes, p.text = v.text; break;
      case ValueKind::kList:
      case ValueKind::kTuple:
      case ValueKind::kSet:
      case ValueKind::kFrozenSet:
        p.kind = v.kind == ValueKind::kList    ? PlainValue::Kind::kList
                 : v.kind == ValueKind::kTuple ? PlainValue::Kind::kTuple
                 : v.kind == ValueKind::kSet   ? PlainValue::Kind::kSet
                                               : PlainValue::Kind::kFrozenSet;
        children.assign(v.items.begin(), v.items.end());
        break;
      case ValueKind::kDict:
        p.kind = PlainValue::Kind::kDict;
        for (const auto& [key, value] : v.entries()) children.push_back(key), children.push_back(value);
        break;
      case ValueKind::kObject: {
        // What pickle protocol 2 spells as calls: an OrderedDict, bytes
        // (_codecs.encode(str, 'latin1')), a set or frozenset (of a list).
        if (is_dict_like(v)) {
          p.kind = PlainValue::Kind::kOrderedDict;
          for (const auto& [key, value] : v.entries()) children.push_back(key), children.push_back(value);
          break;
        }
        const std::vector<Value*> no_args;
        const std::vector<Value*>& args = v.args() != nullptr ? v.args()->items : no_args;
        if (v.is_call_to("_codecs", "encode")) {
          std::optional<std::string> bytes = bytes_of(v);
          if (!bytes) throw unsupported(v);
          p.kind = PlainValue::Kind::kBytes;
          p.text = std::move(*bytes);
          break;
        }
        if (std::optional<BytesIOValue> io = bytes_io_of(v)) {  // io.BytesIO is data, as bytes are
          p.kind = PlainValue::Kind::kBytesIO;
          p.text = std::move(io->bytes);
          p.integer = std::to_string(io->position);
          break;
        }
        const bool set = v.is_call_to("builtins", "set") || v.is_call_to("__builtin__", "set");
        const bool frozenset = v.is_call_to("builtins", "frozenset") || v.is_call_to("__builtin__", "frozenset");
        if ((set || frozenset) && args.size() <= 1 && (args.empty() || args[0]->kind == ValueKind::kList) &&
            v.entries().empty() && v.states().empty()) {
          p.kind = set ? PlainValue::Kind::kSet : PlainValue::Kind::kFrozenSet;
          if (!args.empty()) children.assign(args[0]->items.begin(), args[0]->items.end());
          children.insert(children.end(), v.items.begin(), v.items.end());
          break;
        }
        throw unsupported(v);
      }
      default: throw unsupported(v);
    }
    if (children.empty()) continue;
    if (std::find(on_path.begin(), on_path.end(), &v) != on_path.end() || w.depth >= max_depth) {
      throw Error(ErrorKind::kLimit, "'" + where + "' holds values nested more than " + std::to_string(max_depth) +
                                         " levels deep, or in a cycle (limit max_depth)");
    }
    p.items.resize(children.size());
    for (size_t i = children.size(); i-- > 0;) stack.push_back({children[i], &p.items[i], w.depth + 1});
  }
  return out;
}

}  // namespace

PlainValue plain_value(const Checkpoint& checkpoint, const std::string& key, const StateDictEntry& entry) {
  return error_boundary(checkpoint.file_name(), [&] {
    read_in_left_payloads(checkpoint);
    const CheckpointImpl& impl = impl_of(checkpoint);
    if (entry.kind == StateDictEntry::Kind::kTensor) {
      PlainValue p;
      p.kind = PlainValue::Kind::kTensor;
      p.tensor = entry.tensor;
      return p;
    }
    // The state dict select_state_dict(checkpoint, key) chose, and the entry in it.
    const Value* dict = key.empty() ? nullptr : select_dicts(impl, {key}).front().dict;
    if (dict == nullptr) {
      const std::vector<StateDict> candidates = default_state_dicts(impl);
      if (candidates.size() == 1) dict = candidates.front().dict;
    }
    const Value* value = dict != nullptr ? entry_value(*dict, entry.key) : nullptr;
    if (value == nullptr) throw Error(ErrorKind::kInvalidArgument, "the state dict has no key '" + entry.key + "'");
    return to_plain(impl, *value, "key '" + entry.key + "'");  // names the key, as the layout does
  });
}

PlainValue tensor_attributes(const Checkpoint& checkpoint, size_t tensor) {
  return error_boundary(checkpoint.file_name(), [&] {
    read_in_left_payloads(checkpoint);
    const CheckpointImpl& impl = impl_of(checkpoint);
    const Tensor& t = impl.tensors.at(tensor);
    PlainValue out;
    out.kind = PlainValue::Kind::kDict;
    if (!t.python_attributes) return out;
    // _rebuild_from_type_v2(func, type, args, state) and
    // _rebuild_parameter_with_state(data, requires_grad, hooks, state): state
    // is the tensor's __dict__, or (__dict__, slots) for a class with __slots__.
    const Value& state = *(t.from_type ? t.rebuild : t.value)->args()->items[3];
    std::vector<const Value*> dicts;
    if (state.kind == ValueKind::kDict) dicts.push_back(&state);
    if (state.kind == ValueKind::kTuple) {
      for (const Value* part : state.items) {
        if (part->kind == ValueKind::kDict) dicts.push_back(part);
      }
    }
    if (dicts.empty() && state.kind != ValueKind::kNone) {
      throw Error(ErrorKind::kUnsupported, "the Python attributes of a tensor are " + describe_value(state) +
                                               ", not a dict of names and values");
    }
    for (const Value* d : dicts) {
      for (const auto& [name, value] : d->entries()) {
        if (!name->is_str()) throw Error(ErrorKind::kUnsupported, "a tensor's attribute name is not a str");
        PlainValue key;
        key.kind = PlainValue::Kind::kStr;
        key.text = name->text;
        out.items.push_back(std::move(key));
        out.items.push_back(to_plain(impl, *value, "attribute '" + name->text + "'"));
      }
    }
    return out;
  });
}

std::optional<std::vector<StateDictEntry>> root_state_dict_entries(const Checkpoint& checkpoint) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  if (is_dict_like(*impl.root) && impl.root->entries().empty()) return std::vector<StateDictEntry>{};
  const auto dicts = impl.state_dicts();
  if (std::none_of(dicts.begin(), dicts.end(), [](const StateDict& d) { return d.path.empty(); })) return std::nullopt;
  return select_state_dict(checkpoint);
}

std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key) {
  return error_boundary(checkpoint.file_name(), [&] {
    read_in_left_payloads(checkpoint);  // keys are read from `text`
    return find_state_dict(impl_of(checkpoint), key);
  });
}

}  // namespace ckptfix
