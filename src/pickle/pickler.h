// Writes a ValueGraph back as a protocol-2 pickle.
//
// The output follows what CPython's pickler does for the same objects at
// protocol 2, so that torch 1.13 and later read it, including under
// weights_only=True: every str, tuple, list, dict, global and call result is
// memoized (BINPUT) and repeated references become BINGET, ints use the
// smallest of BININT1/BININT2/BININT/LONG1, floats are BINFLOAT, objects are
// written as callable, args, REDUCE/NEWOBJ, then APPENDS, SETITEMS, BUILD.
// Values that protocol 2 cannot spell directly are written the way CPython
// writes them at protocol 2: bytes as _codecs.encode(latin-1 str,'latin1'),
// sets as builtins.set([...]), cls.__new__ with keywords via
// copyreg.__newobj_ex__.
//
// Persistent ids are written by a caller-supplied function: torch storages
// are re-described from the checkpoint's storage table at write time, which
// is how remapping and casting change them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "pickle/value.h"

namespace ckptfix {

struct PickleWriterOptions {
  /// Writes the persistent id for a kPersistentId value by calling
  /// `save` on a value to pickle (before BINPERSID is appended).
  std::function<void(const Value& pid_value, const std::function<void(Value*)>& save)> persistent_id;
  /// Write only what LibTorch's unpickler (torch::jit::pickle_load) reads:
  /// LONG1 always with 8 bytes, and SETITEMS/APPENDS even for one item (it
  /// has no SETITEM). CPython reads the result the same way.
  bool libtorch = false;
  /// The serial numbers of the values to write lie below this, when known
  /// (ValueGraph::serial_end of their graphs): the memo and the output are
  /// sized for them at once instead of grown by doubling, which touched
  /// every page twice (a fifth of the time pickling 100,000 tensors took).
  size_t value_numbers = 0;
};

/// Serializes root and everything reachable from it, at any depth (the
/// writer keeps its work on the heap). Throws Error(kUnsupported) for graphs
/// pickle cannot express (a tuple that contains itself), for a global that is
/// not a dotted identifier, and for a length protocol 2 cannot spell.
std::string pickle_protocol2(Value* root, const PickleWriterOptions& options = {});

/// A length field of at most `max` (INT32_MAX or UINT32_MAX), as the four
/// bytes protocol 2 writes; throws Error(kUnsupported) naming `what` when
/// `length` does not fit.
int32_t pickle_length32(uint64_t length, const char* what, uint64_t max);

}  // namespace ckptfix
