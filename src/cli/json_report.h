// The JSON report of a run (docs/cli.md, "JSON reports"), written as the
// inputs finish: the document's head first, each input's object in input
// order as soon as it is known, the summary last, so that memory does not
// grow with the number of inputs. It goes to standard output (--json), to a
// file (--report FILE: written beside it and renamed into place when
// complete, so a reader never sees half a report), or both. Every write is
// checked: standard output failing stops the run (stop.h); the report file
// failing is the run's failure (exit 1), said once at the end.
//
// The text is what nlohmann's dump(2) makes of the whole document (keys in
// order, two-space indents), so a report read whole or streamed is the same.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ckptfix::cli {

/// Writes `text` to standard output, whole. A failure stops the run
/// (stdout_failed) and what is written after it is dropped.
void print_out(std::string_view text);

class JsonReport {
 public:
  /// Nothing is written when neither `to_stdout` nor `file`. Throws
  /// Error(kIo) when the report file cannot be made.
  JsonReport(std::string command, bool to_stdout, const std::string& file);
  ~JsonReport();
  JsonReport(const JsonReport&) = delete;
  JsonReport& operator=(const JsonReport&) = delete;

  bool enabled() const { return to_stdout_ || file_fd_ >= 0; }

  /// The next input's object.
  void add_input(const nlohmann::json& doc);
  /// Ends the document with the top-level list `name` after the summary
  /// (inspect's "tensors"), empty unless add_to_list() fills it.
  void end_with_list(const std::string& name) { list_name_ = name; }
  /// An item of that list, kept in a temporary file until finish().
  void add_to_list(const nlohmann::json& item);
  /// Ends the document with "schema" and "summary" (and the list) and
  /// renames the report file into place. Returns false, having said why on
  /// stderr, when the report file could not be written.
  bool finish(const nlohmann::json& summary);

 private:
  void write(std::string_view text);
  void write_file(std::string_view text);

  std::string command_;
  bool to_stdout_;
  std::string file_, temp_;
  int file_fd_ = -1;
  int file_error_ = 0;
  uint64_t temporary_ticket_ = 0;
  bool any_input_ = false;
  bool replaced_utf8_ = false;
  std::string list_name_;
  std::FILE* list_ = nullptr;  // the list's items, dumped, until finish()
  bool any_item_ = false;
};

}  // namespace ckptfix::cli
