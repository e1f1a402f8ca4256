// Pickles inside a checkpoint's values (issue 66; docs/security.md, "What
// runs after weights_only").
//
// Transformer Engine and NVIDIA ModelOpt keep a module's extra state (a key
// ending in `_extra_state`) as a uint8 tensor holding a raw pickle, which
// their set_extra_state hands to pickle.loads inside load_state_dict, after
// torch.load(weights_only=True) accepted the file; older Transformer Engine
// kept an io.BytesIO of a torch.save there, which it hands to torch.load. A
// tensor pickled by pickle.dumps holds its storage as
// torch.storage._load_from_bytes(<a legacy torch.save stream>). None of
// these bytes is a pickle to torch.load, so its weights_only never looks
// inside; ckptfix reads each with its own unpickler (never executing
// anything), bounded in depth and size, and judges it as the file's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// What the bytes of a nested pickle are.
enum class NestedForm : uint8_t {
  kPickle,        ///< a raw pickle (pickle.dumps), what pickle.loads reads
  kTorchZip,      ///< a torch.save zip archive, what torch.load reads
  kLegacyStream,  ///< a legacy (torch < 1.6, or _use_new_zipfile_serialization=False) torch.save stream
  kNotAPickle,    ///< bytes no unpickler gets a global from: data (an empty extra state, raw bytes)
};

/// "pickle", "torch zip", "legacy torch.save stream", "not a pickle".
const char* to_string(NestedForm form);

/// One nested pickle.
struct NestedPickle {
  /// The key or path of the file's value that holds it ("layer._extra_state",
  /// "state_dict/layer._extra_state"); for a pickle within a nested one, the
  /// outer path, then " > " and its place inside ("... > scale_fwd").
  std::string key;
  /// The path of the file's own value that holds it (of the outermost, for
  /// one within another).
  Path path;
  /// What holds the bytes: "uint8 tensor", "io.BytesIO",
  /// "torch.storage._load_from_bytes".
  std::string holder;
  NestedForm form = NestedForm::kNotAPickle;
  uint64_t bytes = 0;  ///< of the nested pickle or archive
  int depth = 1;       ///< 1 for one held by the file's own pickle
  /// Every global it names, judged, with the strongest use loading makes of
  /// it; `where` is "<key>+0x<offset>" (or the record of a nested archive).
  std::vector<GlobalRef> globals;
  /// The tensors inside: "scale_fwd: float32 [1]".
  std::vector<std::string> tensors;
  /// Why ckptfix could not read it all (a limit, damage, a gadget its own
  /// reader refuses); empty when it did. A nested pickle ckptfix cannot
  /// read and that names a global is a violation (nested_violations).
  std::string unreadable;
  /// With `unreadable`: the bytes name a global before the point ckptfix
  /// stopped, so the loader may call it before failing.
  bool names_globals = false;
};

/// Every nested pickle of `checkpoint` as it is now (after passes), outer
/// ones first, each followed by those inside it: the bytes of a uint8
/// tensor under a key whose last segment is `_extra_state`, of every
/// io.BytesIO, and of every torch.storage._load_from_bytes call inside
/// those. A uint8 tensor under another key is data, whatever its bytes
/// (docs/security.md says where the line is drawn, and why). Reading stops
/// at depth 4 and at ReadLimits::max_pickle_bytes of nested bytes in all
/// (the rest is listed `unreadable`). Throws what reading the checkpoint's
/// own storages throws.
std::vector<NestedPickle> nested_pickles(const Checkpoint& checkpoint);

/// The same for bytes alone, as a uint8 extra state holding them would be
/// read (pickle.loads), or with `as_bytes_io` as an io.BytesIO's (torch.load:
/// a zip, a legacy stream, else a pickle); `key` names them in messages.
/// For fuzzing and tests.
std::vector<NestedPickle> nested_pickles_of_bytes(const std::string& bytes, const std::string& key,
                                                  const ReadLimits& limits = {}, bool as_bytes_io = false);

/// Something a nested pickle would do when its model loads it that the call
/// policy refuses.
struct NestedViolation {
  std::string key;   ///< NestedPickle::key
  Path path;         ///< NestedPickle::path
  /// "its pickle calls 'posix.system' (REDUCE at +0x1a)", "its pickle cannot
  /// be read (...) and names 'mypkg.X'".
  std::string what;
  /// A call of a global `allow_globals` could trust (not a known gadget, nor
  /// bytes ckptfix cannot read).
  bool trustable = false;
};

/// The violations among `nested`: a known gadget named anywhere; a class
/// ckptfix does not know as data, or a function, that loading calls
/// (unless a glob of `allow_globals` matches it, or it is one of the
/// classes Transformer Engine pickles there: its recipe classes, `Format`
/// and `_FormatHelper`); a pickle ckptfix cannot read that names a global.
std::vector<NestedViolation> nested_violations(const std::vector<NestedPickle>& nested,
                                               const std::vector<std::string>& allow_globals);

/// True for a global Transformer Engine's get_extra_state pickles (its
/// recipe dataclasses, the Format enum and its _FormatHelper tuple), which
/// a nested pickle may call.
bool is_extra_state_class(const std::string& module, const std::string& name);

}  // namespace ckptfix
