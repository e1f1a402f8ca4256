#include "ckptfix/error.h"

#include <cstdio>

namespace ckptfix {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kNotCheckpoint: return "not-checkpoint";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kCorrupt: return "corrupt";
    case ErrorKind::kUnsafe: return "unsafe";
    case ErrorKind::kInvalidArgument: return "invalid-argument";
    case ErrorKind::kConflict: return "conflict";
    case ErrorKind::kExists: return "exists";
    case ErrorKind::kVerification: return "verification";
    case ErrorKind::kGpu: return "gpu";
  }
  return "unknown";
}

Error::Error(ErrorKind kind, std::string message)
    : kind_(kind), message_(std::move(message)) {
  render();
}

Error& Error::in_file(std::string file) {
  if (file_.empty()) {
    file_ = std::move(file);
    render();
  }
  return *this;
}

Error& Error::at(std::string location) {
  if (location_.empty()) {
    location_ = std::move(location);
    render();
  }
  return *this;
}

Error& Error::within(std::string_view outer) {
  if (location_.empty()) {
    location_ = std::string(outer);
  } else if (location_.front() == '+') {
    location_ = std::string(outer) + location_;
  } else {
    location_ = std::string(outer) + ": " + location_;
  }
  render();
  return *this;
}

Error& Error::set_location(std::string location) {
  location_ = std::move(location);
  render();
  return *this;
}

Error& Error::note(const std::string& text) {
  message_ += "; " + text;
  render();
  return *this;
}

void Error::render() {
  rendered_.clear();
  if (!file_.empty()) rendered_ += "'" + file_ + "': ";
  if (!location_.empty()) rendered_ += location_ + ": ";
  rendered_ += message_;
}

std::string hex_offset(unsigned long long offset) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", offset);
  return buf;
}

}  // namespace ckptfix
