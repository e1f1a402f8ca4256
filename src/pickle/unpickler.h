// A pickle reader that builds a ValueGraph and never executes anything.
//
// It implements the opcodes of protocols 0 to 5 (CPython's pickle.py is the
// reference for their meaning). Where CPython would import a module or call
// a function, this reader records a Global or an Object value instead.
// Every Global is checked against the global policy as soon as it is read,
// so a pickle naming a known gadget fails before anything else happens; before that, its
// module and name must be dotted ASCII identifiers (global_names.h), which
// is also what keeps a name from carrying pickle text into what ckptfix
// writes.
//
// What loading would do with each global (call it, make an instance of
// it, or only hold it) is analysed as the values are made
// (call_analysis.h), so that what the pickle builds and then discards,
// which still runs when torch loads it, is seen too. A function a model may
// hold as a value (GlobalKind::kFunction: an activation such as
// torch._C._nn.gelu kept in a module's attributes) is refused where loading
// would call it; what else is called is reported (UnpickleResult::globals)
// for the readers and the writer to judge.
//
// Memory follows what the pickle holds, not what it did: a value the pickle
// discards (POP, the operands of STACK_GLOBAL, the memo and stack left at
// STOP) is freed as soon as nothing refers to it, and the values, MARKs and
// memo entries held at once are counted against a limit. Persistent ids are
// never freed: torch loads the storage of each one it reads, so each must
// be checked against the archive, used or not. The set of opcodes used is
// recorded, for the weights_only verdict. A caller that parses a pickle
// where it lies in its file may have large str and bytes payloads left
// there (UnpickleOptions::leave_in_file_from): a numpy array's gigabyte is
// then neither copied nor paged in.
//
// Not supported, with a clear error: the copyreg extension registry
// (EXT1/2/4) and out-of-band buffers (NEXT_BUFFER, READONLY_BUFFER), which
// torch.save never produces.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "ckptfix/error.h"
#include "pickle/call_analysis.h"
#include "pickle/value.h"

namespace ckptfix {

struct UnpickleResult {
  Value* root = nullptr;
  uint64_t length = 0;  ///< bytes consumed, STOP included
  int protocol = 0;     ///< from PROTO, 0 or 1 when absent
  OpcodeSet opcodes;    ///< every opcode the pickle used
  /// Bytes of the pickle held in memory: `length` less the payloads left
  /// in the file (UnpickleOptions::leave_in_file_from).
  uint64_t held_bytes = 0;
  /// The globals loading would call or make instances of, with the
  /// strongest such use of each (call_analysis.h), discarded values
  /// included; a global named and only held is not listed (on_global is
  /// told of every one).
  std::vector<GlobalUsage> globals;
};

struct UnpickleOptions {
  /// Added to offsets in messages (a pickle embedded in a larger file).
  uint64_t base_offset = 0;
  /// Called for every Global as it is read (module, name, the offset of its
  /// opcode with base_offset added); may throw. The default refuses
  /// dangerous globals.
  std::function<void(const std::string&, const std::string&, uint64_t)> on_global;
  /// Called for every object as it is made (REDUCE, NEWOBJ, ...) and again
  /// after each BUILD on it, before anything the pickle does later can
  /// discard it, with the offset of that opcode (nested pickles: model/nested.h
  /// reads the bytes of each torch.storage._load_from_bytes call there). May throw.
  std::function<void(const Value&, uint64_t)> on_object;
  /// Values, MARKs and memo entries held at once; beyond, Error(kLimit)
  /// naming ReadLimits::max_pickle_values. 0: no limit.
  uint64_t max_values = 0;
  /// Bytes of a global's module and of its name (ReadLimits::max_name_bytes).
  uint64_t max_name_bytes = 1024;
  /// A str or bytes payload (BINUNICODE, BINUNICODE8, BINBYTES, BINBYTES8)
  /// of at least this many bytes is not copied: its value records where it
  /// lies in the input file (Value::in_file). Only for a pickle read where
  /// it lies in its file (`bytes` is the file's mapping from `file_offset`
  /// on). 0: every payload is copied.
  uint64_t leave_in_file_from = 0;
  /// Where `bytes` starts in the input file (with leave_in_file_from).
  uint64_t file_offset = 0;
  /// Bytes of the pickle held in memory, i.e. all but the payloads left in
  /// the file, beyond which Error(kLimit) names ReadLimits::max_pickle_bytes.
  /// 0: no limit (a caller that copies the whole pickle checks its size).
  uint64_t max_held_bytes = 0;
};

/// Parses one pickle from the start of `bytes` up to its STOP opcode.
/// Errors carry the location "+0x<offset>" of the offending opcode.
UnpickleResult unpickle(std::span<const std::byte> bytes, ValueGraph& graph, const UnpickleOptions& options = {});

/// Whether `e` (from unpickle) says the pickle ran out of bytes before its
/// STOP: every such message of the unpickler ends in "(truncated)".
bool is_truncated_pickle(const Error& e);

/// The default global check: throws Error(kUnsafe) naming a known gadget
/// (global_policy.h).
void refuse_dangerous_global(const std::string& module, const std::string& name, uint64_t offset = 0);

/// The Error(kUnsafe) for a gadget; `matched` is the rule that matched.
Error dangerous_global_error(const std::string& module, const std::string& name, const std::string& matched);

/// The Error(kUnsafe) for a function (GlobalKind::kFunction) the pickle would call.
Error called_function_error(const std::string& module, const std::string& name);

}  // namespace ckptfix
