// DeepSpeed ZeRO, stage 1 of reading a tag directory: finding its layout,
// what each file is by the name DeepSpeed gives it (zero_format.cc has the
// whole picture).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

namespace ckptfix::zero {

enum class FileRole { kOther, kOptimizer, kModelStage3, kModel };

struct NamedRole {
  FileRole role = FileRole::kOther;
  uint32_t rank = 0;     // data-parallel rank (optimizer, stage 3 model states)
  uint32_t mp_rank = 0;  // tensor-parallel rank
  bool bf16 = false;     // bf16_zero_pp_rank_...
};

/// What a file name of a tag directory is, as DeepSpeed names them.
NamedRole role_of(std::string_view name);

struct TagFiles {
  std::map<uint32_t, std::string> optimizer;  // rank -> file name
  std::map<uint32_t, std::string> model_stage3;
  bool bf16 = false;
};

/// Lists the tag directory; refuses what DeepSpeed writes for layouts the
/// reader does not rebuild, naming them.
TagFiles list_tag_directory(const std::filesystem::path& dir, uint64_t max_files);

}  // namespace ckptfix::zero
