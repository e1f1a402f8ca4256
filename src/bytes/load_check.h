// What the GPU load test computes over a tensor's bytes, written once for
// the host (g++/clang) and the device (nvcc): a position-dependent checksum
// of its 32-bit words and, for floating dtypes, its NaN and Inf counts from
// each element's bits.
//
// The checksum is two sums modulo 2^64 over the little-endian words w_i of
// the bytes (the last one zero-padded): sum = Σ w_i and weighted =
// Σ (i + 1)·w_i. Sums do not depend on the order they are added in, so
// thousands of device threads and one CPU loop give the same numbers
// exactly; the weights make a moved or swapped word count, not only a
// changed one. It is not a hash against an adversary (XXH3 does that job on
// the CPU): it proves that the device read the bytes the CPU meant.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define CKPTFIX_HOST_DEVICE __host__ __device__
#else
#define CKPTFIX_HOST_DEVICE
#endif

namespace ckptfix {

/// How a floating dtype marks NaN and Inf in its bits (kNone: not a float,
/// nothing to count).
enum class FloatCoding : uint8_t {
  kNone,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kFloat8E4M3Fn,  ///< no Inf; S.1111.111 is NaN
  kFloat8E5M2,    ///< IEEE-like
  kFloat8Fnuz,    ///< e4m3fnuz and e5m2fnuz: no Inf; 0x80 is NaN
  kFloat8E8M0,    ///< no Inf; 0xFF is NaN
};

/// The bytes of one element of `coding` (0 for kNone).
CKPTFIX_HOST_DEVICE inline uint32_t coding_size(FloatCoding coding) {
  switch (coding) {
    case FloatCoding::kFloat16:
    case FloatCoding::kBFloat16: return 2;
    case FloatCoding::kFloat32: return 4;
    case FloatCoding::kFloat64: return 8;
    case FloatCoding::kFloat8E4M3Fn:
    case FloatCoding::kFloat8E5M2:
    case FloatCoding::kFloat8Fnuz:
    case FloatCoding::kFloat8E8M0: return 1;
    default: return 0;
  }
}

enum ElementClass : int { kFinite = 0, kNaN = 1, kPosInf = 2, kNegInf = 3 };

/// The class of one element from its bits (little-endian value, zero-extended).
CKPTFIX_HOST_DEVICE inline int classify_element(FloatCoding coding, uint64_t bits) {
  // IEEE layouts: an all-ones exponent is Inf (zero mantissa) or NaN.
  auto ieee = [](uint64_t b, int mantissa_bits, int exponent_bits) {
    const uint64_t mantissa = b & ((uint64_t{1} << mantissa_bits) - 1);
    const uint64_t exponent = (b >> mantissa_bits) & ((uint64_t{1} << exponent_bits) - 1);
    if (exponent != (uint64_t{1} << exponent_bits) - 1) return static_cast<int>(kFinite);
    if (mantissa != 0) return static_cast<int>(kNaN);
    return static_cast<int>(((b >> (mantissa_bits + exponent_bits)) & 1) ? kNegInf : kPosInf);
  };
  switch (coding) {
    case FloatCoding::kFloat16: return ieee(bits, 10, 5);
    case FloatCoding::kBFloat16: return ieee(bits, 7, 8);
    case FloatCoding::kFloat32: return ieee(bits, 23, 8);
    case FloatCoding::kFloat64: return ieee(bits, 52, 11);
    case FloatCoding::kFloat8E5M2: return ieee(bits, 2, 5);
    case FloatCoding::kFloat8E4M3Fn: return (bits & 0x7F) == 0x7F ? kNaN : kFinite;
    case FloatCoding::kFloat8Fnuz: return bits == 0x80 ? kNaN : kFinite;
    case FloatCoding::kFloat8E8M0: return bits == 0xFF ? kNaN : kFinite;
    default: return kFinite;
  }
}

/// What the load test found in a tensor's bytes (or a part of them: parts add).
struct LoadCheck {
  uint64_t sum = 0;       ///< Σ w_i mod 2^64
  uint64_t weighted = 0;  ///< Σ (i + 1)·w_i mod 2^64
  uint64_t nan = 0, posinf = 0, neginf = 0;

  CKPTFIX_HOST_DEVICE void add(const LoadCheck& o) {
    sum += o.sum, weighted += o.weighted, nan += o.nan, posinf += o.posinf, neginf += o.neginf;
  }
  CKPTFIX_HOST_DEVICE bool same_bytes(const LoadCheck& o) const { return sum == o.sum && weighted == o.weighted; }
};

/// Word `index` (0-based, counted from the tensor's first byte) into `c`.
CKPTFIX_HOST_DEVICE inline void add_word(LoadCheck& c, uint64_t index, uint32_t word) {
  c.sum += word;
  c.weighted += (index + 1) * word;
}

/// Element bits into `c`'s counts.
CKPTFIX_HOST_DEVICE inline void add_element(LoadCheck& c, FloatCoding coding, uint64_t bits) {
  switch (classify_element(coding, bits)) {
    case kNaN: ++c.nan; break;
    case kPosInf: ++c.posinf; break;
    case kNegInf: ++c.neginf; break;
    default: break;
  }
}

}  // namespace ckptfix
