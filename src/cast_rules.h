// What a cast gives in a torch release, where releases differ: the rules
// the cast pass records on a storage (model/checkpoint_impl.h) and the
// conversion kernels follow (dtype_kernels/convert.h). Beside error.cc at
// the bottom of the layers (docs/architecture.md), so that the model knows
// which rules a storage is cast by without knowing the kernels.
#pragma once

#include "ckptfix/torch_version.h"

namespace ckptfix {

/// Where torch releases differ in what a conversion gives (docs/format.md,
/// "What differs between torch versions"). The defaults are the newest
/// release's (2.14).
struct CastRules {
  /// To float8_e4m3fn: finite values that round past ±448, and ±inf,
  /// saturate to ±448 (0x7E with their sign), since torch 2.13 (pytorch PR
  /// #178817, "Properly saturate E4M3 on finite-overflow on CPU/C++
  /// conversion code"); earlier releases make them NaN (0x7F with their sign).
  bool e4m3fn_saturates = true;
  /// To float16: every NaN becomes 0x7E00 with its sign, as torch 1.13's
  /// conversion without F16C makes it; 2.x keeps the top payload bits.
  bool float16_nan_canonical = false;
  bool operator==(const CastRules&) const = default;
};

/// The rules of a torch release.
CastRules cast_rules(TorchVersion torch);

}  // namespace ckptfix
