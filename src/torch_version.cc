#include "ckptfix/torch_version.h"

#include <cctype>

#include "cast_rules.h"
#include "ckptfix/error.h"

namespace ckptfix {
namespace {

constexpr TorchVersion kModeled[] = {{1, 13}, {2, 6},  {2, 7},  {2, 8}, {2, 9},
                                     {2, 10}, {2, 11}, {2, 12}, {2, 13}, {2, 14}};

// The decimal number at text[pos...] (at most 4 digits), advancing pos.
std::optional<int> number(std::string_view text, size_t& pos) {
  const size_t start = pos;
  int value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) && pos - start < 4) {
    value = value * 10 + (text[pos++] - '0');
  }
  if (pos == start) return std::nullopt;
  return value;
}

}  // namespace

std::optional<TorchVersion> TorchVersion::parse(std::string_view text) {
  size_t pos = 0;
  const auto major = number(text, pos);
  if (!major || pos >= text.size() || text[pos] != '.') return std::nullopt;
  ++pos;
  const auto minor = number(text, pos);
  if (!minor) return std::nullopt;
  // What may follow: nothing, a patch level, a local or pre-release tag.
  if (pos < text.size() && text[pos] != '.' && text[pos] != '+' && !std::isalpha(static_cast<unsigned char>(text[pos]))) {
    return std::nullopt;
  }
  return TorchVersion{*major, *minor};
}

Span<const TorchVersion> modeled_torch_versions() { return kModeled; }

TorchVersion default_torch_version() { return kModeled[std::size(kModeled) - 1]; }

TorchVersion modeled_torch_version(TorchVersion version) {
  for (const TorchVersion& v : kModeled) {
    if (v == version) return version;
  }
  throw Error(ErrorKind::kInvalidArgument, "torch " + version.str() + " is not a release ckptfix models (" +
                                               kModeled[0].str() + ", " + kModeled[1].str() + " to " +
                                               default_torch_version().str() + ")");
}

CastRules cast_rules(TorchVersion torch) {
  CastRules rules;
  rules.e4m3fn_saturates = float8_e4m3fn_saturates(torch);
  rules.float16_nan_canonical = float16_nan_is_canonical(torch);
  return rules;
}

}  // namespace ckptfix
