// Output naming (outputs.h): the paths a run writes to, made from the
// names it was given and found, never from where a link leads.
#include <sys/stat.h>

#include <filesystem>
#include <system_error>
#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckptfix/outputs.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// What an output made from a directory (or a .metadata) is named after:
// the directory's name.
fs::path directory_name(const RunInput& input) {
  fs::path name = fs::path(input.relative);
  if (name.filename() == ".metadata") name = name.parent_path();
  if (name.empty() || name == ".") name = fs::absolute(input.path).lexically_normal().parent_path().filename();
  return name;
}

}  // namespace

std::optional<FileId> file_id(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

std::set<FileId> input_file_ids(const std::vector<std::string>& inputs) {
  std::set<FileId> out;
  for (const std::string& input : inputs) {
    const std::optional<FileId> id = file_id(input);
    if (!id) continue;
    out.insert(*id);
    std::error_code ec;
    if (!fs::is_directory(input, ec)) continue;
    // A distributed or DeepSpeed checkpoint: the files directly in it (a
    // DeepSpeed tag's rank files are one level further, in the tag
    // directory, which is the input when --tag names it).
    for (const fs::directory_entry& entry : fs::directory_iterator(input, ec)) {
      if (const std::optional<FileId> inside = file_id(entry.path()); inside && entry.is_regular_file(ec)) {
        out.insert(*inside);
      }
    }
  }
  return out;
}

std::optional<std::string> format_of_output_name(const fs::path& output) {
  const std::string ext = lowercase(output.extension().string());
  if (ext.empty()) return "";
  if (ext == ".safetensors") return "safetensors";
  // .pth.tar: torch.save's name in the ImageNet examples and many since.
  if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt") return "pt";
  const std::string inner = lowercase(output.stem().extension().string());
  if (ext == ".tar" && (inner == ".pth" || inner == ".pt")) return "pt";
  return std::nullopt;
}

fs::path output_path(const OutputPlacement& placement, const RunInput& input) {
  if (placement.kind == OutputPlacement::Kind::kInPlace) return input.path;
  if (placement.kind == OutputPlacement::Kind::kFile) return placement.path;
  if (placement.format == "dcp") {  // a directory named after the input, without its extension
    fs::path name = directory_name(input);
    const std::optional<std::string> known = format_of_output_name(name);
    if (known && !known->empty()) name.replace_extension();
    return placement.path / name;
  }
  // A distributed checkpoint (its directory, or its .metadata) becomes one
  // file named after the directory.
  std::error_code ec;
  const fs::path in(input.path);
  if (fs::is_directory(in, ec) || in.filename() == ".metadata") {
    return placement.path / (directory_name(input).string() + (placement.format == "safetensors" ? ".safetensors" : ".pt"));
  }
  return placement.path / input.relative;
}

}  // namespace ckptfix
