// Nested pickles (include/ckptfix/nested.h): found in a checkpoint's values,
// read with ckptfix's own readers, never executed.
#include "ckptfix/nested.h"

#include <algorithm>
#include <cstring>
#include <variant>

#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "error_boundary.h"
#include "model/bytes_values.h"
#include "model/checkpoint_impl.h"
#include "model/graph_walk.h"
#include "model/payloads.h"
#include "model/state_dict_values.h"
#include "pickle/unpickler.h"

namespace ckptfix {
namespace {

// Deeper than any library nests them (Transformer Engine: an extra state's
// pickle, then each tensor's _load_from_bytes stream: depth 2).
constexpr int kMaxDepth = 4;

// torch.save's legacy stream begins with the pickle of its magic number
// 0x1950a86a20f9469cfc6c (LONG1, protocol 2).
constexpr char kLegacyMagic[] = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

// What Transformer Engine's get_extra_state pickles beside plain data and
// tensors (transformer_engine/common/recipe/__init__.py): pydantic
// dataclasses (NEWOBJ and BUILD), the Format enum (called with its value)
// and the _FormatHelper NamedTuple it holds (called with two floats).
constexpr const char* kExtraStateClasses[] = {
    "Format", "_FormatHelper", "Recipe", "DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling",
    "Float8BlockScaling", "NVFP4BlockScaling", "CustomRecipe", "QParams", "MMParams", "_OverrideLinearPrecision",
};

bool starts_with(const std::string& bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

GlobalRef judged(const std::string& module, const std::string& name, GlobalUse use, std::string where,
                 std::string how) {
  GlobalRef g = judged_global(module, name);
  g.use = use;
  g.where = std::move(where);
  g.how = std::move(how);
  return g;
}

std::string tensor_line(const std::string& path, const TensorInfo& t) {
  std::string line = path;  // appended piece by piece: g++ 12 warns (-Wrestrict) at "," + std::string
  line += ": ";
  line += dtype_name(t.dtype);
  line += " [";
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) line += ',';
    line += std::to_string(t.shape[i]);
  }
  return line + "]";
}

// The bytes of a uint8 tensor, in its element order (what
// `t.numpy().tobytes()` gives), or nullopt beyond `budget`.
std::optional<std::string> tensor_bytes(const Checkpoint& checkpoint, const TensorInfo& t, uint64_t budget) {
  const uint64_t n = t.numel();
  if (n == 0 || t.storage < 0) return std::string();
  uint64_t reach = 1;  // elements from storage_offset to the last one
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.stride[i] < 0) return std::nullopt;
    reach += static_cast<uint64_t>(t.shape[i] - 1) * static_cast<uint64_t>(t.stride[i]);
  }
  if (reach > budget || n > budget) return std::nullopt;
  std::string block(reach, '\0');
  checkpoint.read_storage(static_cast<size_t>(t.storage), static_cast<uint64_t>(t.storage_offset),
                          Span<std::byte>(reinterpret_cast<std::byte*>(block.data()), block.size()));
  if (reach == n) return block;  // contiguous
  std::string out;
  out.reserve(n);
  std::vector<int64_t> index(t.shape.size(), 0);
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t at = 0;
    for (size_t i = 0; i < index.size(); ++i) at += static_cast<uint64_t>(index[i] * t.stride[i]);
    out.push_back(block[at]);
    for (size_t i = index.size(); i-- > 0;) {
      if (++index[i] < t.shape[i]) break;
      index[i] = 0;
    }
  }
  return out;
}

class NestedReader {
 public:
  NestedReader(const ReadLimits& limits, std::vector<NestedPickle>& out)
      : limits_(limits), budget_(limits.max_pickle_bytes), out_(out) {}

  /// Reads the nested values of an opened checkpoint, `prefix` before their keys.
  void scan(const Checkpoint& checkpoint, const std::string& prefix, int depth, const Path& outer_path = {}) {
    const CheckpointImpl& impl = impl_of(checkpoint);
    const bool uint8 = std::any_of(impl.tensors.begin(), impl.tensors.end(),
                                   [](const Tensor& t) { return t.dtype == DType::kUInt8; });
    const bool bytes_io = std::any_of(impl.globals.begin(), impl.globals.end(), [](const GlobalRef& g) {
      return (g.module == "_io" || g.module == "io") && g.name == "BytesIO";
    });
    if (!uint8 && !bytes_io) return;  // nothing can hold one: no walk (a state dict of 100,000 tensors)
    read_in_left_payloads(checkpoint);
    struct Found {
      std::string key;
      Path path;
      const Value* value;
      const Tensor* tensor;
    };
    std::vector<Found> found;
    walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
      if (const Tensor* t = impl.tensor_of(&v)) {
        const std::string* last = path.empty() ? nullptr : std::get_if<std::string>(&path.back());
        if (t->dtype == DType::kUInt8 && last != nullptr && is_extra_state_key(*last)) {
          found.push_back({path_to_string(path), path, &v, t});
        }
        return false;
      }
      if (v.kind == ValueKind::kObject && v.callable() != nullptr && is_bytes_io_class(*v.callable())) {
        found.push_back({path.empty() ? "<root>" : path_to_string(path), path, &v, nullptr});
        return false;
      }
      return true;
    });
    for (const Found& f : found) {
      const std::string key = prefix + f.key;
      const Path& outer = depth == 1 ? f.path : outer_path;
      if (f.tensor != nullptr) {
        std::optional<std::string> bytes = tensor_bytes(checkpoint, *f.tensor, budget_);
        if (!bytes) {
          over_budget(key, outer, "uint8 tensor", f.tensor->numel(), depth);
          continue;
        }
        read(*bytes, key, outer, "uint8 tensor", depth, /*torch_load=*/false);
      } else {
        read_bytes_io(*f.value, key, outer, depth);
      }
    }
  }

  /// Reads `bytes` as the loader of `holder` would: pickle.loads for an
  /// extra state's uint8 tensor, torch.load (a zip, a legacy stream, or
  /// else a pickle it unpickles first) for the others.
  void read(const std::string& bytes, const std::string& key, const Path& path, const std::string& holder, int depth,
            bool torch_load) {
    NestedPickle p;
    p.key = key;
    p.path = path;
    p.holder = holder;
    p.bytes = bytes.size();
    p.depth = depth;
    if (depth > kMaxDepth) {
      p.form = NestedForm::kPickle;
      p.unreadable = "nested more than " + std::to_string(kMaxDepth) + " levels deep";
      p.names_globals = true;
      out_.push_back(std::move(p));
      return;
    }
    if (bytes.size() > budget_) {
      over_budget(key, path, holder, bytes.size(), depth);
      return;
    }
    budget_ -= bytes.size();
    if (torch_load && (starts_with(bytes, "PK\x03\x04") || starts_with(bytes, kLegacyMagic))) {
      read_torch_save(bytes, std::move(p));
    } else {
      read_pickle(bytes, std::move(p));
    }
  }

 private:
  void over_budget(const std::string& key, const Path& path, const std::string& holder, uint64_t size, int depth) {
    NestedPickle p;
    p.key = key;
    p.path = path;
    p.holder = holder;
    p.bytes = size;
    p.depth = depth;
    p.form = NestedForm::kPickle;
    p.unreadable = "beyond the " + std::to_string(limits_.max_pickle_bytes) +
                   " bytes of nested pickles ckptfix reads (limit max_pickle_bytes)";
    p.names_globals = true;
    out_.push_back(std::move(p));
  }

  void read_bytes_io(const Value& v, const std::string& key, const Path& path, int depth) {
    if (std::optional<BytesIOValue> io = bytes_io_of(v)) {
      read(io->bytes, key, path, "io.BytesIO", depth, /*torch_load=*/true);
      return;
    }
    NestedPickle p;
    p.key = key;
    p.path = path;
    p.holder = "io.BytesIO";
    p.depth = depth;
    p.form = NestedForm::kPickle;
    p.unreadable = "an io.BytesIO whose bytes are not plain bytes (" + describe_value(v) + ")";
    p.names_globals = true;
    out_.push_back(std::move(p));
  }

  void read_torch_save(const std::string& bytes, NestedPickle p) {
    p.form = starts_with(bytes, "PK\x03\x04") ? NestedForm::kTorchZip : NestedForm::kLegacyStream;
    const size_t at = out_.size();
    out_.push_back(p);  // before those inside it
    try {
      OpenOptions options;
      options.limits = limits_;
      options.limits.max_pickle_bytes = std::min<uint64_t>(limits_.max_pickle_bytes, bytes.size());
      options.make_values_ahead = false;
      const Checkpoint inner = Checkpoint::from_bytes(bytes, p.key, options);
      const std::string place = p.key + ": ";
      std::vector<GlobalRef> globals = inner.globals();
      for (GlobalRef& g : globals) g.where = place + g.where;
      std::vector<std::string> tensors;
      for (const TensorPosition& t : inner.tensor_positions()) {
        tensors.push_back(tensor_line(path_to_string(t.path), inner.tensors()[t.tensor]));
      }
      out_[at].globals = std::move(globals);
      out_[at].tensors = std::move(tensors);
      scan(inner, p.key + " > ", p.depth + 1, p.path);
    } catch (const Error& e) {
      // What ckptfix cannot read, torch.load may still: it may run what it names.
      out_[at].unreadable = e.message();
      out_[at].names_globals = true;
    }
  }

  void read_pickle(const std::string& bytes, NestedPickle p) {
    struct Named {
      std::string module, name;
      uint64_t offset;
    };
    std::vector<Named> named;
    struct Inner {
      std::string bytes;
      std::string place;
      bool readable;
    };
    std::vector<Inner> inner;  // _load_from_bytes streams and io.BytesIO buffers, as made
    ValueGraph graph;
    UnpickleOptions options;
    options.max_values = max_pickle_values(limits_, bytes.size());
    options.max_name_bytes = limits_.max_name_bytes;
    options.max_held_bytes = limits_.max_pickle_bytes;
    options.on_global = [&](const std::string& module, const std::string& name, uint64_t offset) {
      named.push_back({module, name, offset});
    };
    // Seen as each is made: a value the pickle later discards was still
    // loaded, and torch.storage._load_from_bytes ran torch.load on its bytes.
    // Python >= 3.11 pickles an Enum member as getattr(cls, name): a lookup
    // of a plain name on a class Transformer Engine pickles is its Format
    // member, not a gadget; any other getattr, or calling what one gave, is.
    bool member_lookups = false, other_getattr = false;
    auto is_getattr = [](const Value& c) {
      return c.kind == ValueKind::kObject && c.callable() != nullptr &&
             (c.callable()->is_global("builtins", "getattr") || c.callable()->is_global("__builtin__", "getattr"));
    };
    options.on_object = [&](const Value& v, uint64_t offset) {
      if (is_getattr(v)) {
        const std::vector<Value*>* a = v.args() != nullptr ? &v.args()->items : nullptr;
        const bool member = a != nullptr && a->size() == 2 && (*a)[0]->kind == ValueKind::kGlobal &&
                            is_extra_state_class((*a)[0]->text, (*a)[0]->name()) && (*a)[1]->is_str() &&
                            (*a)[1]->text.find("__") == std::string::npos && v.states().empty();
        (member ? member_lookups : other_getattr) = true;
      }
      if (v.callable() != nullptr && is_getattr(*v.callable())) other_getattr = true;
      const std::string place = p.key + "+" + hex_offset(offset);
      if (v.is_call_to("torch.storage", "_load_from_bytes")) {
        const std::optional<std::string> b =
            v.args() != nullptr && v.args()->items.size() == 1 ? bytes_of(*v.args()->items[0]) : std::nullopt;
        inner.push_back({b.value_or(""), place, b.has_value()});
      } else if (std::optional<BytesIOValue> io = bytes_io_of(v)) {
        inner.push_back({std::move(io->bytes), place, true});
      }
    };
    UnpickleResult result;
    const size_t at = out_.size();
    try {
      result = unpickle(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), graph, options);
    } catch (const Error& e) {
      if (named.empty()) {  // no global: pickle.loads cannot call anything before it fails
        p.form = NestedForm::kNotAPickle;
        out_.push_back(std::move(p));
        return;
      }
      p.form = NestedForm::kPickle;
      p.unreadable = e.message();
      p.names_globals = true;
      for (const Named& n : named) {
        p.globals.push_back(judged(n.module, n.name, GlobalUse::kReferenced, p.key + "+" + hex_offset(n.offset), "named"));
      }
      out_.push_back(std::move(p));
      return;
    }
    p.form = NestedForm::kPickle;
    // The uses loading makes, then the globals only named.
    for (const GlobalUsage& u : result.globals) {
      p.globals.push_back(judged(u.module, u.name, u.use,
                                 u.offset == kNoOffset ? p.key : p.key + "+" + hex_offset(u.offset), u.how));
    }
    for (const Named& n : named) {
      const bool listed = std::any_of(p.globals.begin(), p.globals.end(), [&](const GlobalRef& g) {
        return g.module == n.module && g.name == n.name;
      });
      if (!listed) {
        p.globals.push_back(judged(n.module, n.name, GlobalUse::kReferenced, p.key + "+" + hex_offset(n.offset), "named"));
      }
    }
    if (member_lookups && !other_getattr) {
      std::erase_if(p.globals, [](const GlobalRef& g) {
        return (g.module == "builtins" || g.module == "__builtin__") && g.name == "getattr";
      });
    }
    // The tensors pickle.dumps made: _rebuild_tensor_v2(_load_from_bytes(...), offset, size, stride, ...).
    if (result.root != nullptr) try {
      // Bounded: a pickle's values may share children without end (a DAG).
      const WalkLimits walk{limits_.max_depth, 4 * max_pickle_values(limits_, bytes.size())};
      walk_graph(result.root, [&](Value& v, const Path& path) {
        if (v.is_call_to("torch._utils", "_rebuild_tensor_v2") || v.is_call_to("torch._utils", "_rebuild_tensor")) {
          std::string shape;
          const Value* args = v.args();
          if (args != nullptr && args->items.size() >= 3 && args->items[2]->kind == ValueKind::kTuple) {
            for (const Value* d : args->items[2]->items) {
              if (!shape.empty()) shape += ',';
              shape += d->kind == ValueKind::kInt ? std::to_string(d->integer) : "?";
            }
          }
          p.tensors.push_back((path.empty() ? "<root>" : path_to_string(path)) + ": [" + shape + "]");
          return false;
        }
        return true;
      }, walk);
    } catch (const Error& e) {
      p.unreadable = e.message();
      p.names_globals = true;
    }
    out_.push_back(std::move(p));
    for (Inner& i : inner) {
      if (!i.readable) {
        NestedPickle q;
        q.key = i.place;
        q.path = out_[at].path;
        q.holder = "torch.storage._load_from_bytes";
        q.depth = out_[at].depth + 1;
        q.form = NestedForm::kPickle;
        q.unreadable = "its argument is not plain bytes";
        q.names_globals = true;
        out_.push_back(std::move(q));
        continue;
      }
      read(i.bytes, i.place, out_[at].path, "torch.storage._load_from_bytes", out_[at].depth + 1, /*torch_load=*/true);
    }
  }

  ReadLimits limits_;
  uint64_t budget_;
  std::vector<NestedPickle>& out_;
};

bool matches_any(const std::vector<std::string>& patterns, const std::string& dotted) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, dotted); });
}

std::string quoted(const GlobalRef& g) {
  std::string s(1, '\'');
  s += g.dotted();
  s += "' (";
  s += g.how;
  if (!g.where.empty()) s += " at " + g.where;
  return s + ")";
}

}  // namespace

const char* to_string(NestedForm form) {
  switch (form) {
    case NestedForm::kPickle: return "pickle";
    case NestedForm::kTorchZip: return "torch zip";
    case NestedForm::kLegacyStream: return "legacy torch.save stream";
    case NestedForm::kNotAPickle: return "not a pickle";
  }
  return "?";
}

bool is_extra_state_class(const std::string& module, const std::string& name) {
  if (module != "transformer_engine.common.recipe") return false;
  return std::any_of(std::begin(kExtraStateClasses), std::end(kExtraStateClasses),
                     [&](const char* c) { return name == c; });
}

std::vector<NestedPickle> nested_pickles(const Checkpoint& checkpoint) {
  return error_boundary(checkpoint.file_name(), [&] {
    std::vector<NestedPickle> out;
    NestedReader(checkpoint.read_limits(), out).scan(checkpoint, "", 1);
    return out;
  });
}

std::vector<NestedPickle> nested_pickles_of_bytes(const std::string& bytes, const std::string& key,
                                                  const ReadLimits& limits, bool as_bytes_io) {
  std::vector<NestedPickle> out;
  NestedReader(limits, out).read(bytes, key, Path{key}, as_bytes_io ? "io.BytesIO" : "uint8 tensor", 1, as_bytes_io);
  return out;
}

std::vector<NestedViolation> nested_violations(const std::vector<NestedPickle>& nested,
                                               const std::vector<std::string>& allow_globals) {
  std::vector<NestedViolation> out;
  for (const NestedPickle& p : nested) {
    if (!p.unreadable.empty() && p.names_globals) {
      // A gadget ckptfix's own reader refused is said as what it is.
      constexpr std::string_view kRefusing = "refusing to load: ";
      const std::string its = "its " + std::string(p.holder == "uint8 tensor" ? "pickle" : p.holder + " bytes");
      if (p.unreadable.rfind(kRefusing, 0) == 0) {
        out.push_back({p.key, p.path, its + ": " + p.unreadable.substr(kRefusing.size())});
        continue;
      }
      std::string what = its + " cannot be read (" + p.unreadable + ")";
      if (!p.globals.empty()) what += " and names " + quoted(p.globals.front());
      out.push_back({p.key, p.path, what + ": its loader may run what ckptfix cannot judge"});
    }
    for (const GlobalRef& g : p.globals) {
      // _load_from_bytes is torch.load of bytes that are read as a nested pickle of their own.
      if (g.module == "torch.storage" && g.name == "_load_from_bytes") continue;
      const bool gadget = g.kind == GlobalKind::kGadget;
      const bool call = (g.kind == GlobalKind::kUnknown || g.kind == GlobalKind::kFunction) && g.use == GlobalUse::kCalled;
      if (!gadget && !call) continue;
      if (!gadget && (is_extra_state_class(g.module, g.name) || matches_any(allow_globals, g.dotted()))) continue;
      const std::string verb = g.use == GlobalUse::kCalled         ? "calls "
                               : g.use == GlobalUse::kInstantiated ? "makes an instance of "
                                                                   : "names the gadget ";
      out.push_back({p.key, p.path,
                     "its " + std::string(p.holder == "uint8 tensor" ? "pickle" : p.holder + " bytes") + " " + verb +
                         quoted(g),
                     !gadget});
    }
  }
  return out;
}

}  // namespace ckptfix
