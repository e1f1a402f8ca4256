// Finding a ZeRO tag directory's layout (formats/zero_layout.h).
#include "formats/zero_layout.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "bytes/storage_reader.h"
#include "ckptfix/error.h"
#include "formats/named_files.h"
#include "formats/registry.h"
#include "io/bytes.h"
#include "model/graph_walk.h"
#include "model/torch_objects.h"

namespace ckptfix::zero {
namespace {

Error corrupt(const std::string& message) { return Error(ErrorKind::kCorrupt, message); }

// ---------------------------------------------------------------------------
// The tag directory's files, by name.

// Parses `digits` at the front of `s` (at most 9), advancing it.
std::optional<uint32_t> take_number(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && n < 10 && std::isdigit(static_cast<unsigned char>(s[n]))) ++n;
  if (n == 0 || n > 9) return std::nullopt;
  uint32_t value = 0;
  for (size_t i = 0; i < n; ++i) value = value * 10 + static_cast<uint32_t>(s[i] - '0');
  s.remove_prefix(n);
  return value;
}

bool take(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}




}  // namespace

// What a file name of a tag directory is, as DeepSpeed names them.
NamedRole role_of(std::string_view name) {
  NamedRole r;
  std::string_view s = name;
  if (take(s, "bf16_")) r.bf16 = true;
  if (take(s, "zero_pp_rank_")) {
    const auto rank = take_number(s);
    if (!rank || !take(s, "_mp_rank_")) return {};
    const auto mp = take_number(s);
    if (!mp) return {};
    r.rank = *rank;
    r.mp_rank = *mp;
    if (s == "_optim_states.pt") r.role = FileRole::kOptimizer;
    else if (s == "_model_states.pt" && !r.bf16) r.role = FileRole::kModelStage3;
    return r;
  }
  if (!r.bf16 && take(s, "mp_rank_")) {
    const auto mp = take_number(s);
    if (mp && s == "_model_states.pt") {
      r.mp_rank = *mp;
      r.role = FileRole::kModel;
    }
  }
  return r;
}


// Lists the tag directory; refuses what DeepSpeed writes for layouts this
// reader does not rebuild, naming them.
TagFiles list_tag_directory(const std::filesystem::path& dir, uint64_t max_files) {
  TagFiles out;
  std::error_code ec;
  uint64_t seen = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (++seen > max_files) {
      throw Error(ErrorKind::kLimit, "the directory holds more than " + std::to_string(max_files) +
                                         " files (limit max_storages)")
          .in_file(dir.string());
    }
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.substr(0, 6) == "layer_" && name.find("model_states.pt") != std::string::npos) {
      throw Error(ErrorKind::kUnsupported, "'" + name + "' is a pipeline stage's layer file: ckptfix rebuilds ZeRO "
                                                        "checkpoints without pipeline parallelism")
          .in_file(dir.string());
    }
    if (name.substr(0, 10) == "expp_rank_") {
      throw Error(ErrorKind::kUnsupported, "'" + name + "' is an expert-parallel (MoE) file: ckptfix rebuilds ZeRO "
                                                        "checkpoints without expert parallelism")
          .in_file(dir.string());
    }
    const NamedRole r = role_of(name);
    if (r.role == FileRole::kOther) continue;
    if (r.mp_rank != 0) {
      throw Error(ErrorKind::kUnsupported, "'" + name + "' belongs to tensor-parallel rank " + std::to_string(r.mp_rank) +
                                               ": ckptfix rebuilds ZeRO checkpoints of tensor parallelism 1")
          .in_file(dir.string());
    }
    if (r.role == FileRole::kOptimizer) {
      if (!out.optimizer.empty() && out.bf16 != r.bf16) {
        throw corrupt("it holds optimizer files both with and without the bf16_ prefix ('" + name +
                      "'): files of two runs?")
            .in_file(dir.string());
      }
      out.bf16 = r.bf16;
      out.optimizer[r.rank] = name;
    } else if (r.role == FileRole::kModelStage3) {
      out.model_stage3[r.rank] = name;
    }
  }
  if (ec) throw Error(ErrorKind::kIo, "cannot list the directory: " + ec.message()).in_file(dir.string());
  return out;
}


}  // namespace ckptfix::zero

namespace ckptfix {

bool is_zero_tag_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "mp_rank_00_model_states.pt", ec) ||
         std::filesystem::is_regular_file(dir / "zero_pp_rank_0_mp_rank_00_model_states.pt", ec);
}

std::filesystem::path zero_model_states_file(const std::filesystem::path& dir) {
  std::error_code ec;
  const std::filesystem::path stage12 = dir / "mp_rank_00_model_states.pt";
  return std::filesystem::is_regular_file(stage12, ec) ? stage12 : dir / "zero_pp_rank_0_mp_rank_00_model_states.pt";
}

}  // namespace ckptfix
