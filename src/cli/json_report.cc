#include "cli/json_report.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include "ckptfix/error.h"
#include "cli/report.h"
#include "cli/stop.h"
#include "io/interrupt.h"

namespace ckptfix::cli {
namespace {

// `doc` as dump(2) writes it, each line after the first indented by `by`
// more spaces (an object inside the top-level one); invalid UTF-8 replaced,
// which `replaced` then says.
std::string dumped(const nlohmann::json& doc, size_t by, bool& replaced) {
  std::string text;
  try {
    text = doc.dump(2);
  } catch (const nlohmann::json::type_error&) {  // 316: a string that is not UTF-8 (a key, a path)
    replaced = true;
    text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (const char c : text) {
    out += c;
    if (c == '\n') out.append(by, ' ');
  }
  return out;
}

// Writes all of `text` to `fd`; the errno of a failure, or 0.
int write_fd(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    text.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

}  // namespace

void print_out(std::string_view text) {
  if (stdout_error() != 0) return;  // already failed: the rest is lost with it
  std::cout.flush();  // anything printed the other way first
  if (const int error = write_fd(STDOUT_FILENO, text)) stdout_failed(error);
}

JsonReport::JsonReport(std::string command, bool to_stdout, const std::string& file)
    : command_(std::move(command)), to_stdout_(to_stdout), file_(file) {
  if (!file.empty()) {
    // Beside the report, so that the rename stays in one file system;
    // in the table of temporaries, so a second signal removes it too.
    const std::filesystem::path path(file);
    const std::filesystem::path dir = path.parent_path();
    temp_ = (dir / ("." + path.filename().string() + ".ckptfix-" + std::to_string(::getpid()) + ".tmp")).string();
    file_fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (file_fd_ < 0) {
      throw Error(ErrorKind::kIo, std::string("cannot make the report: ") + std::strerror(errno) +
                                      " (it is written beside it, then renamed into place)")
          .in_file(file);
    }
    temporary_ticket_ = remember_temporary(temp_);
  }
  if (!enabled()) return;
  nlohmann::json head = {{"ckptfix", version()}, {"command", command_}};
  write("{\n  \"ckptfix\": " + head["ckptfix"].dump() + ",\n  \"command\": " + head["command"].dump() +
        ",\n  \"inputs\": [");
}

JsonReport::~JsonReport() {
  if (file_fd_ >= 0) {
    ::close(file_fd_);
    ::unlink(temp_.c_str());
    forget_temporary(temporary_ticket_);
  }
  if (list_ != nullptr) std::fclose(list_);
}

void JsonReport::write_file(std::string_view text) {
  if (file_fd_ < 0 || file_error_ != 0) return;
  file_error_ = write_fd(file_fd_, text);
}

void JsonReport::write(std::string_view text) {
  if (to_stdout_) print_out(text);
  write_file(text);
}

void JsonReport::add_input(const nlohmann::json& doc) {
  if (!enabled()) return;
  write((any_input_ ? ",\n    " : "\n    ") + dumped(doc, 4, replaced_utf8_));
  any_input_ = true;
}

void JsonReport::add_to_list(const nlohmann::json& item) {
  if (!enabled()) return;
  if (list_ == nullptr) {
    list_ = std::tmpfile();  // unnamed: nothing to remove, whatever happens
    if (list_ == nullptr) {
      file_error_ = file_error_ != 0 ? file_error_ : errno;
      stdout_failed(errno);  // the report cannot be made whole
      return;
    }
  }
  const std::string text = (any_item_ ? ",\n    " : "\n    ") + dumped(item, 4, replaced_utf8_);
  if (std::fwrite(text.data(), 1, text.size(), list_) != text.size()) stdout_failed(errno != 0 ? errno : EIO);
  any_item_ = true;
}

bool JsonReport::finish(const nlohmann::json& summary) {
  if (!enabled()) return true;
  std::string tail = any_input_ ? "\n  ],\n" : "],\n";
  if (replaced_utf8_) tail += "  \"invalid_utf8_replaced\": true,\n";
  tail += "  \"schema\": 1,\n  \"summary\": " + dumped(summary, 2, replaced_utf8_);
  if (list_name_.empty()) {
    write(tail + "\n}\n");
  } else {
    write(tail + ",\n  \"" + list_name_ + "\": [");
    if (list_ != nullptr) {
      std::rewind(list_);
      char buffer[1 << 16];
      for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, list_)) > 0;) write(std::string_view(buffer, n));
      if (std::ferror(list_)) stdout_failed(EIO);
    }
    write(any_item_ ? "\n  ]\n}\n" : "]\n}\n");
  }
  if (file_fd_ < 0) return true;
  if (file_error_ == 0 && ::fsync(file_fd_) != 0) file_error_ = errno;
  if (::close(file_fd_) != 0 && file_error_ == 0) file_error_ = errno;
  file_fd_ = -1;
  if (file_error_ == 0 && ::rename(temp_.c_str(), file_.c_str()) != 0) file_error_ = errno;
  if (file_error_ != 0) ::unlink(temp_.c_str());
  forget_temporary(temporary_ticket_);
  if (file_error_ == 0) return true;
  std::cerr << "ckptfix: error: '" << printable(file_) << "': cannot write the report: " << std::strerror(file_error_)
            << "; it was not written" << std::endl;
  return false;
}

}  // namespace ckptfix::cli
