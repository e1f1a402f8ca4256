// What loading a pickle would do with the globals it names: call them,
// make instances of them, or only hold them (docs/security.md, "What a
// pickle calls").
//
// ckptfix never calls anything; this is about the user, who will load the
// file with torch. Python's unpickler calls code in three places:
//
//  * REDUCE, INST and OBJ call their callable with the arguments the file
//    chose: a class's __new__ and __init__, or any function.
//  * NEWOBJ and NEWOBJ_EX call cls.__new__(cls, *args). Without arguments
//    this is how Python pickles a plain object (object.__reduce_ex__), and
//    for every class that does not define __new__ it is object.__new__,
//    which runs none of the class's code: the class is *instantiated*.
//    With arguments the class's own __new__ gets data the file chose, so
//    it is *called*, as a function given to NEWOBJ would be.
//  * BUILD sets an instance's attributes from a dict; a state that is not a
//    dict goes to the class's __setstate__, and SETITEMS goes to its
//    __setitem__: on an instance of a class ckptfix does not know, each
//    calls that class's code. APPENDS on anything but a list calls
//    getattr(obj, 'append') or 'extend', attributes the file itself may
//    have set, so whatever the object holds counts as called. So does a
//    second BUILD (getattr(obj, '__setstate__') may be what the first
//    stored) and a BUILD with a slot state ((state, slots): setattr of
//    any name, __class__ included, which turns the object into an
//    instance of a class the file names).
//
// Implicit calls (issue 66): a callable ckptfix knows as data may look up
// methods of an object it is given (dict(x) calls x.keys(),
// global_lists::calls_methods_of_its_arguments), hashing an object (a dict
// key, a set item) runs its class's __hash__ and __eq__, and a BUILD on an
// object whose constructor gave it a `__setstate__` attribute calls that:
// each counts as a call of what the object holds.
//
// copyreg's builders are read for what they do (copyreg.__newobj__ is
// NEWOBJ spelled as a REDUCE, _reconstructor(cls, object, None) makes an
// instance without calling cls). A callable that is not a global (a
// functools.partial being called) calls what it holds; some known callables
// call what they are given (global_lists::calls_its_arguments), and so may
// any callable ckptfix does not know: everything reachable from what such a
// call receives (through containers, objects and the memo) counts as
// called too, and so does what is added to a called value later.
//
// The analysis runs in two ways over the same rules: while a pickle is read
// (unpickler.cc reports each object made and each value added, so what the
// pickle builds and then discards, which still runs at load, is seen) and
// over a finished graph from its root (what a writer will pickle, after the
// passes changed it). Each value is marked called at most once, so both
// are linear in the pickle.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckptfix/globals.h"
#include "pickle/value_map.h"
#include "pickle/value.h"

namespace ckptfix {

/// One global and the strongest use a pickle makes of it.
struct GlobalUsage {
  std::string module;
  std::string name;
  GlobalUse use = GlobalUse::kReferenced;
  /// Where that use is first made: the pickle offset of the opcode (the
  /// unpickler's base_offset included); kNoOffset when unknown (a value
  /// made by a pass).
  uint64_t offset = kNoOffset;
  /// How, for messages: "REDUCE", "NEWOBJ with arguments", "BUILD with a
  /// state that is not a dict", "in the arguments of a call", ...
  std::string how;
};

/// Said of a class called with one plain value, the shape in which an Enum
/// member is pickled (how GlobalUsage::how ends then).
inline constexpr const char* kEnumShape = " of one plain value";

/// The uses a pickle makes of its globals, gathered as its values are made.
class CallAnalysis {
 public:
  /// `on_called(global, kind, offset)` is told when a global is first
  /// called; it may throw (the unpickler refuses a function held as a value
  /// this way).
  using OnCalled = std::function<void(const Value& global, GlobalKind kind, uint64_t offset)>;
  explicit CallAnalysis(OnCalled on_called = {}) : on_called_(std::move(on_called)) {}

  /// A global named by the pickle (GLOBAL, STACK_GLOBAL, INST) at `offset`,
  /// for a caller that wants the globals only held listed too.
  void named(const Value& global, uint64_t offset);
  /// An object made by `opcode` (REDUCE, INST, OBJ, NEWOBJ or NEWOBJ_EX) at `offset`.
  void object_made(const Value& object, uint64_t offset, const char* opcode);
  /// How values reach an existing value.
  enum class Addition : uint8_t {
    kBuild,    ///< the first BUILD on an object
    kRebuild,  ///< a BUILD on an object a BUILD already set up
    kSetItems,
    kAppends,
    kAddItems,
  };
  /// `values` added to `target` by the opcode at `offset`.
  void added(const Value& target, std::span<Value* const> values, Addition how, uint64_t offset);

  /// `v` is freed (its slot may be reused for a new value).
  void forget(const Value* v) {
    if (!called_.empty()) called_.erase(v);
    if (!index_by_value_.empty()) index_by_value_.erase(v);
    if (!facts_.empty()) facts_.erase(v);
  }

  /// Every global named (named()) or used, in order of first appearance, with its strongest use.
  std::vector<GlobalUsage> usages() const { return usages_; }

  /// Whether a call with `args` and `kwargs` gives the object it makes
  /// attributes named like dunders (`{'__setstate__': f}`), which CPython
  /// then looks up on the instance.
  static bool gives_dunder_attributes(const Value* args, const Value* kwargs);

 private:
  /// The name's key in kinds_ and index_, in key_.
  const std::string& key_of(const Value& global);
  /// What the policy says of a global, judged once per global value.
  struct GlobalFacts {
    GlobalKind kind = GlobalKind::kUnknown;
    bool calls_its_arguments = false;
    bool calls_methods_of_its_arguments = false;
  };
  /// Marks each object among `values` as called (what it holds, and its
  /// class): a callable looks up its methods, or hashing it runs its
  /// class's __hash__.
  void objects_called(std::span<Value* const> values, uint64_t offset, std::string_view how);
  const GlobalFacts& facts_of(const Value& global);
  GlobalKind kind_of(const Value& global) { return facts_of(global).kind; }
  /// The use `use` of `global` at `offset`, kept when stronger than what was seen.
  void use(const Value& global, GlobalUse use, uint64_t offset, std::string_view how);
  /// Marks `v` and everything reachable from it as called, once each.
  void mark_called(const Value* v, uint64_t offset, std::string_view how);
  /// cls.__new__(cls, *args, **kwargs), made by NEWOBJ or copyreg's builders.
  void new_instance(const Value* cls, std::span<Value* const> args, const Value* kwargs, uint64_t offset,
                    const char* opcode);
  /// The class an object is an instance of, when it was made without
  /// calling that class (see the file comment), or nullptr.
  const Value* instantiated_class(const Value& object);

  OnCalled on_called_;
  PointerSet<Value> called_;
  std::vector<const Value*> pending_;
  std::unordered_map<std::string, GlobalKind> kinds_;  // classify_global of each name judged
  std::unordered_map<std::string, size_t> index_;      // usages_ position of each name
  // The same for each global value met: torch's pickles name a global once
  // and refer back to that value, so a state dict of 100,000 tensors meets
  // a few values 100,000 times each, and no name key need be built again.
  PointerMap<Value, size_t> index_by_value_;
  PointerMap<Value, GlobalFacts> facts_;
  std::vector<GlobalUsage> usages_;
  std::string key_;  // key_of's buffer
};

/// The uses of the globals reachable from `root` (a finished graph, as a
/// writer will pickle it), in the order a walk from the root first reaches
/// them. Linear in the graph, iterative however deep it is.
std::vector<GlobalUsage> reachable_global_usages(const Value* root);

/// False when no global anywhere in `graph`, reachable or not, is a class
/// ckptfix does not know or a function (GlobalKind::kUnknown, kFunction):
/// then no pickle written from it can call code, and no analysis need be
/// made. One pass over the values in memory order, cheaper than a walk.
bool may_name_code(const ValueGraph& graph);

}  // namespace ckptfix
