// recipe_id (rerun.h): every option that decides an output's bytes besides
// its input, written out in one fixed order, and hashed.
#include <xxhash.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptfix/rerun.h"

namespace ckptfix {
namespace {

// The recipe's text: each field named, each string with its length, so
// that no two different recipes can read the same.
class RecipeText {
 public:
  RecipeText& field(const char* name) {
    text_ += '\n';
    text_ += name;
    text_ += ':';
    return *this;
  }
  RecipeText& str(std::string_view s) {
    text_ += std::to_string(s.size());
    text_ += '"';
    text_ += s;
    return *this;
  }
  RecipeText& number(uint64_t n) {
    text_ += std::to_string(n) + ';';
    return *this;
  }
  RecipeText& strs(const std::vector<std::string>& list) {
    number(list.size());
    for (const std::string& s : list) str(s);
    return *this;
  }
  RecipeText& pairs(const std::vector<std::pair<std::string, std::string>>& list) {
    number(list.size());
    for (const auto& [a, b] : list) str(a).str(b);
    return *this;
  }
  const std::string& text() const { return text_; }

 private:
  std::string text_ = "ckptfix recipe 1";
};

}  // namespace

std::string recipe_id(const ValidPassOptions& valid, const OutputRecipe& recipe) {
  const PassOptions& p = valid.options();
  // A field added to PassOptions must be added here too, or two runs that
  // differ only in it would take each other's outputs for their own. (Its
  // size with libstdc++ on 64-bit Linux, where ckptfix is built.)
#if defined(__GLIBCXX__) && defined(__LP64__)
  static_assert(sizeof(PassOptions) == 344, "PassOptions changed: add the new field to recipe_id");
#endif
  RecipeText t;
  t.field("reader").str(recipe.reader);
  t.field("format").str(recipe.format);
  t.field("libtorch_pickle").number(recipe.libtorch_pickle);
  t.field("drop_aliases").number(recipe.drop_aliases);
  t.field("metadata").pairs(recipe.metadata);
  t.field("max_shard_size").number(recipe.max_shard_size);
  t.field("extract").number(p.extract.has_value()).str(p.extract.value_or(""));
  t.field("keys").strs(p.keys);
  t.field("strip_prefixes").strs(p.strip_prefixes);
  t.field("auto_strip").number(p.auto_strip);
  t.field("add_prefix").str(p.add_prefix);
  t.field("to_device").number(p.to_device.has_value()).str(p.to_device.value_or(""));
  t.field("device_map").pairs(p.device_map);
  // The release resolved: a newer ckptfix may default to a newer torch,
  // whose casts and allowlist may give other bytes.
  t.field("torch").str(p.torch.value_or(default_torch_version()).str());
  t.field("cast_to").str(p.cast_to ? dtype_name(*p.cast_to) : "");
  t.field("cast_from").number(p.cast_from.size());
  for (DType d : p.cast_from) t.str(dtype_name(d));
  t.field("keep").strs(p.keep);
  t.field("weights_only").number(p.weights_only);
  t.field("drop_unknown").number(p.drop_unknown);
  t.field("like").number(p.like != nullptr);
  if (p.like) {  // the model's entries, not its file's name: the fit depends on what it says
    t.number(p.like->entries.size());
    for (const ExpectedEntry& e : p.like->entries) {
      t.str(e.key).number(e.tensor).str(dtype_name(e.dtype)).number(e.shape.size());
      for (int64_t d : e.shape) t.number(static_cast<uint64_t>(d));
    }
  }
  t.field("fit").pairs(p.fit.renames).strs(p.fit.drops);
  t.number(p.fit.allow_missing).number(p.fit.drop_unexpected).number(p.fit.drop_mismatched).number(p.fit.dtype_like);
  t.field("for_libtorch").number(p.for_libtorch);
  const XXH128_hash_t h = XXH3_128bits(t.text().data(), t.text().size());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

}  // namespace ckptfix
