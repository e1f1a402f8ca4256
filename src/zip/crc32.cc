#include "zip/crc32.h"

#include <libdeflate.h>

#include "dtype_kernels/cpu_features.h"
#if CKPTFIX_AVX2_KERNELS
#include <immintrin.h>
#endif

namespace ckptfix {
namespace {

#if CKPTFIX_AVX2_KERNELS
// CRC folding (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ", as libdeflate does it) on 256-bit vectors: each 128-bit lane
// of the running remainder is carried D bits down the message by
// multiplying its halves by powers of x modulo G and adding the products to
// the lane found there. The multipliers are computed here, not copied; the
// compile-time checks below hold a few against libdeflate's table.
constexpr uint64_t kGenerator = 0x104c11db7;  // the zip polynomial, natural bit order

// (t · t · x^shift) mod G for t of fewer than 32 bits.
constexpr uint32_t square_mod_g(uint32_t t, int shift) {
  unsigned __int128 p = 0;
  for (int i = 0; i < 32; ++i) {
    if ((t >> i) & 1) p ^= static_cast<unsigned __int128>(t) << i;
  }
  p <<= shift;
  for (int bit = 127; bit >= 32; --bit) {
    if ((p >> bit) & 1) p ^= static_cast<unsigned __int128>(kGenerator) << (bit - 32);
  }
  return static_cast<uint32_t>(p);
}

constexpr uint32_t x_to_the_mod_g(unsigned d) {
  return d < 32 ? uint32_t{1} << d : square_mod_g(x_to_the_mod_g(d / 2), static_cast<int>(d % 2));
}

constexpr uint32_t reversed(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) {
    if ((v >> i) & 1) r |= uint32_t{1} << (31 - i);
  }
  return r;
}

// The zip CRC is bit-reflected: so are its multipliers.
constexpr int64_t multiplier(unsigned d) { return reversed(x_to_the_mod_g(d)); }
static_assert(multiplier(95) == 0xccaa009e && multiplier(159) == 0xae689191, "libdeflate's CRC32_X95/X159_MODG");
static_assert(multiplier(2015) == 0xe95c1271 && multiplier(2079) == 0xce3371cb, "libdeflate's CRC32_X2015/X2079_MODG");

// Multipliers for carrying a lane `bits` down: its first 8 bytes (the low
// qword) by x^(bits+31) mod G, its last 8 by x^(bits-33) mod G (the products
// are 95 bits long, and reflected).
#define CKPTFIX_FOLD_BY(bits) multiplier((bits) - 33), multiplier((bits) + 31)

__attribute__((target("avx2,pclmul,vpclmulqdq"))) inline __m256i fold(__m256i lanes, __m256i next, __m256i by) {
  return _mm256_xor_si256(_mm256_xor_si256(next, _mm256_clmulepi64_epi128(lanes, by, 0x00)),
                          _mm256_clmulepi64_epi128(lanes, by, 0x11));
}

__attribute__((target("avx2,pclmul,vpclmulqdq"))) inline __m256i load(const std::byte* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Eight vectors (256 bytes) a round: a fold's multiplications take several
// cycles, so eight independent ones keep the unit busy. Below kFolded the
// set-up costs more than libdeflate's 128-bit folding.
constexpr size_t kRound = 256;
constexpr size_t kFolded = 2 * kRound;

// The last step of both folds: the remainder so far is two adjacent 256-bit
// vectors, the bytes before `p`; the tail [p, p + len) is not folded yet.
__attribute__((target("avx2,pclmul,vpclmulqdq"))) inline uint32_t finish(__m256i earlier, __m256i later,
                                                                         const std::byte* p, size_t len) {
  const __m256i last = fold(earlier, later, _mm256_set_epi64x(CKPTFIX_FOLD_BY(256), CKPTFIX_FOLD_BY(256)));
  // The first lane (earlier in the message) is carried into the second.
  const __m128i by_128 = _mm_set_epi64x(CKPTFIX_FOLD_BY(128));
  const __m128i first = _mm256_extracti128_si256(last, 0);
  const __m128i second = _mm256_extracti128_si256(last, 1);
  const __m128i rest = _mm_xor_si128(_mm_xor_si128(second, _mm_clmulepi64_si128(first, by_128, 0x00)),
                                     _mm_clmulepi64_si128(first, by_128, 0x11));
  // These 16 bytes now stand for the whole message so far: their CRC from a
  // zero start (libdeflate's, whose start and result are inverted), then the tail.
  alignas(16) std::byte folded[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(folded), rest);
  return libdeflate_crc32(libdeflate_crc32(~uint32_t{0}, folded, sizeof folded), p, len);
}

__attribute__((target("avx2,pclmul,vpclmulqdq"))) uint32_t crc32_vpclmulqdq(uint32_t crc, const std::byte* p,
                                                                            size_t len) {
  const __m256i by_2048 = _mm256_set_epi64x(CKPTFIX_FOLD_BY(2048), CKPTFIX_FOLD_BY(2048));
  const __m256i by_1024 = _mm256_set_epi64x(CKPTFIX_FOLD_BY(1024), CKPTFIX_FOLD_BY(1024));
  const __m256i by_512 = _mm256_set_epi64x(CKPTFIX_FOLD_BY(512), CKPTFIX_FOLD_BY(512));
  // The running CRC, without zip's inversion (~crc), is added to the message's first 32 bits.
  __m256i v[8];
  for (int i = 0; i < 8; ++i) v[i] = load(p + 32 * i);
  v[0] = _mm256_xor_si256(v[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  p += kRound;
  len -= kRound;
  for (; len >= kRound; p += kRound, len -= kRound) {
    for (int i = 0; i < 8; ++i) v[i] = fold(v[i], load(p + 32 * i), by_2048);
  }
  for (int i = 0; i < 4; ++i) v[i] = fold(v[i], v[i + 4], by_1024);
  for (int i = 0; i < 2; ++i) v[i] = fold(v[i], v[i + 2], by_512);
  return finish(v[0], v[1], p, len);
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its
// -Wuninitialized reports as a use of an uninitialized value (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// The same on 512-bit vectors (four lanes each): eight vectors (512 bytes) a
// round, folded down to one vector, whose two halves finish as the 256-bit
// code's last two vectors do. Twice the bytes per instruction: on a Zen 5 core
// (full-width AVX-512) 2× the 256-bit fold from cache.
#define CKPTFIX_FOLD_BY_512(bits) \
  _mm512_set_epi64(CKPTFIX_FOLD_BY(bits), CKPTFIX_FOLD_BY(bits), CKPTFIX_FOLD_BY(bits), CKPTFIX_FOLD_BY(bits))

__attribute__((target("avx512f,avx2,pclmul,vpclmulqdq"))) inline __m512i fold(__m512i lanes, __m512i next, __m512i by) {
  // next ^ lo-product ^ hi-product in one instruction (0x96: a ^ b ^ c).
  return _mm512_ternarylogic_epi64(next, _mm512_clmulepi64_epi128(lanes, by, 0x00),
                                   _mm512_clmulepi64_epi128(lanes, by, 0x11), 0x96);
}

constexpr size_t kWideRound = 512;
constexpr size_t kWideFolded = 2 * kWideRound;

__attribute__((target("avx512f,avx2,pclmul,vpclmulqdq"))) uint32_t crc32_vpclmulqdq_512(uint32_t crc,
                                                                                        const std::byte* p,
                                                                                        size_t len) {
  const __m512i by_4096 = CKPTFIX_FOLD_BY_512(4096);
  const __m512i by_2048 = CKPTFIX_FOLD_BY_512(2048);
  const __m512i by_1024 = CKPTFIX_FOLD_BY_512(1024);
  const __m512i by_512 = CKPTFIX_FOLD_BY_512(512);
  __m512i v[8];
  for (int i = 0; i < 8; ++i) v[i] = _mm512_loadu_si512(p + 64 * i);
  v[0] = _mm512_xor_si512(v[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  p += kWideRound;
  len -= kWideRound;
  for (; len >= kWideRound; p += kWideRound, len -= kWideRound) {
    for (int i = 0; i < 8; ++i) v[i] = fold(v[i], _mm512_loadu_si512(p + 64 * i), by_4096);
  }
  for (int i = 0; i < 4; ++i) v[i] = fold(v[i], v[i + 4], by_2048);
  for (int i = 0; i < 2; ++i) v[i] = fold(v[i], v[i + 2], by_1024);
  const __m512i last = fold(v[0], v[1], by_512);
  return finish(_mm512_castsi512_si256(last), _mm512_extracti64x4_epi64(last, 1), p, len);
}
#pragma GCC diagnostic pop
#undef CKPTFIX_FOLD_BY_512
#undef CKPTFIX_FOLD_BY
#endif

}  // namespace

uint32_t crc32_update(uint32_t crc, std::span<const std::byte> data) {
#if CKPTFIX_AVX2_KERNELS
  if (data.size() >= kWideFolded && cpu_has_avx512_vpclmulqdq()) {
    return crc32_vpclmulqdq_512(crc, data.data(), data.size());
  }
  if (data.size() >= kFolded && cpu_has_avx2_vpclmulqdq()) return crc32_vpclmulqdq(crc, data.data(), data.size());
#endif
  return libdeflate_crc32(crc, data.data(), data.size());
}

std::optional<uint32_t> crc32_update_folded(unsigned bits, uint32_t crc, std::span<const std::byte> data) {
#if CKPTFIX_AVX2_KERNELS
  if (bits == 512 && cpu_has_avx512_vpclmulqdq()) {
    return data.size() >= kWideFolded ? crc32_vpclmulqdq_512(crc, data.data(), data.size())
                                      : libdeflate_crc32(crc, data.data(), data.size());
  }
  if (bits == 256 && cpu_has_avx2_vpclmulqdq()) {
    return data.size() >= kFolded ? crc32_vpclmulqdq(crc, data.data(), data.size())
                                  : libdeflate_crc32(crc, data.data(), data.size());
  }
#endif
  (void)bits, (void)crc, (void)data;
  return std::nullopt;
}

namespace {

// Polynomials over GF(2) in the CRC's reflected bit order: bit 31 is x^0.
constexpr uint32_t kReflectedPolynomial = 0xEDB88320;
constexpr uint32_t kOne = uint32_t{1} << 31;

// a * b modulo the polynomial (zlib 1.2.12's multmodp).
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = kOne; m != 0; m >>= 1) {
    if ((a & m) != 0) product ^= b;
    b = (b & 1) != 0 ? (b >> 1) ^ kReflectedPolynomial : b >> 1;
  }
  return product;
}

// x^(8 n) modulo the polynomial: x^8 squared by the bits of n.
uint32_t shift_by_bytes(uint64_t n) {
  uint32_t power = kOne >> 8;  // x^8
  uint32_t result = kOne;
  for (; n != 0; n >>= 1) {
    if ((n & 1) != 0) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

}  // namespace

Crc32Join::Crc32Join(uint64_t length_b) : shift_(shift_by_bytes(length_b)) {}

uint32_t Crc32Join::operator()(uint32_t crc_a, uint32_t crc_b) const { return multiply(crc_a, shift_) ^ crc_b; }

uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) { return Crc32Join(length_b)(crc_a, crc_b); }

uint32_t crc32_update_reference(uint32_t crc, std::span<const std::byte> data) {
  return libdeflate_crc32(crc, data.data(), data.size());
}

}  // namespace ckptfix
