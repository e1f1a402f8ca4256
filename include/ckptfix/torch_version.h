// The torch release ckptfix answers for (docs/format.md, "What differs
// between torch versions"): which globals the default torch.load accepts,
// which dtypes load, and what a cast gives all changed between the releases
// people run. Every option struct that depends on one of those takes a
// TorchVersion; the CLI spells it `--torch 2.6`.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>

#include "ckptfix/span.h"

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

/// The releases ckptfix models, oldest first: 1.13 (Debian 12's and
/// Ubuntu 24.04's python3-torch, whose torch.load defaults to
/// weights_only=False), then 2.6 (the first whose torch.load defaults to
/// weights_only=True) to 2.14.
Span<const TorchVersion> modeled_torch_versions();

/// Whether `torch`'s torch.load defaults to weights_only=True (2.6 and later).
inline bool weights_only_by_default(TorchVersion torch) { return torch >= TorchVersion{2, 6}; }

/// The release whose weights_only allowlist a rewrite for `torch` keeps to:
/// `torch` itself, or for a release that loads everything by default (1.13)
/// the oldest allowlist, 2.6's.
inline TorchVersion allowlist_release(TorchVersion torch) {
  return weights_only_by_default(torch) ? torch : TorchVersion{2, 6};
}

/// What ckptfix answers for when not told: the newest release it models
/// (2.14). `inspect` and `check` also say which releases would refuse a
/// file.
TorchVersion default_torch_version();

/// Whether `torch`'s cast to float8_e4m3fn saturates finite values that
/// round past ±448, and ±inf, to ±448 (2.13 and later: pytorch PR #178817);
/// earlier releases make them NaN.
inline bool float8_e4m3fn_saturates(TorchVersion torch) { return torch >= TorchVersion{2, 13}; }

/// Whether `torch`'s casts to float16 make every NaN 0x7E00 with its sign
/// (torch 1.13, which converts without F16C; 2.x keeps the top payload bits).
inline bool float16_nan_is_canonical(TorchVersion torch) { return torch < TorchVersion{2, 0}; }

/// `version` if ckptfix models it; else Error(kInvalidArgument) saying which
/// releases it models.
TorchVersion modeled_torch_version(TorchVersion version);

}  // namespace ckptfix
