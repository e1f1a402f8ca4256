// Rules of the weights-only repair for Python's own classes: namespaces
// become dicts, paths become strings, functions held as values (outside a
// module, which becomes its state_dict() without them) their names, and
// functools.partial objects dicts of their function's name and arguments,
// builtin exceptions (where the target torch's allowlist lacks them) their
// message; enum members their value, and instances of a class of their own
// pickled as their class and attributes (dataclasses) the dict of those.
#include <string_view>

#include "passes/weights_only_rules.h"
#include "pickle/global_policy.h"

namespace ckptfix {
namespace {

bool is_path_class(const Value& cls) {
  // pathlib.PosixPath, ..., and pathlib._local.PosixPath (Python >= 3.13).
  const std::string_view module = cls.text;
  if (module != "pathlib" && module.rfind("pathlib.", 0) != 0) return false;
  const std::string& n = cls.name();
  return n == "PosixPath" || n == "WindowsPath" || n == "PurePosixPath" || n == "PureWindowsPath" || n == "Path" ||
         n == "PurePath";
}

// str(path) from the parts PurePath.__reduce__ gives: the anchor ("/",
// "C:\\") and the names, joined by the flavour's separator.
std::string path_text(const Value& cls, const std::vector<Value*>& parts) {
  const bool windows = cls.name().find("Windows") != std::string::npos;
  const char sep = windows ? '\\' : '/';
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i]->text;
    if (!out.empty() && out.back() != sep && !(windows && out.back() == '/')) out += sep;
    out += p;
  }
  return out.empty() ? "." : out;
}

// A builtin exception class (torch.save spells them exceptions.X, Python 3
// builtins.X): what torch 2.14's allowlist has under builtins, bar the three
// plain types.
bool is_builtin_exception(const Value& cls) {
  if (cls.text != "builtins" && cls.text != "exceptions" && cls.text != "__builtin__") return false;
  const GlobalClass c = classify_global("builtins", cls.name());
  return c.kind == GlobalKind::kWeightsOnly && cls.name() != "set" && cls.name() != "bytearray" &&
         cls.name() != "complex";
}

}  // namespace

bool repair_python_value(RepairContext& ctx, Value& v, const Path& path) {
  if (v.kind == ValueKind::kGlobal && classify_global(v.text, v.name()).kind == GlobalKind::kFunction) {
    const std::string was = v.dotted();
    become_str(v, was);
    ctx.changes.push_back({path, was + " (a function held as a value)", "str '" + was + "'"});
    return true;
  }
  if (v.kind != ValueKind::kObject) return false;
  const Value& cls = *v.callable();
  if (cls.is_global("argparse", "Namespace") || cls.is_global("types", "SimpleNamespace")) {
    // NEWOBJ or REDUCE with no arguments, then BUILD(attributes): the
    // attributes, in their order, are the dict.
    if (v.args() != nullptr && !v.args()->items.empty()) return false;
    std::vector<std::pair<Value*, Value*>> attributes;
    for (const Value* state : v.states()) {
      const Value* dict = state;
      if (state->kind == ValueKind::kTuple && !state->items.empty()) dict = state->items[0];
      if (dict->kind != ValueKind::kDict) return false;
      for (const auto& entry : dict->entries()) attributes.push_back(entry);
    }
    const std::string was = cls.dotted();
    v.reset(ValueKind::kDict);
    v.entries() = std::move(attributes);
    ctx.changes.push_back({path, was, "dict"});
    return true;
  }
  if (is_builtin_exception(cls) && v.args() != nullptr && v.states().empty()) {
    // BaseException.__reduce__: REDUCE(cls, args). As traceback prints it:
    // "ValueError: diverged at step 7" (the args joined by ", " when there
    // are several or they are not text).
    std::string text = cls.name();
    const auto& args = v.args()->items;
    for (size_t i = 0; i < args.size(); ++i) {
      const Value* a = args[i];
      text += i == 0 ? ": " : ", ";
      if (a->is_str()) text += a->text;
      else if (a->kind == ValueKind::kInt) text += std::to_string(a->integer);
      else return false;  // not what an exception's message is made of: no rule
    }
    const std::string was = cls.dotted();
    become_str(v, text);
    ctx.changes.push_back({path, was + " (an exception)", "str '" + v.text + "'"});
    return true;
  }
  if (cls.is_global("functools", "partial")) {
    // REDUCE(partial, (func, *args)), then BUILD((func, args, keywords,
    // __dict__)) as partial.__reduce__ writes it: the dict {'func': its
    // dotted name, 'args': [...], 'keywords': {...}}.
    Value* func = nullptr;
    std::vector<Value*> args;
    std::vector<std::pair<Value*, Value*>> keywords;
    if (v.args() != nullptr && !v.args()->items.empty()) {
      func = v.args()->items[0];
      args.assign(v.args()->items.begin() + 1, v.args()->items.end());
    }
    for (const Value* state : v.states()) {
      if (state->kind != ValueKind::kTuple || state->items.size() != 4) return false;
      const auto& st = state->items;
      if (st[1]->kind != ValueKind::kTuple) return false;
      if (st[2]->kind != ValueKind::kNone && st[2]->kind != ValueKind::kDict) return false;
      if (st[3]->kind != ValueKind::kNone && !(st[3]->kind == ValueKind::kDict && st[3]->entries().empty())) return false;
      func = st[0];
      args = st[1]->items;
      keywords = st[2]->kind == ValueKind::kDict ? st[2]->entries() : decltype(keywords){};
    }
    if (func == nullptr || func->kind != ValueKind::kGlobal) return false;
    ValueGraph& g = ctx.impl.graph;
    Value* args_list = g.make(ValueKind::kList);
    args_list->items = std::move(args);
    Value* keywords_dict = g.make(ValueKind::kDict);
    keywords_dict->entries() = std::move(keywords);
    const std::string func_name = func->dotted();
    v.reset(ValueKind::kDict);
    v.entries() = {{g.make_str("func"), g.make_str(func_name)}, {g.make_str("args"), args_list},
                   {g.make_str("keywords"), keywords_dict}};
    ctx.changes.push_back({path, "functools.partial of " + func_name, "dict {'func', 'args', 'keywords'}"});
    return true;
  }
  if (is_path_class(cls)) {
    if (v.args() == nullptr || !v.states().empty()) return false;
    for (const Value* part : v.args()->items) {
      if (part->kind != ValueKind::kStr) return false;
    }
    const std::string was = cls.dotted();
    become_str(v, path_text(cls, v.args()->items));
    ctx.changes.push_back({path, was, "str '" + v.text + "'"});
    return true;
  }
  return false;
}

}  // namespace ckptfix

namespace ckptfix {

bool repair_enum_member(RepairContext& ctx, Value& v, const Path& path) {
  // Enum.__reduce_ex__ gives (cls, (value,)): a REDUCE of the class with its
  // member's value, and no state. A plain object pickles as NEWOBJ + BUILD
  // instead, so this shape is an Enum member (or a class that pickles as
  // one): it becomes the value, as member.value gives it.
  if (v.kind != ValueKind::kObject || v.creation() != ObjectCreation::kReduce || !v.states().empty() ||
      !v.items.empty() || !v.entries().empty() || v.args() == nullptr || v.args()->items.size() != 1) {
    return false;
  }
  Value* value = v.args()->items[0];
  switch (value->kind) {
    case ValueKind::kStr:
    case ValueKind::kInt:
    case ValueKind::kBigInt:
    case ValueKind::kFloat:
    case ValueKind::kBool:
    case ValueKind::kNone: break;
    default: return false;
  }
  // Copied, not moved: the value may be shared (the pickle memoizes strs).
  const std::string was = v.callable()->dotted();
  const ValueKind kind = value->kind;
  const bool boolean = value->boolean;
  const int64_t integer = value->integer;  // the union: a float's bits too
  std::string text = value->text;
  v.reset(kind);
  v.boolean = boolean;
  v.integer = integer;
  v.text = std::move(text);
  ctx.changes.push_back({path, was + " (an enum member)", "its value"});
  return true;
}

}  // namespace ckptfix

namespace ckptfix {

bool repair_plain_object(RepairContext& ctx, Value& v, const Path& path) {
  // object.__reduce_ex__(2) of an instance of a class of its own (a
  // dataclass such as Hugging Face's TrainingArguments, any class without
  // a __reduce__): NEWOBJ(cls) with no arguments, then BUILD(its
  // __dict__), or BUILD((__dict__ or None, {slot: value})) for __slots__,
  // or no BUILD for an instance with no attributes. It becomes the dict
  // of that state, attribute by attribute; the walk goes on into them, so
  // one that no rule knows is still refused (or None with drop_unknown).
  // A list or dict subclass (APPENDS, SETITEMS) is none of these.
  if (v.kind != ValueKind::kObject || v.creation() != ObjectCreation::kNewObj || !v.items.empty() ||
      !v.entries().empty() || (v.args() != nullptr && !v.args()->items.empty()) || v.states().size() > 1) {
    return false;
  }
  std::vector<std::pair<Value*, Value*>> attributes;
  const auto take = [&](const Value* dict) {
    if (dict->kind != ValueKind::kDict) return false;
    for (const auto& entry : dict->entries()) {
      if (!entry.first->is_str()) return false;  // an attribute's name is a str
      attributes.push_back(entry);
    }
    return true;
  };
  for (const Value* state : v.states()) {
    if (state->kind == ValueKind::kTuple) {
      if (state->items.size() != 2) return false;
      if (state->items[0]->kind != ValueKind::kNone && !take(state->items[0])) return false;
      if (!take(state->items[1])) return false;
    } else if (!take(state)) {
      return false;
    }
  }
  const std::string was = v.callable()->dotted();
  const size_t count = attributes.size();
  v.reset(ValueKind::kDict);
  v.entries() = std::move(attributes);
  ctx.changes.push_back({path, was + " (an object of plain attributes)",
                         "dict of its " + std::to_string(count) + " attribute" + (count == 1 ? "" : "s")});
  return true;
}

}  // namespace ckptfix
