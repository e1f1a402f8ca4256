// CRC-32 (zip's polynomial). Pieces of 512 bytes and more are folded with
// VPCLMULQDQ on 256-bit vectors where the CPU has it (AMD Zen 3 and later,
// Intel Ice Lake and later): 25.6 GB/s from cache on a 2-core Zen 3 VM, where
// libdeflate 1.14 (PCLMULQDQ on 128 bits, the rest and every other CPU) runs
// at 12.8 GB/s and zlib at 4 GB/s. Pieces of 1 KiB and more are folded on
// 512-bit vectors where the CPU has AVX-512 too (Zen 4 and later, Ice Lake
// and later): docs/performance.md has the figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace ckptfix {

/// Continues a CRC-32 over `data` (start with 0).
uint32_t crc32_update(uint32_t crc, std::span<const std::byte> data);

/// Joins CRC-32s of consecutive parts: what lets parts of a record be summed
/// on different threads. The shift for B's length is made once (O(log
/// length): 0.5 us for 1 MiB); each join is then one multiplication in
/// GF(2), 33 ns on the 2-core Zen 5 VM. Ours, not zlib's crc32_combine, which
/// before zlib 1.2.12 (the release build's) squared a 32x32 matrix per call.
class Crc32Join {
 public:
  explicit Crc32Join(uint64_t length_b);
  /// The CRC-32 of A followed by B (`length_b` bytes), from A's and B's.
  uint32_t operator()(uint32_t crc_a, uint32_t crc_b) const;

 private:
  uint32_t shift_;  // x^(8 length_b) mod the polynomial
};

/// The same for one join.
uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

/// The same by libdeflate alone, for tests.
uint32_t crc32_update_reference(uint32_t crc, std::span<const std::byte> data);

/// For tests: the CRC-32 by the fold on `bits`-wide vectors (256 or 512)
/// however long the piece (libdeflate below the fold's least length), or
/// nullopt where the CPU cannot run it.
std::optional<uint32_t> crc32_update_folded(unsigned bits, uint32_t crc, std::span<const std::byte> data);

}  // namespace ckptfix
