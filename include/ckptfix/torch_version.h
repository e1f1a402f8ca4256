// The torch release ckptfix answers for (docs/format.md, "What differs
// between torch versions"): which globals the default torch.load accepts,
// which dtypes load, and what a cast gives all changed between the releases
// people run. Every option struct that depends on one of those takes a
// TorchVersion; the CLI spells it `--torch 2.6`.
#pragma once

#include <compare>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckptfix {

/// A torch release, major.minor (patch releases change none of what
/// ckptfix models).
struct TorchVersion {
  int major = 2;
  int minor = 14;
  auto operator<=>(const TorchVersion&) const = default;
  /// "2.14".
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
  /// "2.6", "2.11.0", "2.11.0+cu130", "2.14.1+debian": the first two numbers;
  /// nullopt when the text does not start like a version.
  static std::optional<TorchVersion> parse(std::string_view text);
};

/// The releases ckptfix models, oldest first: 2.6 (the first whose
/// torch.load defaults to weights_only=True) to 2.14.
std::span<const TorchVersion> modeled_torch_versions();

/// What ckptfix answers for when not told: the newest release it models
/// (2.14). `inspect` and `check` also say which releases would refuse a
/// file.
TorchVersion default_torch_version();

/// Whether `torch`'s cast to float8_e4m3fn saturates finite values that
/// round past ±448, and ±inf, to ±448 (2.13 and later: pytorch PR #178817);
/// earlier releases make them NaN.
inline bool float8_e4m3fn_saturates(TorchVersion torch) { return torch >= TorchVersion{2, 13}; }

/// `version` if ckptfix models it; else Error(kInvalidArgument) saying which
/// releases it models.
TorchVersion modeled_torch_version(TorchVersion version);

}  // namespace ckptfix
