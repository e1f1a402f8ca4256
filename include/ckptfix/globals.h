// The globals and opcodes a pickle uses, and how ckptfix judges a global
// (docs/format.md, "Globals"; docs/security.md).
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckptfix {

/// How a global a pickle names is judged.
enum class GlobalKind : uint8_t {
  kWeightsOnly,  ///< on torch 2.14's default weights_only allowlist
  kData,         ///< known data: builds a value, can neither run code nor touch files
  kUnknown,      ///< anything else that is not a known gadget (a project's own classes)
  kGadget,       ///< a known code, command, import, file or network primitive: refused
  /// A function a model may hold as a value (an activation kept in an
  /// attribute: torch.nn.functional.gelu pickles as torch._C._nn.gelu).
  /// Referenced, it is data; a pickle that would call it while loading is
  /// refused (docs/security.md, "Referenced functions").
  kFunction,
};

/// What loading a pickle does with a global it names, from least to most
/// (docs/security.md, "What a pickle calls").
enum class GlobalUse : uint8_t {
  kReferenced,    ///< only held as a value (a function kept by a module, a class bound by a partial)
  /// Made an instance of without calling it: NEWOBJ with no arguments then
  /// BUILD with an attribute dict, as Python pickles a plain object (every
  /// module of a model pickled whole). Loading runs only the class's own
  /// __new__ and __setstate__, if it defines them.
  kInstantiated,
  /// Called with what the file chose (REDUCE, INST, OBJ, NEWOBJ with
  /// arguments, BUILD with a state other than a dict, in the arguments of a
  /// call that calls what it is given, ...).
  kCalled,
};

/// A set of pickle opcodes (one bit per byte value): which opcodes a pickle used.
class OpcodeSet {
 public:
  /// Adds the opcode `code`.
  void insert(uint8_t code) { bits_[code >> 6] |= uint64_t{1} << (code & 63); }
  /// Whether the opcode `code` is in the set.
  bool contains(uint8_t code) const { return (bits_[code >> 6] >> (code & 63)) & 1; }
  /// Adds every opcode of `other`.
  OpcodeSet& operator|=(const OpcodeSet& other) {
    for (size_t i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
    return *this;
  }

 private:
  uint64_t bits_[4] = {};
};

}  // namespace ckptfix
