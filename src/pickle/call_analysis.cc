#include "pickle/call_analysis.h"

#include <cctype>

#include "pickle/global_policy.h"

namespace ckptfix {
namespace {

bool is_tuple(const Value* v) { return v != nullptr && v->kind == ValueKind::kTuple; }

// copyreg's builders, as Python 3 and 2 (protocol 2 pickles) spell them.
bool is_copyreg(const Value& callable, std::string_view name) {
  return callable.kind == ValueKind::kGlobal && (callable.text == "copyreg" || callable.text == "copy_reg") &&
         callable.name() == name;
}

// Known data and torch's allowlist: their code is known to build values.
bool known(GlobalKind kind) { return kind == GlobalKind::kWeightsOnly || kind == GlobalKind::kData; }

std::string_view addition_text(CallAnalysis::Addition how) {
  switch (how) {
    case CallAnalysis::Addition::kBuild: return "BUILD with a state other than a dict, for its __setstate__";
    case CallAnalysis::Addition::kRebuild: return "a second BUILD, for its __setstate__";
    case CallAnalysis::Addition::kSetItems: return "SETITEMS on an instance, for its __setitem__";
    case CallAnalysis::Addition::kAppends: return "APPENDS on an instance, for its append or extend";
    case CallAnalysis::Addition::kAddItems: return "ADDITEMS on an instance, for its add";
  }
  return "";
}

// A class called with one plain value: the shape in which Python pickles an
// Enum member (Format('NCHW'): Enum.__reduce_ex__ gives the class and the
// value). A class and a function look alike in a pickle, so it is only said.
bool looks_like_enum_member(const Value& callable, const Value* args) {
  const std::string& name = callable.name();
  const size_t last = name.rfind('.') + 1;  // npos + 1 == 0
  if (last >= name.size() || !std::isupper(static_cast<unsigned char>(name[last]))) return false;
  if (!is_tuple(args) || args->items.size() != 1) return false;
  switch (args->items[0]->kind) {
    case ValueKind::kStr: case ValueKind::kPyStr: case ValueKind::kInt: case ValueKind::kBigInt:
    case ValueKind::kFloat: case ValueKind::kBool:
      return true;
    default:
      return false;
  }
}

const char* creation_opcode(ObjectCreation how) {
  switch (how) {
    case ObjectCreation::kReduce: return "REDUCE";
    case ObjectCreation::kNewObj: return "NEWOBJ";
    case ObjectCreation::kNewObjEx: return "NEWOBJ_EX";
  }
  return "";
}

}  // namespace

// Into a buffer kept between calls: a state dict asks once per tensor, and a
// fresh string each time was a third of the analysis.
const std::string& CallAnalysis::key_of(const Value& global) {
  key_.clear();
  key_ += std::to_string(global.text.size());
  key_ += ':';
  key_ += global.text;
  key_ += global.name();
  return key_;
}

const CallAnalysis::GlobalFacts& CallAnalysis::facts_of(const Value& global) {
  if (const GlobalFacts* known = facts_.find(&global)) return *known;
  GlobalFacts facts;
  const std::string& key = key_of(global);
  const auto it = kinds_.find(key);
  if (it != kinds_.end()) {
    facts.kind = it->second;
  } else {
    facts.kind = classify_global(global.text, global.name()).kind;
    kinds_.emplace(key, facts.kind);
  }
  facts.calls_its_arguments = calls_its_arguments(global.text, global.name());
  facts.calls_methods_of_its_arguments = calls_methods_of_its_arguments(global.text, global.name());
  GlobalFacts& kept = facts_[&global];
  kept = facts;
  return kept;
}

void CallAnalysis::use(const Value& global, GlobalUse use, uint64_t offset, std::string_view how) {
  const size_t* known = index_by_value_.find(&global);
  size_t index;
  if (known != nullptr) {
    index = *known;
  } else {
    const std::string& key = key_of(global);
    const auto it = index_.find(key);
    index = it != index_.end() ? it->second : usages_.size();
    index_by_value_.emplace(&global, index);
  }
  if (index == usages_.size()) {
    index_.emplace(key_of(global), index);
    usages_.push_back({global.text, global.name(), use, offset, std::string(how)});
  } else {
    GlobalUsage& u = usages_[index];
    if (use <= u.use) return;
    u.use = use;
    u.offset = offset;
    u.how = how;
  }
  if (use == GlobalUse::kCalled && on_called_) on_called_(global, kind_of(global), offset);
}

void CallAnalysis::named(const Value& global, uint64_t offset) { use(global, GlobalUse::kReferenced, offset, ""); }

void CallAnalysis::mark_called(const Value* v, uint64_t offset, std::string_view how) {
  if (v == nullptr || called_.count(v) != 0) return;
  pending_.push_back(v);
  while (!pending_.empty()) {
    const Value* c = pending_.back();
    pending_.pop_back();
    if (c == nullptr || !called_.insert(c)) continue;
    if (c->kind == ValueKind::kGlobal) {
      use(*c, GlobalUse::kCalled, offset, how);
      continue;
    }
    pending_.insert(pending_.end(), c->items.begin(), c->items.end());
    if (c->has_parts()) {
      for (const auto& [k, val] : c->entries()) {
        pending_.push_back(k);
        pending_.push_back(val);
      }
      pending_.insert(pending_.end(), c->states().begin(), c->states().end());
      pending_.push_back(c->callable());
      pending_.push_back(c->args());
      pending_.push_back(c->kwargs());
    }
  }
}

void CallAnalysis::new_instance(const Value* cls, std::span<Value* const> args, const Value* kwargs,
                                uint64_t offset, const char* opcode) {
  const bool with_arguments = !args.empty() || (kwargs != nullptr && !kwargs->entries().empty());
  auto arguments_called = [&] {
    for (const Value* a : args) mark_called(a, offset, "in the arguments of a call");
    mark_called(kwargs, offset, "in the arguments of a call");
  };
  if (cls == nullptr || cls->kind != ValueKind::kGlobal) {
    mark_called(cls, offset, "called as an object");
    return arguments_called();
  }
  const GlobalKind kind = kind_of(*cls);
  if (kind == GlobalKind::kFunction) {  // a function is no class: NEWOBJ calls it
    use(*cls, GlobalUse::kCalled, offset, opcode);
    return arguments_called();
  }
  if (kind == GlobalKind::kUnknown && with_arguments) {  // its own __new__, given what the file chose
    use(*cls, GlobalUse::kCalled, offset, std::string(opcode) + " with arguments");
    return arguments_called();
  }
  // object.__new__, or a known class's __new__ building from data.
  use(*cls, GlobalUse::kInstantiated, offset, opcode);
}

const Value* CallAnalysis::instantiated_class(const Value& object) {
  const Value* callable = object.callable();
  if (callable == nullptr || callable->kind != ValueKind::kGlobal) return nullptr;
  const Value* cls = nullptr;
  if (object.creation() != ObjectCreation::kReduce) {
    const bool bare = (object.args() == nullptr || object.args()->items.empty()) &&
                      (object.kwargs() == nullptr || object.kwargs()->entries().empty());
    if (bare) cls = callable;
  } else if (is_tuple(object.args()) && !object.args()->items.empty()) {
    const std::vector<Value*>& a = object.args()->items;
    const bool newobj = is_copyreg(*callable, "__newobj__") && a.size() == 1;
    const bool newobj_ex = is_copyreg(*callable, "__newobj_ex__") && a.size() == 3 && is_tuple(a[1]) &&
                           a[1]->items.empty() && a[2]->entries().empty();
    const bool reconstructor = is_copyreg(*callable, "_reconstructor") && a.size() == 3 &&
                               a[1]->kind == ValueKind::kGlobal && known(kind_of(*a[1]));
    if (newobj || newobj_ex || reconstructor) cls = a[0];
  }
  if (cls == nullptr || cls->kind != ValueKind::kGlobal || kind_of(*cls) != GlobalKind::kUnknown) return nullptr;
  return cls;
}

void CallAnalysis::object_made(const Value& object, uint64_t offset, const char* opcode) {
  const Value* callable = object.callable();
  const Value* args = object.args();
  const Value* kwargs = object.kwargs();
  if (callable == nullptr || callable->kind != ValueKind::kGlobal) {
    // An object being called (a functools.partial): what it holds is called,
    // with the arguments.
    mark_called(callable, offset, "held by an object that is called");
    mark_called(args, offset, "in the arguments of a call");
    mark_called(kwargs, offset, "in the arguments of a call");
    return;
  }
  if (object.creation() != ObjectCreation::kReduce) {
    const std::span<Value* const> a = is_tuple(args) ? std::span<Value* const>(args->items) : std::span<Value* const>();
    return new_instance(callable, a, kwargs, offset, opcode);
  }
  const std::vector<Value*>* a = is_tuple(args) ? &args->items : nullptr;
  if (a != nullptr && !a->empty()) {
    // copyreg's builders, read for what they do.
    if (is_copyreg(*callable, "__newobj__")) {  // cls.__new__(cls, *args)
      use(*callable, GlobalUse::kCalled, offset, opcode);
      return new_instance((*a)[0], std::span<Value* const>(*a).subspan(1), nullptr, offset, "copyreg.__newobj__");
    }
    if (is_copyreg(*callable, "__newobj_ex__") && a->size() == 3 && is_tuple((*a)[1])) {
      use(*callable, GlobalUse::kCalled, offset, opcode);
      return new_instance((*a)[0], (*a)[1]->items, (*a)[2], offset, "copyreg.__newobj_ex__");
    }
    if (is_copyreg(*callable, "_reconstructor") && a->size() == 3) {
      // base.__new__(cls, state) and base.__init__(obj, state): cls is not
      // called; base is, with state (object, dict, list, ... when known).
      use(*callable, GlobalUse::kCalled, offset, opcode);
      const Value* base = (*a)[1];
      if (base->kind == ValueKind::kGlobal && known(kind_of(*base))) {
        use(*base, GlobalUse::kCalled, offset, "the base of copyreg._reconstructor");
        // base.__init__(obj, state): dict's looks up state.keys().
        if (facts_of(*base).calls_methods_of_its_arguments) {
          objects_called(std::span<Value* const>(*a).subspan(2, 1), offset,
                         "given to copyreg._reconstructor's base, which looks up its methods");
        }
      } else {
        mark_called(base, offset, "the base of copyreg._reconstructor");
        mark_called((*a)[2], offset, "in the arguments of a call");
      }
      return new_instance((*a)[0], {}, nullptr, offset, "copyreg._reconstructor");
    }
  }
  const GlobalKind kind = kind_of(*callable);
  use(*callable, GlobalUse::kCalled, offset,
      kind == GlobalKind::kUnknown && looks_like_enum_member(*callable, args) ? std::string(opcode) + kEnumShape
                                                                              : std::string(opcode));
  // A callable ckptfix does not know may call what it is given.
  if (kind == GlobalKind::kUnknown || kind == GlobalKind::kFunction || facts_of(*callable).calls_its_arguments) {
    mark_called(args, offset, "in the arguments of a call");
    mark_called(kwargs, offset, "in the arguments of a call");
    return;
  }
  // One that looks up methods of an object it is given (dict(x) calls x.keys()).
  if (facts_of(*callable).calls_methods_of_its_arguments) {
    const std::string how = "given to " + callable->text + "." + callable->name() + ", which looks up its methods";
    if (a != nullptr) objects_called(*a, offset, how);
    if (kwargs != nullptr) {
      for (const auto& [k, v] : kwargs->entries()) objects_called({&v, 1}, offset, how);
    }
  }
}

void CallAnalysis::objects_called(std::span<Value* const> values, uint64_t offset, std::string_view how) {
  for (const Value* v : values) {
    if (v != nullptr && v->kind == ValueKind::kObject) mark_called(v, offset, how);
  }
}

bool CallAnalysis::gives_dunder_attributes(const Value* args, const Value* kwargs) {
  auto dunder = [](const Value* key) {
    return key != nullptr && key->is_str() && key->text.size() > 4 && key->text.starts_with("__") &&
           key->text.ends_with("__");
  };
  auto dict_with_dunder = [&](const Value* v) {
    if (v == nullptr || v->kind != ValueKind::kDict) return false;
    for (const auto& [k, val] : v->entries()) {
      if (dunder(k)) return true;
    }
    return false;
  };
  if (args != nullptr) {
    for (const Value* a : args->items) {
      if (dict_with_dunder(a)) return true;
    }
  }
  if (kwargs != nullptr) {
    for (const auto& [k, v] : kwargs->entries()) {
      if (dunder(k) || dict_with_dunder(v)) return true;
    }
  }
  return false;
}

void CallAnalysis::added(const Value& target, std::span<Value* const> values, Addition how, uint64_t offset) {
  if (values.empty()) return;  // an empty SETITEMS or APPENDS calls nothing
  // Calls of attributes the file itself may have set: APPEND(S) on anything
  // but a list calls getattr(obj, 'append') or 'extend' (a Namespace whose
  // 'append' is a function); a second BUILD calls getattr(obj,
  // '__setstate__'), which the first may have stored; a slot state
  // (state, {name: value}) is setattr of each name, __class__ included. So
  // everything the object holds is called.
  const char* attribute_call = nullptr;
  if (target.kind == ValueKind::kObject) {
    if (how == Addition::kAppends) attribute_call = "held by an object whose append or extend APPENDS calls";
    if (how == Addition::kRebuild) attribute_call = "held by an object a second BUILD calls __setstate__ of";
    if (how == Addition::kBuild && gives_dunder_attributes(target.args(), target.kwargs())) {
      attribute_call = "held by an object whose constructor gave it a dunder attribute (a __setstate__ its BUILD calls)";
    }
    if (how == Addition::kBuild && values.size() == 1 && is_tuple(values[0]) && values[0]->items.size() == 2 &&
        values[0]->items[1]->kind == ValueKind::kDict) {
      attribute_call = "held by an object a BUILD sets attributes of by setattr (a slot state)";
    }
  }
  if (attribute_call != nullptr) {
    mark_called(&target, offset, attribute_call);
    for (const Value* v : values) mark_called(v, offset, attribute_call);
    return;
  }
  if (called_.count(&target) != 0) {
    for (const Value* v : values) mark_called(v, offset, "added to a value that is called");
    return;
  }
  // Hashed: a dict's keys, a set's items run their class's __hash__ and __eq__.
  if (target.kind == ValueKind::kDict && how == Addition::kSetItems) {
    for (size_t i = 0; i < values.size(); i += 2) {
      objects_called(values.subspan(i, 1), offset, "a dict key (hashing it calls its class's __hash__ and __eq__)");
    }
    return;
  }
  if ((target.kind == ValueKind::kSet || target.kind == ValueKind::kFrozenSet) && how == Addition::kAddItems) {
    objects_called(values, offset, "a set item (hashing it calls its class's __hash__ and __eq__)");
    return;
  }
  if (target.kind != ValueKind::kObject) return;
  const Value* cls = instantiated_class(target);
  if (cls == nullptr) return;
  // The default object protocol: BUILD with the instance's attribute dict.
  if (how == Addition::kBuild && values.size() == 1 && values[0]->kind == ValueKind::kDict) return;
  use(*cls, GlobalUse::kCalled, offset, addition_text(how));
  for (const Value* v : values) mark_called(v, offset, "in the arguments of a call");
}

std::vector<GlobalUsage> reachable_global_usages(const Value* root) {
  CallAnalysis analysis;
  ValueSet seen;
  std::vector<const Value*> stack;
  auto push = [&](const Value* v) {
    // A leaf names no global and makes no object: nothing to analyse.
    if (v != nullptr && !v->refers_to_nothing() && seen.insert(v)) stack.push_back(v);
  };
  push(root);
  std::vector<Value*> entries;
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->kind == ValueKind::kGlobal) {
      analysis.named(*v, v->op_offset());
      continue;
    }
    if ((v->kind == ValueKind::kDict || v->kind == ValueKind::kSet || v->kind == ValueKind::kFrozenSet) &&
        !v->refers_to_nothing()) {
      // Keys and items that are objects are hashed as the pickle is loaded.
      entries.clear();
      if (v->kind == ValueKind::kDict) {
        for (const auto& [k, val] : v->entries()) {
          if (k != nullptr && k->kind == ValueKind::kObject) entries.insert(entries.end(), {k, val});
        }
        if (!entries.empty()) analysis.added(*v, entries, CallAnalysis::Addition::kSetItems, v->op_offset());
      } else {
        for (Value* item : v->items) {
          if (item != nullptr && item->kind == ValueKind::kObject) entries.push_back(item);
        }
        if (!entries.empty()) analysis.added(*v, entries, CallAnalysis::Addition::kAddItems, v->op_offset());
      }
    }
    if (v->kind == ValueKind::kObject) {
      const uint64_t at = v->op_offset();
      analysis.object_made(*v, at, creation_opcode(v->creation()));
      for (size_t i = 0; i < v->states().size(); ++i) {
        analysis.added(*v, {&v->states()[i], 1}, i == 0 ? CallAnalysis::Addition::kBuild : CallAnalysis::Addition::kRebuild,
                       at);
      }
      if (!v->entries().empty()) {
        entries.clear();
        for (const auto& [k, val] : v->entries()) {
          entries.push_back(k);
          entries.push_back(val);
        }
        analysis.added(*v, entries, CallAnalysis::Addition::kSetItems, at);
      }
      if (!v->items.empty()) analysis.added(*v, v->items, CallAnalysis::Addition::kAppends, at);
    }
    // Children in reverse, so that globals come out in pickle order.
    for (auto it = v->states().rbegin(); it != v->states().rend(); ++it) push(*it);
    for (auto it = v->entries().rbegin(); it != v->entries().rend(); ++it) {
      push(it->second);
      push(it->first);
    }
    for (auto it = v->items.rbegin(); it != v->items.rend(); ++it) push(*it);
    push(v->pid());
    push(v->kwargs());
    push(v->args());
    push(v->callable());
  }
  return analysis.usages();
}

bool may_name_code(const ValueGraph& graph) {
  // A state dict names a handful of globals, many times over when a pass
  // made a value for each tensor: the last name judged is judged again free.
  const Value* last = nullptr;
  bool found = false;
  graph.for_each([&](const Value& v) {
    if (found || v.kind != ValueKind::kGlobal) return;
    if (last != nullptr && v.text == last->text && v.name() == last->name()) return;
    const GlobalKind kind = classify_global(v.text, v.name()).kind;
    found = kind == GlobalKind::kUnknown || kind == GlobalKind::kFunction;
    last = &v;
  });
  return found;
}

}  // namespace ckptfix
