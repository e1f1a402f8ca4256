#include "pickle/global_policy.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pickle/compat_names.h"
#include "pickle/global_lists.h"

namespace ckptfix {
namespace {

constexpr size_t npos = std::string_view::npos;

// Dotted paths stored segment by segment, so that "which entries are dotted
// prefixes of this path" costs one hash lookup per segment walked and never
// looks at more than the longest entry's segments.
class SegmentTrie {
 public:
  explicit SegmentTrie(std::span<const char* const> entries) {
    for (const char* e : entries) insert(e);
  }

  /// Calls found(end) for every entry that is path[0, end) with end at a
  /// dot or at the end of path, shortest first; stops when found returns true.
  template <typename F>
  void walk(std::string_view path, F&& found) const {
    uint32_t node = 0;
    size_t pos = 0;
    while (true) {
      // Look no further than the longest segment: a longer one matches nothing.
      const size_t dot = path.substr(pos, longest_segment_ + 1).find('.');
      const size_t end = dot == npos ? path.size() : pos + dot;
      if (end - pos > longest_segment_) return;
      const auto& children = nodes_[node].children;
      const auto it = children.find(path.substr(pos, end - pos));
      if (it == children.end()) return;
      node = it->second;
      if (nodes_[node].terminal && found(end)) return;
      if (end == path.size()) return;
      pos = end + 1;
    }
  }

  /// End of the shortest entry that is a dotted prefix of path, or npos.
  size_t first_prefix(std::string_view path) const {
    size_t out = npos;
    walk(path, [&](size_t end) {
      out = end;
      return true;
    });
    return out;
  }

  bool contains(std::string_view path) const {
    bool exact = false;
    walk(path, [&](size_t end) { return exact = end == path.size(); });
    return exact;
  }

 private:
  struct Node {
    std::unordered_map<std::string_view, uint32_t> children;
    bool terminal = false;
  };

  void insert(std::string_view path) {
    uint32_t node = 0;
    while (true) {
      const size_t dot = path.find('.');
      const std::string_view segment = path.substr(0, dot);
      longest_segment_ = std::max(longest_segment_, segment.size());
      auto it = nodes_[node].children.find(segment);
      if (it == nodes_[node].children.end()) {
        nodes_.emplace_back();
        it = nodes_[node].children.emplace(segment, static_cast<uint32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
      if (dot == npos) break;
      path.remove_prefix(dot + 1);
    }
    nodes_[node].terminal = true;
  }

  std::vector<Node> nodes_{1};
  size_t longest_segment_ = 0;
};

struct Lists {
  SegmentTrie function_modules{global_lists::function_modules()};
  SegmentTrie calls_its_arguments{global_lists::calls_its_arguments()};
  SegmentTrie allowlist{global_lists::torch_allowlist()};
  SegmentTrie data{global_lists::known_data()};
  SegmentTrie gadgets{global_lists::gadgets()};
  SegmentTrie gadget_methods{global_lists::gadget_methods()};
  SegmentTrie missing_in_1_13{global_lists::missing_in_torch_1_13()};
};

const Lists& lists() {
  static const Lists instance;  // built once, thread-safe
  return instance;
}

// Python 2 module names, as pickle (and torch's weights_only reader) map them.
std::string_view canonical_module(std::string_view module) {
  if (module == "__builtin__" || module == "exceptions") return "builtins";
  if (module == "copy_reg") return "copyreg";
  return module;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Exception classes only build an exception object.
bool is_exception_name(std::string_view name) {
  return ends_with(name, "Error") || ends_with(name, "Exception") || ends_with(name, "Warning") ||
         name == "KeyboardInterrupt" || name == "SystemExit" || name == "GeneratorExit" ||
         name == "StopIteration" || name == "StopAsyncIteration" || name == "ExceptionGroup" ||
         name == "BaseExceptionGroup";
}

GlobalClass gadget(std::string matched) { return {GlobalKind::kGadget, std::move(matched)}; }

// The first release whose allowlist has `path` (an entry of the 2.14 list).
TorchVersion allowlisted_since(std::string_view module, std::string_view name, const std::string& path) {
  if (module == "builtins" && name != "bytearray" && name != "complex" && name != "set") {
    return global_lists::builtin_exceptions_since();
  }
  for (const global_lists::AllowlistAddition& a : global_lists::allowlist_additions()) {
    if (path == a.path) return a.since;
  }
  return {2, 6};  // the first weights_only default
}

}  // namespace

bool exists_in_torch_1_13(std::string_view module, std::string_view name) {
  const std::string path = std::string(canonical_module(module)) + "." + std::string(name);
  return !lists().missing_in_1_13.contains(path);
}

bool in_torch_allowlist(std::string_view module, std::string_view name, TorchVersion torch) {
  if (name.find('.') != npos) return false;
  const std::string path = std::string(canonical_module(module)) + "." + std::string(name);
  return lists().allowlist.contains(path) && allowlisted_since(canonical_module(module), name, path) <= torch;
}

bool calls_its_arguments(std::string_view module, std::string_view name) {
  if (name.find('.') != npos) return false;
  return lists().calls_its_arguments.contains(std::string(canonical_module(module)) + "." + std::string(name));
}

bool calls_methods_of_its_arguments(std::string_view module, std::string_view name) {
  const auto [module3, name3] = python3_name(module, name);
  static const SegmentTrie trie{global_lists::calls_methods_of_its_arguments()};
  return name3.find('.') == npos && trie.contains(std::string(canonical_module(module3)) + "." + std::string(name3));
}

namespace {

// classify_global of a name as it is looked up (after _compat_pickle).
GlobalClass classify_loaded(std::string_view spelled_module, std::string_view name) {
  const Lists& l = lists();
  const std::string_view module = canonical_module(spelled_module);
  const std::string path = std::string(module) + "." + std::string(name);
  const size_t chain_start = module.size() + 1;  // where `name` starts in `path`
  const bool dotted = name.find('.') != npos;

  // A dunder attribute reaches everything (torch.__builtins__, f.__globals__);
  // copyreg's two object builders are the exception.
  if (name.find("__") != npos && !(module == "copyreg" && (name == "__newobj__" || name == "__newobj_ex__"))) {
    return gadget("a dunder attribute");
  }
  if (!dotted) {
    if (l.allowlist.contains(path)) return {GlobalKind::kWeightsOnly, {}, allowlisted_since(module, name, path)};
    if (l.data.contains(path)) return {GlobalKind::kData, {}};
  }
  // A tensor function held as a value (kFunction), whatever gadget prefix its
  // module lies under (torch._C): its module is not judged as a gadget, its
  // name is (torch.nn.functional.os is the os module, F.from_file reads files).
  const bool function_module = !dotted && l.function_modules.contains(module);

  // An attribute of a known class is a method, not data, and several touch
  // files (pathlib.Path.write_text, numpy.ndarray.tofile, torch.UntypedStorage.from_file).
  if (dotted) {
    size_t owner = npos;
    auto past_module = [&](size_t end) {
      if (end > module.size() && end < path.size()) owner = end;  // a class, with attributes after it
      return owner != npos;
    };
    l.allowlist.walk(path, past_module);
    if (owner == npos) l.data.walk(path, past_module);
    if (owner != npos) return gadget("an attribute of " + path.substr(0, owner));
  }

  // Gadget modules and attributes: a dotted prefix of the whole path, or of
  // any tail of the attribute chain, since each link may be a module
  // (torch + os.system is os.system; torch.serialization + pickle.loads is pickle.loads).
  for (size_t start = function_module ? chain_start : 0; start < path.size();) {
    const std::string_view tail = std::string_view(path).substr(start);
    if (const size_t end = l.gadgets.first_prefix(tail); end != npos) return gadget(std::string(tail.substr(0, end)));
    if (start < chain_start) {
      start = chain_start;
    } else {
      const size_t dot = path.find('.', start);
      if (dot == npos) break;
      start = dot + 1;
    }
  }

  if (function_module) {
    if (l.gadget_methods.contains(name)) return gadget("the method " + std::string(name));
    return {GlobalKind::kFunction, {}};
  }
  // builtins holds the interpreter's functions: only the data types above
  // and exception classes are values.
  if (module == "builtins") {
    if (!dotted && is_exception_name(name)) return {GlobalKind::kUnknown, {}};
    return gadget("builtins." + std::string(name));
  }
  // Methods that load, execute or write, on any class.
  if (dotted) {
    const std::string_view method = std::string_view(path).substr(path.rfind('.') + 1);
    if (l.gadget_methods.contains(method)) return gadget("the method " + std::string(method));
  }
  return {GlobalKind::kUnknown, {}};
}

}  // namespace

GlobalClass classify_global(std::string_view module, std::string_view name) {
  // CPython loads a Python 2 name as its Python 3 one in the pickles torch
  // writes (protocol 2): StringIO.open is the builtin open. Judged as what
  // it loads; a name that is a gadget as spelled stays one.
  const auto [module3, name3] = python3_name(module, name);
  if (module3 == module && name3 == name) return classify_loaded(module, name);
  const GlobalClass spelled = classify_loaded(module, name);
  if (spelled.kind == GlobalKind::kGadget) return spelled;
  GlobalClass loaded = classify_loaded(module3, name3);
  if (loaded.kind == GlobalKind::kGadget) {
    loaded.matched = std::string(module3) + "." + std::string(name3) + ", which " + std::string(module) + "." +
                     std::string(name) + " loads as" + (loaded.matched.empty() ? "" : ": " + loaded.matched);
  }
  return loaded;
}

}  // namespace ckptfix
