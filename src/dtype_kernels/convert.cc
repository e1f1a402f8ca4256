#include "dtype_kernels/convert.h"

#include <cmath>
#include <cstring>
#include <iterator>
#include <mutex>
#include <vector>

#include "ckptfix/error.h"
#include "dtype_kernels/convert_kernels.h"

namespace ckptfix {
namespace {

template <typename T>
inline T load(const std::byte* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
inline void store(std::byte* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Reads element i as float32, torch's intermediate for every pair but
// float32 <-> float64. The source type is a template argument so that each
// conversion loop is compiled for one source type, without a switch per element.
template <DType From>
inline float load_as_float(const std::byte* p, size_t i) {
  if constexpr (From == DType::kFloat16) return half_bits_to_float(load<uint16_t>(p, i));
  if constexpr (From == DType::kBFloat16) return bfloat16_bits_to_float(load<uint16_t>(p, i));
  if constexpr (From == DType::kFloat32) return load<float>(p, i);
  if constexpr (From == DType::kFloat8E4M3Fn) return float8_e4m3fn_bits_to_float(load<uint8_t>(p, i));
  if constexpr (From == DType::kFloat8E5M2) return float8_e5m2_bits_to_float(load<uint8_t>(p, i));
  if constexpr (From == DType::kFloat64) return static_cast<float>(load<double>(p, i));
}

// The input element as float64 (exact for every type), for the statistics
// only: finite inputs that overflow, non-zero inputs that become 0.
template <DType From>
inline double load_exact(const std::byte* p, size_t i) {
  if constexpr (From == DType::kFloat64) {
    return load<double>(p, i);
  } else {
    return static_cast<double>(load_as_float<From>(p, i));
  }
}

inline void tally(ConvertStats& s, double in, bool overflowed, bool out_zero) {
  if (overflowed && std::isfinite(in)) ++s.overflowed;
  if (out_zero && in != 0 && !std::isnan(in)) ++s.flushed;
}

}  // namespace


namespace {

// The scalar rules for every pair from one source type, element by element.
template <DType From>
ConvertStats convert_from(DType to, const std::byte* src, std::byte* dst, size_t count, ChunkPosition position,
                          const CastRules& rules) {
  constexpr DType from = From;
  ConvertStats stats;
  switch (to) {
    case DType::kFloat64:  // widening never overflows or flushes
      for (size_t i = 0; i < count; ++i) store<double>(dst, i, static_cast<double>(load_as_float<From>(src, i)));
      return stats;
    case DType::kFloat32:
      for (size_t i = 0; i < count; ++i) {
        const float f = load_as_float<From>(src, i);  // float64 -> float32 rounds here
        store<float>(dst, i, f);
        if (from == DType::kFloat64) tally(stats, load<double>(src, i), std::isinf(f), f == 0);
      }
      return stats;
    case DType::kFloat16:
      for (size_t i = 0; i < count; ++i) {
        const uint16_t h = float_to_half_bits(load_as_float<From>(src, i));
        store<uint16_t>(dst, i, h);
        tally(stats, load_exact<From>(src, i), (h & 0x7FFF) == 0x7C00, (h & 0x7FFF) == 0);
      }
      return stats;
    case DType::kBFloat16: {
      // float64: ATen's vectorized blocks of 16 end where the scalar tail starts.
      const uint64_t vector_end = from == DType::kFloat64 ? position.total - position.total % 16 : 0;
      for (size_t i = 0; i < count; ++i) {
        const float f = load_as_float<From>(src, i);
        const uint16_t b = position.first + i < vector_end ? float_to_bfloat16_bits_vectorized(f)
                                                           : float_to_bfloat16_bits_scalar(f);
        store<uint16_t>(dst, i, b);
        tally(stats, load_exact<From>(src, i), (b & 0x7FFF) == 0x7F80, (b & 0x7FFF) == 0);
      }
      return stats;
    }
    case DType::kFloat8E4M3Fn:
      for (size_t i = 0; i < count; ++i) {
        const float f = load_as_float<From>(src, i);
        const uint8_t b = float_to_float8_e4m3fn_bits(f, rules.e4m3fn_saturates);
        store<uint8_t>(dst, i, b);
        // Saturated: from 464, where rounding reaches past 448 (464 itself
        // rounds to 448, and counts); before torch 2.13, a finite value that
        // became NaN.
        const bool overflowed = rules.e4m3fn_saturates ? std::fabs(f) >= 464.0f : (b & 0x7F) == 0x7F;
        tally(stats, load_exact<From>(src, i), overflowed, (b & 0x7F) == 0);
      }
      return stats;
    case DType::kFloat8E5M2:
      for (size_t i = 0; i < count; ++i) {
        const uint8_t b = float_to_float8_e5m2_bits(load_as_float<From>(src, i));
        store<uint8_t>(dst, i, b);
        tally(stats, load_exact<From>(src, i), (b & 0x7F) == 0x7C, (b & 0x7F) == 0);
      }
      return stats;
    default: break;
  }
  return stats;
}

ConvertStats convert_scalar(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                            ChunkPosition position, const CastRules& rules) {
  switch (from) {
    case DType::kFloat16: return convert_from<DType::kFloat16>(to, src, dst, count, position, rules);
    case DType::kBFloat16: return convert_from<DType::kBFloat16>(to, src, dst, count, position, rules);
    case DType::kFloat32: return convert_from<DType::kFloat32>(to, src, dst, count, position, rules);
    case DType::kFloat64: return convert_from<DType::kFloat64>(to, src, dst, count, position, rules);
    case DType::kFloat8E4M3Fn: return convert_from<DType::kFloat8E4M3Fn>(to, src, dst, count, position, rules);
    default: return convert_from<DType::kFloat8E5M2>(to, src, dst, count, position, rules);
  }
}

// Conversions from the 8- and 16-bit types (but the AVX2 kernels' below)
// are table lookups: every source pattern's result, and whether it
// overflowed or flushed, computed once by convert_scalar (so the bits are
// the scalar rules' by construction), 3-20x faster than the scalar code
// (its float8 rules, and float16's arithmetic decoding).
struct LookupTable {
  std::vector<std::byte> results;  // element_size(to) bytes per source pattern
  std::vector<uint8_t> flags;      // bit 0: overflowed, bit 1: flushed
};

constexpr DType kCastTypes[] = {DType::kFloat16,  DType::kBFloat16,     DType::kFloat32,
                                DType::kFloat64,  DType::kFloat8E4M3Fn, DType::kFloat8E5M2};
constexpr size_t kNumCastTypes = std::size(kCastTypes);

size_t cast_index(DType d) {
  for (size_t i = 0; i < kNumCastTypes; ++i) {
    if (kCastTypes[i] == d) return i;
  }
  return kNumCastTypes;
}

bool uses_table(DType from) { return element_size(from) <= 2; }

// One set of tables per CastRules (index: whether e4m3fn saturates).
const LookupTable& lookup_table(DType from, DType to, const CastRules& rules) {
  static std::once_flag once[2][kNumCastTypes][kNumCastTypes];
  static LookupTable tables[2][kNumCastTypes][kNumCastTypes];
  const size_t f = cast_index(from), t = cast_index(to), r = rules.e4m3fn_saturates ? 1 : 0;
  std::call_once(once[r][f][t], [&] {
    LookupTable& table = tables[r][f][t];
    const size_t patterns = size_t{1} << (8 * element_size(from)), out_size = element_size(to);
    table.results.resize(patterns * out_size);
    table.flags.resize(patterns);
    for (size_t p = 0; p < patterns; ++p) {
      const uint64_t bits = p;  // little-endian: its first 1 or 2 bytes are the pattern
      const ConvertStats st = convert_scalar(from, to, reinterpret_cast<const std::byte*>(&bits),
                                             table.results.data() + p * out_size, 1, {0, 1}, rules);
      table.flags[p] = static_cast<uint8_t>((st.overflowed != 0 ? 1 : 0) | (st.flushed != 0 ? 2 : 0));
    }
  });
  return tables[r][f][t];
}

template <typename In, typename Out>
ConvertStats convert_by_table(const LookupTable& table, const std::byte* src, std::byte* dst, size_t count) {
  const auto* results = reinterpret_cast<const Out*>(table.results.data());
  uint64_t overflowed = 0, flushed = 0;
  for (size_t i = 0; i < count; ++i) {
    const In p = load<In>(src, i);
    store<Out>(dst, i, results[p]);
    overflowed += table.flags[p] & 1;
    flushed += table.flags[p] >> 1;
  }
  return {overflowed, flushed};
}

template <typename In>
ConvertStats convert_by_table(DType to, const LookupTable& table, const std::byte* src, std::byte* dst,
                              size_t count) {
  switch (element_size(to)) {
    case 1: return convert_by_table<In, uint8_t>(table, src, dst, count);
    case 2: return convert_by_table<In, uint16_t>(table, src, dst, count);
    case 4: return convert_by_table<In, uint32_t>(table, src, dst, count);
    default: return convert_by_table<In, uint64_t>(table, src, dst, count);
  }
}

}  // namespace

namespace {

// An unsigned integer type into the next wider signed one, which holds
// every value (for a release that lacks the unsigned type).
template <typename In, typename Out>
void widen(const std::byte* src, std::byte* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) store<Out>(dst, i, static_cast<Out>(load<In>(src, i)));
}

// torch 1.13's float16 NaN (CastRules::float16_nan_canonical): 0x7E00 with its sign.
void canonical_float16_nans(std::byte* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint16_t h = load<uint16_t>(dst, i);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) store<uint16_t>(dst, i, static_cast<uint16_t>((h & 0x8000) | 0x7E00));
  }
}

ConvertStats convert_floats(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                            ChunkPosition position, const CastRules& rules);

}  // namespace

bool is_widening(DType from, DType to) {
  return (from == DType::kUInt16 && to == DType::kInt32) || (from == DType::kUInt32 && to == DType::kInt64);
}

ConvertStats convert_elements(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                              ChunkPosition position, const CastRules& rules) {
  if (is_widening(from, to)) {
    if (from == DType::kUInt16) widen<uint16_t, int32_t>(src, dst, count);
    else widen<uint32_t, int64_t>(src, dst, count);
    return {};
  }
  const ConvertStats stats = convert_floats(from, to, src, dst, count, position, rules);
  if (to == DType::kFloat16 && from != to && rules.float16_nan_canonical) canonical_float16_nans(dst, count);
  return stats;
}

namespace {

ConvertStats convert_floats(DType from, DType to, const std::byte* src, std::byte* dst, size_t count,
                            ChunkPosition position, const CastRules& rules) {
  if (!is_cast_type(from) || !is_cast_type(to)) {
    throw Error(ErrorKind::kInvalidArgument, "cannot convert " + std::string(dtype_name(from)) + " to " +
                                                 std::string(dtype_name(to)));
  }
  if (from == to) {
    std::memcpy(dst, src, count * element_size(from));
    return {};
  }
  if (from == DType::kFloat32 && to == DType::kBFloat16) return convert_f32_to_bf16(src, dst, count);
  if (from == DType::kFloat32 && to == DType::kFloat16) return convert_f32_to_f16(src, dst, count);
  if (from == DType::kFloat32 && to == DType::kFloat8E4M3Fn) {
    return convert_f32_to_e4m3fn(src, dst, count, rules.e4m3fn_saturates);
  }
  if (from == DType::kFloat32 && to == DType::kFloat8E5M2) return convert_f32_to_e5m2(src, dst, count);
  if (from == DType::kBFloat16 && to == DType::kFloat16) return convert_bf16_to_f16(src, dst, count);
  if (from == DType::kFloat16 && to == DType::kBFloat16) return convert_f16_to_bf16(src, dst, count);
  if (from == DType::kBFloat16 && to == DType::kFloat32) return convert_bf16_to_f32(src, dst, count);
  if (from == DType::kFloat16 && to == DType::kFloat32) return convert_f16_to_f32(src, dst, count);
  if (uses_table(from)) {
    const LookupTable& table = lookup_table(from, to, rules);
    return element_size(from) == 1 ? convert_by_table<uint8_t>(to, table, src, dst, count)
                                   : convert_by_table<uint16_t>(to, table, src, dst, count);
  }
  return convert_scalar(from, to, src, dst, count, position, rules);
}

}  // namespace

}  // namespace ckptfix
