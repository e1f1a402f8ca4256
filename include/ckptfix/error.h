// ckptfix: the one error type of the library.
//
// Every failure the library reports is a ckptfix::Error. It carries a kind
// (so a caller can tell bad input from a usage mistake from an I/O failure),
// the file it concerns, where in the file (a record and offset, or a key),
// and a lower-case message that states what was expected and what was found.
// what() renders all of it on one line:
//
//   'model.pt': archive/data.pkl+0x1a3: unknown pickle opcode 0x9f
//
// File names, keys and names inside an Error come from the input, so every
// part is stored as printable() makes it: a key holding a newline or a
// terminal escape cannot break the line or forge output.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfix {

/// What went wrong, coarsely: enough to choose an exit code or a reaction.
enum class ErrorKind {
  kIo,              ///< the operating system refused a read, write or rename
  kNotCheckpoint,   ///< the file is not a torch.save checkpoint at all
  kUnsupported,     ///< a checkpoint variant ckptfix recognises but does not handle
  kCorrupt,         ///< the file is damaged: truncated, inconsistent, bad CRC
  kUnsafe,          ///< the pickle references a dangerous callable
  kInvalidArgument, ///< an option or argument given by the caller is invalid
  kConflict,        ///< a requested edit cannot be done (e.g. two keys collide)
  kExists,          ///< the output exists and overwriting was not allowed
  kVerification,    ///< a written file did not verify against what was intended
  kGpu,             ///< the GPU load test was required but could not run, or failed
  kLimit,           ///< the input exceeds a resource limit (ReadLimits); it may be sound, and raising the limit reads it
  kInternal,        ///< a failure that is a bug in ckptfix (an unexpected exception, reported instead of a crash)
  kInterrupted,     ///< the work was stopped from outside (interrupt.h: a signal) before it was complete
};

/// Stable lower-case name of an ErrorKind, e.g. "corrupt" (used in JSON reports).
std::string_view to_string(ErrorKind kind);

/// The library's exception type. Context is added as the error travels up:
/// the layer that knows the file name adds it, the layer that knows the
/// record adds that, so the innermost code only states the fact.
class Error : public std::exception {
 public:
  Error(ErrorKind kind, std::string message);

  /// What kind of failure this is (the exit code and JSON name follow from it).
  ErrorKind kind() const noexcept { return kind_; }
  /// The bare message, without file or location.
  const std::string& message() const noexcept { return message_; }
  /// The file the error concerns, or empty.
  const std::string& file() const noexcept { return file_; }
  /// Where in the file: "archive/data.pkl+0x1a3", "key 'conv.weight'", or empty.
  const std::string& location() const noexcept { return location_; }

  /// Sets the file if none is set yet (the innermost knowledge wins).
  Error& in_file(std::string file);
  /// Sets the location if none is set yet.
  Error& at(std::string location);
  /// Prefixes the location with an outer context ("archive/data.pkl" + "+0x1a3").
  Error& within(std::string_view outer);
  /// Replaces the location.
  Error& set_location(std::string location);
  /// Appends "; <text>" to the message (a consequence the caller knows).
  Error& note(const std::string& text);
  /// Adds a line that goes with the error, printed after it (torch's own
  /// words for what load_state_dict would refuse, one line each).
  Error& detail(const std::string& line);
  /// The lines detail() added, in order (each printable, one line).
  const std::vector<std::string>& details() const noexcept { return details_; }

  /// One line: "'FILE': LOCATION: MESSAGE" (parts that are unknown are left out).
  const char* what() const noexcept override { return rendered_.c_str(); }

 private:
  void render();

  ErrorKind kind_;
  std::string message_;
  std::string file_;
  std::string location_;
  std::string rendered_;
  std::vector<std::string> details_;
};

/// Formats an offset the way every message does: "0x1a3".
std::string hex_offset(unsigned long long offset);

/// `text` made safe to print on one line of a terminal: C0 and C1 control
/// characters, DEL, line and paragraph separators and bidirectional
/// controls become \xNN or \uNNNN escapes, and bytes that are not UTF-8
/// become \xNN. Everything else, non-ASCII letters included, is kept.
/// Idempotent (a backslash is not escaped), so text may pass through twice.
std::string printable(std::string_view text);

/// A shape or stride as ckptfix prints it: "[2,3]", "[]" for a scalar.
std::string shape_text(const std::vector<int64_t>& dims);

/// True when `text` is valid UTF-8 (what JSON output needs as it is).
bool is_valid_utf8(std::string_view text);

}  // namespace ckptfix
