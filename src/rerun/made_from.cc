#include "rerun/made_from.h"

#include <sys/stat.h>
#include <sys/xattr.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ckptfix/rerun.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b <= 0x20 || b == 0x7F || b == '%') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", b);
      out += hex;
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> unescaped(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size()) return std::nullopt;
    const auto [end, ec] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (ec != std::errc() || end != text.data() + i + 3) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  for (size_t at = 0; at <= line.size();) {
    const size_t space = std::min(line.find(' ', at), line.size());
    out.push_back(line.substr(at, space - at));
    at = space + 1;
  }
  return out;
}

template <typename T>
bool number(std::string_view word, T& value) {
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  return ec == std::errc() && end == word.data() + word.size();
}

// 'name', built step by step: GCC 12 warns falsely (-Wrestrict) on "'" + string.
std::string quoted(const std::string& name) {
  std::string out(1, '\'');
  out += name;
  out += '\'';
  return out;
}

int64_t ns(const struct timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

// The record on `file` (not followed if a link: links keep no user
// attributes), or why there is none.
std::optional<MadeFromRecord> read_record(const fs::path& file, std::string& why) {
  std::string value(4096, '\0');
  ssize_t n = ::lgetxattr(file.c_str(), kMadeFromAttribute, value.data(), value.size());
  if (n < 0 && errno == ERANGE) {
    n = ::lgetxattr(file.c_str(), kMadeFromAttribute, nullptr, 0);
    if (n > 0 && n <= (1 << 20)) {
      value.resize(static_cast<size_t>(n));
      n = ::lgetxattr(file.c_str(), kMadeFromAttribute, value.data(), value.size());
    }
  }
  if (n < 0) {
    why = errno == ENODATA ? "it has no record of what made it (not written by this version of ckptfix, or copied "
                             "without its extended attributes)"
                           : "its file system keeps no record of what made it (no user extended attributes)";
    return std::nullopt;
  }
  value.resize(static_cast<size_t>(n));
  std::optional<MadeFromRecord> record = parse_record(value);
  if (!record) why = "its record of what made it is not one ckptfix reads";
  return record;
}

// Whether `record` still describes the files: the inputs as they were read
// (unless `in_place`, where the input is the output), the outputs as they
// were written; else why not.
OutputFinding compare(const MadeFromRecord& record, const fs::path& directory, const MadeFrom& asked, bool in_place) {
  if (record.recipe != asked.recipe) {
    return {OutputState::kOutdated, "it was written by other options (or another command) than these"};
  }
  if (record.read.empty()) {  // nothing to tell the input by: only the bytes can
    return {OutputState::kUnknown, "its record names no input file to compare"};
  }
  if (in_place) {
    if (fs::path(record.input) != fs::absolute(asked.input).lexically_normal()) {
      return {OutputState::kOutdated, "its record says it was made from " + quoted(record.input)};
    }
  } else {
    for (const ReadStamp& r : record.read) {
      struct stat st {};
      if (::stat(r.path.c_str(), &st) != 0) {
        return {OutputState::kOutdated, "its input " + quoted(r.path) + " is gone"};
      }
      if (static_cast<uint64_t>(st.st_ino) != r.inode || static_cast<uint64_t>(st.st_size) != r.size ||
          ns(st.st_ctim) != r.changed_ns) {
        return {OutputState::kOutdated, "it was made from " + quoted(r.path) + ", which changed since"};
      }
    }
  }
  for (const WroteStamp& w : record.wrote) {
    struct stat st {};
    const fs::path file = directory / w.name;
    if (::lstat(file.c_str(), &st) != 0) return {OutputState::kOutdated, quoted(file.string()) + " of it is gone"};
    if (static_cast<uint64_t>(st.st_ino) != w.inode || static_cast<uint64_t>(st.st_size) != w.size ||
        ns(st.st_mtim) != w.modified_ns) {
      return {OutputState::kOutdated, quoted(file.string()) + " changed since it was written"};
    }
  }
  return {OutputState::kDone, "it was written from this input, as it is now, by these options"};
}

}  // namespace

WroteStamp wrote_stamp(const struct stat& st, std::string name) {
  return {std::move(name), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size), ns(st.st_mtim)};
}

std::string record_text(const MadeFromRecord& record) {
  std::string out = "ckptfix-made-from 1\nrecipe " + escaped(record.recipe) + "\ninput " + escaped(record.input) + "\n";
  for (const ReadStamp& r : record.read) {
    out += "read " + std::to_string(r.inode) + " " + std::to_string(r.size) + " " + std::to_string(r.changed_ns) + " " +
           escaped(r.path) + "\n";
  }
  for (const WroteStamp& w : record.wrote) {
    out += "wrote " + std::to_string(w.inode) + " " + std::to_string(w.size) + " " + std::to_string(w.modified_ns) +
           " " + escaped(w.name) + "\n";
  }
  return out;
}

std::optional<MadeFromRecord> parse_record(std::string_view text) {
  MadeFromRecord record;
  bool header = false, recipe = false, input = false;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::vector<std::string_view> w = words(text.substr(at, end - at));
    at = end + 1;
    if (!header) {
      if (w.size() != 2 || w[0] != "ckptfix-made-from" || w[1] != "1") return std::nullopt;
      header = true;
    } else if (w.size() == 2 && w[0] == "recipe" && !recipe) {
      const auto r = unescaped(w[1]);
      if (!r) return std::nullopt;
      record.recipe = *r;
      recipe = true;
    } else if (w.size() == 2 && w[0] == "input" && !input) {
      const auto i = unescaped(w[1]);
      if (!i) return std::nullopt;
      record.input = *i;
      input = true;
    } else if (w.size() == 5 && w[0] == "read") {
      ReadStamp r;
      const auto path = unescaped(w[4]);
      if (!number(w[1], r.inode) || !number(w[2], r.size) || !number(w[3], r.changed_ns) || !path) return std::nullopt;
      r.path = *path;
      record.read.push_back(std::move(r));
    } else if (w.size() == 5 && w[0] == "wrote") {
      WroteStamp s;
      const auto name = unescaped(w[4]);
      // A name, never a path: the record speaks of its own directory only.
      if (!number(w[1], s.inode) || !number(w[2], s.size) || !number(w[3], s.modified_ns) || !name ||
          name->empty() || name->find('/') != std::string::npos || *name == "." || *name == "..") {
        return std::nullopt;
      }
      s.name = *name;
      record.wrote.push_back(std::move(s));
    } else {
      return std::nullopt;
    }
  }
  if (!header || !recipe || !input || record.wrote.empty()) return std::nullopt;
  return record;
}

std::string_view output_state_name(OutputState state) {
  switch (state) {
    case OutputState::kAbsent: return "absent";
    case OutputState::kDone: return "done";
    case OutputState::kOutdated: return "outdated";
    case OutputState::kUnknown: return "unknown";
  }
  return "unknown";
}

OutputFinding find_output(const fs::path& output, const MadeFrom& made_from, bool in_place) {
  try {
    std::vector<fs::path> candidates;
    std::error_code ec;
    struct stat st {};
    if (::lstat(output.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      candidates.push_back(output / ".metadata");  // a distributed checkpoint's directory
    } else {
      candidates = {output, fs::path(output.string() + ".index.json")};  // a file, or a shard set's index
    }
    std::optional<OutputFinding> first;
    for (const fs::path& file : candidates) {
      if (::lstat(file.c_str(), &st) != 0) continue;
      OutputFinding found;
      if (S_ISLNK(st.st_mode)) {
        found = {OutputState::kUnknown, "it is a symbolic link, which a write into a directory replaces, never follows"};
      } else if (!S_ISREG(st.st_mode)) {
        found = {OutputState::kUnknown, "it is not a regular file"};
      } else {
        std::string why;
        const std::optional<MadeFromRecord> record = read_record(file, why);
        found = record ? compare(*record, file.parent_path(), made_from, in_place)
                       : OutputFinding{OutputState::kUnknown, why};
      }
      if (found.state == OutputState::kDone) return found;
      if (!first) first = found;
    }
    return first.value_or(OutputFinding{OutputState::kAbsent, "it is not there"});
  } catch (const std::exception&) {  // memory: the output is then taken for one to compare
    return {OutputState::kUnknown, "its record could not be read"};
  }
}

}  // namespace ckptfix
